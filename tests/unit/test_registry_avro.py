"""Schema Registry Avro (encoding: confluent-avro) against confluent-kafka's own serializers, on its
in-memory ``mock://`` registry: they read perfsift's records, perfsift reads theirs."""

from __future__ import annotations

import json
import uuid
from importlib import resources
from pathlib import Path

import pytest
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from perfsift.schemas import RecordError, decode_samples, encode_records
from perfsift.schemas.forecast_wire import complete_forecast, forecast_on_wire
from perfsift.schemas.registry import (
    ConfluentAvroCodec,
    RegistryError,
    SchemaRegistry,
    registry_for,
    registry_settings,
    schema_id_of,
    use_registry,
)

SAMPLE = {"ts": 1.7e9, "node": "n1", "job": "j", "seq": 4, "metrics": {"cpu": 0.25, "mem": None}}
FORECAST = {
    "ts": 1.7e9,
    "node": "n1",
    "job": "j",
    "metric": "cpu",
    "forecast": 0.5,
    "sigma": 0.1,
    "lower": 0.3,
    "upper": 0.7,
    "method": "holt",
}


def schema_text(kind: str) -> str:
    return resources.files("perfsift.schemas").joinpath(f"{kind}.avsc").read_text()


@pytest.fixture()
def registry() -> SchemaRegistry:
    """A registry of its own per test (a mock:// registry lives in its client), the process's
    current one (what ``encoding: confluent-avro`` uses)."""
    return use_registry({"url": f"mock://{uuid.uuid4().hex}"})


def ctx(topic: str) -> SerializationContext:
    return SerializationContext(topic, MessageField.VALUE)


@pytest.mark.parametrize(("kind", "record"), [("sample", SAMPLE), ("forecast", FORECAST)])
def test_perfsift_writes_the_bytes_avro_serializer_writes(registry: SchemaRegistry, kind: str, record: dict) -> None:
    # perfsift writes a forecast without its derived bounds (null): AvroSerializer given the same
    on_wire = forecast_on_wire(record) if kind == "forecast" else record
    theirs = AvroSerializer(registry.client, schema_text(kind))(on_wire, ctx("perf.x"))
    schema_id = registry.register("perf.x-value", kind)
    ours = ConfluentAvroCodec(kind, registry).encode(record)
    assert ours == theirs
    assert ours[0] == 0 and int.from_bytes(ours[1:5], "big") == schema_id == schema_id_of(ours)
    back = AvroDeserializer(registry.client)(ours, ctx("perf.x"))
    assert back["node"] == "n1" and back["ts"] == record["ts"]
    if kind == "sample":
        assert back["metrics"] == {"cpu": 0.25, "mem": None}
    else:
        assert back["lower"] is None  # not on the wire: the reader derives it
        derived = {"mae_forecast": 0.5, "mae": None, "lower_mae": None, "upper_mae": None}
        assert ConfluentAvroCodec(kind, registry).decode(ours) == {**record, **derived}
        complete_forecast(back)
        assert (back["forecast"], back["lower"], back["upper"]) == (0.5, 0.3, 0.7)


def test_avro_serializer_records_decode_into_a_batch(registry: SchemaRegistry) -> None:
    ser = AvroSerializer(registry.client, schema_text("sample"))
    values = [ser({**SAMPLE, "seq": i, "metrics": {"cpu": i / 10, "mem": float(i)}}, ctx("raw")) for i in range(5)]
    values.append(b'{"ts": 1, "node": "x", "metrics": {}}')  # JSON on a registry-Avro topic
    batch, kept, errors = decode_samples(values, codec="confluent-avro")
    assert kept == [0, 1, 2, 3, 4]
    assert [e.index for e in errors] == [5] and "magic byte" in errors[0].reason
    assert batch.seq.tolist() == [0, 1, 2, 3, 4]
    cpu, mem = batch.metrics.index("cpu"), batch.metrics.index("mem")
    assert batch.values[:, cpu].tolist() == [0.0, 0.1, 0.2, 0.3, 0.4]
    assert batch.values[:, mem].tolist() == [0.0, 1.0, 2.0, 3.0, 4.0]


