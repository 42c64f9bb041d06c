"""The one table of topics (ARCHITECTURE.md, Topics): name, the kind of record it carries (a
schema in ``schemas/``), the record field that keys its messages and its cleanup policy.

Operators name the *kind* of what they emit (:class:`~perfsift.operators.base.Decider.output`,
:class:`~perfsift.operators.base.Router.outputs`); this table says which topic carries each kind by
default and how its messages are keyed. Creating the topics on a cluster is
:func:`perfsift.streams.clients.create_pipeline_topics`'s job.
"""

from __future__ import annotations

from dataclasses import dataclass


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


STATE_TOPIC = "perf.state"
DEADLETTER_TOPIC = "perf.deadletter"

#: default topic names, before the configurable prefix
TOPICS: dict[str, TopicSpec] = {
    t.name: t
    for t in [
        TopicSpec("perf.raw", "node", "sample", "samples as published"),
        TopicSpec("perf.clean", "node", "sample", "outliers handled, missing values imputed, counters scaled"),
        TopicSpec("perf.smoothed", "node", "sample", "sliding-window averages (optional)", framed=True),
        TopicSpec(
            "perf.smoothed.byjob", "job", "sample", "sliding-window averages keyed by job (pursuit)", framed=True
        ),
        TopicSpec(
            "perf.selection",
            "job",
            "selection",
            "decisions: metrics chosen, scores, version",
            True,
            file="selection.jsonl",
        ),
        TopicSpec(
            "perf.reduced", "node", "reduced", "smoothed samples with only the selected metrics", file="reduced.jsonl"
        ),
        TopicSpec("perf.contract", "node", "contract", "contract evaluation per node", file="contract.jsonl"),
        TopicSpec("perf.forecast", "node", "forecast", "forecasts with +-2 sigma bounds", file="forecast.jsonl"),
        TopicSpec(
            "perf.prediction",
            "job",
            "prediction",
            "structural-model predictions, observed values, verdicts",
            file="prediction.jsonl",
        ),
        TopicSpec(
            "perf.control", "job", "control", "feedback to producers: which metrics to keep", True, file="control.jsonl"
        ),
        TopicSpec(DEADLETTER_TOPIC, "-", "deadletter", "records that could not be decoded or processed"),
        TopicSpec(STATE_TOPIC, "stage/topic/partition", "state", "operator snapshots with their offsets", True),
    ]
}

#: the topic that carries each kind of record by default; samples go to several topics, so a stage
#: that emits samples names its outputs
DEFAULT_TOPIC: dict[str, str] = {t.schema: t.name for t in TOPICS.values() if t.schema != "sample"}


#: topic -> the file of a report folder its records go to (topics not listed are not written)
REPORT_FILES: dict[str, str] = {t.name: t.file for t in TOPICS.values() if t.file}


def kind_of(topic: str) -> str | None:
    """The kind of record a topic carries (None for a topic that is not in the table)."""
    spec = TOPICS.get(topic)
    return spec.schema if spec is not None else None


def key_of(topic: str, kind: str = "sample") -> str:
    """The record field that keys messages on ``topic``: the table's, or for a topic that is not in
    the table, that of the default topic of its kind (``node`` for samples)."""
    spec = TOPICS.get(topic) or TOPICS.get(DEFAULT_TOPIC.get(kind, "perf.raw"))
    return spec.key if spec is not None else "node"


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
