"""The topics: the default topic of every kind of record (:data:`~perfsift.schemas.kinds.KINDS`)
and the other topics that carry samples, each with its name, the kind of record it carries, the
record field that keys its messages, its cleanup policy and its report file.

Operators name the *kind* of what they emit (:class:`~perfsift.operators.base.Decider.output`,
:class:`~perfsift.operators.base.Router.outputs`); the kinds' table says which topic carries each kind by
default and how its messages are keyed. Creating the topics on a cluster is
:func:`perfsift.streams.clients.create_pipeline_topics`'s job.
"""

from __future__ import annotations

from dataclasses import dataclass

from perfsift.schemas.kinds import KINDS, Kind


@dataclass(frozen=True)
class TopicSpec:
    name: str
    #: the record field whose value keys a message (``node`` or ``job``; ``-`` for none)
    key: str
    #: the kind of record (schema name in ``schemas/``)
    schema: str
    what: str
    compacted: bool = False
    #: read only by perfsift's own stages: column frames of many samples per message (pipeline
    #: ``framing: columns``, the default) rather than one record per sample
    framed: bool = False
    #: the file a report folder (``perfsift analyze``, ``perfsift run``) keeps its records in; "" for none
    file: str = ""


def _default_topic(kind: Kind) -> TopicSpec:
    return TopicSpec(kind.topic, kind.key, kind.name, kind.what, kind.compacted, file=kind.file)


STATE_TOPIC = KINDS["state"].topic
DEADLETTER_TOPIC = KINDS["deadletter"].topic

#: the topics that carry samples besides the sample kind's default (perf.raw)
SAMPLE_TOPICS = (
    TopicSpec("perf.clean", "node", "sample", "outliers handled, missing values imputed, counters scaled"),
    TopicSpec("perf.smoothed", "node", "sample", "sliding-window averages (optional)", framed=True),
    TopicSpec("perf.smoothed.byjob", "job", "sample", "sliding-window averages keyed by job (pursuit)", framed=True),
)

#: default topic names, before the configurable prefix
TOPICS: dict[str, TopicSpec] = {
    t.name: t
    for t in [
        _default_topic(KINDS["sample"]),
        *SAMPLE_TOPICS,
        *(_default_topic(k) for k in KINDS.values() if k.name != "sample"),
    ]
}

#: the topic that carries each kind of record by default; samples go to several topics, so a stage
#: that emits samples names its outputs
DEFAULT_TOPIC: dict[str, str] = {k.name: k.topic for k in KINDS.values() if k.name != "sample"}


def kind_of(topic: str) -> str | None:
    """The kind of record a topic carries (None for a topic that is not in the table)."""
    spec = TOPICS.get(topic)
    return spec.schema if spec is not None else None


def key_of(topic: str, kind: str = "sample") -> str:
    """The record field that keys messages on ``topic``: the table's, or for a topic that is not in
    the table, that of the default topic of its kind (``node`` for samples)."""
    spec = TOPICS.get(topic)
    if spec is not None:
        return spec.key
    known = KINDS.get(kind)
    return known.key if known is not None else "node"


def topic_configs(compacted: bool, retention_ms: int) -> dict[str, str]:
    """Explicit configs for every topic (the embedded broker reports only explicitly set ones)."""
    if compacted:
        return {"cleanup.policy": "compact", "retention.ms": "-1", "max.message.bytes": "16777216"}
    return {"cleanup.policy": "delete", "retention.ms": str(retention_ms)}


def framed(topic: str) -> bool:
    """Whether ``topic`` (a logical name) carries column frames when the pipeline's framing is
    ``columns``."""
    spec = TOPICS.get(topic)
    return spec is not None and spec.framed
