"""The topic layout (ARCHITECTURE.md, Topics) and topic creation through the admin client."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from perfsift.streams.logs import kafka_logger

if TYPE_CHECKING:
    from perfsift.streams.config import PipelineConfig


@dataclass(frozen=True)
class TopicSpec:
    name: str
    key: str
    schema: str
    what: str
    compacted: bool = False


#: default topic names, before the configurable prefix
TOPICS: dict[str, TopicSpec] = {
    t.name: t
    for t in [
        TopicSpec("perf.raw", "node", "sample", "samples as published"),
        TopicSpec("perf.clean", "node", "sample", "outliers handled, missing values imputed, counters scaled"),
        TopicSpec("perf.smoothed", "node", "sample", "sliding-window averages"),
        TopicSpec("perf.smoothed.byjob", "job", "sample", "the same, keyed by job for cross-node stages (pursuit)"),
        TopicSpec("perf.selection", "job", "selection", "decisions: metrics chosen, scores, version", True),
        TopicSpec("perf.reduced", "node", "reduced", "smoothed samples with only the selected metrics"),
        TopicSpec("perf.contract", "node", "contract", "contract evaluation per node"),
        TopicSpec("perf.forecast", "node", "forecast", "forecasts with +-2 sigma bounds"),
        TopicSpec("perf.prediction", "job", "prediction", "structural-model predictions, observed values, verdicts"),
        TopicSpec("perf.control", "job", "control", "feedback to producers: which metrics to keep", True),
        TopicSpec("perf.deadletter", "-", "deadletter", "records that could not be decoded or processed"),
        TopicSpec("perf.state", "stage/topic/partition", "state", "operator snapshots with their offsets", True),
    ]
}


def topic_configs(compacted: bool, retention_ms: int) -> dict[str, str]:
    """Explicit configs for every topic (the embedded broker reports only explicitly set ones)."""
    if compacted:
        return {"cleanup.policy": "compact", "retention.ms": "-1", "max.message.bytes": "16777216"}
    return {"cleanup.policy": "delete", "retention.ms": str(retention_ms)}


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


def pipeline_topics(cfg: PipelineConfig) -> tuple[list[str], list[str]]:
    """All topic names of a pipeline (with prefix) and the compacted ones among them."""
    names = [cfg.topic(t) for t in TOPICS]
    for st in cfg.stages.values():
        names += [cfg.topic(st.input), *(cfg.topic(o) for o in st.written)]
    compacted = [cfg.topic(t.name) for t in TOPICS.values() if t.compacted]
    return list(dict.fromkeys(names)), compacted


def create_pipeline_topics(cfg: PipelineConfig, props: dict[str, str]) -> list[str]:
    """Create every topic of the pipeline that does not exist yet; return the names created."""
    names, compacted = pipeline_topics(cfg)
    admin = AdminClient({**props, "logger": kafka_logger()})
    return ensure_topics(admin, names, cfg.partitions, cfg.replication, cfg.retention_ms, compacted)


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
