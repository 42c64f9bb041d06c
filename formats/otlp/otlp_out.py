"""perfsift's results as OTLP protobuf metrics (``otlp_out``): one
``ExportMetricsServiceRequest`` per Kafka message, as the OpenTelemetry Collector's Kafka receiver
reads them with ``encoding: otlp_proto``.

Each batch a stage emits becomes one request per resource, the (job, node) of the records:
resource attributes ``service.name`` = job and ``host.name`` = node (left out for the node ``*``
of a prediction over a whole job). Every value is a gauge data point at the record's time; a null
value gives no point. Names (documented in docs/pipeline.md, OTLP out):

=================  =========================================================  ===================
record             gauges                                                     point attributes
=================  =========================================================  ===================
perf.reduced       ``perfsift.reduced.<metric>`` (each metric of the record)  --
perf.forecast      ``perfsift.forecast``, ``.lower``, ``.upper``, ``.sigma``, ``metric``
                   ``.mae_forecast``, ``.lower_mae``, ``.upper_mae``, ``.mae``
perf.contract      ``perfsift.contract.violation``, ``.violation.smoothed``,  (``space`` on
                   ``.violated`` (1 violated, 0 ok; none when unknown),       ``.space.violation``)
                   ``perfsift.contract.space.violation``
perf.prediction    ``perfsift.prediction.mean``, ``.lower``, ``.upper``,       ``model``, ``output``
                   ``.sigma``, ``.observed``, ``.violation``
=================  =========================================================  ===================
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, InstrumentationScope, KeyValue
from opentelemetry.proto.metrics.v1.metrics_pb2 import Metric, ResourceMetrics, ScopeMetrics
from opentelemetry.proto.resource.v1.resource_pb2 import Resource
from perfsift.schemas.forecast_wire import complete_forecast
from perfsift.schemas.kinds import KINDS as RECORD_KINDS

#: the kinds of record that have an OTLP form (``otlp=True`` in the kinds' table; each has its
#: mapping in :data:`POINTS`)
KINDS = tuple(k.name for k in RECORD_KINDS.values() if k.otlp)
SCOPE = InstrumentationScope(name="perfsift")
_BOUNDS = (
    ("forecast", ""),
    ("lower", ".lower"),
    ("upper", ".upper"),
    ("sigma", ".sigma"),
    ("mae_forecast", ".mae_forecast"),
    ("lower_mae", ".lower_mae"),
    ("upper_mae", ".upper_mae"),
    ("mae", ".mae"),
)
_PREDICTED = ("mean", "lower", "upper", "sigma", "observed", "violation")

#: one gauge point: (gauge name, point attributes, seconds, value)
Point = tuple[str, tuple[tuple[str, str], ...], float, float]


def _number(v: Any) -> bool:
    return (type(v) is float or type(v) is int) and v == v


def _reduced(rec: dict[str, Any], ts: float) -> list[Point]:
    return [(f"perfsift.reduced.{m}", (), ts, float(v)) for m, v in rec["metrics"].items() if _number(v)]


def _forecast(rec: dict[str, Any], ts: float) -> list[Point]:
    attrs: tuple[tuple[str, str], ...] = (("metric", str(rec["metric"])),)
    rec = complete_forecast(dict(rec))  # a record as written lacks its bounds (schemas/forecast_wire.py)
    return [(f"perfsift.forecast{suffix}", attrs, ts, float(rec[f])) for f, suffix in _BOUNDS if _number(rec.get(f))]


def _contract(rec: dict[str, Any], ts: float) -> list[Point]:
    out: list[Point] = []
    if _number(rec.get("violation")):
        out.append(("perfsift.contract.violation", (), ts, float(rec["violation"])))
    if _number(rec.get("smoothed")):
        out.append(("perfsift.contract.violation.smoothed", (), ts, float(rec["smoothed"])))
    if rec.get("state") in ("ok", "violated"):
        out.append(("perfsift.contract.violated", (), ts, 1.0 if rec["state"] == "violated" else 0.0))
    for space, ev in (rec.get("spaces") or {}).items():
        if isinstance(ev, dict) and _number(ev.get("violation")):
            out.append(("perfsift.contract.space.violation", (("space", str(space)),), ts, float(ev["violation"])))
    return out


def _prediction(rec: dict[str, Any], ts: float) -> list[Point]:
    attrs = (("model", str(rec["model"])), ("output", str(rec["output"])))
    return [(f"perfsift.prediction.{f}", attrs, ts, float(rec[f])) for f in _PREDICTED if _number(rec.get(f))]


#: the gauge points of one record (and its time in seconds), per kind of record
POINTS: dict[str, Callable[[dict[str, Any], float], list[Point]]] = {
    "reduced": _reduced,
    "forecast": _forecast,
    "contract": _contract,
    "prediction": _prediction,
}


def points(kind: str, rec: dict[str, Any]) -> list[Point]:
    """The gauge points of one record of ``kind`` (see the module docstring)."""
    if kind not in KINDS:
        raise ValueError(f"no OTLP form for {kind!r} records; known: {', '.join(KINDS)}")
    return POINTS[kind](rec, float(rec["ts"]))


def _kv(key: str, value: str) -> KeyValue:
    return KeyValue(key=key, value=AnyValue(string_value=value))


def _gauge(name: str) -> tuple[Metric, Any]:
    metric = Metric(name=name)
    return metric, metric.gauge.data_points


def to_requests(kind: str, records: Iterable[dict[str, Any]]) -> tuple[list[bytes], list[bytes]]:
    """Records of ``kind`` as serialised ``ExportMetricsServiceRequest`` messages, one per (job,
    node) in the order they first appear, and their message keys (the node).

    One ``Metric`` per gauge name and resource collects the points of every record; a reduced
    record's values go straight into their gauges (the hot path: bench/bench_encodings.py), the
    other kinds through :func:`points`."""
    if kind not in KINDS:
        raise ValueError(f"no OTLP form for {kind!r} records; known: {', '.join(KINDS)}")
    #: per resource: gauge name -> its Metric and the Metric's point list (in order of appearance)
    to_points = POINTS[kind]
    by_resource: dict[tuple[str, str], dict[str, tuple[Metric, Any]]] = {}
    names: dict[str, str] = {}  # reduced: metric -> gauge name
    labels: dict[tuple[tuple[str, str], ...], list[KeyValue]] = {}
    for rec in records:
        res = (str(rec.get("job", "default")), str(rec["node"]))
        gauges = by_resource.get(res)
        if gauges is None:
            gauges = by_resource[res] = {}
        if kind == "reduced":
            t = round(float(rec["ts"]) * 1e9)
            for m, v in rec["metrics"].items():
                if v is None or v != v:
                    continue
                name = names.get(m)
                if name is None:
                    name = names[m] = f"perfsift.reduced.{m}"
                gauge = gauges.get(name)
                if gauge is None:
                    gauge = gauges[name] = _gauge(name)
                gauge[1].add(time_unix_nano=t, as_double=v)
            continue
        for name, attrs, ts, value in to_points(rec, float(rec["ts"])):
            gauge = gauges.get(name)
            if gauge is None:
                gauge = gauges[name] = _gauge(name)
            kvs = labels.get(attrs)
            if kvs is None:
                kvs = labels[attrs] = [_kv(k, v) for k, v in attrs]
            gauge[1].add(time_unix_nano=round(ts * 1e9), as_double=value, attributes=kvs)
    values, keys = [], []
    for (job, node), gauges in by_resource.items():
        if not gauges:
            continue
        attributes = [_kv("service.name", job)] + ([_kv("host.name", node)] if node != "*" else [])
        rm = ResourceMetrics(
            resource=Resource(attributes=attributes),
            scope_metrics=[ScopeMetrics(scope=SCOPE, metrics=[m for m, _ in gauges.values()])],
        )
        values.append(ExportMetricsServiceRequest(resource_metrics=[rm]).SerializeToString())
        keys.append(node.encode())
    return values, keys
