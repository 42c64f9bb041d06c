"""Throughput of the smooth stage through the embedded broker, next to a bare passthrough.

Both read the same pre-filled input topic (N samples of 12 metrics) in their own consumer group
and write every record to an output topic; the passthrough copies the bytes, the stage decodes
into column batches, runs the sliding mean and encodes. Rates count from the first fetched batch
to the moment every output is acknowledged. Rounds alternate so drift hits both alike.

    python -m bench.bench_stage [--samples 200000] [--rounds 3]      (from the repository root)
"""

from __future__ import annotations

import argparse
import math
import statistics
import time
import uuid

import numpy as np
import orjson
from confluent_kafka import Consumer, Producer
from perfsift.streams.broker import EmbeddedBroker
from perfsift.streams.clients import consumer_settings, create_pipeline_topics, ensure_topics, producer_settings
from perfsift.streams.config import OperatorSpec, StageConfig, load_pipeline, with_overrides
from perfsift.streams.logs import kafka_logger
from perfsift.streams.runner import StageRunner, run_in_thread

from bench.common import produce, write_result


def fill(props: dict, topic: str, n: int, nodes: int = 256) -> None:
    rng = np.random.default_rng(0)
    p = Producer(producer_settings(props))
    names = [f"m{j}" for j in range(12)]
    vals = np.round(rng.normal(100, 15, size=(n, 12)), 3).tolist()
    for i in range(n):
        node = f"node{i % nodes:04d}"
        rec = {
            "ts": 1.7e9 + i // nodes,
            "node": node,
            "job": "bench",
            "seq": i // nodes,
            "metrics": dict(zip(names, vals[i], strict=True)),
        }
        produce(p, topic, orjson.dumps(rec), node.encode())
    assert p.flush(60) == 0


def passthrough(props: dict, src: str, dst: str, n: int, batch: int) -> float:
    c = Consumer(consumer_settings(props, f"pass-{uuid.uuid4().hex}"))
    p = Producer(producer_settings(props))
    c.subscribe([src])
    got, t0 = 0, float("nan")
    while got < n:
        msgs = c.consume(batch, 0.1)
        if not msgs:
            continue
        if math.isnan(t0):  # until the first message arrives
            t0 = time.monotonic()
        for m in msgs:
            if m.error() is None:
                produce(p, dst, m.value(), m.key())
                got += 1
        p.poll(0)
    assert p.flush(60) == 0
    elapsed = time.monotonic() - t0
    c.close()
    return n / elapsed


def stage(props: dict, cfg, n: int) -> float:  # type: ignore[no-untyped-def]
    runner = StageRunner(cfg.stage("smooth"), cfg, props, embedded=True, group_id=f"stage-{uuid.uuid4().hex}")
    thread = run_in_thread(runner)
    while runner.stats.records_in < n:
        time.sleep(0.005)
    runner.stop()
    thread.join(60)  # drains: the last outputs are acknowledged and committed
    assert runner.stats.records_out == n and runner.stats.first_batch_at is not None
    return n / (time.monotonic() - runner.stats.first_batch_at)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--samples", type=int, default=200_000)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    with EmbeddedBroker() as b:
        props = {"bootstrap.servers": b.bootstrap, "logger": kafka_logger()}
        # a smooth stage on its own (the default pipeline cleans and smooths in one stage)
        smooth = StageConfig("smooth", "perf.raw", ("perf.smoothed",), (OperatorSpec("sliding_mean", {"window": 10}),))
        cfg = with_overrides(load_pipeline(), topic_prefix="bench.", snapshots=True, stages={"smooth": smooth})
        create_pipeline_topics(cfg, props)
        from confluent_kafka.admin import AdminClient

        ensure_topics(AdminClient(props), ["bench.copy"], cfg.partitions)
        src = cfg.topic("perf.raw")
        t = time.monotonic()
        fill(props, src, args.samples)
        print(f"filled {src} with {args.samples} samples in {time.monotonic() - t:.1f} s")
        rates: dict[str, list[float]] = {"passthrough": [], "smooth_stage": []}
        for r in range(args.rounds):
            rates["passthrough"].append(passthrough(props, src, "bench.copy", args.samples, cfg.batch_size))
            rates["smooth_stage"].append(stage(props, cfg, args.samples))
            print(
                f"round {r + 1}: passthrough {rates['passthrough'][-1]:,.0f}/s, "
                f"smooth stage {rates['smooth_stage'][-1]:,.0f}/s"
            )
    med = {k: statistics.median(v) for k, v in rates.items()}
    ratio = med["smooth_stage"] / med["passthrough"]
    print(
        f"median: passthrough {med['passthrough']:,.0f} samples/s, smooth stage {med['smooth_stage']:,.0f} "
        f"samples/s, ratio {ratio:.2f}"
    )
    path = write_result(
        "stage_throughput",
        {
            "benchmark": "smooth stage vs passthrough through the embedded broker",
            "script": "bench_stage",
            "samples": args.samples,
            "metrics_per_sample": 12,
            "nodes": 256,
            "rounds": args.rounds,
            "batch_size": cfg.batch_size,
            "partitions": cfg.partitions,
            "window": 10,
            "rates_samples_per_s": rates,
            "median_samples_per_s": med,
            "ratio_stage_to_passthrough": ratio,
            "targets": {"stage_samples_per_s": 40000, "ratio": 0.5},
            "notes": "The passthrough rate on this shared 2-core VM is bimodal between rounds (about 145k or "
            "290k samples/s) while the stage's is steady, so the table reports medians and all rounds.",
            "rows": [
                {
                    "measure": "bare consume-and-produce passthrough",
                    "value": f"{med['passthrough']:,.0f} samples/s",
                    "target": "",
                },
                {
                    "measure": "smooth stage (decode, sliding mean w=10, encode, commit + snapshots)",
                    "value": f"{med['smooth_stage']:,.0f} samples/s",
                    "target": ">= 40,000 samples/s",
                },
                {"measure": "stage / passthrough", "value": f"{ratio:.2f}", "target": ">= 0.50"},
                {
                    "measure": "per-round rates (passthrough; stage)",
                    "value": "; ".join(
                        f"{a:,.0f}; {b:,.0f}" for a, b in zip(rates["passthrough"], rates["smooth_stage"], strict=True)
                    ),
                    "target": "",
                },
            ],
        },
    )
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
