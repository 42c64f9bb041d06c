"""A worker's memory under a cardinality burst and 10,000 malformed or oversized records, with the
default limits and with the node and job limits lifted (the ratio is what the limits save).

Input (one partition, so the admission order is the publishing order): 10,000 good samples (50
nodes x 200 steps, job ``good``), a burst of 100,000 distinct node names (job ``burst``, one
sample each) and 10,000 bad records: 1,000 with 100 kB node names, 3,000 not JSON, 3,000 with a
300-character metric name, 3,000 with 1,100 metrics. Each scenario runs the smooth stage in a
child process of its own and reports its resident memory once every record is processed.

    python -m bench.bench_limits      (from the repository root)
"""

from __future__ import annotations

import multiprocessing as mp
import resource
import time
from pathlib import Path
from typing import Any

import orjson
from confluent_kafka import Producer
from perfsift.streams.broker import EmbeddedBroker
from perfsift.streams.clients import create_pipeline_topics, producer_settings
from perfsift.streams.config import load_pipeline

from bench.common import produce, write_result

BURST = 100_000
PIPELINE = """topic_prefix: "{prefix}"
partitions: 1
commit_interval_s: 1.0
limits: {limits}
stages:
  smooth:
    input: perf.raw
    outputs: [perf.smoothed]
    operators:
      - type: sliding_mean
        window: 10
"""


def records() -> tuple[list[tuple[bytes, bytes]], int, int]:
    """(value, key) pairs in publishing order, the number of good samples and of bad records."""
    out: list[tuple[bytes, bytes]] = []

    def add(node: str, job: str, seq: int, metrics: dict[str, float]) -> None:
        out.append((orjson.dumps({"ts": 1e9 + seq, "node": node, "job": job, "seq": seq, "metrics": metrics}), b"k"))

    m = {f"m{j}": float(j) for j in range(12)}
    for t in range(200):
        for n in range(50):
            add(f"good{n}", "good", t, m)
    good = len(out)
    for i in range(BURST):
        add(f"burst{i:06d}", "burst", 0, m)
    bad = 0
    for i in range(1000):
        add("x" * 100_000 + str(i), "good", i, m)
    out += [(b"not json", b"k")] * 3000
    for i in range(3000):
        add("good0", "good", 10_000 + i, {"y" * 300: 1.0})
    wide = {f"w{j}": 1.0 for j in range(1100)}
    for i in range(3000):
        add("good1", "good", 10_000 + i, wide)
    bad = 10_000
    return out, good, bad


def worker(bootstrap: str, path: str, total: int, result: Any) -> None:
    from perfsift.streams.runner import StageRunner, run_in_thread

    cfg = load_pipeline(path)
    runner = StageRunner(cfg.stage("smooth"), cfg, {"bootstrap.servers": bootstrap}, embedded=True)
    t0 = time.monotonic()
    errors: list[str] = []
    thread = run_in_thread(runner, on_error=lambda e: errors.append(f"{type(e).__name__}: {e}"))
    while runner.stats.records_in < total and thread.is_alive():
        time.sleep(0.2)
    elapsed = time.monotonic() - t0
    rss = int(Path("/proc/self/statm").read_text().split()[1]) * resource.getpagesize()
    admitted = sum(len(n) for part in runner._parts.values() for n in part.guard.nodes.values())
    runner.stop()
    thread.join(60)
    result.update(
        rss_mib=rss / 2**20,
        peak_rss_mib=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        records_in=runner.stats.records_in,
        records_out=runner.stats.records_out,
        dead_by_reason=dict(runner.stats.dead_by_reason),
        admitted_nodes=admitted,
        seconds=elapsed,
        error=errors[0] if errors else None,
    )


def main() -> None:
    values, good, bad = records()
    scenarios = {
        "default limits": "{}",
        "node and job limits lifted": "{max_nodes_per_job: 1000000000, max_jobs: 1000000000}",
    }
    results: dict[str, dict[str, Any]] = {}
    with EmbeddedBroker() as broker, mp.Manager() as manager:
        props = {"bootstrap.servers": broker.bootstrap}
        for k, (name, limits) in enumerate(scenarios.items()):
            path = Path(f"/tmp/bench_limits_{k}.yaml")
            path.write_text(PIPELINE.format(prefix=f"bl{k}.", limits=limits))
            cfg = load_pipeline(path)
            create_pipeline_topics(cfg, props)
            p = Producer(producer_settings(props))
            for v, key in values:
                produce(p, cfg.topic("perf.raw"), v, key)
            assert p.flush(120) == 0
            shared = manager.dict()
            child = mp.get_context("spawn").Process(
                target=worker, args=(broker.bootstrap, str(path), len(values), shared)
            )
            child.start()
            child.join(900)
            results[name] = dict(shared)
            print(name, results[name], flush=True)
    lim, free = results["default limits"], results["node and job limits lifted"]
    rows = [
        {"measure": "records: good samples, burst of distinct nodes, bad", "value": f"{good:,}; {BURST:,}; {bad:,}",
         "target": ""},
        {"measure": "dead letters by reason, default limits",
         "value": ", ".join(f"{r} {n:,}" for r, n in sorted(lim["dead_by_reason"].items())),
         "target": "all bad + the burst beyond 10,000"},
        {"measure": "nodes admitted (default limits; lifted)",
         "value": f"{lim['admitted_nodes']:,}; {free['admitted_nodes']:,}", "target": "<= 10,050"},
        {"measure": "worker RSS once all processed (default limits; lifted)",
         "value": f"{lim['rss_mib']:,.0f} MiB; {free['rss_mib']:,.0f} MiB", "target": ""},
        {"measure": "peak RSS (default limits; lifted)",
         "value": f"{lim['peak_rss_mib']:,.0f} MiB; {free['peak_rss_mib']:,.0f} MiB", "target": ""},
        {"measure": "records processed, samples out (default limits; lifted)",
         "value": f"{lim['records_in']:,}, {lim['records_out']:,}; {free['records_in']:,}, {free['records_out']:,}",
         "target": f"{len(values):,}, {good + 10_000:,}; -"},
        {"measure": "stage failure (default limits; lifted)",
         "value": f"{lim['error'] or 'none'}; {free['error'] or 'none'}", "target": "none; -"},
    ]  # fmt: skip
    notes = (
        "With the node and job limits lifted the stage takes the burst into its state until its next "
        "commit, whose snapshot of the partition's state is larger than the 16 MB record limit: the "
        "stage stops (a worker would restart and fail again at the same place). Peak RSS includes "
        "librdkafka's prefetch of the 100 kB-name records."
    )
    write_result("limits", {"benchmark": "limits under a cardinality burst", "script": "bench_limits",
                            "results": results, "rows": rows, "notes": notes})  # fmt: skip


if __name__ == "__main__":
    main()
