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

# the cleaner's workloads, where callers found them
from perfsift.producers.synth_clean import CYCLIC_METRICS as CYCLIC_METRICS
from perfsift.producers.synth_clean import cyclic as cyclic
from perfsift.producers.synth_clean import multiplexed as multiplexed


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


#: Vetter & Reed's Table 1 metrics (SC'99), the columns of the SPMD scenarios
TABLE1 = (
    "cpu_idle",
    "cpu_user",
    "cpu_kern",
    "ctx_switches",
    "interrupts",
    "forks",
    "disk_lread",
    "disk_lwrite",
    "disk_pread",
    "disk_pwrite",
    "pkts_in",
    "pkts_out",
)

#: per SPMD scenario: metrics that are independent bursty processes across processors (the
#: structure projection pursuit should find), nearly constant ones, exactly constant ones, and
#: whether the network traffic is periodic with a per-node phase (a wavefront) or in step
SPMD_SCENARIOS: dict[str, dict[str, Any]] = {
    "cactus": {
        "bursty": ("disk_pwrite", "disk_lwrite", "forks"),
        "near_constant": ("disk_lread",),
        "constant": ("disk_pread",),
        "phased_network": False,
        "period": 120.0,
    },
    "sweep3d": {
        "bursty": ("disk_pwrite", "disk_lwrite", "interrupts"),
        "near_constant": ("forks",),
        "constant": ("disk_pread",),
        "phased_network": True,
        "period": 40.0,
    },
    "smg98": {
        "bursty": ("disk_pwrite", "forks", "ctx_switches"),
        "near_constant": ("disk_lread", "disk_lwrite"),
        "constant": ("disk_pread",),
        "phased_network": False,
        "period": 60.0,
    },
}

_BASE = {
    "cpu_user": 70.0,
    "cpu_kern": 8.0,
    "ctx_switches": 900.0,
    "interrupts": 1200.0,
    "forks": 0.5,
    "disk_lread": 40.0,
    "disk_lwrite": 60.0,
    "disk_pread": 0.0,
    "disk_pwrite": 20.0,
    "pkts_in": 5000.0,
    "pkts_out": 5000.0,
}


