"""The node stage's CPU per part, in one process, no broker, on bench_pipeline's data.

The published JSON samples (sweep3d, 64 nodes × 12 metrics; :func:`bench.pipeline_inproc.raw_messages`)
go, keyed by node over four partitions in micro-batches of ``--batch`` messages, through what the
Kafka runner does with them after ``consume``: the size limit and the decoder (``stage.decoded``),
the other limits (``stage.guarded``), the chain (clean, sliding_mean; each operator timed), the
encoding of its output (column frames on perf.smoothed.byjob) and the byte accounting of what was
read and written (``StageStats.count_in`` / ``count_out``: payload and the zstd estimate). Printed and
written to ``bench/results/node_stage.json``: CPU seconds per part (the minimum over ``--rounds``
runs, each on fresh chains), and a SHA-256 of every encoded frame and key, in order, with the byte
counts: the same digest before and after a change means the same bytes.

    python -m bench.bench_node [--samples 200000] [--rounds 3] [--profile]
"""

from __future__ import annotations

import argparse
import cProfile
import hashlib
import pstats
import time
import zlib
from typing import Any

from perfsift.streams.config import load_pipeline
from perfsift.streams.limits import Guard
from perfsift.streams.stage import Chain, StageStats, decoded, guarded, sample_decoder

from bench.common import write_result
from bench.pipeline_inproc import raw_messages

PARTS = ("decode", "guard", "clean", "smooth", "encode", "bytes_in", "bytes_out")


def partitions(n: int) -> dict[int, list[bytes]]:
    """The messages per input partition (crc32 of the key, as bench_pipeline's four partitions)."""
    parts: dict[int, list[bytes]] = {}
    for value, key in raw_messages(n):
        parts.setdefault(zlib.crc32(key) % 4, []).append(value)
    return parts


def one_round(parts: dict[int, list[bytes]], batch: int) -> dict[str, Any]:
    """Every partition's micro-batches through fresh chains; CPU seconds per part, the digest."""
    cfg = load_pipeline()
    stage = cfg.stage("node")
    decode = sample_decoder(cfg.encoding)
    stats = StageStats("node")
    cpu = dict.fromkeys(PARTS, 0.0)
    names = {"Clean": "clean", "SlidingMean": "smooth"}
    digest = hashlib.sha256()
    frames = 0
    clock = time.process_time
    mark = 0.0

    def after(op: Any, _out: Any, _seconds: float) -> None:
        nonlocal mark
        now = clock()
        cpu[names[type(op).__name__]] += now - mark
        mark = now

    def park(i: int, reason: str, detail: str) -> None:
        raise AssertionError(f"dead letter {i}: {reason} {detail}")

    for p in sorted(parts):
        chain, guard = Chain(stage, cfg.encoding, cfg.framing), Guard(cfg.limits)
        for i in range(0, len(parts[p]), batch):
            values = parts[p][i : i + batch]
            t0 = clock()
            b, rows = decoded(values, guard, decode, str, park)
            t1 = clock()
            b, rows = guarded(b, rows, guard, park)
            t2 = clock()
            mark = t2
            emitted = chain.process(b, after)
            t3 = clock()
            stats.count_out(emitted.topics)
            t4 = clock()
            stats.count_in("perf.raw", values)  # type: ignore[arg-type]
            t5 = clock()
            cpu["decode"] += t1 - t0
            cpu["guard"] += t2 - t1
            cpu["encode"] += t3 - mark
            cpu["bytes_out"] += t4 - t3
            cpu["bytes_in"] += t5 - t4
            for topic, (vals, keys) in emitted.topics.items():
                for v, k in zip(vals, keys, strict=True):
                    digest.update(topic.encode() + len(v).to_bytes(4, "big") + v + k)
                    frames += 1
    return {
        "cpu": cpu,
        "frames": frames,
        "digest": digest.hexdigest()[:16],
        "bytes": {"read": stats.wire_in.as_dict(), "written": stats.wire_out.as_dict()},
    }


def run(n: int, batch: int, rounds: int, profile: bool = False) -> dict[str, Any]:
    parts = partitions(n)
    one_round(parts, batch)  # warm-up: numba's cache, imports
    results = []
    prof = cProfile.Profile()
    for _ in range(rounds):
        if profile:
            prof.enable()
        results.append(one_round(parts, batch))
        prof.disable()
    if profile:
        pstats.Stats(prof).sort_stats("tottime").print_stats(35)
    assert len({r["digest"] for r in results}) == 1, "rounds disagree"
    best = {k: round(min(r["cpu"][k] for r in results), 3) for k in PARTS}
    totals = [sum(r["cpu"].values()) for r in results]
    return {
        "samples": n,
        "batch": batch,
        "rounds": rounds,
        "cpu_s": best,
        "cpu_s_total": [round(t, 3) for t in totals],
        "frames": results[0]["frames"],
        "digest": results[0]["digest"],
        "bytes": results[0]["bytes"],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--samples", type=int, default=200_000)
    ap.add_argument("--batch", type=int, default=1250, help="messages per partition and micro-batch")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--profile", action="store_true", help="cProfile of the timed rounds (slower)")
    ap.add_argument("--write", action="store_true", help="write bench/results/node_stage.json")
    args = ap.parse_args()
    r = run(args.samples, args.batch, args.rounds, args.profile)
    if args.write:
        write_result("node_stage", r)
    print({k: v for k, v in r.items() if k != "bytes"})
    print(r["bytes"])


if __name__ == "__main__":
    main()
