"""The pipeline file (YAML): stages, their operators and the shared settings.

Precedence, lowest first: built-in defaults < pipeline YAML < environment (``PERFSIFT_*``) <
command-line flags (``--set key=value``). Kafka client properties are
:mod:`perfsift.streams.clients`' business.

What a stage publishes follows from the role of its last operator (``operators/base.py``): a
transformer's samples go to the stage's ``outputs``; a decider's records to its kind's topic
(``perf.selection``, ``perf.contract``, ...) unless ``outputs`` names others; a router's kinds each
to the topic of that kind among ``outputs`` (default: all of them).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field, replace
from functools import cached_property
from importlib import resources
from pathlib import Path
from typing import Any

import yaml
from perfsift.formats.settings import IngestConfigError, IngestSettings, parse_ingest
from perfsift.operators import OPERATORS, Decider, Operator, Router
from perfsift.schemas.encodings import ENCODINGS as WIRE_ENCODINGS
from perfsift.schemas.encodings import Encoding, encoding_for
from perfsift.schemas.registry import registry_settings
from perfsift.streams.knowledge import clean_params
from perfsift.streams.limits import Limits
from perfsift.streams.topics import DEFAULT_TOPIC, TOPICS, kind_of

GUARANTEES = ("auto", "at_least_once", "exactly_once")
#: the wire encodings of ``encoding:``
ENCODINGS = tuple(WIRE_ENCODINGS)
#: the topic of ``otlp_out: true``
OTLP_TOPIC = "perf.reduced.otlp"
FRAMINGS = ("columns", "records")
#: operators whose pipeline-file parameters name a source that the runtime reads for them
_SOURCES: dict[str, Callable[[Mapping[str, Any]], dict[str, Any]]] = {"clean": clean_params}
#: the ``emit:`` values older pipeline files state (it now follows from the last operator's role)
_EMIT_ALIASES = {"samples": "transform", "routed": "route"}


class ConfigError(ValueError):
    """The pipeline file or a setting is invalid; the message names the place."""


@dataclass(frozen=True)
class OperatorSpec:
    type: str
    params: dict[str, Any]
    #: topics that also get this operator's output batch (a tap on an intermediate result, e.g.
    #: perf.clean from a stage that cleans and smooths); never the last operator (that is `outputs`)
    publish: tuple[str, ...] = ()

    @cached_property
    def arguments(self) -> dict[str, Any]:
        """The constructor's arguments: the file's parameters, with the sources they name read
        once (a clean operator's ``kb`` and ``app`` become the application's history)."""
        return _SOURCES.get(self.type, dict)(self.params)

    def build(self) -> Operator:
        return OPERATORS[self.type](**self.arguments)


@dataclass(frozen=True)
class StageConfig:
    name: str
    input: str
    outputs: tuple[str, ...]
    operators: tuple[OperatorSpec, ...]
    #: an ingest stage's input format and mapping (long records in; formats/)
    ingest: IngestSettings | None = None

    def build_chain(self) -> list[Operator]:
        return [spec.build() for spec in self.operators]

    @property
    def last(self) -> type[Operator] | None:
        """The class of the chain's last operator (None for an empty chain, which passes samples)."""
        return OPERATORS[self.operators[-1].type] if self.operators else None

    @property
    def role(self) -> str:
        """What the stage emits: ``transform`` (samples), ``decide`` (records of one kind) or
        ``route`` (several kinds), after its last operator."""
        return self.last.role if self.last is not None else "transform"

    @cached_property
    def routes(self) -> dict[str, tuple[str, ...]]:
        """The output topics of each kind a router emits (``{"reduced": ("perf.reduced",), ...}``)."""
        last = self.last
        if last is None or not issubclass(last, Router):
            return {}
        return {kind: tuple(t for t in self.outputs if kind_of(t) == kind) for kind in last.outputs}

    @property
    def tapped(self) -> tuple[str, ...]:
        """Topics that get an intermediate result (operators' ``publish``)."""
        return tuple(t for op in self.operators for t in op.publish)

    @property
    def written(self) -> tuple[str, ...]:
        """Every topic the stage writes: its outputs and its taps."""
        return (*self.outputs, *self.tapped)


