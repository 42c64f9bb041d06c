"""Synthetic workloads for the cleaner, with ground truth: ``cyclic`` (daily-like cycles with
outliers, level shifts and gaps, where the outlier filters are measured) and ``multiplexed`` (PMU
events counted part of the time, to be scaled by enabled / running time)."""

from __future__ import annotations

from typing import Any

import numpy as np

CYCLIC_METRICS = ("cpu_user", "mem_used", "net_in", "net_out", "disk_read", "disk_write")


def cyclic(
    nodes: int = 8,
    metrics: int = 6,
    samples: int = 3000,
    seed: int = 0,
    interval: float = 1.0,
    spikes: float = 0.005,
    shifts: float = 0.5,
    missing: float = 0.01,
    t0: float = 1.7e9,
    job: str = "cyclic",
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """(samples, truth) of smooth cyclic metrics with planted spikes and level shifts, the class
    of signal real node metrics are (the cleaning filter's test bed).

    Every (node, metric) series is a base level plus a cycle of amplitude A (a sum of two or
    three sines of periods 120–900 samples at random phases, scaled so that its largest excursion
    is A = 10–30 % of the base), a linear trend of ±0–1·A over the run and Gaussian noise of
    2–6 % of A. With probability ``shifts`` a series gets one level shift of ±1–3·A at a random
    time; a share ``spikes`` of the values gets an isolated spike of ±0.5–3·A (either sign, never
    two in a row, none in the first 50 samples); a share ``missing`` is left out (null). Truth:
    ``spikes`` and ``shifts`` (``{"step", "ts", "node", "metric", "size"}``, spikes only where the
    value is present), ``amplitude`` (node × metric), ``values`` (the series without spikes or
    gaps: time × node × metric) and ``metrics``.
    """
    rng = np.random.default_rng(seed)
    names = [*CYCLIC_METRICS[:metrics], *(f"extra_{j:02d}" for j in range(metrics - len(CYCLIC_METRICS)))]
    shape = (samples, nodes, len(names))
    t = np.arange(samples, dtype=np.float64)[:, None, None]
    base = rng.uniform(50, 1000, shape[1:])
    amp = base * rng.uniform(0.1, 0.3, shape[1:])
    cycle = np.zeros(shape)
    for _ in range(3):
        period = rng.uniform(120, 900, shape[1:])
        weight = rng.uniform(0.0, 1.0, shape[1:])
        cycle += weight * np.sin(2 * np.pi * t / period + rng.uniform(0, 2 * np.pi, shape[1:]))
    cycle *= amp / np.abs(cycle).max(axis=0)
    trend = rng.uniform(-1, 1, shape[1:]) * amp * t / samples
    clean = base + cycle + trend + rng.normal(size=shape) * rng.uniform(0.02, 0.06, shape[1:]) * amp
    shift_list: list[dict[str, Any]] = []
    for p, j in zip(*np.nonzero(rng.random(shape[1:]) < shifts), strict=True):
        step = int(rng.integers(samples // 10, samples - samples // 10))
        jump = float(rng.choice([-1, 1]) * rng.uniform(1, 3) * amp[p, j])
        clean[step:, p, j] += jump
        shift_list.append(
            {"step": step, "ts": t0 + step * interval, "node": f"n{p:02d}", "metric": names[j], "size": jump}
        )
    hit = rng.random(shape) < spikes
    hit[:50] = False
    hit[1:] &= ~hit[:-1]  # isolated: never two in a row
    absent = rng.random(shape) < missing if missing else np.zeros(shape, dtype=bool)
    hit &= ~absent
    size = rng.choice([-1.0, 1.0], shape) * rng.uniform(0.5, 3.0, shape) * amp
    vals = np.where(hit, clean + size, clean)
    vals[absent] = np.nan
    spike_list = [
        {"step": int(s), "ts": t0 + s * interval, "node": f"n{p:02d}", "metric": names[j], "size": float(size[s, p, j])}
        for s, p, j in zip(*np.nonzero(hit), strict=True)
    ]
    out = [
        {
            "ts": t0 + s * interval,
            "node": f"n{p:02d}",
            "job": job,
            "seq": s,
            "metrics": {m: None if absent[s, p, j] else float(vals[s, p, j]) for j, m in enumerate(names)},
        }
        for s in range(samples)
        for p in range(nodes)
    ]
    truth = {
        "metrics": names,
        "nodes": nodes,
        "spikes": spike_list,
        "shifts": shift_list,
        "amplitude": amp,
        "values": clean,
        "missing": int(absent.sum()),
    }
    return out, truth


def multiplexed(
    nodes: int = 8, events: int = 6, samples: int = 1000, seed: int = 0, gaps: float = 0.01, t0: float = 1.7e9
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """(samples, truth) of PMU event rates under multiplexing: per node a shared load (log-AR(1),
    φ = 0.9, so it moves from one interval to the next as real load does) drives every event,
    ``e_i = a_i · load^b_i · (1 + 2 % noise)``; in each interval one event, in rotation, was not
    counted (null), and a share ``gaps`` of the others is missing too. Truth: ``values`` (time ×
    node × event, nothing missing), ``missing`` (the same shape, True where the sample has null)
    and ``metrics``."""
    rng = np.random.default_rng(seed)
    names = [f"event_{i}" for i in range(events)]
    log_load = np.zeros((samples, nodes))
    for s in range(1, samples):
        log_load[s] = 0.9 * log_load[s - 1] + rng.normal(0.0, 0.3, nodes)
    a, b = rng.uniform(1e3, 1e6, events), rng.uniform(0.5, 1.5, events)
    clean = a * np.exp(log_load[:, :, None] * b) * (1 + 0.02 * rng.normal(size=(samples, nodes, events)))
    missing = rng.random(clean.shape) < gaps
    missing[
        np.arange(samples)[:, None],
        np.arange(nodes)[None, :],
        (np.arange(samples)[:, None] + np.arange(nodes)) % events,
    ] = True
    out = [
        {
            "ts": t0 + s,
            "node": f"n{p:02d}",
            "job": "mux",
            "seq": s,
            "metrics": {m: None if missing[s, p, j] else float(clean[s, p, j]) for j, m in enumerate(names)},
        }
        for s in range(samples)
        for p in range(nodes)
    ]
    return out, {"values": clean, "missing": missing, "metrics": names}
