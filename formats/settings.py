"""What an ingest stage reads and how long records map onto perfsift samples.

An ingest stage turns *long* records (one series, or one metric set, per message: OTLP, Telegraf,
LDMS, Prometheus) into *wide* samples ``{ts, node, job, metrics}``. :class:`IngestMap` says where
the node and the job come from and how a series becomes a metric name; every format has defaults
(:data:`DEFAULT_MAPS`), and a ``--map FILE`` (YAML) overrides any of them::

    node: [host.name, host]          # the first of these attributes present (resource, then point)
    job: service.name                # an attribute naming the job; null: every sample in job_default
    job_default: default
    attributes: [state, direction]   # point attributes appended to the series name (default: all
                                     #   but node and job, in key order); null = all
    quantiles: [0.5, 0.9, 0.99]      # of histograms and summaries, as <name>.p50 ...
    rates: true                      # cumulative counters become per-second rates
    align: 0                         # seconds: timestamps floored to a multiple (0 = exact)
    rename: {system.cpu.time.user: cpu_user}
    include: ["system.*"]            # metric names kept (fnmatch patterns; default: all)
    exclude: ["*.p99"]               # (prometheus_text and remote_write exclude info and
                                     #   exporter self-metrics by default; [] keeps everything)
    prefix: "collectd."              # graphite only: stripped before <host><postfix>.<metric>
    postfix: ""
"""

from __future__ import annotations

import fnmatch
import functools
import hashlib
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import orjson
import yaml

FORMATS = (
    "otlp_proto",
    "otlp_json",
    "telegraf_json",
    "influx_line",
    "ldms_json",
    "prometheus_text",
    "remote_write",
    "collectd_json",
    "graphite",
    "perfsift",
)
#: exporters' metrics about themselves and info metrics (constant 1, information in labels): not
#: metrics to compare nodes by; the default ``exclude`` of the Prometheus formats
PROMETHEUS_EXCLUDE = ("*_info", "*_info{*", "go_*", "process_*", "promhttp_*", "node_scrape_collector_*")


class IngestConfigError(ValueError):
    """An ingest setting or mapping file is invalid; the message names the place."""


@dataclass(frozen=True)
class IngestMap:
    """How a format's series map onto samples (see the module docstring)."""

    node: tuple[str, ...] = ("host.name", "host", "instance", "service.instance.id")
    job: str | None = "service.name"
    job_default: str = "default"
    #: point attributes appended to a series name, in this order; None = all (but node/job), sorted
    attributes: tuple[str, ...] | None = None
    quantiles: tuple[float, ...] = (0.5, 0.9, 0.99)
    rates: bool = True
    align: float = 0.0
    rename: Mapping[str, str] = field(default_factory=dict)
    include: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()
    #: graphite: stripped from the front of a path, and from the end of its host
    prefix: str = ""
    postfix: str = ""

    def keep(self, name: str) -> bool:
        """Whether a metric name passes ``include`` and ``exclude``."""
        return _keep(self.include, self.exclude, name)

    @property
    def filters(self) -> bool:
        return bool(self.include or self.exclude or self.rename)


@functools.lru_cache(maxsize=65536)
def _keep(include: tuple[str, ...], exclude: tuple[str, ...], name: str) -> bool:
    if include and not any(fnmatch.fnmatchcase(name, p) for p in include):
        return False
    return not any(fnmatch.fnmatchcase(name, p) for p in exclude)


#: the mapping each format starts from
DEFAULT_MAPS: dict[str, IngestMap] = {
    "otlp_proto": IngestMap(),
    "otlp_json": IngestMap(),
    "telegraf_json": IngestMap(node=("host",), job=None),
    "ldms_json": IngestMap(node=("ProducerName", "producer", "component_id"), job=None),
    "influx_line": IngestMap(node=("host",), job=None),
    "prometheus_text": IngestMap(node=("instance", "host"), job=None, exclude=PROMETHEUS_EXCLUDE),
    # Prometheus' synthetic series of every target (up, scrape_duration_seconds, ...) go too
    "remote_write": IngestMap(node=("instance",), job="job", exclude=(*PROMETHEUS_EXCLUDE, "scrape_*")),
    "collectd_json": IngestMap(node=("host",), job=None, align=1.0),
    "graphite": IngestMap(node=("host",), job=None),
    "perfsift": IngestMap(),
}

_MAP_KEYS = {f for f in IngestMap.__dataclass_fields__}


def _strings(where: str, value: object) -> tuple[str, ...]:
    if isinstance(value, str):
        return (value,)
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise IngestConfigError(f"{where}: expected a name or a list of names, got {value!r:.80}")
    return tuple(value)


