"""Synthetic workloads with ground truth, shaped like the papers' applications.

``master_worker`` follows the performance-contracts experiments (Vraalsen et al.): node 0 is a
master with a high instructions/FLOP ratio, the workers a low one; options make some workers do
fewer floating-point operations per job, or put an external CPU load on one node for a time range.
Samples carry rates per second: ``instructions_per_s``, ``flops_per_s``, ``messages_per_s``,
``bytes_per_s``.
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
