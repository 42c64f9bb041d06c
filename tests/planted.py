"""A synthetic SPMD trace with one planted deviant node (issue #23): 12 nodes of the cactus
scenario without bursts, in which node ``n05`` writes 20× more than the others (``disk_lwrite`` and
``disk_pwrite``) from 180 s to 270 s after the start; the rest of the trace is calm."""

from __future__ import annotations

from typing import Any

from perfsift.producers.synth import spmd

NODE = "n05"
START, STOP = 180.0, 270.0  # seconds after the first sample
T0 = 1.7e9  # the first sample's time (spmd's default)


def planted_trace(seed: int = 0, duration: int = 600, nodes: int = 12) -> list[dict[str, Any]]:
    samples, _ = spmd("cactus", nodes=nodes, duration=duration, seed=seed, burst_rate=0.0, t0=T0)
    for s in samples:
        if s["node"] == NODE and START <= s["ts"] - T0 < STOP:
            for m in ("disk_lwrite", "disk_pwrite"):
                s["metrics"][m] *= 20
    return samples
