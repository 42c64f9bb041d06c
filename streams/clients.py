"""Kafka clients: their settings, the admin calls (topics), group-less readers and the dead-letter
record format. Everything here is the same for every stage, tool and producer.

Client properties, lowest precedence first: built-in defaults (:data:`CONSUMER_DEFAULTS`,
:data:`PRODUCER_DEFAULTS`) < the pipeline file's ``kafka:`` section < ``PERFSIFT_KAFKA_<PROPERTY>``
environment variables (dots written as underscores) < ``-X key=value`` flags.
"""

from __future__ import annotations

import base64
import logging
import os
import re
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import orjson
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Message, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from perfsift.streams.config import ConfigError, PipelineConfig, parse_pairs
from perfsift.streams.logs import kafka_logger
from perfsift.streams.topics import topic_configs

log = logging.getLogger("perfsift.clients")


def kafka_properties(
    bootstrap: str,
    extra: Mapping[str, str] | None = None,
    env: Mapping[str, str] | None = None,
    file: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """librdkafka client properties, lowest precedence first: the pipeline file's ``kafka:``
    section (``file``), the bootstrap servers, ``PERFSIFT_KAFKA_*`` variables, then ``extra``
    (``-X key=value`` flags). SASL/TLS settings go here (``security.protocol``,
    ``sasl.mechanism``, ``sasl.username``, ...). perfsift's own defaults for each kind of client
    (:data:`CONSUMER_DEFAULTS`, :data:`PRODUCER_DEFAULTS`) are below all of these."""
    props = {**(file or {}), "bootstrap.servers": bootstrap}
    for key, val in (env if env is not None else os.environ).items():
        if key.startswith("PERFSIFT_KAFKA_"):
            props[key[len("PERFSIFT_KAFKA_") :].lower().replace("_", ".")] = val
    props.update(extra or {})
    return props


def parse_props(items: list[str] | None) -> dict[str, str]:
    """``-X a.b=1`` flags -> librdkafka properties ``{"a.b": "1"}``."""
    return parse_pairs(items, "--kafka-prop", form="key=value")


#: perfsift's defaults for consumers; any of them yields to the pipeline file, PERFSIFT_KAFKA_* and -X
CONSUMER_DEFAULTS: dict[str, Any] = {
    "auto.offset.reset": "earliest",
    # fast group joins (the defaults take ~23 s on the embedded broker); classic protocol
    "session.timeout.ms": 6000,
    "heartbeat.interval.ms": 500,
    "fetch.max.bytes": 52428800,
    "max.partition.fetch.bytes": 10485760,
}
#: perfsift's defaults for producers; any of them yields to the pipeline file, PERFSIFT_KAFKA_* and -X
PRODUCER_DEFAULTS: dict[str, Any] = {
    "linger.ms": 5,
    "batch.size": 1000000,
    "queue.buffering.max.messages": 2000000,
    "message.max.bytes": 16777216,
    # same key -> same partition as Java clients, so outputs co-partition with other producers
    "partitioner": "murmur2_random",
    "enable.idempotence": True,
    "compression.type": "zstd",
}
#: properties perfsift sets itself because its processing depends on them (offsets are committed
#: by the runner after the outputs are acknowledged; group and transactional ids are derived)
MANAGED = ("group.id", "enable.auto.commit", "transactional.id")
#: property names whose values never go to a log (matched as substrings)
SECRET_WORDS = ("password", "secret", "sasl.oauthbearer.config", "ssl.key.pem", "ssl.keystore", "token")


def _refuse_managed(props: Mapping[str, Any]) -> None:
    for key in MANAGED:
        if key in props:
            raise ConfigError(
                f"kafka property {key!r} is set by perfsift (group.id from the topic prefix and stage, offsets "
                "committed after the outputs are acknowledged); remove it from -X, PERFSIFT_KAFKA_* and the "
                "pipeline file's kafka section"
            )


def consumer_settings(props: Mapping[str, str], group: str, isolation: str = "read_uncommitted") -> dict[str, Any]:
    """A consumer's configuration: :data:`CONSUMER_DEFAULTS` and ``isolation`` < ``props`` (the
    user's) < what perfsift manages: the group, manual commits (:data:`MANAGED`: a user value is an
    error) and, for ``isolation="read_committed"`` (exactly-once), that level, which a
    read_uncommitted setting would break."""
    _refuse_managed(props)
    s = {**CONSUMER_DEFAULTS, "isolation.level": isolation, **props}
    if isolation == "read_committed":
        s["isolation.level"] = isolation
    if s.get("group.protocol") == "consumer":  # KIP-848: the broker sets the session and assigns
        for key in ("session.timeout.ms", "heartbeat.interval.ms"):
            if key not in props:  # perfsift's classic-protocol defaults; a user's value stays (and is refused)
                s.pop(key, None)
    return s | {"group.id": group, "enable.auto.commit": False, "logger": kafka_logger()}


def producer_settings(
    props: Mapping[str, str], transactional_id: str | None = None, negotiate: bool = False
) -> dict[str, Any]:
    """A producer's configuration: :data:`PRODUCER_DEFAULTS` < ``props`` (the user's), then the
    transactional id when the stage runs exactly-once (:data:`MANAGED`). With ``negotiate`` and no
    codec of the user's, the default zstd becomes what the brokers take
    (:func:`negotiated_compression`: asks the cluster once per process)."""
    _refuse_managed(props)
    s: dict[str, Any] = {**PRODUCER_DEFAULTS, "delivery.report.only.error": True, **props, "logger": kafka_logger()}
    if negotiate and not {"compression.type", "compression.codec"} & set(props) and "bootstrap.servers" in props:
        s["compression.type"] = negotiated_compression(props)
    if transactional_id:
        s["transactional.id"] = transactional_id
        # a zombie's open transaction blocks read_committed readers until it times out: keep it short
        s.setdefault("transaction.timeout.ms", 10000)
    return s


#: perfsift's default codec first, then what a producer falls back to when the brokers lack it
COMPRESSION_FALLBACK = ("zstd", "lz4", "none")
#: the librdkafka protocol feature a broker must have for each codec (gzip and snappy need none)
CODEC_FEATURES = {"zstd": "ZSTD", "lz4": "LZ4", "none": ""}
_negotiated: dict[str, str] = {}
_FEATURE_LINE = re.compile(r"^(\S+): (Enabling|Disabling) feature (\w+)$")


def broker_features(props: Mapping[str, Any], timeout: float = 5.0) -> set[str] | None:
    """The protocol features librdkafka enables for the first broker that answers its ApiVersions
    request (``ZSTD``, ``LZ4``, ``IdempotentProducer``, ...; read from its ``debug=feature`` log),
    or None when no broker answered within ``timeout`` seconds or the connection failed."""
    lines: list[str] = []

    class _Capture:  # librdkafka calls logger.log(level, fmt, *args)
        def log(self, level: int, fmt: str, *args: object) -> None:
            lines.append(fmt % args if args else fmt)

    settings = {k: v for k, v in props.items() if k not in ("debug", "logger")}
    probe = Producer({**settings, "debug": "feature", "logger": _Capture()})
    features: dict[str, set[str]] = {}
    deadline, quiet_since = time.monotonic() + timeout, None
    try:
        while time.monotonic() < deadline:
            probe.poll(0.05)
            seen = sum(map(len, features.values()))
            for line in lines:
                if ("Connect to" in line and "failed" in line) or "Failed to resolve" in line:
                    return None
                m = _FEATURE_LINE.match(line.split("]: ", 1)[-1])
                if m:
                    on = features.setdefault(m.group(1), set())
                    (on.add if m.group(2) == "Enabling" else on.discard)(m.group(3))
            lines.clear()
            if features and sum(map(len, features.values())) == seen:  # the burst of one answer is over
                if quiet_since is not None and time.monotonic() - quiet_since > 0.2:
                    return next(iter(features.values()))
                quiet_since = quiet_since or time.monotonic()
            else:
                quiet_since = None
        return None
    finally:
        probe.flush(0)


def choose_compression(features: set[str]) -> str:
    """The first codec of :data:`COMPRESSION_FALLBACK` whose broker feature is in ``features``."""
    return next(c for c in COMPRESSION_FALLBACK if not CODEC_FEATURES[c] or CODEC_FEATURES[c] in features)


def negotiated_compression(props: Mapping[str, Any], features: set[str] | None = None) -> str:
    """zstd when the brokers take it, else lz4, else none, with one WARNING line when falling back.
    Asked once per process and cluster (``features``: already known, for tests); when no broker
    answers, zstd stays (librdkafka itself then sends uncompressed batches to a broker without it)."""
    key = str(props.get("bootstrap.servers", ""))
    if key not in _negotiated:
        known = features if features is not None else broker_features(props)
        codec = "zstd" if known is None else choose_compression(known)
        if codec != "zstd":
            logging.getLogger("perfsift.clients").warning(
                "brokers at %s do not support zstd compression; producers send %s batches",
                key,
                codec,
                extra={"bootstrap": key, "compression": codec},
            )
        _negotiated[key] = codec
    return _negotiated[key]


def redacted(settings: Mapping[str, Any]) -> dict[str, str]:
    """``settings`` as strings for a log line, secrets (:data:`SECRET_WORDS`) replaced by ``***``
    and callables (logger, callbacks) left out."""
    return {
        k: "***" if any(w in k for w in SECRET_WORDS) else str(v)
        for k, v in sorted(settings.items())
        if not callable(v) and not isinstance(v, logging.Logger)
    }


#: librdkafka statistics every this many ms (below the user's ``statistics.interval.ms``; 0 = off)
STATISTICS_INTERVAL_MS = 15000


def kafka_statistics(stats: dict[str, Any]) -> dict[str, float]:
    """The subset of a librdkafka statistics document (``statistics.interval.ms``) that
    ``/metrics`` shows: the local queue (messages, bytes), traffic totals, fetch requests sent
    (a consumer's; a paused partition's prefetched data is fetched again), the slowest broker's
    average round trip and, for a consumer, its group's rebalances and assigned partitions."""
    brokers = [b for b in stats["brokers"].values() if b.get("nodeid", -1) >= 0]
    out = {
        "queue_messages": float(stats["msg_cnt"]),
        "queue_bytes": float(stats["msg_size"]),
        "tx_bytes": float(stats["tx_bytes"]),
        "rx_bytes": float(stats["rx_bytes"]),
        "tx_messages": float(stats["txmsgs"]),
        "rx_messages": float(stats["rxmsgs"]),
        "broker_rtt_seconds": max((b["rtt"]["avg"] / 1e6 for b in brokers), default=0.0),
        "fetch_requests": float(sum(b.get("req", {}).get("Fetch", 0) for b in brokers)),
    }
    if "cgrp" in stats:
        out["group_rebalances"] = float(stats["cgrp"]["rebalance_cnt"])
        out["group_assigned_partitions"] = float(stats["cgrp"]["assignment_size"])
    return out


def statistics_callback(into: dict[tuple[str, str], float], client: str, owner: str) -> Callable[[str], None]:
    """A ``stats_cb`` keeping :func:`kafka_statistics` of ``client`` in ``into``, by (client, statistic)."""

    def keep(raw: str) -> None:
        try:
            into.update(((client, k), v) for k, v in kafka_statistics(orjson.loads(raw)).items())
        except (orjson.JSONDecodeError, KeyError, TypeError):
            log.debug("%s: unreadable librdkafka statistics", owner, exc_info=True)

    return keep


def where(m: Message) -> tuple[str, int, int]:
    """(topic, partition, offset) of a fetched message (never None for a message without error)."""
    return m.topic(), m.partition(), m.offset()  # type: ignore[return-value]  # per message: no cast() calls


def dead_letter_record(
    stage: str, msg_topic: str, partition: int, offset: int, key: bytes | None, value: bytes | None, reason: str
) -> bytes:
    """A dead-letter record (schemas/deadletter.avsc); key and value are base64 in JSON."""
    return orjson.dumps(
        {
            "stage": stage,
            "topic": msg_topic,
            "partition": partition,
            "offset": offset,
            "key": base64.b64encode(key).decode() if key is not None else None,
            "value": base64.b64encode(value).decode() if value is not None else None,
            "reason": reason,
            "ts": time.time(),
        }
    )


# -- topics ----------------------------------------------------------------------------------------
def broker_topics(props: dict[str, str], timeout: float = 10.0) -> set[str]:
    """The names of the topics on the cluster at ``props``' bootstrap (internal ``__*`` ones left
    out); KafkaException when no broker answers within ``timeout`` seconds."""
    admin = AdminClient({**props, "logger": kafka_logger()})
    return {t for t in admin.list_topics(timeout=timeout).topics if not t.startswith("__")}


def require_topic(props: dict[str, str], topic: str, timeout: float = 10.0) -> None:
    """Check at once that a broker answers and has ``topic``, so a command that publishes or reads
    does not wait out librdkafka's retries (KafkaException, or ValueError naming what is there)."""
    names = broker_topics(props, timeout)
    if topic not in names:
        there = ", ".join(sorted(names)[:20]) + (", ..." if len(names) > 20 else "") if names else "none"
        raise ValueError(f"no topic {topic!r} on {props.get('bootstrap.servers')} (topics there: {there})")


def ensure_topics(
    admin: AdminClient,
    names: Iterable[str],
    partitions: int,
    replication: int = 1,
    retention_ms: int = 7 * 24 * 3600 * 1000,
    compacted: Iterable[str] = (),
    timeout: float = 15.0,
) -> list[str]:
    """Create the topics that do not exist yet; return the names created."""
    existing = set(admin.list_topics(timeout=timeout).topics)
    compact = set(compacted)
    new = [
        NewTopic(
            n,
            num_partitions=partitions,
            replication_factor=replication,
            config=topic_configs(n in compact, retention_ms),
        )
        for n in dict.fromkeys(names)
        if n not in existing
    ]
    if not new:
        return []
    created = []
    for name, fut in admin.create_topics(new, operation_timeout=timeout, request_timeout=timeout).items():
        try:
            fut.result()
            created.append(name)
        except KafkaException as exc:
            if "TOPIC_ALREADY_EXISTS" not in str(exc):  # a concurrent creator won the race
                raise
    return created


def create_pipeline_topics(cfg: PipelineConfig, props: dict[str, str]) -> list[str]:
    """Create every topic of the pipeline that does not exist yet; return the names created."""
    names, compacted = cfg.topics()
    admin = AdminClient({**props, "logger": kafka_logger()})
    return ensure_topics(admin, names, cfg.partitions, cfg.replication, cfg.retention_ms, compacted)


# -- group-less readers ----------------------------------------------------------------------------
def assign_from_start(consumer: Consumer, topic: str) -> list[int]:
    """Assign every partition of ``topic`` from its first offset, without a consumer group (so no
    group join: readers that need everything so far stop at partition EOF). Returns the partitions;
    [] when the topic does not exist or cannot be listed."""
    try:
        meta = consumer.list_topics(topic, timeout=10)
    except KafkaException:
        return []
    parts = list(meta.topics[topic].partitions) if topic in meta.topics else []
    if parts:
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in parts])
    return parts


def read_topic_to_end(props: dict[str, str], topic: str, timeout: float = 60.0) -> list[bytes]:
    """Every record value of a topic, read without a consumer group (all partitions assigned from
    the beginning until each reports its end), so it takes no group join."""
    c = Consumer(consumer_settings(props, f"perfsift-reader-{uuid.uuid4().hex[:8]}") | {"enable.partition.eof": True})
    try:
        parts = assign_from_start(c, topic)
        done: set[int] = set()
        values: list[bytes] = []
        deadline = time.monotonic() + timeout
        while len(done) < len(parts) and time.monotonic() < deadline:
            for m in c.consume(5000, 0.2):
                err = m.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        done.add(m.partition())  # type: ignore[arg-type]
                    continue
                v = m.value()
                if v is not None:
                    values.append(v)
        return values
    finally:
        c.close()
