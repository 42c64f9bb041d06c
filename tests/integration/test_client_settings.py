"""Client settings on the real embedded broker: what the user sets is what librdkafka runs with,
and producers compress."""

from __future__ import annotations

import logging
import re
import uuid
from pathlib import Path

import orjson
import pytest
from confluent_kafka import Consumer, KafkaError, Producer
from perfsift.producers.publish import publish_samples
from perfsift.streams.clients import (
    consumer_settings,
    create_pipeline_topics,
    kafka_properties,
    parse_props,
    producer_settings,
)
from perfsift.streams.config import load_pipeline
from perfsift.streams.runner import StageRunner, run_in_thread

from tests.conftest import read_topic
from tests.integration.test_stage import make_samples, write_pipeline

pytestmark = pytest.mark.integration


def librdkafka_confs(records: list[logging.LogRecord]) -> dict[str, dict[str, str]]:
    """Per client (``consumer-3``, ``producer-5``), the "Client configuration:" dump librdkafka
    logs with ``debug=conf``: property -> value as librdkafka holds it."""
    confs: dict[str, dict[str, str]] = {}
    for r in records:
        m = re.search(r"\[rdkafka#(\w+-\d+)\] \[thrd:app\]:   ([\w.]+) = (.*)$", r.getMessage())
        if r.name == "perfsift.kafka" and m:
            confs.setdefault(m.group(1), {})[m.group(2)] = m.group(3)
    return confs


