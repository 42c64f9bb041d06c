"""The bundled demo trace: a small SPMD-shaped run of 16 nodes, 12 system metrics and the
application's iteration time.

The system metrics are shaped like the twelve of Vetter & Reed's Table 1: common trends on every
node (CPU, context switches), nearly constant metrics (forks), bursty disk writes that differ
across nodes, and network traffic with a per-node phase. ``iter_time`` (:data:`APP_METRIC`) is
the application's: every rank reports the iteration time of the job, which ends at a barrier -
the slowest node's compute (its busy CPU share) plus communication (its received packets), the
bundled model ``demo`` (``models/demo.yaml``), times a 2 % measurement noise. From
:data:`EPISODE` on, for a minute, node n06 stalls 1 s per iteration for a reason none of the
twelve metrics shows (interference its counters do not see): the model's predictions and the bundled contract
(``models/demo.contract.json``, derived from :func:`generate_demo` with ``episode=False``, a run
without it) both flag it. ``iter_time`` comes from a random stream of its own, so the twelve
system metrics are the same bytes as before it was added. Regenerate with
``python -m perfsift.producers.demo``.
"""

from __future__ import annotations

import gzip
from importlib import resources
from pathlib import Path

import numpy as np
import orjson

METRICS = (
    "cpu_idle",
    "cpu_user",
    "cpu_kern",
    "pswitch",
    "intr",
    "forks",
    "lread",
    "lwrite",
    "bread",
    "bwrite",
    "pkts_in",
    "pkts_out",
)
#: the application metric every rank reports: the job's iteration time in seconds
APP_METRIC = "iter_time"
#: the model of ``iter_time`` (models/demo.yaml): seconds of compute on a fully busy CPU, per packet
COMPUTE_S, PACKET_S = 0.2, 0.001
#: steps [start, end) in which node ``SLOW_NODE`` stalls ``STALL_S`` seconds per iteration
EPISODE, SLOW_NODE, STALL_S = (400, 460), 6, 1.0


def demo_trace_path() -> Path:
    """Path of the demo trace shipped with the package."""
    return Path(str(resources.files("perfsift.producers").joinpath("data/demo.jsonl.gz")))


def generate_demo(
    path: str | Path, nodes: int = 16, steps: int = 600, seed: int = 7, t0: float = 1.7e9, episode: bool = True
) -> int:
    """Write the demo trace to ``path`` (gzip JSONL); return the number of samples. ``episode``
    False: no slow node (the baseline the bundled contract was derived from)."""
    rng = np.random.default_rng(seed)
    app_rng = np.random.default_rng([seed, 1])  # iter_time's own stream: the system metrics do not move
    t = np.arange(steps, dtype=np.float64)
    trend = 0.5 + 0.4 * np.sin(2 * np.pi * t / 150)
    phase = rng.uniform(0, 2 * np.pi, nodes)
    count = 0
    with gzip.open(path, "wb") as fh:
        for i in range(steps):
            step = []
            for p in range(nodes):
                user = 100 * trend[i] * 0.9 + rng.normal(0, 1.5)
                kern = 8 + 4 * trend[i] + rng.normal(0, 0.5)
                burst = rng.random() < (0.02 if p % 4 else 0.15)
                vals = {
                    "cpu_idle": max(0.0, 100 - user - kern),
                    "cpu_user": user,
                    "cpu_kern": kern,
                    "pswitch": 1200 * trend[i] + rng.normal(0, 20),
                    "intr": 900 + 300 * trend[i] + rng.normal(0, 15),
                    "forks": 2.0 + rng.normal(0, 0.01),
                    "lread": 400 + rng.normal(0, 10),
                    "lwrite": 150 + rng.normal(0, 5),
                    "bread": 20 + rng.normal(0, 2),
                    "bwrite": (5000 + rng.exponential(2000)) if burst else rng.exponential(20),
                    "pkts_in": 300 + 250 * np.sin(2 * np.pi * t[i] / 40 + phase[p]) + rng.normal(0, 10),
                    "pkts_out": 300 + 250 * np.sin(2 * np.pi * t[i] / 40 + phase[p] + 0.3) + rng.normal(0, 10),
                }
                step.append({k: round(float(v), 3) for k, v in vals.items()})
            node_time = np.array(
                [COMPUTE_S * (m["cpu_user"] + m["cpu_kern"]) / 100 + PACKET_S * m["pkts_in"] for m in step]
            )
            if episode and EPISODE[0] <= i < EPISODE[1]:
                node_time[SLOW_NODE] += STALL_S
            iter_time = round(float(node_time.max() * app_rng.lognormal(0, 0.02)), 4)
            for p, metrics in enumerate(step):
                rec = {
                    "ts": t0 + i,
                    "node": f"n{p:02d}",
                    "job": "demo",
                    "seq": i,
                    "metrics": {**metrics, APP_METRIC: iter_time},
                }
                fh.write(orjson.dumps(rec) + b"\n")
                count += 1
    return count


if __name__ == "__main__":  # pragma: no cover
    n = generate_demo(demo_trace_path())
    print(f"wrote {n} samples to {demo_trace_path()}")
