"""Pipeline configuration (YAML) and Kafka client properties.

Precedence, lowest first: built-in defaults < pipeline YAML < environment (``PERFSIFT_*``;
librdkafka properties as ``PERFSIFT_KAFKA_<PROPERTY>`` with dots written as underscores, e.g.
``PERFSIFT_KAFKA_SASL_MECHANISM=SCRAM-SHA-512``) < command-line flags.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field, replace
from importlib import resources
from pathlib import Path
from typing import Any

import yaml
from perfsift.operators import ContractMonitor, Ewma, ForecastBank, Operator, SlidingMean
from perfsift.operators.clean import Clean
from perfsift.operators.contract import contract_records
from perfsift.operators.forecast import PRIMARIES, forecast_records
from perfsift.operators.predict import ModelPredictor
from perfsift.operators.pursuit import ProjectionPursuit
from perfsift.operators.reduce import Reduce
from perfsift.operators.selection import DataReduction
from perfsift.schemas.serde import encode_forecasts

#: operator names usable in a pipeline file -> class
OPERATORS: dict[str, type[Operator]] = {
    "sliding_mean": SlidingMean,
    "ewma": Ewma,
    "forecast": ForecastBank,
    "contract": ContractMonitor,
    "data_reduction": DataReduction,
    "pursuit": ProjectionPursuit,
    "clean": Clean,
    "reduce": Reduce,
    "predict": ModelPredictor,
}

#: what a stage publishes: the record schema, how to turn the chain's output into records (None =
#: samples, encoded column-wise) and the record field that keys the Kafka message
EMITTERS: dict[str, tuple[str, Callable[[Any], list[dict[str, Any]]] | None, str]] = {
    "samples": ("sample", None, "node"),
    "contract": ("contract", contract_records, "node"),
    "forecast": ("forecast", forecast_records, "node"),
    "selection": ("selection", list, "job"),  # DataReduction and ProjectionPursuit return selection records
    "prediction": ("prediction", list, "job"),  # ModelPredictor returns perf.prediction records
    # the reduce operator returns {topic: records or batches}; each goes out with its topic's schema and key
    "routed": ("", None, ""),
}

#: column-wise JSON for an emitter's records (encoded, keys): the same bytes as encoding the
#: records that EMITTERS makes, without a dict per record
JSON_ENCODERS: dict[str, Callable[[Any], tuple[list[bytes], list[bytes]]]] = {
    "forecast": lambda out: encode_forecasts(out, PRIMARIES),
}

GUARANTEES = ("auto", "at_least_once", "exactly_once")


class ConfigError(ValueError):
    """The pipeline file or a setting is invalid; the message names the place."""


@dataclass(frozen=True)
class OperatorSpec:
    type: str
    params: dict[str, Any]
    #: topics that also get this operator's output batch (a tap on an intermediate result, e.g.
    #: perf.clean from a stage that cleans and smooths); never the last operator (that is `outputs`)
    publish: tuple[str, ...] = ()

    def build(self) -> Operator:
        cls = OPERATORS[self.type]
        return cls(**self.params)


@dataclass(frozen=True)
class StageConfig:
    name: str
    input: str
    outputs: tuple[str, ...]
    operators: tuple[OperatorSpec, ...]
    emit: str = "samples"

    def build_chain(self) -> list[Operator]:
        return [spec.build() for spec in self.operators]

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
    guarantee: str = "auto"
    batch_size: int = 5000
    batch_timeout_s: float = 0.1
    commit_interval_s: float = 1.0
    snapshots: bool = True
    stages: dict[str, StageConfig] = field(default_factory=dict)
    source: str = "<defaults>"

    def topic(self, name: str) -> str:
        """Full topic name with the configured prefix."""
        return f"{self.topic_prefix}{name}"

    def stage(self, name: str) -> StageConfig:
        try:
            return self.stages[name]
        except KeyError:
            raise ConfigError(
                f"{self.source}: no stage {name!r}; stages are: {', '.join(self.stages) or '(none)'}"
            ) from None


def default_pipeline_path() -> Path:
    return Path(str(resources.files("perfsift.streams").joinpath("pipeline.yaml")))


def _err(source: str, where: str, msg: str) -> ConfigError:
    return ConfigError(f"{source}: {where}: {msg}")


def _parse_operator(source: str, where: str, item: object) -> OperatorSpec:
    if not isinstance(item, Mapping) or "type" not in item:
        raise _err(source, where, "an operator is a mapping with a 'type' and its parameters")
    params = {k: v for k, v in item.items() if k not in ("type", "publish")}
    typ = item["type"]
    if typ not in OPERATORS:
        raise _err(source, where, f"unknown operator {typ!r}; known: {', '.join(sorted(OPERATORS))}")
    publish = item.get("publish", [])
    if isinstance(publish, str) or not isinstance(publish, list) or not all(isinstance(t, str) for t in publish):
        raise _err(source, f"{where}.publish", "must be a list of topics")
    spec = OperatorSpec(typ, params, tuple(publish))
    try:
        spec.build().reset()
    except (TypeError, ValueError) as exc:
        raise _err(source, where, f"bad parameters for {typ}: {exc}") from None
    return spec


_SCALARS: dict[str, type] = {
    "topic_prefix": str,
    "partitions": int,
    "replication": int,
    "retention_ms": int,
    "encoding": str,
    "guarantee": str,
    "batch_size": int,
    "batch_timeout_s": float,
    "commit_interval_s": float,
    "snapshots": bool,
}


def _coerce(source: str, key: str, value: object) -> Any:
    typ = _SCALARS[key]
    try:
        if typ is bool and isinstance(value, str):
            low = value.strip().lower()
            if low not in ("1", "0", "true", "false", "yes", "no"):
                raise ValueError(value)
            return low in ("1", "true", "yes")
        return typ(value)
    except (TypeError, ValueError):
        raise _err(source, key, f"expected {typ.__name__}, got {value!r}") from None


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
    unknown = set(doc) - set(_SCALARS) - {"stages"}
    if unknown:
        raise ConfigError(f"{source}: unknown settings {sorted(unknown)}; known: {sorted([*_SCALARS, 'stages'])}")
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
        where = f"stages.{name}"
        if not isinstance(st, Mapping) or "input" not in st or "outputs" not in st:
            raise _err(source, where, "a stage needs 'input' (a topic) and 'outputs' (a list of topics)")
        outputs = st["outputs"]
        if isinstance(outputs, str) or not isinstance(outputs, list) or not outputs:
            raise _err(source, where, "'outputs' must be a non-empty list of topics")
        ops = tuple(
            _parse_operator(source, f"{where}.operators[{i}]", item) for i, item in enumerate(st.get("operators") or [])
        )
        if ops and ops[-1].publish:
            raise _err(
                source,
                f"{where}.operators[{len(ops) - 1}].publish",
                "the last operator's output goes to the stage's outputs; list those topics there",
            )
        emit = str(st.get("emit", "samples"))
        if emit not in EMITTERS:
            raise _err(source, f"{where}.emit", f"unknown output kind {emit!r}; known: {', '.join(EMITTERS)}")
        if emit == "routed":
            from perfsift.streams.topics import TOPICS

            not_topics = [o for o in map(str, outputs) if o not in TOPICS]
            if not_topics:
                raise _err(source, f"{where}.outputs", f"routed outputs must be pipeline topics; unknown: {not_topics}")
        stages[name] = StageConfig(name, str(st["input"]), tuple(map(str, outputs)), ops, emit)
    cfg = PipelineConfig(**values, stages=stages, source=source)
    if cfg.guarantee not in GUARANTEES:
        raise ConfigError(f"{source}: guarantee must be one of {GUARANTEES}, got {cfg.guarantee!r}")
    if cfg.encoding not in ("json", "avro"):
        raise ConfigError(f"{source}: encoding must be 'json' or 'avro', got {cfg.encoding!r}")
    if cfg.partitions < 1 or cfg.batch_size < 1:
        raise ConfigError(f"{source}: partitions and batch_size must be >= 1")
    return cfg


def with_overrides(cfg: PipelineConfig, **changes: Any) -> PipelineConfig:
    return replace(cfg, **{k: v for k, v in changes.items() if v is not None})


def kafka_properties(
    bootstrap: str, extra: Mapping[str, str] | None = None, env: Mapping[str, str] | None = None
) -> dict[str, str]:
    """librdkafka client properties: bootstrap, then ``PERFSIFT_KAFKA_*`` variables, then ``extra``
    (``--kafka-prop key=value`` flags). SASL/TLS settings go here (``security.protocol``,
    ``sasl.mechanism``, ``sasl.username``, ...)."""
    props = {"bootstrap.servers": bootstrap}
    for key, val in (env if env is not None else os.environ).items():
        if key.startswith("PERFSIFT_KAFKA_"):
            props[key[len("PERFSIFT_KAFKA_") :].lower().replace("_", ".")] = val
    props.update(extra or {})
    return props


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


def parse_props(items: list[str] | None) -> dict[str, str]:
    """``-X a.b=1`` flags -> librdkafka properties ``{"a.b": "1"}``."""
    return parse_pairs(items, "--kafka-prop", form="key=value")
