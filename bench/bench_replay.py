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
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import numpy as np
import orjson
import psutil
from confluent_kafka import Consumer
from perfsift.producers.synth import spmd
from perfsift.producers.traces import TraceWriter
from perfsift.streams.broker import EmbeddedBroker
from perfsift.streams.runner import consumer_settings

from bench.common import write_result


def write_trace(path: Path, fmt: str, nodes: int, seconds: int) -> int:
    """Chunks of 500 s, so generating a million samples stays within memory."""
    n = 0
    with TraceWriter(path, fmt) as w:
        for chunk in range(0, seconds, 500):
            _, c = spmd("cactus", nodes=nodes, duration=min(500, seconds - chunk), seed=chunk, cube=True,
                        t0=1.7e9 + chunk)  # fmt: skip
            vals, names = c["values"], c["metrics"]
            for s, t in enumerate(c["t"].tolist()):
                for p in range(nodes):
                    row = dict(zip(names, vals[s, p].tolist(), strict=True))
                    w.write({"ts": t, "node": f"n{p:03d}", "job": "cactus", "seq": -1, "metrics": row})
                    n += 1
    return n


def replay_subprocess(trace: Path, bootstrap: str, summary: Path) -> tuple[float, list[tuple[float, int]]]:
    cmd = [sys.executable, "-m", "perfsift", "replay", str(trace), "--max-speed", "-b", bootstrap,
           "--summary-json", str(summary)]  # fmt: skip
    t0 = time.monotonic()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    ps = psutil.Process(proc.pid)
    rss: list[tuple[float, int]] = []
    while proc.poll() is None:
        try:
            rss.append((time.monotonic() - t0, ps.memory_info().rss))
        except psutil.Error:
            break
        time.sleep(0.2)
    out, err = proc.communicate()
    if proc.returncode != 0:
        raise SystemExit(f"replay failed: {err[-2000:]}")
    print(out.strip())
    return time.monotonic() - t0, rss


def check_exactly_once(bootstrap: str, topic: str, expected: int) -> dict[str, int]:
    c = Consumer(consumer_settings({"bootstrap.servers": bootstrap}, f"check-{uuid.uuid4().hex}"))
    c.subscribe([topic])
    seen: dict[tuple[str, str], list[int]] = {}
    got = 0
    idle_since = time.monotonic()
    while got < expected and time.monotonic() - idle_since < 30:
        msgs = c.consume(10000, 0.5)
        if msgs:
            idle_since = time.monotonic()
        for m in msgs:
            if m.error() is not None:
                continue
            r = orjson.loads(m.value())  # type: ignore[arg-type]
            seen.setdefault((r["job"], r["node"]), []).append(r["seq"])
            got += 1
    c.close()
    dup = missing = 0
    for seqs in seen.values():
        a = np.sort(np.array(seqs))
        dup += int(len(a) - len(np.unique(a)))
        missing += int(a.max() + 1 - len(np.unique(a))) if len(a) else 0
    return {"received": got, "keys": len(seen), "duplicates": dup, "gaps": missing}


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