@dataclass(frozen=True)
class PipelineConfig:
    topic_prefix: str = ""
    partitions: int = 4
    replication: int = 1
    retention_ms: int = 7 * 24 * 3600 * 1000
    encoding: str = "json"
    #: ``columns``: the topics only perfsift reads (TOPICS' ``framed``) carry column frames of many
    #: samples per message (the packaged pipeline file's setting); ``records``: one record per
    #: sample everywhere (the built-in default, for pipeline files that do not say)
    framing: str = "records"
    guarantee: str = "auto"
    batch_size: int = 5000
    batch_timeout_s: float = 0.1
    commit_interval_s: float = 1.0
    snapshots: bool = True
    #: the share of a partition's input bytes its state snapshots may cost: a snapshot is written
    #: at a commit once the input read since the last one reaches the last one's size divided by
    #: this; a restart replays the input since the snapshot without emitting (``.inf``: a snapshot
    #: at every commit)
    snapshot_share: float = 0.02
    #: the largest state message: a snapshot larger than this goes out as zstd-compressed chunks of
    #: at most this many bytes and a manifest (:mod:`~perfsift.streams.state_chunks`)
    snapshot_chunk_bytes: int = 524_288
    #: the event-time skew (seconds) a stage allows between its input partitions: a partition whose
    #: samples run further ahead of the slowest one that still has data is paused until the others
    #: catch up (:mod:`~perfsift.streams.align`; ``.inf``: no alignment, partitions in fetch order)
    event_time_skew_s: float = 120.0
    #: how many payload bytes of the partitions ahead a stage holds in memory before it pauses them
    #: (a paused partition's prefetched data is fetched again when it resumes; 0: pause at once)
    event_time_hold_bytes: int = 33_554_432
    #: topic that gets perf.reduced, perf.forecast, perf.contract and perf.prediction again as OTLP
    #: protobuf metrics ("" = none; ``true`` in the file means :data:`OTLP_TOPIC`)
    otlp_out: str = ""
    #: librdkafka properties of every client (the file's ``kafka:`` section), below
    #: ``PERFSIFT_KAFKA_*`` and ``-X``
    kafka: dict[str, str] = field(default_factory=dict)
    #: what one input partition of a stage accepts (the file's ``limits:`` section)
    limits: Limits = field(default_factory=Limits)
    #: ``encoding: confluent-avro``: the registry client's settings (the file's ``schema_registry:``
    #: section below ``PERFSIFT_SR_*``; :mod:`perfsift.schemas.registry`)
    schema_registry: dict[str, str] = field(default_factory=dict)
    stages: dict[str, StageConfig] = field(default_factory=dict)
    source: str = "<defaults>"

    @property
    def codec(self) -> Encoding:
        """The object of the pipeline's wire encoding (``encoding:``, with its Schema Registry): a
        runner asks for it once and keeps it (:mod:`perfsift.schemas.encodings`)."""
        return encoding_for(self.encoding, self.schema_registry)

    def topic(self, name: str) -> str:
        """Full topic name with the configured prefix."""
        return f"{self.topic_prefix}{name}"

    def topics(self) -> tuple[list[str], list[str]]:
        """All topic names of the pipeline (with prefix) and the compacted ones among them."""
        names = [self.topic(t) for t in TOPICS]
        for st in self.stages.values():
            names += [self.topic(st.input), *(self.topic(o) for o in st.written)]
        names += [self.topic(self.otlp_out)] if self.otlp_out else []
        compacted = [self.topic(t.name) for t in TOPICS.values() if t.compacted]
        return list(dict.fromkeys(names)), compacted

    def stage(self, name: str) -> StageConfig:
        try:
            return self.stages[name]
        except KeyError:
            raise ConfigError(
                f"{self.source}: no stage {name!r}; stages are: {', '.join(self.stages) or '(none)'}"
            ) from None


def default_pipeline_path() -> Path:
    return Path(str(resources.files("perfsift.streams").joinpath("pipeline.yaml")))


