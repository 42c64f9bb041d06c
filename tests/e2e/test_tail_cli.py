"""``perfsift tail`` at kcat's level, as a user runs it, on a topic whose content the test wrote:
partitions, offsets (absolute, from the end, by time), key filter, -f templates, and every
encoding decoded (JSON, single-object Avro, Schema Registry Avro, OTLP protobuf)."""

from __future__ import annotations

import uuid
from pathlib import Path

import orjson
import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.metrics.v1.metrics_pb2 import Gauge, Metric, NumberDataPoint, ResourceMetrics, ScopeMetrics
from opentelemetry.proto.resource.v1.resource_pb2 import Resource
from perfsift.schemas import AvroCodec
from perfsift.streams.clients import ensure_topics
from typer.testing import CliRunner

from tests.e2e.cli import perfsift, perfsift_here

pytestmark = pytest.mark.e2e

T0 = 1_700_000_000_000  # ms
N_JSON, N_AVRO = 8, 4


def otlp_request(host: str, value: float) -> bytes:
    point = NumberDataPoint(time_unix_nano=T0 * 1_000_000, as_double=value)
    metric = Metric(name="system.cpu.utilization", gauge=Gauge(data_points=[point]))
    resource = Resource(attributes=[KeyValue(key="host.name", value=AnyValue(string_value=host))])
    rm = ResourceMetrics(resource=resource, scope_metrics=[ScopeMetrics(metrics=[metric])])
    return ExportMetricsServiceRequest(resource_metrics=[rm]).SerializeToString()


@pytest.fixture(scope="module")
def topic(broker) -> str:  # type: ignore[no-untyped-def]
    """Partition 0: JSON samples keyed a, b, a, ... one second apart; 1: single-object Avro keyed
    c; 2: OTLP protobuf keyed otel. Each record is its own produce request (flushed one by one)."""
    name = f"tail-{uuid.uuid4().hex[:8]}"
    props = {"bootstrap.servers": broker.bootstrap}
    ensure_topics(AdminClient(props), [name], partitions=3)
    p = Producer(props)
    for i in range(N_JSON):
        rec = {"ts": T0 / 1000 + i, "node": "n0", "job": "j", "seq": i, "metrics": {"x": i * 1.5}}
        p.produce(name, orjson.dumps(rec), b"ab"[i % 2 : i % 2 + 1], partition=0, timestamp=T0 + i * 1000)
        p.flush(10)
    avro = AvroCodec("sample")
    for i in range(N_AVRO):
        rec = {"ts": T0 / 1000 + i, "node": "n1", "job": "j", "seq": i, "metrics": {"y": float(i), "z": None}}
        p.produce(name, avro.encode(rec), b"c", partition=1, timestamp=T0 + i * 1000)
        p.flush(10)
    for i, host in enumerate(["h1", "h2"]):
        p.produce(name, otlp_request(host, 0.25 * (i + 1)), b"otel", partition=2, timestamp=T0 + i * 1000)
        p.flush(10)
    return name


def tail(broker, *args: str, subprocess: bool = False) -> list[str]:  # type: ignore[no-untyped-def]
    """``perfsift tail ARGS`` and its lines: through main() in this process, or as a subprocess."""
    call = ["tail", *args, "-b", broker.bootstrap]
    r = perfsift(*call, timeout=60) if subprocess else perfsift_here(*call)
    assert r.returncode == 0, r.stderr[-2000:]
    return r.stdout.splitlines()


def test_from_the_beginning_every_encoding_is_decoded(broker, topic: str) -> None:  # type: ignore[no-untyped-def]
    # as a user runs it (the other tests here call the same main() in this process)
    lines = tail(
        broker, topic, "-f", "%p\t%o\t%k\t%E\t%s\\n", "-n", str(N_JSON + N_AVRO + 2), "--idle", "10", subprocess=True
    )
    rows = sorted(tuple(line.split("\t")) for line in lines)
    assert len(rows) == N_JSON + N_AVRO + 2
    json_rows = [r for r in rows if r[0] == "0"]
    assert [(int(r[1]), r[2], r[3]) for r in json_rows] == [(i, "ab"[i % 2], "json") for i in range(N_JSON)]
    assert [orjson.loads(r[4])["metrics"]["x"] for r in json_rows] == [i * 1.5 for i in range(N_JSON)]
    avro_rows = [r for r in rows if r[0] == "1"]
    assert [(r[2], r[3]) for r in avro_rows] == [("c", "avro")] * N_AVRO
    assert [orjson.loads(r[4])["metrics"] for r in avro_rows] == [{"y": float(i), "z": None} for i in range(N_AVRO)]
    otlp_rows = [r for r in rows if r[0] == "2"]
    assert [r[3] for r in otlp_rows] == ["otlp_proto"] * 2
    for r, host, value in zip(otlp_rows, ["h1", "h2"], [0.25, 0.5], strict=True):
        rm = orjson.loads(r[4])["resourceMetrics"][0]
        assert rm["resource"]["attributes"][0] == {"key": "host.name", "value": {"stringValue": host}}
        assert rm["scopeMetrics"][0]["metrics"][0]["gauge"]["dataPoints"][0]["asDouble"] == value


