"""The ingest stage takes the runner's stage step (issue #33, item 5): ``otlp_out`` publishes its
results as OTLP, its input bytes count on ``/metrics`` (perfsift_topic_bytes_read), and an
operator error dead-letters the samples instead of stopping the worker."""

from __future__ import annotations

import base64
import urllib.request
from pathlib import Path

import orjson
import pytest
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest
from perfsift.streams.clients import create_pipeline_topics
from perfsift.streams.config import load_pipeline
from perfsift.streams.http import HealthServer
from perfsift.streams.ingest_stage import IngestRunner, stage_runner
from perfsift.streams.runner import run_in_thread, wait_assigned
from prometheus_client.parser import text_string_to_metric_families

from tests import ingest_sources as src
from tests.conftest import read_topic, wait_until

pytestmark = pytest.mark.integration


def test_an_ingest_stage_publishes_otlp_counts_its_bytes_and_survives_an_operator_error(
    kafka: dict, prefix: str, tmp_path: Path
) -> None:
    (tmp_path / "p.yaml").write_text(f"""
topic_prefix: "{prefix}"
partitions: 1
commit_interval_s: 0.3
otlp_out: true
stages:
  in_ldms:
    input: in.ldms
    outputs: [perf.forecast]
    ingest:
      format: ldms_json
      max_delay: 0.2
    operators:
      - type: clean
        mode: none
        impute: none
        multiplexed: [cyc]
      - type: forecast
        metrics: [MemFree]
""")
    cfg = load_pipeline(tmp_path / "p.yaml", env={})
    create_pipeline_topics(cfg, kafka)
    runner = stage_runner(cfg.stage("in_ldms"), cfg, kafka, embedded=True)
    assert isinstance(runner, IngestRunner)
    health = HealthServer(runner, 0, "127.0.0.1").start()
    failures: list[BaseException] = []
    thread = run_in_thread(runner, on_error=failures.append)
    topic = cfg.topic("in.ldms")
    bad = [(orjson.dumps({"timestamp": 99.0, "ProducerName": "n1", "cyc": 5.0}), b"n1", None)]  # no cyc:enabled
    good = [(orjson.dumps({"timestamp": 100.0 + t, "ProducerName": "n1", "MemFree": 50.0 + t % 3}), b"n1", None)
            for t in range(12)]  # fmt: skip
    sent = sum(len(v) for v, _, _ in bad + good)
    try:
        assert wait_assigned([runner], 300), failures  # the warm-up compiles the forecast kernel
        src.produce(kafka, topic, bad)
        dead = read_topic(kafka, cfg.topic("perf.deadletter"), lambda r: len(r) >= 1, timeout=30)
        src.produce(kafka, topic, good)
        # both topics of the last batch counted (count_out adds them one after the other while this
        # thread reads: under load it read the forecasts' count before the OTLP one existed)
        outs = runner.stats.by_topic
        assert wait_until(lambda: outs.get("perf.forecast", 0) >= 11 and outs.get("perf.reduced.otlp", 0) >= 1, 60)
        assert thread.is_alive() and not failures  # the operator error did not stop the worker
        n_otlp = runner.stats.by_topic["perf.reduced.otlp"]
        otlp = read_topic(kafka, cfg.topic("perf.reduced.otlp"), lambda r: len(r) >= n_otlp, decode=False)
        with urllib.request.urlopen(f"http://127.0.0.1:{health.port}/metrics", timeout=5) as r:
            text = r.read().decode()
    finally:
        runner.stop()
        thread.join(30)
        health.stop()
    assert [d["reason"][:38] for d in dead] == ["processing failed: ValueError: multipl"]
    assert orjson.loads(base64.b64decode(dead[0]["value"]))["metrics"] == {"cyc": 5.0}
    assert runner.stats.dead_by_reason == {"operator_failed": 1}
    points = 0  # one OTLP request per (job, node) and batch; one forecast point per forecast record
    for m in otlp:
        rm = ExportMetricsServiceRequest.FromString(m.value()).resource_metrics[0]
        assert {a.key: a.value.string_value for a in rm.resource.attributes}["host.name"] == "n1"
        points += sum(
            len(x.gauge.data_points) for sm in rm.scope_metrics for x in sm.metrics if x.name == "perfsift.forecast"
        )
    assert n_otlp >= 1 and points == runner.stats.by_topic["perf.forecast"] >= 11
    read = {
        s.labels["topic"]: s.value
        for f in text_string_to_metric_families(text)
        for s in f.samples
        if s.name == "perfsift_topic_bytes_read_total" and s.labels["kind"] == "payload"
    }
    assert read == {"in.ldms": sent}
    assert runner.stats.bytes_in == sent