def parse_map(fmt: str, doc: object, source: str = "--map") -> IngestMap:
    """The format's default mapping with the keys of ``doc`` (a parsed YAML mapping) over it."""
    base = DEFAULT_MAPS[fmt]
    if doc is None:
        return base
    if not isinstance(doc, Mapping):
        raise IngestConfigError(f"{source}: a mapping of {', '.join(sorted(_MAP_KEYS))}")
    unknown = set(doc) - _MAP_KEYS
    if unknown:
        raise IngestConfigError(f"{source}: unknown keys {sorted(map(str, unknown))}; known: {sorted(_MAP_KEYS)}")
    ch: dict[str, Any] = {}
    for key, value in doc.items():
        where = f"{source}: {key}"
        if key in ("node", "include", "exclude"):
            ch[key] = _strings(where, value)
        elif key == "attributes":
            ch[key] = None if value is None else _strings(where, value)
        elif key == "job":
            if value is not None and not isinstance(value, str):
                raise IngestConfigError(f"{where}: an attribute name or null")
            ch[key] = value
        elif key == "job_default":
            if not isinstance(value, str) or not value:
                raise IngestConfigError(f"{where}: a non-empty name")
            ch[key] = value
        elif key == "quantiles":
            if not isinstance(value, list) or not all(
                isinstance(q, int | float) and not isinstance(q, bool) and 0 <= q <= 1 for q in value
            ):
                raise IngestConfigError(f"{where}: a list of numbers in [0, 1]")
            ch[key] = tuple(float(q) for q in value)
        elif key == "rates":
            if not isinstance(value, bool):
                raise IngestConfigError(f"{where}: true or false")
            ch[key] = value
        elif key == "align":
            if not isinstance(value, int | float) or isinstance(value, bool) or value < 0:
                raise IngestConfigError(f"{where}: seconds >= 0")
            ch[key] = float(value)
        elif key == "rename":
            if not isinstance(value, Mapping) or not all(isinstance(v, str) for v in value.values()):
                raise IngestConfigError(f"{where}: a mapping of metric name -> new name")
            twice = sorted({v for v in value.values() if list(value.values()).count(v) > 1})
            if twice:  # two series would collapse into one name
                raise IngestConfigError(f"{where}: several names renamed to {', '.join(map(repr, twice))}")
            ch[key] = {str(k): v for k, v in value.items()}
        elif key in ("prefix", "postfix"):
            if not isinstance(value, str):
                raise IngestConfigError(f"{where}: a string")
            ch[key] = value
    if "node" in ch and not ch["node"]:
        raise IngestConfigError(f"{source}: node: at least one attribute")
    return replace(base, **ch)


def load_map(fmt: str, path: str | Path | None) -> IngestMap:
    """The mapping of ``fmt`` with the YAML file ``path`` (if any) over its defaults."""
    if path is None:
        return DEFAULT_MAPS[fmt]
    try:
        doc = yaml.safe_load(Path(path).read_text())
    except OSError as exc:
        raise IngestConfigError(f"{path}: cannot read: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        raise IngestConfigError(f"{path}: not valid YAML: {exc}") from None
    return parse_map(fmt, doc, str(path))


@dataclass(frozen=True)
class IngestSettings:
    """An ingest stage: the input format, the mapping and the bounded lateness (wall-clock seconds
    from a sample's first point to its emission)."""

    format: str
    map: IngestMap
    max_delay: float = 5.0

    def __post_init__(self) -> None:
        if self.format not in FORMATS:
            raise IngestConfigError(f"unknown format {self.format!r}; known: {', '.join(FORMATS)}")
        if not self.max_delay >= 0:
            raise IngestConfigError(f"max_delay must be >= 0 seconds, got {self.max_delay!r}")

    def fingerprint(self) -> str:
        """Key of the state (pending samples, counters) these settings make."""
        doc = {"format": self.format, "map": asdict(self.map)}
        return "ingest:" + hashlib.sha1(orjson.dumps(doc, option=orjson.OPT_SORT_KEYS)).hexdigest()[:12]


def parse_ingest(source: str, where: str, doc: object) -> IngestSettings:
    """A pipeline file's ``ingest:`` section of a stage: ``{format, map (file or mapping), max_delay}``."""
    if not isinstance(doc, Mapping) or "format" not in doc:
        raise IngestConfigError(
            f"{source}: {where}: a mapping with 'format' ({', '.join(FORMATS)}), "
            "optional 'map' (a file or a mapping) and 'max_delay' (seconds)"
        )
    unknown = set(doc) - {"format", "map", "max_delay"}
    if unknown:
        raise IngestConfigError(f"{source}: {where}: unknown keys {sorted(map(str, unknown))}")
    fmt = str(doc["format"])
    if fmt not in FORMATS:
        raise IngestConfigError(f"{source}: {where}.format: {fmt!r} is not one of {', '.join(FORMATS)}")
    m = doc.get("map")
    mapping = load_map(fmt, m) if isinstance(m, str) else parse_map(fmt, m, f"{source}: {where}.map")
    delay = doc.get("max_delay", 5.0)
    if not isinstance(delay, int | float) or isinstance(delay, bool) or delay < 0:
        raise IngestConfigError(f"{source}: {where}.max_delay: seconds >= 0, got {delay!r}")
    return IngestSettings(fmt, mapping, float(delay))