def test_user_settings_reach_librdkafka_over_the_defaults(
    kafka: dict, prefix: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """defaults < pipeline file < PERFSIFT_KAFKA_* < -X, read back from librdkafka's own dump of
    the configuration the stage's consumer and producer run with."""
    path = write_pipeline(tmp_path, prefix, commit_interval_s=0.2)
    path.write_text(
        path.read_text()
        + "kafka:\n  fetch.wait.max.ms: 77\n  linger.ms: 20\n  queue.buffering.max.kbytes: 4096\n  debug: conf\n"
    )
    cfg = load_pipeline(path)
    env = {"PERFSIFT_KAFKA_LINGER_MS": "30", "PERFSIFT_KAFKA_HEARTBEAT_INTERVAL_MS": "700"}
    flags = parse_props(["session.timeout.ms=7000", "linger.ms=50", "sasl.password=hunter2"])
    flags.pop("sasl.password")  # librdkafka refuses SASL settings without SASL; redaction is checked below
    props = kafka_properties(kafka["bootstrap.servers"], flags, env=env, file=cfg.kafka)
    create_pipeline_topics(cfg, props)
    caplog.set_level(logging.INFO, logger="perfsift.runner")
    caplog.set_level(logging.DEBUG, logger="perfsift.kafka")  # last: the capturing handler's level too
    runner = StageRunner(cfg.stage("smooth"), cfg, props, embedded=True)
    thread = run_in_thread(runner)
    samples = make_samples(n_nodes=2, steps=20)
    publish_samples(kafka, cfg.topic("perf.raw"), samples)
    read_topic(kafka, cfg.topic("perf.smoothed"), lambda r: len(r) >= len(samples))
    runner.stop()
    thread.join(20)
    confs = librdkafka_confs(caplog.records)
    (consumer,) = [c for c in confs.values() if c.get("group.id") == runner.group_id]  # the stage's consumer
    (producer,) = [c for n, c in confs.items() if n.startswith("producer") and "batch.size" in c]  # not admin
    assert consumer["session.timeout.ms"] == "7000"  # -X over the built-in 6000
    assert consumer["heartbeat.interval.ms"] == "700"  # environment over the built-in 500
    assert consumer["fetch.wait.max.ms"] == "77"  # pipeline file over librdkafka's 500
    assert consumer["enable.auto.commit"] == "false"
    assert producer["queue.buffering.max.ms"] == "50"  # linger.ms: -X over env (30), file (20), default (5)
    assert producer["queue.buffering.max.kbytes"] == "4096"  # pipeline file
    assert producer["compression.codec"] == "zstd"  # perfsift's default, nobody set it
    assert producer["batch.size"] == "1000000"
    started = [r for r in caplog.records if r.name == "perfsift.runner" and "kafka consumer" in r.getMessage()]
    assert len(started) == 1  # the effective configuration, logged once
    assert started[0].consumer["session.timeout.ms"] == "7000"  # type: ignore[attr-defined]
    assert started[0].producer["linger.ms"] == "50"  # type: ignore[attr-defined]


def test_a_setting_perfsift_manages_is_refused() -> None:
    props = kafka_properties("127.0.0.1:9", parse_props(["enable.auto.commit=true"]), env={})
    with pytest.raises(ValueError, match=r"'enable\.auto\.commit' is set by perfsift"):
        consumer_settings(props, "g")


def test_the_effective_configuration_log_hides_secrets() -> None:
    from perfsift.streams.clients import redacted

    shown = redacted(producer_settings({"sasl.password": "hunter2", "sasl.username": "me", "ssl.key.pem": "KEY"}))
    assert shown["sasl.password"] == shown["ssl.key.pem"] == "***"
    assert shown["sasl.username"] == "me" and "logger" not in shown
    assert "hunter2" not in repr(shown) and "KEY" not in repr(shown)


def wire_bytes(stats_json: list[str], key: str) -> int:
    """Bytes a client moved over the network to or from the brokers (``txbytes``/``rxbytes`` of
    the last librdkafka statistics, summed over the brokers)."""
    last = orjson.loads(stats_json[-1])
    return sum(b[key] for name, b in last["brokers"].items() if not name.startswith("GroupCoordinator"))


def test_producers_compress_with_zstd_and_the_broker_serves_compressed_batches(kafka: dict) -> None:
    """The default producer sends zstd batches (bytes on the wire far below the payload), the
    broker keeps them compressed (a consumer fetches about as few bytes) and every record reads
    back intact."""
    from confluent_kafka.admin import AdminClient
    from perfsift.streams.clients import ensure_topics

    topic = f"zstd-{uuid.uuid4().hex[:8]}"
    ensure_topics(AdminClient(kafka), [topic], 1)
    samples = make_samples(n_nodes=4, steps=500)
    values = [orjson.dumps({**s, "pad": "x" * 200}) for s in samples]
    payload = sum(map(len, values))
    pstats: list[str] = []
    p = Producer(producer_settings(kafka) | {"statistics.interval.ms": 100, "stats_cb": pstats.append})
    for v in values:
        p.produce(topic, v, b"k")
    assert p.flush(30) == 0
    p.poll(0.3)
    cstats: list[str] = []
    settings = consumer_settings(kafka, f"zstd-{uuid.uuid4().hex}") | {"enable.partition.eof": True}
    c = Consumer(settings | {"statistics.interval.ms": 100, "stats_cb": cstats.append})
    c.subscribe([topic])
    got: list[bytes] = []
    try:
        eof = False
        while not eof:
            for m in c.consume(1000, 1.0):
                err = m.error()
                if err is not None:
                    eof = err.code() == KafkaError._PARTITION_EOF and len(got) >= len(values)
                    continue
                got.append(m.value() or b"")
        c.poll(0.3)
    finally:
        c.close()
    assert got == values
    sent, fetched = wire_bytes(pstats, "txbytes"), wire_bytes(cstats, "rxbytes")
    assert sent < payload / 4, (sent, payload)  # compressed on the way in
    assert fetched < payload / 4, (fetched, payload)  # and served compressed


def test_the_compression_probe_reads_the_brokers_features_and_keeps_zstd_on_the_embedded_broker(
    kafka: dict,
) -> None:
    """perfsift asks the cluster which codecs it takes (librdkafka's feature negotiation): Tansu
    has ZSTD and LZ4, so a stage's producer keeps zstd; a codec the user chose is never probed or
    replaced; a broker that cannot be reached leaves zstd (librdkafka's own gate then applies)."""
    from perfsift.streams import clients

    features = clients.broker_features(kafka)
    assert features is not None and {"ZSTD", "LZ4", "IdempotentProducer"} <= features
    clients._negotiated.pop(kafka["bootstrap.servers"], None)
    assert producer_settings(kafka, negotiate=True)["compression.type"] == "zstd"
    assert clients._negotiated[kafka["bootstrap.servers"]] == "zstd"
    assert producer_settings({**kafka, "compression.type": "gzip"}, negotiate=True)["compression.type"] == "gzip"
    assert clients.broker_features({"bootstrap.servers": "127.0.0.1:1"}) is None
    runner = StageRunner(load_pipeline().stages["node"], load_pipeline(), kafka, embedded=True)
    assert runner.client_settings()[1]["compression.type"] == "zstd"


def test_without_zstd_on_the_brokers_producers_fall_back_to_lz4_then_none_with_one_log_line(
    caplog: pytest.LogCaptureFixture,
) -> None:
    from perfsift.streams import clients

    # the features librdkafka enables for a broker older than Kafka 2.1 (no ZSTD) and for one
    # that has neither (a Kafka-compatible service)
    old = {"MsgVer1", "MsgVer2", "ApiVersion", "LZ4", "IdempotentProducer"}
    assert clients.choose_compression(old | {"ZSTD"}) == "zstd"
    assert clients.choose_compression(old) == "lz4"
    assert clients.choose_compression(old - {"LZ4"}) == "none"
    with caplog.at_level(logging.WARNING, "perfsift.clients"):
        props = {"bootstrap.servers": f"old-{uuid.uuid4().hex}:9092"}
        assert clients.negotiated_compression(props, features=old) == "lz4"
        assert clients.negotiated_compression(props) == "lz4"  # remembered: no second probe, no second line
        assert producer_settings(props, negotiate=True)["compression.type"] == "lz4"
    (line,) = [r for r in caplog.records if r.name == "perfsift.clients"]
    assert "do not support zstd" in line.getMessage() and line.compression == "lz4"  # type: ignore[attr-defined]
