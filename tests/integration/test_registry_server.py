"""encoding: confluent-avro against a real Schema Registry API (Apicurio Registry's ccompat API,
tests/schema_registry.py) instead of ``mock://``: a reduce and a forecast stage on the embedded
broker register their subjects there, and confluent-kafka's AvroDeserializer, with its own client
of that registry, reads every record back equal to the records of the same stages run with
``encoding: json`` on the same samples."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer
from confluent_kafka.serialization import MessageField, SerializationContext
from perfsift.producers.publish import publish_samples
from perfsift.schemas.forecast_wire import complete_forecast
from perfsift.streams.clients import create_pipeline_topics
from perfsift.streams.config import PipelineConfig, load_pipeline
from perfsift.streams.runner import StageRunner, run_in_thread

from tests.conftest import read_topic, wait_until
from tests.schema_registry import Registry

pytestmark = [pytest.mark.integration, pytest.mark.schema_registry]

STAGES = ("select", "fc")
OUTPUTS = ("perf.reduced", "perf.forecast")


def samples() -> list[dict]:
    rng = np.random.default_rng(7)
    out = []
    for t in range(60):
        for n in range(3):
            metrics = {f"m{j}": float(np.round(rng.normal(10 * (j + 1), 2), 4)) for j in range(4)}
            out.append({"ts": 1.7e9 + t, "node": f"n{n}", "job": "j", "seq": t, "metrics": metrics})
    return out


def pipeline(tmp_path: Path, prefix: str, encoding: str) -> PipelineConfig:
    registry = f"schema_registry:\n  url: {encoding.split('@')[1]}\n" if "@" in encoding else ""
    path = tmp_path / f"{prefix}.yaml"
    path.write_text(f"""
topic_prefix: "{prefix}"
partitions: 1
commit_interval_s: 0.2
encoding: {encoding.split("@")[0]}
{registry}stages:
  select:
    input: perf.raw
    outputs: [perf.reduced, perf.selection, perf.control]
    operators:
      - type: reduce
        pursuit: {{period: 20, window: 5, restarts: 2, slack: 8}}
  fc:
    input: perf.raw
    outputs: [perf.forecast]
    operators:
      - type: forecast
        metrics: [m0, m2]
""")
    return load_pipeline(path, env={})


def run_stages(cfg: PipelineConfig, kafka: dict, data: list[dict]) -> dict[str, int]:
    """Publish ``data`` in the pipeline's encoding, run both stages over it: records per output."""
    create_pipeline_topics(cfg, kafka)
    runners = [StageRunner(cfg.stage(s), cfg, kafka, embedded=True) for s in STAGES]
    threads = [run_in_thread(r) for r in runners]
    assert publish_samples(kafka, cfg.topic("perf.raw"), data, pipeline=cfg) == len(data)
    assert wait_until(lambda: all(r.stats.records_in >= len(data) for r in runners), 60)
    for r, t in zip(runners, threads, strict=True):
        r.stop()
        t.join(20)
    assert all(r.stats.dead_letters == 0 for r in runners)
    return {topic: runners[i].stats.by_topic[topic] for i, topic in enumerate(OUTPUTS)}


def at_least(n: int) -> Callable[[list[Any]], bool]:
    return lambda records: len(records) >= n


def test_confluent_avro_reads_back_from_a_real_registry(
    kafka: dict, prefix: str, tmp_path: Path, schema_registry: Registry
) -> None:
    data = samples()
    avro = pipeline(tmp_path, f"{prefix}a.", f"confluent-avro@{schema_registry.url}")
    ref = pipeline(tmp_path, f"{prefix}j.", "json")
    counts = run_stages(avro, kafka, data)
    assert counts == run_stages(ref, kafka, data)
    assert counts["perf.reduced"] > len(data) // 2 and counts["perf.forecast"] > 0

    client = SchemaRegistryClient({"url": schema_registry.url})  # not perfsift's client
    deser = AvroDeserializer(client)
    for kind in OUTPUTS:
        topic, n = avro.topic(kind), counts[kind]
        msgs = read_topic(kafka, topic, at_least(n), timeout=30, decode=False)
        want = read_topic(kafka, ref.topic(kind), at_least(n), timeout=30)
        subject_id = client.get_latest_version(f"{topic}-value").schema_id
        assert {int.from_bytes(m.value()[1:5], "big") for m in msgs} == {subject_id}
        got: list[dict[str, Any]] = [deser(m.value(), SerializationContext(topic, MessageField.VALUE)) for m in msgs]
        if kind == "perf.forecast":  # the bounds are null on the wire: readers derive them
            got = [complete_forecast(r) for r in got]
        assert len(got) == len(want) == n
        assert got == want
    subjects = set(schema_registry.subjects())
    assert {f"{avro.topic(k)}-value" for k in ("perf.raw", *OUTPUTS)} <= subjects
    assert not {s for s in subjects if s.startswith(f"{prefix}j.")}  # the JSON run registered nothing
