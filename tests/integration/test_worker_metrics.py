"""A select-stage worker's /metrics, scraped over HTTP on the real broker while it runs: the
per-job selection gauges agree with the control records it published (the kept set and its
version, which the reduced samples carry as ``selection_version``)."""

from __future__ import annotations

import urllib.request
from pathlib import Path

import orjson
from confluent_kafka import Producer
from perfsift.operators import SlidingMean
from perfsift.producers.synth import spmd
from perfsift.schemas import batch_to_samples, samples_to_batch
from perfsift.streams.clients import create_pipeline_topics
from perfsift.streams.config import load_pipeline
from perfsift.streams.http import HealthServer
from perfsift.streams.runner import StageRunner, run_in_thread
from perfsift.streams.stage import DEAD_LETTER_REASONS
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import read_topic, wait_until
from tests.integration.test_chaos_select import pipeline


def test_selection_gauges_on_metrics_match_the_published_selections(kafka: dict, prefix: str, tmp_path: Path) -> None:
    cfg = load_pipeline(pipeline(tmp_path, prefix))
    create_pipeline_topics(cfg, kafka)
    raw, _ = spmd("sweep3d", nodes=6, duration=300, seed=3, job="j1")
    samples = batch_to_samples(SlidingMean(window=5).update(samples_to_batch(raw)))
    runner = StageRunner(cfg.stage("select"), cfg, kafka, embedded=True)
    health = HealthServer(runner, 0, "127.0.0.1").start()
    thread = run_in_thread(runner)
    try:
        p = Producer(kafka)
        for s in samples:
            p.produce(cfg.topic("perf.smoothed.byjob"), orjson.dumps(s), s["job"].encode())
        assert p.flush(30) == 0
        wait_until(lambda: runner.stats.records_in >= len(samples) or not thread.is_alive(), 60)
        assert runner.stats.records_in == len(samples)
        produced = runner.stats.by_topic["perf.control"]
        controls = read_topic(kafka, cfg.topic("perf.control"), lambda r: len(r) >= produced)
        with urllib.request.urlopen(f"http://127.0.0.1:{health.port}/metrics", timeout=5) as r:
            text = r.read().decode()
    finally:
        runner.stop()
        thread.join(30)
        health.stop()
    got = {
        (s.name, s.labels.get("job")): s.value
        for f in text_string_to_metric_families(text)
        for s in f.samples
        if s.labels.get("stage") == "select"
    }
    newest = max(controls, key=lambda c: c["version"])
    assert got[("perfsift_selection_version", "j1")] == newest["version"] >= 1
    assert got[("perfsift_kept_metrics", "j1")] == len(newest["keep"]) >= 1  # 0..3 kept since #32
    assert 0.2 < got[("perfsift_reduction_ratio", "j1")] < 0.8
    assert got[("perfsift_records_in_total", None)] == len(samples)


def test_metrics_show_process_gc_build_batch_histogram_dead_letters_rebalances_and_librdkafka(
    kafka: dict, prefix: str, tmp_path: Path
) -> None:
    """Scraped from a smooth worker's /metrics after good and malformed records: the standard
    process and GC series, build info, the batch-duration histogram (its count = batches), dead
    letters by reason, rebalances and librdkafka's statistics."""

    from tests.integration.test_stage import make_samples, write_pipeline

    path = write_pipeline(tmp_path, prefix, commit_interval_s=0.2)
    path.write_text(path.read_text() + "kafka:\n  statistics.interval.ms: 200\n")
    cfg = load_pipeline(path)
    create_pipeline_topics(cfg, kafka)
    runner = StageRunner(cfg.stage("smooth"), cfg, {**kafka, **cfg.kafka}, embedded=True)
    health = HealthServer(runner, 0, "127.0.0.1").start()
    thread = run_in_thread(runner)
    good = make_samples(n_nodes=3, steps=40)
    try:
        p = Producer(kafka)
        for s in good:
            p.produce(cfg.topic("perf.raw"), orjson.dumps(s), s["node"].encode())
        for _ in range(7):
            p.produce(cfg.topic("perf.raw"), b"not json", b"node0")
        assert p.flush(30) == 0
        assert wait_until(lambda: runner.stats.records_in >= len(good) + 7 or not thread.is_alive(), 60)
        outputs = len(good) + 7  # smoothed samples and dead letters
        assert wait_until(lambda: runner.stats.kafka.get(("producer", "tx_messages"), 0) >= outputs, 10)
        batches_before = runner.stats.batches  # the loop may still come round (held messages, an end event)
        with urllib.request.urlopen(f"http://127.0.0.1:{health.port}/metrics", timeout=5) as r:
            text = r.read().decode()
        batches_after = runner.stats.batches
    finally:
        runner.stop()
        thread.join(30)
        health.stop()
    families = {f.name: f for f in text_string_to_metric_families(text)}
    for standard in ("process_resident_memory_bytes", "process_cpu_seconds", "python_gc_collections", "python_info"):
        assert standard in families, standard
    assert families["process_resident_memory_bytes"].samples[0].value > 10e6
    (info,) = families["perfsift_build_info"].samples
    assert info.value == 1 and info.labels["librdkafka"].startswith("2.")
    hist = {(s.name, s.labels.get("le")): s.value for s in families["perfsift_batch_duration_seconds"].samples}
    assert families["perfsift_batch_duration_seconds"].type == "histogram"
    assert (
        hist[("perfsift_batch_duration_seconds_count", None)]
        == hist[("perfsift_batch_duration_seconds_bucket", "+Inf")]
    )
    # the scrape's count is the batches at the moment of the scrape
    assert 1 <= batches_before <= hist[("perfsift_batch_duration_seconds_count", None)] <= batches_after
    reasons = {s.labels["reason"]: s.value for s in families["perfsift_dead_letters_by_reason"].samples}
    assert reasons == {reason: 7 if reason == "malformed" else 0 for reason in DEAD_LETTER_REASONS}  # every label
    events = {s.labels["event"]: s.value for s in families["perfsift_rebalances"].samples}
    assert events["assigned"] >= 1 and events["lost"] == 0
    kafka_stats = {(s.labels["client"], s.labels["statistic"]): s.value for s in families["perfsift_kafka"].samples}
    assert kafka_stats[("consumer", "rx_bytes")] > sum(len(orjson.dumps(s)) for s in good) / 10
    assert kafka_stats[("consumer", "group_assigned_partitions")] == 3  # the one worker owns all partitions
    assert kafka_stats[("producer", "tx_messages")] >= outputs
    assert kafka_stats[("consumer", "fetch_requests")] >= 1  # it fetched what it read
    assert kafka_stats[("producer", "fetch_requests")] == 0
    # a backlog this small is held under event_time_hold_bytes: counted, never paused
    flips = {s.labels["event"]: s.value for s in families["perfsift_partitions_paused"].samples}
    assert flips == {"paused": runner.stats.paused, "resumed": runner.stats.resumed} == {"paused": 0, "resumed": 0}
