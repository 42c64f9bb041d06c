"""Synthetic workloads with ground truth, shaped like the papers' applications.

``master_worker`` follows the performance-contracts experiments (Vraalsen et al.): node 0 is a
master with a high instructions/FLOP ratio, the workers a low one; options make some workers do
fewer floating-point operations per job, or put an external CPU load on one node for a time range.
Samples carry rates per second: ``instructions_per_s``, ``flops_per_s``, ``messages_per_s``,
``bytes_per_s``, and ``cpu_avail``, the share of the CPU the application gets (1 without load).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np


def master_worker(
    nodes: int = 12,
    duration: int = 300,
    seed: int = 0,
    fewer_flops: Sequence[int] = (),
    flops_factor: float = 0.6,
    load_node: int | None = None,
    load_start: float = 0.0,
    load_end: float = float("inf"),
    load_factor: float = 0.5,
    t0: float = 1.7e9,
    job: str = "master-worker",
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """(samples, ground truth) of a master-worker run, one sample per node and second.

    ``fewer_flops``: workers that do ``flops_factor`` times the FLOPs per job (same instructions),
    which raises their instructions/FLOP ratio. ``load_node``: a node whose application gets only
    ``load_factor`` of the CPU during [load_start, load_end) seconds, which slows every rate but
    leaves the intrinsic ratios alone.
    """
    rng = np.random.default_rng(seed)
    samples = []
    for t in range(duration):
        for p in range(nodes):
            master = p == 0
            flops = (2e6 if master else 1e8) * rng.lognormal(0, 0.02)
            ratio = (8.0 if master else 1.5) * rng.lognormal(0, 0.01)
            instructions = flops * ratio
            if p in fewer_flops:
                flops *= flops_factor
            messages = (600.0 if master else 50.0) * rng.lognormal(0, 0.02)
            msg_size = (200.0 if master else 8000.0) * rng.lognormal(0, 0.01)
            rate = load_factor if (p == load_node and load_start <= t < load_end) else 1.0
            samples.append(
                {
                    "ts": t0 + t,
                    "node": f"n{p:02d}",
                    "job": job,
                    "seq": t,
                    "metrics": {
                        "instructions_per_s": instructions * rate,
                        "flops_per_s": flops * rate,
                        "messages_per_s": messages * rate,
                        "bytes_per_s": messages * msg_size * rate,
                        "cpu_avail": rate * rng.lognormal(0, 0.005),  # share of the CPU the job gets
                    },
                }
            )
    truth = {
        "scenario": "master-worker",
        "nodes": nodes,
        "duration": duration,
        "master": "n00",
        "fewer_flops": [f"n{p:02d}" for p in fewer_flops],
        "flops_factor": flops_factor,
        "load": None
        if load_node is None
        else {"node": f"n{load_node:02d}", "start": t0 + load_start, "end": t0 + load_end, "factor": load_factor},
    }
    return samples, truth


def gridftp(
    duration: int = 600,
    seed: int = 0,
    noise: float = 0.3,
    t0: float = 1.7e9,
    job: str = "gridftp",
    missing: float = 0.0,
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """A GridFTP-like transfer whose rate (``app/transfer_rate``) is a linear and quadratic function of
    a few system metrics, plus redundant copies, irrelevant and constant metrics (Yang et al.).

    ``transfer_rate = 50 + 8·z(srv1/net_in) + 5·z(srv1/cpu_user)² + 4·z(srv2/disk_read) + noise``, with z the
    standardised metric. Ground truth: ``predictive`` (and which of those are ``quadratic``),
    ``redundant`` (copy -> original), ``irrelevant``, ``constant``. ``missing``: share of values dropped.
    """
    rng = np.random.default_rng(seed)
    n = duration

    def walk(scale: float) -> np.ndarray:  # stationary AR(1) noise: autocorrelated like real load, no trend
        e = rng.normal(0, scale, n)
        out = np.empty(n)
        out[0] = e[0]
        for i in range(1, n):
            out[i] = 0.5 * out[i - 1] + e[i]
        return out

    net_in = 5e7 + 1e7 * rng.normal(size=n)
    cpu_user = 40 + 12 * rng.normal(size=n)
    disk_read = 2e6 + 5e5 * rng.normal(size=n)
    z = lambda v: (v - v.mean()) / v.std()  # noqa: E731
    rate = 50 + 8 * z(net_in) + 5 * z(cpu_user) ** 2 + 4 * z(disk_read) + noise * rng.normal(size=n) * 3
    metrics = {
        "srv1": {
            "net_in": net_in,
            "pkts_in": net_in / 1500 + rng.normal(0, 300, n),
            "cpu_user": cpu_user,
            "cpu_kern": 0.25 * cpu_user + rng.normal(0, 0.3, n),
            "intr": 2e4 + walk(500),
            "forks": np.full(n, 3.0),
            "ctx_switch": 1e4 + walk(800),
        },
        "srv2": {
            "disk_read": disk_read,
            "disk_ops": disk_read / 4096 + rng.normal(0, 8, n),
            "mem_free": 8e9 + walk(1e7),
            "swap": np.full(n, 0.0),
            "load1": 2 + walk(0.3),
        },
    }
    samples = []
    for t in range(n):
        for node, ms in metrics.items():
            vals: dict[str, float | None] = {k: float(v[t]) for k, v in ms.items()}
            if missing:
                vals = {k: (None if rng.random() < missing else v) for k, v in vals.items()}
            samples.append({"ts": t0 + t, "node": node, "job": job, "seq": t, "metrics": vals})
        samples.append(
            {"ts": t0 + t, "node": "app", "job": job, "seq": t, "metrics": {"transfer_rate": float(rate[t])}}
        )
    truth = {
        "scenario": "gridftp",
        "response": "transfer_rate",
        "predictive": ["srv1/net_in", "srv1/cpu_user", "srv2/disk_read"],
        "quadratic": ["srv1/cpu_user"],
        "redundant": {
            "srv1/pkts_in": "srv1/net_in",
            "srv1/cpu_kern": "srv1/cpu_user",
            "srv2/disk_ops": "srv2/disk_read",
        },
        "irrelevant": ["srv1/intr", "srv1/ctx_switch", "srv2/mem_free", "srv2/load1"],
        "constant": ["srv1/forks", "srv2/swap"],
        "redundancy_level": 0.99,
    }
    return samples, truth