def _did_you_mean(words: Collection[object], known: Collection[str]) -> str:
    """`` (did you mean 'x'?)`` for the first of ``words`` close to a known name, else ``""``."""
    import difflib

    for w in sorted(map(str, words)):
        close = difflib.get_close_matches(w, list(known), n=1)
        if close:
            return f" (did you mean {close[0]!r}?)"
    return ""


def _err(source: str, where: str, msg: str) -> ConfigError:
    return ConfigError(f"{source}: {where}: {msg}")


def _parse_operator(source: str, where: str, item: object) -> OperatorSpec:
    if not isinstance(item, Mapping) or "type" not in item:
        raise _err(source, where, "an operator is a mapping with a 'type' and its parameters")
    params = {k: v for k, v in item.items() if k not in ("type", "publish")}
    typ = item["type"]
    if typ not in OPERATORS:
        raise _err(
            source,
            where,
            f"unknown operator {typ!r}{_did_you_mean([str(typ)], OPERATORS)}; known: {', '.join(sorted(OPERATORS))}",
        )
    publish = item.get("publish", [])
    if isinstance(publish, str) or not isinstance(publish, list) or not all(isinstance(t, str) for t in publish):
        raise _err(source, f"{where}.publish", "must be a list of topics")
    spec = OperatorSpec(typ, params, tuple(publish))
    try:
        spec.build()  # constructing an operator checks its parameters
    except (TypeError, ValueError) as exc:
        raise _err(source, where, f"bad parameters for {typ}: {exc}") from None
    return spec


_SCALARS: dict[str, type] = {
    "topic_prefix": str,
    "partitions": int,
    "replication": int,
    "retention_ms": int,
    "encoding": str,
    "framing": str,
    "guarantee": str,
    "batch_size": int,
    "batch_timeout_s": float,
    "commit_interval_s": float,
    "snapshots": bool,
    "snapshot_share": float,
    "snapshot_chunk_bytes": int,
    "event_time_skew_s": float,
    "event_time_hold_bytes": int,
    "otlp_out": str,
}


#: YAML 1.1's infinities and NaN, as a pipeline file writes them, for values given as text
_YAML_FLOATS = {".inf": "inf", "+.inf": "inf", "-.inf": "-inf", ".nan": "nan"}


def _coerce(source: str, key: str, value: object) -> Any:
    typ = _SCALARS[key]
    try:
        if typ is bool and isinstance(value, str):
            low = value.strip().lower()
            if low not in ("1", "0", "true", "false", "yes", "no"):
                raise ValueError(value)
            return low in ("1", "true", "yes")
        if typ is float and isinstance(value, str):  # YAML's spellings too: --set snapshot_share=.inf
            value = _YAML_FLOATS.get(value.strip().lower(), value)
        return typ(value)
    except (TypeError, ValueError):
        raise _err(source, key, f"expected {typ.__name__}, got {value!r}") from None