def spmd(
    scenario: str = "cactus",
    nodes: int = 12,
    metrics: int = 12,
    duration: int = 600,
    seed: int = 0,
    interval: float = 1.0,
    burst_rate: float = 0.03,
    burst_length: float = 6.0,
    outliers: float = 0.0,
    missing: float = 0.0,
    t0: float = 1.7e9,
    job: str | None = None,
    cube: bool = False,
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """(samples, ground truth) of an SPMD code shaped like the SC'99 paper's applications.

    Every processor runs the same phases, so most metrics follow a common trend (a slow cycle of
    period ``SPMD_SCENARIOS[s]["period"]`` seconds) plus 1 % noise; a few are nearly constant or
    exactly constant; three are independent on/off bursty processes per processor (a burst starts
    with probability ``burst_rate`` per sample and lasts ``burst_length`` samples on average, at
    50–200× the base rate), which is what makes processors differ. ``sweep3d`` adds a per-node
    phase to the network traffic (a wavefront). With ``metrics`` > 12 the extra columns
    ``extra_NN`` follow the common trend. ``outliers``: share of values multiplied by 20–100
    (positions in the ground truth); ``missing``: share of values left out (null). ``cube``: return no
    samples but ``{"t", "values" (time × node × metric, NaN = missing), "metrics", "job"}`` in place
    of the ground truth, for benchmarks with thousands of nodes.
    """
    if scenario not in SPMD_SCENARIOS:
        raise ValueError(f"unknown SPMD scenario {scenario!r}; known: {', '.join(SPMD_SCENARIOS)}")
    if metrics < len(TABLE1):
        raise ValueError(f"metrics must be at least {len(TABLE1)} (Table 1), got {metrics}")
    spec = SPMD_SCENARIOS[scenario]
    rng = np.random.default_rng(seed)
    steps = int(duration / interval)
    t = np.arange(steps) * interval
    names = list(TABLE1) + [f"extra_{i:02d}" for i in range(metrics - len(TABLE1))]
    cycle = 1 + 0.3 * np.sin(2 * np.pi * t / spec["period"])  # the common trend
    vals = np.empty((steps, nodes, len(names)))
    for j, m in enumerate(names):
        base = _BASE.get(m, 100.0 * (j + 1))
        if m in spec["constant"]:
            vals[:, :, j] = base
        elif m in spec["near_constant"]:
            vals[:, :, j] = base * (1 + 1e-3 * rng.normal(size=(steps, nodes)))
        elif m in spec["bursty"]:
            on = np.zeros((steps, nodes), dtype=bool)
            state = rng.random(nodes) < burst_rate * burst_length / (1 + burst_rate * burst_length)
            for s in range(steps):
                flip = rng.random(nodes)
                state = np.where(state, flip >= 1 / burst_length, flip < burst_rate)
                on[s] = state
            level = base * rng.uniform(50, 200, size=(steps, nodes))
            vals[:, :, j] = np.where(on, level, base * rng.lognormal(0, 0.05, size=(steps, nodes)))
        elif m in ("pkts_in", "pkts_out") and spec["phased_network"]:
            phase = 2 * np.pi * np.arange(nodes) / nodes
            wave = 1 + 0.5 * np.sin(2 * np.pi * t[:, None] / spec["period"] + phase[None, :])
            vals[:, :, j] = base * wave * (1 + 0.01 * rng.normal(size=(steps, nodes)))
        else:
            vals[:, :, j] = base * cycle[:, None] * (1 + 0.01 * rng.normal(size=(steps, nodes)))
    user, kern = names.index("cpu_user"), names.index("cpu_kern")
    vals[:, :, names.index("cpu_idle")] = np.clip(100 - vals[:, :, user] - vals[:, :, kern], 0, 100)
    injected: list[dict[str, Any]] = []
    if outliers:
        hit = rng.random(vals.shape) < outliers
        for s, p, j in zip(*np.nonzero(hit), strict=True):
            vals[s, p, j] *= rng.uniform(20, 100)
            injected.append({"ts": t0 + float(t[s]), "node": f"n{p:02d}", "metric": names[j]})
    absent = rng.random(vals.shape) < missing if missing else np.zeros(vals.shape, dtype=bool)
    vals[absent] = np.nan
    job = job or scenario
    if cube:
        return [], {"t": t0 + t, "values": vals, "metrics": names, "job": job}
    samples = []
    for s in range(steps):
        for p in range(nodes):
            row = {m: None if absent[s, p, j] else float(vals[s, p, j]) for j, m in enumerate(names)}
            samples.append({"ts": t0 + float(t[s]), "node": f"n{p:02d}", "job": job, "seq": s, "metrics": row})
    truth = {
        "scenario": scenario,
        "nodes": nodes,
        "duration": duration,
        "interval": interval,
        "metrics": names,
        "interesting": list(spec["bursty"]),
        "near_constant": list(spec["near_constant"]),
        "constant": list(spec["constant"]),
        "phased": ["pkts_in", "pkts_out"] if spec["phased_network"] else [],
        "common": [
            m
            for m in names
            if m not in spec["bursty"]
            and m not in spec["near_constant"]
            and m not in spec["constant"]
            and not (spec["phased_network"] and m in ("pkts_in", "pkts_out"))
        ],
        "outliers": injected,
        "missing": int(absent.sum()),
    }
    return samples, truth


def sor(
    nodes: int = 4,
    steps: int = 300,
    seed: int = 0,
    cpu: Sequence[float] | float = 0.8,
    cpu_sigma: Sequence[float] | float = 0.05,
    bw: Sequence[float] | float = 2.0e5,
    bw_sigma: Sequence[float] | float = 1.0e4,
    mode_node: int | None = None,
    mode_levels: tuple[float, float] = (0.9, 0.3),
    switch_prob: float = 0.15,
    slowdown: tuple[int, int, int, float] | None = None,
    interval: float = 1.0,
    t0: float = 1.7e9,
    job: str = "sor",
    model: str = "sor",
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """(samples, truth) of an SOR run for the structural-model experiments (the seed's PPE paper).

    Every iteration (one sample per node) draws each node's available CPU fraction ``cpu_avail`` ~
    N(cpu, cpu_sigma) and its bandwidth to the next node ``bw_avail`` ~ N(bw, bw_sigma), independent
    across iterations (the stationary, single-mode case), and reports the iteration's ``node_time``
    and ``iter_time`` (slowest node) computed with the bundled model from those realised values.
    ``mode_node``: that node's CPU instead switches between the two ``mode_levels`` (a Markov chain
    leaving its mode with probability ``switch_prob`` per iteration - the multi-mode case).
    ``slowdown = (node, start, end, factor)``: that node's time is multiplied by ``factor`` in
    iterations [start, end), a slowdown its parameters do not show (what a model-driven contract
    should flag). Truth: the realised parameters, times and the slowed iterations.
    """
    from perfsift.models import bundled
    from perfsift.models.structural import StructuralModel

    m = StructuralModel.load(bundled(model))
    rng = np.random.default_rng(seed)

    def per_node(v: Sequence[float] | float) -> np.ndarray:
        return np.broadcast_to(np.asarray(v, dtype=np.float64), (nodes,))

    cpu_v = np.clip(rng.normal(per_node(cpu), per_node(cpu_sigma), (steps, nodes)), 0.02, 1.0)
    bw_v = np.clip(rng.normal(per_node(bw), per_node(bw_sigma), (steps, nodes)), 1.0e4, None)
    mode = np.zeros(steps, dtype=np.int64)
    if mode_node is not None:
        for t in range(1, steps):
            mode[t] = 1 - mode[t - 1] if rng.random() < switch_prob else mode[t - 1]
        spread = rng.normal(0.0, 0.02, steps)
        cpu_v[:, mode_node] = np.clip(np.asarray(mode_levels)[mode] + spread, 0.02, 1.0)
    env: dict[str, np.ndarray] = {}
    for name, p in m.parameters.items():
        if p.value is not None:
            env[name] = np.broadcast_to(np.asarray(p.value, dtype=np.float64), (1, nodes))
    env["FracAvailCPU"] = cpu_v
    env["BWAvail"] = bw_v
    node_time = np.broadcast_to(m.evaluate(env, ["NodeTime"])["NodeTime"], (steps, nodes)).copy()
    slowed = np.zeros(steps, dtype=bool)
    if slowdown is not None:
        node, start, end, factor = slowdown
        node_time[start:end, node] *= factor
        slowed[start:end] = True
    iter_time = node_time.max(axis=1)
    names = [f"node{i:02d}" for i in range(nodes)]
    samples = [
        {
            "ts": t0 + t * interval,
            "node": names[p],
            "job": job,
            "metrics": {
                "cpu_avail": float(cpu_v[t, p]),
                "bw_avail": float(bw_v[t, p]),
                "node_time": float(node_time[t, p]),
                "iter_time": float(iter_time[t]),
            },
        }
        for t in range(steps)
        for p in range(nodes)
    ]
    truth = {
        "nodes": names,
        "cpu_avail": cpu_v,
        "bw_avail": bw_v,
        "node_time": node_time,
        "iter_time": iter_time,
        "mode": mode,
        "slowed": slowed,
    }
    return samples, truth