def test_a_compatible_writer_schema_is_resolved_to_perfsifts(registry: SchemaRegistry) -> None:
    """Another producer's evolved schema (an extra field) reads by its id, resolved to ours."""
    evolved = json.loads(schema_text("sample"))
    evolved["fields"].append({"name": "rack", "type": "string", "default": ""})
    data = AvroSerializer(registry.client, json.dumps(evolved))({**SAMPLE, "rack": "r7"}, ctx("raw"))
    rec = ConfluentAvroCodec("sample", registry).decode(data)
    assert rec["metrics"] == SAMPLE["metrics"] and "rack" not in rec


def test_bad_records_are_refused_with_reasons(registry: SchemaRegistry) -> None:
    codec = ConfluentAvroCodec("sample", registry)
    good = codec.encode(SAMPLE)
    with pytest.raises(RecordError, match="truncated"):
        codec.decode(good[:-3])
    with pytest.raises(RecordError, match="no schema id"):
        codec.decode(b"\x00\x00\x00\x03\xe7" + good[5:])  # id 999 was never registered
    with pytest.raises(RecordError, match="does not fit"):
        codec.encode({"ts": "x"})


def test_without_auto_register_an_unknown_subject_is_an_error() -> None:
    reg = registry_for({"url": f"mock://{uuid.uuid4().hex}", "auto.register.schemas": "false"})
    with pytest.raises(RegistryError, match=r"subject 'perf\.raw-value'"):
        reg.register("perf.raw-value", "sample")
    AvroSerializer(reg.client, schema_text("sample"))(SAMPLE, ctx("perf.raw"))  # now registered
    assert reg.register("perf.raw-value", "sample") >= 1


def test_records_of_a_kind_no_topic_named_go_under_the_record_name(registry: SchemaRegistry) -> None:
    (data,) = encode_records([SAMPLE], "confluent-avro")
    assert registry.client.get_latest_version("perfsift.Sample").schema_id == schema_id_of(data)


def test_settings_come_from_the_file_below_the_environment() -> None:
    env = {"PERFSIFT_SR_URL": "https://sr:8081", "PERFSIFT_SR_BASIC_AUTH_USER_INFO": "key:secret", "OTHER": "x"}
    got = registry_settings({"url": "http://file:8081", "auto.register.schemas": False}, env)
    assert got == {"url": "https://sr:8081", "basic.auth.user.info": "key:secret", "auto.register.schemas": "false"}
    with pytest.raises(ValueError, match=r"schema_registry\.url"):
        registry_for({})


def test_the_pipeline_file_needs_a_registry_url_for_confluent_avro(tmp_path: Path) -> None:
    from perfsift.streams.config import ConfigError, load_pipeline

    path = tmp_path / "p.yaml"
    path.write_text("encoding: confluent-avro\n")
    with pytest.raises(ConfigError, match=r"needs schema_registry\.url"):
        load_pipeline(path, env={})
    cfg = load_pipeline(path, env={"PERFSIFT_SR_URL": "http://sr:8081", "PERFSIFT_SR_BASIC_AUTH_USER_INFO": "k:s"})
    assert cfg.schema_registry == {"url": "http://sr:8081", "basic.auth.user.info": "k:s"}
    path.write_text("encoding: confluent-avro\nschema_registry: [1]\n")
    with pytest.raises(ConfigError, match="a mapping of registry client settings"):
        load_pipeline(path, env={})


def test_a_registry_that_is_not_there_stops_the_stage_not_the_record() -> None:
    import socket

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    reg = registry_for({"url": f"http://127.0.0.1:{port}", "max.retries": "0"})  # text, as from PERFSIFT_SR_*
    with pytest.raises(RegistryError, match="cannot be reached"):
        reg.register("perf.raw-value", "sample")
    with pytest.raises(RegistryError, match="cannot be reached"):  # not a RecordError: nothing is dead-lettered
        ConfluentAvroCodec("sample", reg).decode(b"\x00\x00\x00\x00\x07" + bytes(8))