def test_partition_and_absolute_offset(broker, topic: str) -> None:  # type: ignore[no-untyped-def]
    assert tail(broker, topic, "-p", "0", "-o", "5", "-f", "%p %o\\n", "--idle", "2") == ["0 5", "0 6", "0 7"]
    assert tail(broker, topic, "-p", "1", "-o", "99", "--idle", "2") == []  # past the end: waits there


def test_key_filter(broker, topic: str) -> None:  # type: ignore[no-untyped-def]
    lines = tail(broker, topic, "-k", "b", "--json", "--idle", "2")
    assert [orjson.loads(line)["seq"] for line in lines] == [1, 3, 5, 7]


def test_start_at_a_timestamp(broker, topic: str) -> None:  # type: ignore[no-untyped-def]
    # s@T: the first record at or after T in each partition: offset 3 on partition 0 and 1; none on 2
    lines = tail(broker, topic, "-o", f"s@{T0 + 3000}", "-f", "%p %o %T\\n", "--idle", "2")
    assert sorted(lines) == [f"0 {o} {T0 + o * 1000}" for o in range(3, 8)] + [f"1 3 {T0 + 3000}"]


def test_relative_offset_from_the_end(broker, topic: str) -> None:  # type: ignore[no-untyped-def]
    # every record of the topic was flushed on its own, so each is its own batch; the embedded
    # broker's high watermark can lag by the last batch, i.e. by one record here: -o -2 then starts
    # one record earlier. The last two records are always there, and at most one before them.
    lines = tail(broker, topic, "-p", "0", "-o", "-2", "-f", "%o\\n", "--idle", "2")
    assert lines[-2:] == ["6", "7"] and len(lines) in (2, 3), lines


def test_group_mode_and_exit_at_end(broker, topic: str) -> None:  # type: ignore[no-untyped-def]
    lines = tail(broker, topic, "-G", f"g-{uuid.uuid4().hex[:6]}", "-f", "%p %o\\n", "-n", "14", "--idle", "10")
    assert sorted(lines) == sorted([f"0 {i}" for i in range(8)] + [f"1 {i}" for i in range(4)] + ["2 0", "2 1"])
    # -e stops at the end of the partitions without waiting for --idle (the end may be short by
    # one record on the embedded broker, see above)
    lines = tail(broker, topic, "-p", "1", "-e", "-f", "%o\\n", "--idle", "60")
    assert lines == ["0", "1", "2"] or lines == ["0", "1", "2", "3"], lines


def test_bad_offset_and_partition_are_usage_errors(broker, topic: str) -> None:  # type: ignore[no-untyped-def]
    r = perfsift_here("tail", topic, "-b", broker.bootstrap, "-o", "yesterday")
    assert r.returncode == 2 and "offset 'yesterday'" in r.stderr
    r = perfsift_here("tail", topic, "-b", broker.bootstrap, "-p", "7", "--idle", "1")
    assert r.returncode == 2 and "not [7]" in r.stderr


def test_schema_registry_avro_is_decoded_by_the_id_in_the_message(broker, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """In-process (a mock:// registry lives in its process): AvroSerializer writes, tail reads."""
    from confluent_kafka.schema_registry.avro import AvroSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext
    from perfsift.cli import app
    from perfsift.schemas.registry import registry_for

    url = f"mock://{uuid.uuid4().hex}"
    config = tmp_path / "p.yaml"
    config.write_text(f"schema_registry:\n  url: {url}\n")
    name = f"tail-sr-{uuid.uuid4().hex[:8]}"
    props = {"bootstrap.servers": broker.bootstrap}
    ensure_topics(AdminClient(props), [name], partitions=1)
    schema = (Path(__file__).parents[2] / "schemas" / "forecast.avsc").read_text()
    ser = AvroSerializer(registry_for({"url": url}).client, schema)
    rec = {"ts": 1.0, "node": "n", "job": "j", "metric": "cpu", "forecast": 2.0, "sigma": 0.5,
           "lower": 1.0, "upper": 3.0, "method": "holt", "mae_forecast": 2.1, "mae": 0.4,
           "lower_mae": 1.1, "upper_mae": 3.1}  # fmt: skip
    p = Producer(props)
    p.produce(name, ser(rec, SerializationContext(name, MessageField.VALUE)), b"n")
    p.flush(10)
    result = CliRunner().invoke(app, ["tail", name, "-b", broker.bootstrap, "-c", str(config), "-f", "%E %s\\n",
                                      "-n", "1", "--idle", "10"])  # fmt: skip
    assert result.exit_code == 0, result.output
    encoding, value = result.output.strip().split(" ", 1)
    assert encoding == "confluent-avro"
    assert orjson.loads(value) == rec
