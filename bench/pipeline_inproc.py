"""The default pipeline's two stages in one process, no broker, on bench_pipeline's data.

The published JSON samples (sweep3d, 64 nodes × 12 metrics) go, keyed by node over four
partitions in micro-batches of ``--batch`` messages, through the node stage's ``step_records``
(one chain per partition, as the runner keeps them); its frames on perf.smoothed.byjob go, in
order, through the select stage's. Printed: CPU seconds per stage (decode and chain included),
and a SHA-256 per output topic of every encoded record and key, in order - the same digests
before and after a change mean the same bytes on every topic. As the stage runner does, each
stage's operators are warmed up first (numba's cached kernels loaded: about half a CPU-second of
the select stage's otherwise); that CPU is printed apart (``warm_up``), ``--cold`` leaves it out.

    python -m bench.pipeline_inproc [--samples 200000] [--profile select|node] [--cold]
"""

from __future__ import annotations

import argparse
import cProfile
import hashlib
import pstats
import time
import zlib
from typing import Any

import orjson
from perfsift.producers.synth import spmd
from perfsift.streams.config import load_pipeline
from perfsift.streams.limits import Guard
from perfsift.streams.stage import Chain, Emitted, sample_decoder, step_records


def raw_messages(n: int, nodes: int = 64) -> list[tuple[bytes, bytes]]:
    """(value, key) of the samples bench_pipeline publishes, in its order."""
    _, c = spmd("sweep3d", nodes=nodes, duration=n // nodes, seed=1, cube=True)
    vals, names = c["values"], c["metrics"]
    out = []
    for s, t in enumerate(c["t"].tolist()):
        for q in range(nodes):
            rec = {
                "ts": t,
                "node": f"n{q:03d}",
                "job": "sweep3d",
                "seq": s,
                "metrics": dict(zip(names, vals[s, q].tolist(), strict=True)),
            }
            out.append((orjson.dumps(rec), rec["node"].encode()))
    return out


class Stage:
    """One stage's chains (one per input partition), its collected outputs and CPU time."""

    def __init__(self, name: str) -> None:
        cfg = load_pipeline()
        self.cfg = cfg
        self.stage = cfg.stage(name)
        self.decode = sample_decoder(cfg.encoding)
        self.chains: dict[int, Chain] = {}
        self.guards: dict[int, Guard] = {}
        self.out: dict[str, list[tuple[bytes, bytes]]] = {}
        self.cpu = 0.0
        self.warm_cpu = 0.0

    def warm_up(self) -> None:
        """What the stage runner does before its first batch: every operator's and the encoding's
        warm-up (compiled kernels loaded), on a chain of its own."""
        t = time.process_time()
        chain = Chain(self.stage, self.cfg.encoding, self.cfg.framing)
        for op in chain.operators:
            op.warm_up()
        chain.encoding.warm_up()
        self.warm_cpu += time.process_time() - t

    def publish(self, emitted: Emitted) -> None:
        for topic, (values, keys) in emitted.topics.items():
            self.out.setdefault(topic, []).extend(zip(values, keys, strict=True))

    def park(self, i: int, reason: str, detail: str) -> None:
        raise AssertionError(f"dead letter {i}: {reason} {detail}")

    def step(self, part: int, values: list[bytes]) -> None:
        if part not in self.chains:
            self.chains[part] = Chain(self.stage, self.cfg.encoding, self.cfg.framing)
            self.guards[part] = Guard(self.cfg.limits)
        t = time.process_time()
        step_records(self.chains[part], self.guards[part], values, self.decode, str, self.publish, self.park, f"{part}")
        self.cpu += time.process_time() - t


def run(n: int, batch: int, profile: str | None = None, warm: bool = True) -> dict[str, Any]:
    msgs = raw_messages(n)
    node, select = Stage("node"), Stage("select")
    if warm:
        node.warm_up()
        select.warm_up()
    parts: dict[int, list[bytes]] = {}
    for value, key in msgs:
        parts.setdefault(zlib.crc32(key) % 4, []).append(value)
    prof = cProfile.Profile(time.process_time)  # CPU time: the machine is shared
    if profile == "node":
        prof.enable()
    for p in sorted(parts):  # each partition's micro-batches
        for i in range(0, len(parts[p]), batch):
            node.step(p, parts[p][i : i + batch])
    prof.disable()
    frames = [v for v, _ in node.out.get("perf.smoothed.byjob", [])]
    if profile == "select":
        prof.enable()
    for i in range(0, len(frames), 4):  # a few frames per consume batch
        select.step(0, frames[i : i + 4])
    prof.disable()
    if profile:
        pstats.Stats(prof).sort_stats("cumulative").print_stats(45)
        pstats.Stats(prof).sort_stats("tottime").print_stats(30)
    digests = {}
    for stage in (node, select):
        for topic, recs in sorted(stage.out.items()):
            h = hashlib.sha256()
            for v, k in recs:
                h.update(len(v).to_bytes(4, "big") + v + k)
            digests[topic] = (len(recs), h.hexdigest()[:16])
    cpu = {"node": round(node.cpu, 2), "select": round(select.cpu, 2)}
    if warm:
        cpu |= {"node_warm_up": round(node.warm_cpu, 2), "select_warm_up": round(select.warm_cpu, 2)}
    return {"cpu": cpu, "digests": digests}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--samples", type=int, default=200_000)
    ap.add_argument("--batch", type=int, default=1250)
    ap.add_argument("--profile", choices=["node", "select"])
    ap.add_argument("--cold", action="store_true", help="no warm-up: kernels load in the first batches")
    args = ap.parse_args()
    r = run(args.samples, args.batch, args.profile, warm=not args.cold)
    print(orjson.dumps(r, option=orjson.OPT_INDENT_2).decode())


if __name__ == "__main__":
    main()
