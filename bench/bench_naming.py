"""Naming a node as it starts (issue #32): what ``name_nodes`` adds to a pursuit update.

1. Microseconds per call of :func:`~perfsift.operators.pursuit.deviants.name_nodes` on a ring of the
   operator's default capacity (174 rows per node: h_max 10, window 5, slack 128; 1-s rows, 30-s
   periods) at P × n = 12 × 12, 32 × 24 and 128 × 24.
2. Median ms per update of the streaming operator at P = n = 12 with naming and, in the same run,
   with ``name_nodes`` replaced by a stub that returns the empty fields.

    python -m bench.bench_naming
"""

from __future__ import annotations

import statistics
import time
from typing import Any

import numpy as np
from perfsift.operators.pursuit import pursuit as pursuit_module
from perfsift.operators.pursuit.deviants import name_nodes
from perfsift.producers.episodes import episode_job, trailing_mean

from bench.bench_pursuit import per_update
from bench.common import write_result

CAPACITY = 174


def per_call(nodes: int, metrics: int, reps: int = 30) -> float:
    job = episode_job(nodes, 0, [("level", 100.0, 30.0)], metrics=metrics, samples=CAPACITY)
    ring = trailing_mean(job.values, 5)
    ts = np.broadcast_to(job.ts, ring.shape[:2]).copy()
    names = [f"n{k}" for k in range(nodes)]
    name_nodes(ring, ts, names, job.metrics, 30.0, 150.0)
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        name_nodes(ring, ts, names, job.metrics, 30.0, 150.0)
        times.append(time.perf_counter() - t)
    return statistics.median(times) * 1e6


def main() -> None:
    calls = {f"{p}x{n}": round(per_call(p, n), 1) for p, n in ((12, 12), (32, 24), (128, 24))}
    print("name_nodes µs per call:", calls)
    with_naming = per_update(12, 12, 12)
    real = pursuit_module.name_nodes

    def stub(*_: Any, **__: Any) -> dict[str, Any]:
        return {"deviant_nodes": [], "deviant_scores": {}, "deviant_threshold": None}

    pursuit_module.name_nodes = stub
    try:
        without = per_update(12, 12, 12)
    finally:
        pursuit_module.name_nodes = real
    print("operator per update at P = n = 12, with naming:", with_naming, "without:", without)
    result = {"name_nodes_us_per_call": calls, "update_with_naming": with_naming, "update_without_naming": without}
    write_result("naming", result)


if __name__ == "__main__":
    main()