def _parse_stage(source: str, name: str, st: object) -> StageConfig:
    where = f"stages.{name}"
    if not isinstance(st, Mapping) or "input" not in st:
        raise _err(source, where, "a stage needs 'input' (a topic), 'operators' and, for samples, 'outputs'")
    unknown = set(st) - {"input", "outputs", "operators", "emit", "ingest"}
    if unknown:
        raise _err(source, where, f"unknown keys {sorted(unknown)}; a stage has input, operators, outputs, ingest")
    ops = tuple(
        _parse_operator(source, f"{where}.operators[{i}]", item) for i, item in enumerate(st.get("operators") or [])
    )
    for i, op in enumerate(ops[:-1]):
        if OPERATORS[op.type].role != "transform":
            raise _err(source, f"{where}.operators[{i}]", f"{op.type} emits records, so it must be the last operator")
    if ops and ops[-1].publish:
        raise _err(
            source,
            f"{where}.operators[{len(ops) - 1}].publish",
            "the last operator's output goes to the stage's outputs; list those topics there",
        )
    last = OPERATORS[ops[-1].type] if ops else None
    outputs = st.get("outputs", ["perf.raw"] if "ingest" in st and not ops else None)
    if outputs is None and last is not None and issubclass(last, Decider):
        outputs = [DEFAULT_TOPIC[last.output]]
    elif outputs is None and last is not None and issubclass(last, Router):
        outputs = [DEFAULT_TOPIC[kind] for kind in last.outputs if kind not in last.optional_outputs]
    if isinstance(outputs, str) or not isinstance(outputs, list) or not outputs:
        raise _err(source, where, "'outputs' must be a non-empty list of topics")
    try:
        ingest = parse_ingest(source, f"{where}.ingest", st["ingest"]) if "ingest" in st else None
    except IngestConfigError as exc:
        raise ConfigError(str(exc)) from None
    stage = StageConfig(name, str(st["input"]), tuple(map(str, outputs)), ops, ingest)
    if "emit" in st:  # optional: older files state what the last operator's role says
        said = _EMIT_ALIASES.get(str(st["emit"]), str(st["emit"]))
        role = stage.role
        does = role if last is None or not issubclass(last, Decider) else last.output
        if said not in (does, role):
            what = ops[-1].type if ops else "the stage"
            raise _err(
                source,
                f"{where}.emit",
                f"{st['emit']!r} does not match what {what} emits ({does}); 'emit' can be left out",
            )
    if last is not None and issubclass(last, Router):
        unknown_topics = [o for o in stage.outputs if kind_of(o) not in last.outputs]
        if unknown_topics:
            raise _err(
                source,
                f"{where}.outputs",
                f"{ops[-1].type} emits {', '.join(last.outputs)}; no such kind of output goes to {unknown_topics}",
            )
        missing = [kind for kind, topics in stage.routes.items() if not topics and kind not in last.optional_outputs]
        if missing:
            raise _err(
                source,
                f"{where}.outputs",
                f"no topic for the {', '.join(missing)} output of {ops[-1].type} "
                f"(e.g. {', '.join(DEFAULT_TOPIC[k] for k in missing)})",
            )
    return stage


def _kafka_section(source: str, section: object) -> dict[str, str]:
    """The ``kafka:`` mapping of librdkafka properties, values as librdkafka takes them (strings;
    YAML booleans as ``true``/``false``)."""
    if section is None:
        return {}
    if not isinstance(section, Mapping) or not all(
        isinstance(v, str | int | float | bool) and not isinstance(k, bool) for k, v in section.items()
    ):
        raise _err(source, "kafka", "a mapping of librdkafka properties to scalar values (e.g. linger.ms: 50)")
    return {str(k): (str(v).lower() if isinstance(v, bool) else str(v)) for k, v in section.items()}


