"""Limits on the real embedded broker: oversized and malformed records and a cardinality burst all
go to the dead-letter topic with their reason, every good sample is still processed, and what the
stage holds stays within the limits."""

from __future__ import annotations

import collections
import urllib.request
from pathlib import Path

import orjson
import pytest
from confluent_kafka import Producer
from perfsift.streams.clients import create_pipeline_topics
from perfsift.streams.config import load_pipeline
from perfsift.streams.http import HealthServer
from perfsift.streams.runner import StageRunner, run_in_thread
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import read_topic, wait_until
from tests.integration.test_stage import assert_close, expected_means, make_samples, write_pipeline

pytestmark = pytest.mark.integration

LIMITS = """limits:
  max_name_length: 64
  max_metrics_per_sample: 20
  max_nodes_per_job: 50
  max_jobs: 3
  max_record_bytes: 200000
"""


def sample(node: str, job: str = "j1", seq: int = 0, metrics: dict | None = None, **extra: object) -> bytes:
    return orjson.dumps({"ts": 1e9 + seq, "node": node, "job": job, "seq": seq, "metrics": metrics or {"m0": 1.0},
                         **extra})  # fmt: skip


def test_oversized_records_and_a_cardinality_burst_are_dead_lettered_by_reason(
    kafka: dict, prefix: str, tmp_path: Path
) -> None:
    path = write_pipeline(tmp_path, prefix, commit_interval_s=0.2)
    path.write_text(path.read_text().replace("partitions: 3", "partitions: 1") + LIMITS)  # one partition: one order
    cfg = load_pipeline(path)
    create_pipeline_topics(cfg, kafka)
    good = make_samples(n_nodes=4, steps=50)
    bad: dict[str, list[bytes]] = {
        "record_too_large": [sample("n0", pad="x" * 300_000) for _ in range(5)],
        "name_too_long": [sample("n" * 100_000, seq=i) for i in range(10)]
        + [sample("n1", metrics={"m" * 100: 1.0}, seq=i) for i in range(10)],
        "too_many_metrics": [sample("n2", metrics={f"m{j}": 1.0 for j in range(30)}) for _ in range(10)],
        "too_many_nodes": [sample(f"burst{i}", job="burst") for i in range(2000)],  # 50 admitted, 1950 not
        "too_many_jobs": [sample("x", job=f"other{i}") for i in range(10)],  # j1, burst, other0; 9 not
        "malformed": [b"not json"] * 5,
    }
    runner = StageRunner(cfg.stage("smooth"), cfg, kafka, embedded=True)
    health = HealthServer(runner, 0, "127.0.0.1").start()
    thread = run_in_thread(runner)
    total = len(good) + sum(map(len, bad.values()))
    try:
        p = Producer({**kafka, "message.max.bytes": 1_000_000})
        for s in good:
            p.produce(cfg.topic("perf.raw"), orjson.dumps(s), s["node"].encode())
        for records in bad.values():
            for v in records:
                p.produce(cfg.topic("perf.raw"), v, b"k")
        assert p.flush(30) == 0
        assert wait_until(lambda: runner.stats.records_in >= total or not thread.is_alive(), 60)
        with urllib.request.urlopen(f"http://127.0.0.1:{health.port}/metrics", timeout=5) as r:
            text = r.read().decode()
        dead = read_topic(kafka, cfg.topic("perf.deadletter"), lambda r: len(r) >= runner.stats.dead_letters)
        out = read_topic(kafka, cfg.topic("perf.smoothed"), lambda r: len(r) >= runner.stats.records_out)
        ((guard_nodes),) = [{j: len(n) for j, n in part.guard.nodes.items()} for part in runner._parts.values()]
    finally:
        runner.stop()
        thread.join(30)
        health.stop()
    want = {reason: len(v) for reason, v in bad.items()}
    want["too_many_nodes"] -= 50
    want["too_many_jobs"] -= 1
    got = collections.Counter(
        "malformed" if d["reason"].startswith("cannot decode")
        else "record_too_large" if "bytes, more than" in d["reason"]
        else "name_too_long" if "name longer than 64" in d["reason"]
        else "too_many_metrics" if "metrics, more than 20" in d["reason"]
        else "too_many_nodes" if "nodes of job 'burst'" in d["reason"]
        else "too_many_jobs" if "beyond 3 jobs" in d["reason"]
        else d["reason"]
        for d in dead
    )  # fmt: skip
    assert dict(got) == want
    families = {f.name: f for f in text_string_to_metric_families(text)}
    by_reason = {s.labels["reason"]: s.value for s in families["perfsift_dead_letters_by_reason"].samples}
    assert {k: v for k, v in by_reason.items() if v} == want
    # every good sample processed, with the values of a stream that never saw the bad records
    smoothed = {(r["node"], r["seq"]): r for r in out if r["job"] == "j1"}
    assert set(smoothed) == {(s["node"], s["seq"]) for s in good}
    means = expected_means(good)
    for key, rec in smoothed.items():
        assert_close(rec["metrics"], means[key])
    # what the stage admitted is within the limits
    assert guard_nodes == {"j1": 4, "burst": 50, "other0": 1}
    assert len({r["node"] for r in out if r["job"] == "burst"}) == 50
