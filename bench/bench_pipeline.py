"""The whole pipeline on the embedded broker, all stages in one process (as ``perfsift run``).

1. Throughput: N synthetic samples × 12 metrics (sweep3d, 64 nodes) published at full speed;
   samples/s from the first publish until every stage has processed every record - with the
   stages as ``perfsift run`` starts them (one process each), and as threads of one process.
2. Latency raw -> reduced at a fixed 5,000 samples/s (500 nodes at 10 Hz, event time = wall
   time, 5 s selection periods): p50/p99 of (arrival on perf.reduced − event time), after the
   first three periods (the startup grace of projection pursuit).
3. Bytes: perf.reduced on the bundled demo trace (``perfsift analyze``) vs the raw bytes, payload
   and zstd-compressed (every topic: ``bench.bench_bytes``).
0. Before 1, in the same run: the bare two-hop consume -> produce chain of the same topology
   (one process per hop), the machine's ceiling for moving these messages, and the ratio.

    python -m bench.bench_pipeline [--samples 200000] [--latency-seconds 40]
    python -m bench.bench_pipeline --ratio-rounds 2     # only 0., alternated with 1.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import orjson
from confluent_kafka import Consumer, Producer
from perfsift.analysis.analyze import analyze
from perfsift.cli.local import expected_inputs, start_stages
from perfsift.producers.demo import demo_trace_path
from perfsift.producers.synth import spmd
from perfsift.streams.broker import EmbeddedBroker
from perfsift.streams.clients import consumer_settings, create_pipeline_topics, producer_settings
from perfsift.streams.config import load_pipeline, with_overrides
from perfsift.streams.runner import wait_assigned

from bench.common import produce, write_result


def cpu_seconds(names: dict[int, str]) -> dict[str, float]:
    """CPU seconds (user + system) so far: this process with its producer's threads ("publisher"),
    the child processes ``names`` (pid -> name) and the embedded broker ("broker"), from /proc."""
    tick = os.sysconf("SC_CLK_TCK")
    out = {"publisher": time.process_time()}
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            stat = (d / "stat").read_text().rsplit(")", 1)[1].split()
            cmd = (d / "cmdline").read_bytes()
        except (OSError, IndexError):
            continue
        name = names.get(int(d.name)) or ("broker" if int(stat[1]) == os.getpid() and b"tansu" in cmd else None)
        if name:
            out[name] = out.get(name, 0.0) + (int(stat[11]) + int(stat[12])) / tick
    return out


def cpu_delta(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    return {k: round(v - before.get(k, 0.0), 2) for k, v in after.items()}


def start(cfg, props: dict, processes: bool, embedded: bool = True) -> tuple[list[Any], Callable[[], None]]:  # type: ignore[no-untyped-def]
    """The stages as ``perfsift run`` starts them (one process each, or threads of this one)."""
    runners, join = start_stages(cfg, props, embedded, processes, [])
    wait_assigned(runners, timeout=120)
    return runners, join


def stop(runners: list[Any], join: Callable[[], None]) -> None:
    for r in runners:
        r.stop()
    join()


def publish_sweep(props: dict[str, str], topic: str, c: dict[str, Any], nodes: int) -> int:
    """The sweep3d columns ``c`` as JSON samples keyed by node, as fast as the producer takes them;
    returns how many were sent (every one acknowledged)."""
    vals, names = c["values"], c["metrics"]
    p = Producer(producer_settings(props))
    sent = 0
    for s, t in enumerate(c["t"].tolist()):
        for q in range(nodes):
            rec = {"ts": t, "node": f"n{q:03d}", "job": "sweep3d", "seq": s,
                   "metrics": dict(zip(names, vals[s, q].tolist(), strict=True))}  # fmt: skip
            produce(p, topic, orjson.dumps(rec), rec["node"].encode())
            sent += 1
    p.flush(60)
    return sent


def throughput(
    n: int,
    processes: bool,
    broker: Callable[[], Any] = EmbeddedBroker,
    replication: int = 1,
    kafka: dict[str, str] | None = None,
    **overrides: Any,
) -> dict[str, Any]:
    """``broker()``: a context manager with ``bootstrap`` (an EmbeddedBroker, or a real cluster with
    ``replication`` 3, where ``guarantee: auto`` means exactly-once: bench_cluster.py); ``kafka``:
    more client properties (e.g. ``statistics.interval.ms``), ``overrides``: pipeline settings
    (e.g. ``event_time_skew_s``). Also returns each stage's librdkafka statistics at the end and the
    partitions event-time alignment paused and resumed."""
    nodes = 64
    _, c = spmd("sweep3d", nodes=nodes, duration=n // nodes, seed=1, cube=True)
    with broker() as b:
        props = {"bootstrap.servers": b.bootstrap, **(kafka or {})}
        prefix = f"tp{uuid.uuid4().hex[:4]}."
        cfg = with_overrides(load_pipeline(), topic_prefix=prefix, replication=replication, **overrides)
        create_pipeline_topics(cfg, props)
        runners, join = start(cfg, props, processes, embedded=broker is EmbeddedBroker)
        pids = {r.proc.pid: r.stage.name for r in runners if hasattr(r, "proc")}
        cpu0 = cpu_seconds(pids)
        t0 = time.monotonic()
        sent = publish_sweep(props, cfg.topic("perf.raw"), c, nodes)
        publish_s = time.monotonic() - t0
        first = {r.stage.name: r for r in runners}
        expected = expected_inputs(cfg, runners, sent)  # a stage after the first reads column frames
        while not all(r.stats.records_in >= expected(r) for r in runners) and time.monotonic() - t0 < 600:
            time.sleep(0.05)
        elapsed = time.monotonic() - t0
        cpu = cpu_delta(cpu0, cpu_seconds(pids))
        kafka_stats = {name: {f"{c}.{k}": v for (c, k), v in r.stats.kafka.items()} for name, r in first.items()}
        stats = {name: r.stats.as_dict() for name, r in first.items()}
        stop(runners, join)
    return {
        "samples": sent,
        "seconds": elapsed,
        "rate": sent / elapsed,
        "publish_s": publish_s,
        "busy": {k: v["busy_s"] for k, v in stats.items()},
        "cpu": cpu,
        "paused": {k: v["paused"] for k, v in stats.items()},
        "resumed": {k: v["resumed"] for k, v in stats.items()},
        "kafka": kafka_stats,
    }


def _hop(props: dict[str, str], src: str, dst: str | None, group: str, total: int, done: Any) -> None:
    """One bare stage: consume ``src`` in micro-batches and produce every message unchanged, with
    its key, to ``dst`` (the last hop only counts); ``done`` is set after ``total`` messages."""
    c = Consumer(consumer_settings(props, group) | {"auto.offset.reset": "earliest"})
    c.subscribe([src])
    p = Producer(producer_settings(props)) if dst else None
    n = 0
    while n < total:
        for m in c.consume(5000, 0.1):
            if m.error() is not None:
                continue
            n += 1
            if p is not None and dst is not None:
                produce(p, dst, m.value(), m.key())
        if p is not None:
            p.poll(0)
    if p is not None:
        p.flush(60)
    c.close()
    done.set()


def passthrough(n: int, broker: Callable[[], Any] = EmbeddedBroker, replication: int = 1) -> dict[str, Any]:
    """The bare two-hop chain of the default topology (perf.raw -> one topic -> a consumer), one
    process per hop as perfsift run starts its stages: consume and produce, nothing else."""
    import multiprocessing as mp

    nodes = 64
    _, c = spmd("sweep3d", nodes=nodes, duration=n // nodes, seed=1, cube=True)
    ctx = mp.get_context("spawn")
    with broker() as b:
        props = {"bootstrap.servers": b.bootstrap}
        cfg = with_overrides(load_pipeline(), topic_prefix=f"pt{uuid.uuid4().hex[:4]}.", replication=replication)
        create_pipeline_topics(cfg, props)
        raw, mid = cfg.topic("perf.raw"), cfg.topic("perf.smoothed.byjob")
        sent = len(c["t"]) * nodes
        done = [ctx.Event(), ctx.Event()]
        hops = [ctx.Process(target=_hop, args=(props, raw, mid, "pt.a", sent, done[0])),
                ctx.Process(target=_hop, args=(props, mid, None, "pt.b", sent, done[1]))]  # fmt: skip
        for h in hops:
            h.start()
        time.sleep(8)  # both join their groups
        pids = {h.pid: f"hop {i + 1}" for i, h in enumerate(hops) if h.pid is not None}
        cpu0 = cpu_seconds(pids)
        t0 = time.monotonic()
        publish_sweep(props, raw, c, nodes)
        publish_s = time.monotonic() - t0
        done[1].wait(600)
        elapsed = time.monotonic() - t0
        cpu = cpu_delta(cpu0, cpu_seconds(pids))
        for h in hops:
            h.join(30)
    return {"samples": sent, "seconds": elapsed, "rate": sent / elapsed, "publish_s": publish_s, "cpu": cpu}


def latency(rate: int, seconds: float, processes: bool) -> dict[str, float]:
    nodes, hz = 500, rate / 500
    with EmbeddedBroker() as b:
        props = {"bootstrap.servers": b.bootstrap}
        cfg = load_pipeline()
        stages = dict(cfg.stages)
        sel = stages["select"]
        op = sel.operators[0]
        from dataclasses import replace

        from perfsift.streams.config import OperatorSpec

        params = {**op.params, "pursuit": {**op.params["pursuit"], "period": 5.0, "restarts": 4}}
        stages["select"] = replace(sel, operators=(OperatorSpec("reduce", params),))
        cfg = with_overrides(cfg, topic_prefix="lat.", stages=stages, batch_timeout_s=0.05, commit_interval_s=1.0)
        create_pipeline_topics(cfg, props)
        runners, join = start(cfg, props, processes)
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
        stop(runners, join)
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
    reduced = s["bytes"]["topics"]["perf.reduced"]
    return {"ratio_raw": reduced["ratio"], "compressed_raw": reduced["compressed_ratio"],
            "written": s["bytes_written_ratio"], "written_compressed": s["bytes_written_compressed_ratio"]}  # fmt: skip


def cpu_text(run: dict[str, Any]) -> str:
    parts = ", ".join(f"{k} {v:.2f}" for k, v in run["cpu"].items())
    return f"{parts}; total {sum(run['cpu'].values()):.2f} of {2 * run['seconds']:.2f}"


#: runs of this script that one table cannot show; the VM's speed drifts by up to about 25 %
NOTES = (
    "Before the lean topology (8b3e1ae, 2026-11-22, on an Intel Xeon VM, no passthrough measured): "
    "23,000-24,700 samples/s, one process per stage. 2026-11-24, an AMD EPYC VM shared with four other "
    "sessions (load average 4-6 on 2 cores): rates drift by up to 2x between runs, so only the ratio "
    "within one run counts. Runs of that day: after the topology, framing and sampled bytes accounting "
    "(8c78474) the pipeline read 13,000 and 14,200 samples/s against a passthrough of 42,300 and 29,200 "
    "(0.31x, 0.48x; node stage busy about 10 s, select 6-7 s per 200,000 samples); the run recorded at "
    "d325bcd (32,346 vs 55,452 samples/s, 0.58x; node busy 4.2 s, select 2.5 s) added one thread pool per"
    " process for projection pursuit's restarts instead of one per period, which cut the select stage's "
    "busy time to 2.5 s. py-spy of the node stage then: JSON decode of perf.raw about 40 % (orjson itself"
    " half of it), the cleaner 20 %. p99 latency read 0.8-1.8 s between runs. 2026-11-24 afternoon (this "
    "table, commit in the header): per-batch costs cut, each measured in one process on the bench's "
    "200,000 samples (1,250 per partition and micro-batch), outputs checked identical: a numba scanner of"
    " the raw sample shape (schemas/_json_scan.py, Eisel-Lemire numbers, correctly rounded; anything "
    "unusual falls back to orjson whole) decodes in 0.24-0.29 s against 0.72-0.92 s for the orjson path; "
    "the select stage's period matrix taken from the probe's rows and the deviants' robust z computed "
    "once: 0.83x the select stage's time (single-threaded pursuit, 1.97-2.22 s -> 1.67-1.83 s); the "
    "cleaner's flags from whole columns: 0.95x the cleaner's time (1 % outliers and missing). The "
    "pipeline's ratio did not move beyond the drift: the base (43f7248) and this branch alternated twice "
    "read 0.53 and 0.65 (base), 0.58 and 0.63 (branch); two full runs of this script, both while another "
    "session loaded the machine, 0.59 (35,600 vs 60,000) and 0.62 (32,817 vs 53,255). What bounds it: "
    "during those two runs top showed another session's process at 87-107 % of a core, and the pipeline's"
    " processes together got about 1.1 cores; the stages were busy longer than they ran (node 3.4 s busy,"
    " 2.6-2.7 s CPU; select 3.1-3.7 s busy, 1.6-1.9 s CPU), that is, waiting for a core. Per 200,000 "
    "samples the pipeline needs about 6-6.5 CPU-s (publisher 1.4, broker 0.4-0.5, node 2.6-2.7, select "
    "1.6-1.9 of which projection pursuit's L-BFGS kernel about half: 104 analyses of 30 s periods here) "
    "against 3.3-3.9 for the passthrough, so on two free cores 0.8x needs the select stage's pursuit to "
    "get cheaper (fewer restarts or analyses), not only the per-record work. Left as measured: the zstd "
    "estimate of perf.raw's compressed bytes costs 0.19 s per 200,000 samples with 256 kB sampled per "
    "micro-batch (0.07 s at 128 kB, whose estimate is 4.5 % low where 256 kB's is 5 % high). The run in "
    "this table (merge ee8fc24 with the snapshot cadence, 16:46 UTC) had the machine to itself (load "
    "average 0.14 at the start): 60,098 samples/s against 87,162 for the passthrough, 0.69x; CPU seconds "
    "node 2.1 and select 1.5 against 1.4 and 0.5 for the two hops, publisher 1.3 and broker 0.3 in both; "
    "p99 latency 0.64 s. So the 60,000 goal is met on two free cores and the 0.8x is not: the stages' own"
    " work (cleaning, forecasting, projection pursuit) costs 1.7 CPU-s more per 200,000 samples than "
    "copying the messages."
)


def ratio(n: int, rounds: int) -> list[dict[str, Any]]:
    """The bare passthrough and the whole pipeline (one process per stage) alternated ``rounds``
    times in this session, after a short warm-up run: per round the rates, their ratio and the CPU
    seconds (``--ratio-rounds``; written to bench/results/pipeline_ratio.json)."""
    throughput(20_000, processes=True)  # the kernels' cache, compiled outside the timed runs
    out = []
    for r in range(rounds):
        pt = passthrough(n)
        t = throughput(n, processes=True)
        row = {
            "round": r,
            "samples": n,
            "passthrough": round(pt["rate"]),
            "pipeline": round(t["rate"]),
            "ratio": round(t["rate"] / pt["rate"], 3),
            "cpu_pipeline": t["cpu"],
            "cpu_passthrough": pt["cpu"],
        }
        print(row, flush=True)
        out.append(row)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--samples", type=int, default=200_000)
    ap.add_argument("--latency-seconds", type=float, default=40.0)
    ap.add_argument("--ratio-rounds", type=int, default=0, help="only the pipeline / passthrough ratio, alternated")
    args = ap.parse_args()
    if args.ratio_rounds:
        rounds = ratio(args.samples, args.ratio_rounds)
        write_result("pipeline_ratio", {"benchmark": "Whole pipeline / passthrough, alternated", "rounds": rounds})
        return
    d = demo_bytes()
    print("demo bytes", d, flush=True)
    pt = passthrough(args.samples)
    print("bare two-hop passthrough", pt, flush=True)
    t = throughput(args.samples, processes=True)
    print("throughput, one process per stage", t, flush=True)
    tt = throughput(args.samples, processes=False)
    print("throughput, stages as threads", tt, flush=True)
    lat = latency(5000, args.latency_seconds, processes=True)
    print("latency, one process per stage", lat, flush=True)
    lat_t = latency(5000, args.latency_seconds, processes=False)
    print("latency, stages as threads", lat_t, flush=True)
    rows = [
        {"measure": f"whole pipeline (node: clean, smooth, forecast; select) in one perfsift run, one process per "
                    f"stage, {t['samples']:,} samples × 12 metrics, 64 nodes",
         "value": f"{t['rate']:,.0f} samples/s ({t['seconds']:.1f} s; publishing alone {t['publish_s']:.1f} s)",
         "target": ">= 60,000"},
        {"measure": f"bare two-hop consume -> produce chain of the same topology (perf.raw -> one topic -> a "
                    f"consumer, one process per hop), same run, {pt['samples']:,} samples",
         "value": f"{pt['rate']:,.0f} samples/s ({pt['seconds']:.1f} s; publishing alone {pt['publish_s']:.1f} s)",
         "target": ""},
        {"measure": "whole pipeline / bare passthrough (measured in this one run)",
         "value": f"{t['rate'] / pt['rate']:.2f} ×", "target": ">= 0.8 ×"},
        {"measure": "the same, stages as threads of one process (perfsift run --threads)",
         "value": f"{tt['rate']:,.0f} samples/s ({tt['seconds']:.1f} s)", "target": ""},
        {"measure": "stage busy time (s), processes: " + ", ".join(f"{k} {v:.1f}" for k, v in t["busy"].items()),
         "value": "", "target": ""},
        {"measure": "CPU seconds in the timed window, whole pipeline (of 2 cores × elapsed)",
         "value": f"{cpu_text(t)}", "target": ""},
        {"measure": "CPU seconds in the timed window, bare passthrough (of 2 cores × elapsed)",
         "value": f"{cpu_text(pt)}", "target": ""},
        {"measure": f"latency raw -> reduced at 5,000 samples/s (500 nodes × 10 Hz, 5 s periods; "
                    f"{lat['measured']:,} samples after warm-up), one process per stage",
         "value": f"p50 {lat['p50']:.2f} s, p99 {lat['p99']:.2f} s (max {lat['max']:.2f} s)", "target": "p99 <= 1 s"},
        {"measure": "the same latency, stages as threads of one process",
         "value": f"p50 {lat_t['p50']:.2f} s, p99 {lat_t['p99']:.2f} s (max {lat_t['max']:.2f} s)", "target": ""},
        {"measure": "bytes on perf.reduced / perf.raw, payload and zstd (demo trace, perfsift analyze; "
                    "bench_bytes has every topic)",
         "value": f"{d['ratio_raw']:.1%} / {d['compressed_raw']:.1%}", "target": "zstd <= 20 %"},
    ]  # fmt: skip
    write_result("pipeline", {"benchmark": "Whole pipeline", "script": "bench_pipeline", "notes": NOTES, "rows": rows})


if __name__ == "__main__":
    main()
