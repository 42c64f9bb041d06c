"""encoding: confluent-avro on the embedded broker: samples written by confluent-kafka's
AvroSerializer go through a perfsift stage, and its output reads with AvroDeserializer."""

from __future__ import annotations

import uuid
from importlib import resources
from pathlib import Path

import numpy as np
import pytest
from confluent_kafka import Producer
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from perfsift.streams.clients import create_pipeline_topics
from perfsift.streams.config import load_pipeline
from perfsift.streams.runner import StageRunner, run_in_thread

from tests.conftest import read_topic

pytestmark = pytest.mark.integration

WINDOW = 3


def test_registry_avro_in_and_out_of_a_stage(kafka: dict, prefix: str, tmp_path: Path) -> None:
    url = f"mock://{uuid.uuid4().hex}"
    path = tmp_path / "pipeline.yaml"
    path.write_text(
        f'topic_prefix: "{prefix}"\npartitions: 2\nencoding: confluent-avro\ncommit_interval_s: 0.2\n'
        f"schema_registry:\n  url: {url}\n"
        "stages:\n  smooth:\n    input: perf.raw\n    outputs: [perf.smoothed]\n"
        f"    operators:\n      - type: sliding_mean\n        window: {WINDOW}\n"
    )
    cfg = load_pipeline(path, env={})
    create_pipeline_topics(cfg, kafka)
    runner = StageRunner(cfg.stage("smooth"), cfg, kafka, embedded=True)  # registers perf.smoothed-value
    from perfsift.schemas.registry import registry_for

    client = registry_for(cfg.schema_registry).client  # the process's client of this registry
    schema = resources.files("perfsift.schemas").joinpath("sample.avsc").read_text()
    ser = AvroSerializer(client, schema)
    raw = cfg.topic("perf.raw")
    rng = np.random.default_rng(3)
    values = rng.normal(50, 5, size=(3, 20)).round(4)  # node x step
    producer = Producer(kafka)
    for step in range(20):
        for n in range(3):
            sample = {"ts": 1e9 + step, "node": f"n{n}", "job": "j", "seq": step, "metrics": {"x": values[n, step]}}
            producer.produce(raw, ser(sample, SerializationContext(raw, MessageField.VALUE)), f"n{n}".encode())
    producer.produce(raw, b'{"ts": 1, "node": "n0", "metrics": {}}', b"n0")  # JSON: not registry Avro
    producer.flush(10)
    thread = run_in_thread(runner)
    out_topic = cfg.topic("perf.smoothed")
    msgs = read_topic(kafka, out_topic, lambda r: len(r) >= 60, timeout=30, decode=False)
    dead = read_topic(kafka, cfg.topic("perf.deadletter"), lambda r: len(r) >= 1, timeout=30)
    runner.stop()
    thread.join(20)
    assert len(msgs) == 60
    subject_id = client.get_latest_version(f"{out_topic}-value").schema_id
    deser = AvroDeserializer(client)
    for m in msgs:
        assert m.value()[0] == 0 and int.from_bytes(m.value()[1:5], "big") == subject_id
        rec = deser(m.value(), SerializationContext(out_topic, MessageField.VALUE))
        n, step = int(rec["node"][1:]), rec["seq"]
        want = values[n, max(0, step - WINDOW + 1) : step + 1].mean()
        assert rec["metrics"]["x"] == pytest.approx(want, rel=1e-12)
        assert rec["warm"] == (step >= WINDOW - 1)
    assert len(dead) == 1 and "magic byte" in dead[0]["reason"]


def test_perfsifts_own_publisher_writes_the_pipelines_encoding(kafka: dict, prefix: str, tmp_path: Path) -> None:
    """produce / replay / run publish perf.raw in the pipeline's encoding: a confluent-avro stage
    reads every sample (none dead-lettered), and the raw topic's subject carries the id."""
    from perfsift.producers.publish import publish_samples
    from perfsift.schemas.registry import registry_for

    path = tmp_path / "pipeline.yaml"
    path.write_text(
        f'topic_prefix: "{prefix}"\npartitions: 1\nencoding: confluent-avro\ncommit_interval_s: 0.2\n'
        f"schema_registry:\n  url: mock://{uuid.uuid4().hex}\n"
        "stages:\n  smooth:\n    input: perf.raw\n    outputs: [perf.smoothed]\n"
        "    operators:\n      - type: sliding_mean\n        window: 2\n"
    )
    cfg = load_pipeline(path, env={})
    create_pipeline_topics(cfg, kafka)
    data = [{"ts": 1e9 + t, "node": "n", "job": "j", "seq": t, "metrics": {"x": float(t)}} for t in range(30)]
    assert publish_samples(kafka, cfg.topic("perf.raw"), data, pipeline=cfg) == 30
    raw = read_topic(kafka, cfg.topic("perf.raw"), lambda r: len(r) >= 30, timeout=30, decode=False)
    client = registry_for(cfg.schema_registry).client
    raw_id = client.get_latest_version(f"{cfg.topic('perf.raw')}-value").schema_id
    assert {int.from_bytes(m.value()[1:5], "big") for m in raw} == {raw_id}
    runner = StageRunner(cfg.stage("smooth"), cfg, kafka, embedded=True)
    thread = run_in_thread(runner)
    out = read_topic(kafka, cfg.topic("perf.smoothed"), lambda r: len(r) >= 30, timeout=30, decode=False)
    runner.stop()
    thread.join(20)
    deser = AvroDeserializer(client)
    got = sorted((r["seq"], r["metrics"]["x"]) for r in (deser(m.value(), None) for m in out))
    assert got == [(0, 0.0)] + [(t, t - 0.5) for t in range(1, 30)]
    assert runner.stats.dead_letters == 0
