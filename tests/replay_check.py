"""Replay at scale, shared by the test suite and ``bench/bench_replay.py``: write a big synthetic
trace in chunks, replay it in a subprocess while sampling its RSS, and check that every
(job, node, seq) arrived exactly once."""

from __future__ import annotations

import subprocess
import sys
import time
import uuid
from pathlib import Path

import numpy as np
import orjson
import psutil
from confluent_kafka import Consumer
from perfsift.producers.synth import spmd
from perfsift.producers.traces import TraceWriter
from perfsift.streams.clients import consumer_settings


def write_trace(path: Path, fmt: str, nodes: int, seconds: int) -> int:
    """Chunks of 500 s, so generating a million samples stays within memory."""
    n = 0
    node_names = [f"n{p:03d}" for p in range(nodes)]
    with TraceWriter(path, fmt) as w:
        for chunk in range(0, seconds, 500):
            _, c = spmd("cactus", nodes=nodes, duration=min(500, seconds - chunk), seed=chunk, cube=True,
                        t0=1.7e9 + chunk)  # fmt: skip
            names = c["metrics"]
            for t, rows in zip(c["t"].tolist(), c["values"].tolist(), strict=True):  # one tolist per chunk
                for node, row in zip(node_names, rows, strict=True):
                    w.write(
                        {
                            "ts": t,
                            "node": node,
                            "job": "cactus",
                            "seq": -1,
                            "metrics": dict(zip(names, row, strict=True)),
                        }
                    )
                    n += 1
    return n


def replay_subprocess(
    trace: Path, bootstrap: str, summary: Path, extra: list[str] | None = None
) -> tuple[float, list[tuple[float, int]]]:
    cmd = [sys.executable, "-m", "perfsift", "replay", str(trace), "--max-speed", "-b", bootstrap,
           "--summary-json", str(summary), *(extra or [])]  # fmt: skip
    t0 = time.monotonic()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    ps = psutil.Process(proc.pid)
    rss: list[tuple[float, int]] = []
    while proc.poll() is None:
        try:
            if (now := ps.memory_info().rss) > 0:  # 0: exited between poll() and here (a zombie has no memory)
                rss.append((time.monotonic() - t0, now))
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
