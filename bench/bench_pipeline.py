"""The whole pipeline on the embedded broker, all stages in one process (as ``perfsift run``).

1. Throughput: N synthetic samples × 12 metrics (sweep3d, 64 nodes) published at full speed;
   samples/s from the first publish until every stage has processed every record.
2. Latency raw -> reduced at a fixed 5,000 samples/s (500 nodes at 10 Hz, event time = wall
   time, 5 s selection periods): p50/p99 of (arrival on perf.reduced − event time), after the
   first three periods (the startup grace of projection pursuit).
3. Bytes: the reduction on the bundled demo trace (``perfsift analyze``): reduced vs smoothed and
   raw bytes.

    python -m bench.bench_pipeline [--samples 200000] [--latency-seconds 40]
"""

from __future__ import annotations

import argparse
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import numpy as np
import orjson
from confluent_kafka import Consumer, Producer
from perfsift.producers.demo import demo_trace_path
from perfsift.producers.synth import spmd
from perfsift.streams.analyze import analyze
from perfsift.streams.broker import EmbeddedBroker
from perfsift.streams.config import load_pipeline, with_overrides
from perfsift.streams.runner import (
    StageRunner,
    consumer_settings,
    producer_settings,
    run_in_thread,
    wait_assigned,
)
from perfsift.streams.topics import create_pipeline_topics

from bench.common import write_result


def start(cfg, props: dict) -> tuple[list[StageRunner], list[threading.Thread]]:  # type: ignore[no-untyped-def]
    runners = [StageRunner(st, cfg, props, embedded=True) for st in cfg.stages.values()]
    threads = [run_in_thread(r) for r in runners]
    wait_assigned(runners)
    return runners, threads


def stop(runners: list[StageRunner], threads: list[threading.Thread]) -> None:
    for r in runners:
        r.stop()
    for t in threads:
        t.join(60)


