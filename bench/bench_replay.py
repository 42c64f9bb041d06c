"""Trace replay at --max-speed through the embedded broker.

Writes a synthetic cactus trace (``--nodes`` × ``--seconds`` samples of 12 metrics, default
100 × 10,000 = 1,000,000) in the chosen format, replays it into ``perf.raw`` with
``perfsift replay --max-speed`` in a subprocess (peak RSS sampled every 0.2 s, so the memory curve
is recorded), then reads ``perf.raw`` back and checks that every (job, node, seq) arrived exactly
once.

    python -m bench.bench_replay [--nodes 100] [--seconds 10000] [--format jsonl|sddf-binary|csv]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from perfsift.streams.broker import EmbeddedBroker

from bench.common import write_result
from tests.replay_check import check_exactly_once, replay_subprocess, write_trace


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", type=int, default=100)
    ap.add_argument("--seconds", type=int, default=10000)
    ap.add_argument("--format", default="jsonl", choices=["jsonl", "sddf-binary", "sddf", "csv"])
    args = ap.parse_args()
    ext = {"jsonl": "jsonl", "sddf-binary": "sddfb", "sddf": "sddf", "csv": "csv"}[args.format]
    with tempfile.TemporaryDirectory() as tmp:
        trace = Path(tmp) / f"cactus.{ext}"
        t = time.monotonic()
        n = write_trace(trace, args.format, args.nodes, args.seconds)
        size = trace.stat().st_size
        print(f"wrote {n:,} samples ({size / 2**20:.0f} MiB) in {time.monotonic() - t:.0f} s")
        with EmbeddedBroker() as b:
            summary = Path(tmp) / "summary.json"
            wall, rss = replay_subprocess(trace, b.bootstrap, summary)
            stats = json.loads(summary.read_text())
            check = check_exactly_once(b.bootstrap, "perf.raw", n)
    peak = max(r for _, r in rss)
    early = max((r for t_, r in rss if t_ < wall * 0.25), default=peak)
    print(stats, check, f"peak RSS {peak / 2**20:.0f} MiB (first quarter {early / 2**20:.0f} MiB)")
    rows = [
        {"measure": f"replay --max-speed, {n:,} samples × 12 metrics, {args.format} ({size / 2**20:.0f} MiB)",
         "value": f"{stats['samples_per_s']:,.0f} samples/s ({stats['elapsed_s']:.1f} s)", "target": ">= 100,000"},
        {"measure": "every (job, node, seq) exactly once in perf.raw",
         "value": f"{check['received']:,} received, {check['duplicates']} duplicates, {check['gaps']} gaps",
         "target": f"{n:,}, 0, 0"},
        {"measure": "peak RSS of the replay process (first quarter of the run)",
         "value": f"{peak / 2**20:.0f} MiB ({early / 2**20:.0f} MiB)", "target": "flat"},
    ]  # fmt: skip
    write_result(
        f"replay_{args.format.replace('-', '_')}",
        {"benchmark": f"Trace replay ({args.format})", "script": "bench_replay", "rows": rows,
         "rss_mib": [[round(t_, 1), round(r / 2**20, 1)] for t_, r in rss[::5]]},
    )  # fmt: skip


if __name__ == "__main__":
    main()