def load_pipeline(
    path: str | Path | None = None, env: Mapping[str, str] | None = None, overrides: Mapping[str, Any] | None = None
) -> PipelineConfig:
    """Read a pipeline file (the packaged default when ``path`` is None), then apply ``PERFSIFT_*``
    environment variables and then ``overrides`` (CLI flags)."""
    p = Path(path) if path is not None else default_pipeline_path()
    source = str(p)
    try:
        doc = yaml.safe_load(p.read_text()) or {}
    except OSError as exc:
        raise ConfigError(f"{source}: cannot read: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{source}: not valid YAML: {exc}") from None
    if not isinstance(doc, Mapping):
        raise ConfigError(f"{source}: the top level must be a mapping")
    unknown = set(doc) - set(_SCALARS) - {"stages", "kafka", "limits", "schema_registry"}
    if unknown:
        known = sorted([*_SCALARS, "stages", "kafka", "limits", "schema_registry"])
        raise ConfigError(
            f"{source}: unknown settings {sorted(unknown)}{_did_you_mean(unknown, known)}; known: {known}"
        )
    values: dict[str, Any] = {k: _coerce(source, k, v) for k, v in doc.items() if k in _SCALARS}
    for key in _SCALARS:  # environment
        env_val = (env if env is not None else os.environ).get(f"PERFSIFT_{key.upper()}")
        if env_val is not None:
            values[key] = _coerce(f"$PERFSIFT_{key.upper()}", key, env_val)
    for key, val in (overrides or {}).items():  # command line
        if val is not None:
            values[key] = _coerce("command line", key, val)

    stages: dict[str, StageConfig] = {}
    raw_stages = doc.get("stages") or {}
    if not isinstance(raw_stages, Mapping):
        raise ConfigError(f"{source}: 'stages' must be a mapping of stage name -> stage")
    for name, st in raw_stages.items():
        stages[str(name)] = _parse_stage(source, str(name), st)
    try:
        limits = Limits.parse(doc.get("limits"), source)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    kafka = _kafka_section(source, doc.get("kafka"))
    if not isinstance(doc.get("schema_registry") or {}, Mapping):
        raise _err(source, "schema_registry", "a mapping of registry client settings (url, basic.auth.user.info, ...)")
    registry = registry_settings(doc.get("schema_registry"), env)
    if "otlp_out" in values:  # a topic, or true / false
        flag = values["otlp_out"].strip().lower()
        values["otlp_out"] = (
            OTLP_TOPIC if flag in ("true", "yes", "1") else "" if flag in ("false", "no", "0") else values["otlp_out"]
        )
    cfg = PipelineConfig(**values, kafka=kafka, limits=limits, schema_registry=registry, stages=stages, source=source)
    if cfg.guarantee not in GUARANTEES:
        raise ConfigError(f"{source}: guarantee must be one of {GUARANTEES}, got {cfg.guarantee!r}")
    if cfg.encoding not in ENCODINGS:
        raise ConfigError(f"{source}: encoding must be 'json', 'avro' or 'confluent-avro', got {cfg.encoding!r}")
    if WIRE_ENCODINGS[cfg.encoding].needs_registry and not registry.get("url"):
        raise ConfigError(f"{source}: encoding confluent-avro needs schema_registry.url (or PERFSIFT_SR_URL)")
    if cfg.framing not in FRAMINGS:
        raise ConfigError(f"{source}: framing must be 'columns' or 'records', got {cfg.framing!r}")
    if cfg.partitions < 1 or cfg.batch_size < 1:
        raise ConfigError(f"{source}: partitions and batch_size must be >= 1")
    if not cfg.snapshot_share > 0:  # NaN too
        raise ConfigError(
            f"{source}: snapshot_share must be > 0 (.inf: a snapshot at every commit), got {cfg.snapshot_share!r}"
        )
    if not cfg.event_time_skew_s >= 0:  # NaN too
        raise ConfigError(
            f"{source}: event_time_skew_s must be >= 0 (.inf: no alignment), got {cfg.event_time_skew_s!r}"
        )
    if cfg.event_time_hold_bytes < 0:
        raise ConfigError(f"{source}: event_time_hold_bytes must be >= 0, got {cfg.event_time_hold_bytes}")
    if cfg.snapshot_chunk_bytes < 1024:
        raise ConfigError(f"{source}: snapshot_chunk_bytes must be >= 1024, got {cfg.snapshot_chunk_bytes}")
    return cfg


def with_overrides(cfg: PipelineConfig, **changes: Any) -> PipelineConfig:
    return replace(cfg, **{k: v for k, v in changes.items() if v is not None})


def parse_pairs(
    items: list[str] | None,
    flag: str,
    form: str = "KEY=VALUE",
    allowed: Collection[str] | None = None,
    need_value: bool = False,
) -> dict[str, str]:
    """Repeated ``flag KEY=VALUE`` options -> dict, with an error naming the flag and the form.

    ``allowed`` restricts the keys; ``need_value`` refuses empty values (and strips them)."""
    out = {}
    for item in items or []:
        key, sep, val = item.partition("=")
        key = key.strip()
        if not sep or not key or (allowed is not None and key not in allowed) or (need_value and not val.strip()):
            hint = f" with KEY one of {', '.join(allowed)}" if allowed is not None else ""
            raise ConfigError(f"{flag} expects {form}{hint}; got {item!r}")
        out[key] = val.strip() if need_value else val
    return out


def parse_settings(items: list[str] | None) -> dict[str, str]:
    """``--set key=value`` flags -> overrides for :func:`load_pipeline` (names as in the YAML)."""
    return parse_pairs(items, "--set", allowed=_SCALARS)