def throughput(n: int) -> dict[str, Any]:
    nodes = 64
    _, c = spmd("sweep3d", nodes=nodes, duration=n // nodes, seed=1, cube=True)
    vals, names = c["values"], c["metrics"]
    with EmbeddedBroker() as b:
        props = {"bootstrap.servers": b.bootstrap}
        cfg = with_overrides(load_pipeline(), topic_prefix="tp.")
        create_pipeline_topics(cfg, props)
        runners, threads = start(cfg, props)
        p = Producer(producer_settings(props))
        t0 = time.monotonic()
        sent = 0
        for s, t in enumerate(c["t"].tolist()):
            for q in range(nodes):
                rec = {"ts": t, "node": f"n{q:03d}", "job": "sweep3d", "seq": s,
                       "metrics": dict(zip(names, vals[s, q].tolist(), strict=True))}  # fmt: skip
                while True:
                    try:
                        p.produce(cfg.topic("perf.raw"), orjson.dumps(rec), rec["node"].encode())
                        break
                    except BufferError:
                        p.poll(0.05)
                sent += 1
        p.flush(60)
        publish_s = time.monotonic() - t0
        first = {r.stage.name: r for r in runners}
        while not all(r.stats.records_in >= sent for r in runners) and time.monotonic() - t0 < 600:
            time.sleep(0.05)
        elapsed = time.monotonic() - t0
        stats = {name: r.stats.as_dict() for name, r in first.items()}
        stop(runners, threads)
    return {
        "samples": sent,
        "seconds": elapsed,
        "rate": sent / elapsed,
        "publish_s": publish_s,
        "busy": {k: v["busy_s"] for k, v in stats.items()},
    }


def latency(rate: int, seconds: float) -> dict[str, float]:
    nodes, hz = 500, rate / 500
    with EmbeddedBroker() as b:
        props = {"bootstrap.servers": b.bootstrap}
        cfg = load_pipeline()
        stages = dict(cfg.stages)
        sel = stages["select"]
        op = sel.operators[0]
        from dataclasses import replace

        from perfsift.streams.config import OperatorSpec

        params = {**op.params, "pursuit": {**op.params["pursuit"], "period": 5.0, "window": 5, "restarts": 4}}
        stages["select"] = replace(sel, operators=(OperatorSpec("reduce", params),))
        cfg = with_overrides(cfg, topic_prefix="lat.", stages=stages, batch_timeout_s=0.05, commit_interval_s=1.0)
        create_pipeline_topics(cfg, props)
        runners, threads = start(cfg, props)
        arrivals: list[tuple[float, float]] = []
        done = threading.Event()

        def consume() -> None:
            c = Consumer(consumer_settings(props, f"lat-{uuid.uuid4().hex}"))
            c.subscribe([cfg.topic("perf.reduced")])
            while not done.is_set():
                for m in c.consume(5000, 0.05):
                    if m.error() is None:
                        now = time.time()
                        arrivals.append((now, orjson.loads(m.value())["ts"]))  # type: ignore[arg-type]
            c.close()

        reader = threading.Thread(target=consume, daemon=True)
        reader.start()
        time.sleep(5)  # the reader joins its group
        p = Producer(producer_settings(props) | {"linger.ms": 1})
        rng = np.random.default_rng(0)
        t0 = time.time()
        step = 1.0 / hz
        k = 0
        while time.time() - t0 < seconds:
            tick = t0 + k * step
            while time.time() < tick:
                time.sleep(0.001)
            for q in range(nodes):
                m = {f"m{j}": float(100 + rng.normal()) for j in range(12)}
                node = f"n{q:03d}"
                rec = {"ts": tick, "node": node, "job": "live", "seq": k, "metrics": m}
                p.produce(cfg.topic("perf.raw"), orjson.dumps(rec), node.encode())
            p.poll(0)
            k += 1
        p.flush(30)
        time.sleep(8)
        done.set()
        reader.join(10)
        stop(runners, threads)
    lat = np.array([a - ts for a, ts in arrivals if ts > t0 + 15.0])  # after three 5 s periods
    return {
        "sent": k * nodes,
        "received": len(arrivals),
        "p50": float(np.percentile(lat, 50)),
        "p99": float(np.percentile(lat, 99)),
        "max": float(lat.max()),
        "measured": len(lat),
    }


def demo_bytes() -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp:
        s = analyze(demo_trace_path(), load_pipeline(), Path(tmp))
    return {"raw": s["bytes_raw"], "reduced": s["bytes_reduced"], "ratio": s["reduction_ratio"],
            "ratio_raw": s["reduction_ratio_vs_raw"]}  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--samples", type=int, default=200_000)
    ap.add_argument("--latency-seconds", type=float, default=40.0)
    args = ap.parse_args()
    d = demo_bytes()
    print("demo bytes", d, flush=True)
    t = throughput(args.samples)
    print("throughput", t, flush=True)
    lat = latency(5000, args.latency_seconds)
    print("latency", lat, flush=True)
    rows = [
        {"measure": f"whole pipeline (clean, smooth, forecast, select) in one process, {t['samples']:,} samples × 12 "
                    "metrics, 64 nodes",
         "value": f"{t['rate']:,.0f} samples/s ({t['seconds']:.1f} s; publishing alone {t['publish_s']:.1f} s)",
         "target": ">= 20,000"},
        {"measure": "stage busy time (s): " + ", ".join(f"{k} {v:.1f}" for k, v in t["busy"].items()),
         "value": "", "target": ""},
        {"measure": f"latency raw -> reduced at 5,000 samples/s (500 nodes × 10 Hz, 5 s periods; "
                    f"{lat['measured']:,} samples after warm-up)",
         "value": f"p50 {lat['p50']:.2f} s, p99 {lat['p99']:.2f} s (max {lat['max']:.2f} s)", "target": "p99 <= 2 s"},
        {"measure": "bytes on perf.reduced / perf.smoothed.byjob (demo trace, perfsift analyze)",
         "value": f"{d['ratio']:.1%} ({d['ratio_raw']:.1%} of the raw bytes)", "target": "report"},
    ]  # fmt: skip
    write_result("pipeline", {"benchmark": "Whole pipeline", "script": "bench_pipeline", "rows": rows})


if __name__ == "__main__":
    main()
