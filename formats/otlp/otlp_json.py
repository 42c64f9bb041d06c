"""``otlp_json`` without protobuf's JSON reflection: the request is read by orjson, and gauges and
sums of resources that name their node are walked as dicts (OTLP/JSON: lowerCamelCase keys, 64-bit
integers as strings, enums as names or numbers); every other metric is converted to the generated
class (``json_format.ParseDict``, per metric) and goes through :class:`~.otlp.OtlpWalker`, so both
give the same samples. A message whose structure is not a request is refused whole, before any of
its points is used.
"""

from __future__ import annotations

import math
from typing import Any

import orjson
from google.protobuf import json_format
from opentelemetry.proto.metrics.v1.metrics_pb2 import Metric
from perfsift.formats.assemble import IngestError
from perfsift.formats.otlp.otlp_in import NS, OtlpWalker, _per_second

CUMULATIVE_NAMES = (2, "AGGREGATION_TEMPORALITY_CUMULATIVE")
#: (time ns, series name, value, start time ns, 0 gauge | 1 cumulative counter | 2 delta counter)
Point = tuple[int, str, float, int, int]
_SPECIAL = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}


def _text(v: Any) -> str:
    """An AnyValue as text (stringValue, intValue, doubleValue, boolValue)."""
    if type(v) is not dict:
        return ""
    s = v.get("stringValue")
    if s is not None:
        return str(s)
    for key in ("intValue", "doubleValue", "boolValue"):
        if key in v:
            x = v[key]
            return str(x).lower() if key == "boolValue" else str(x)
    return ""


def _number(x: Any) -> float:
    if type(x) is str:
        return _SPECIAL[x] if x in _SPECIAL else float(x)
    return float(x)


class OtlpJsonReader:
    """Decodes one ``otlp_json`` message into the walker's assembler."""

    def __init__(self, walker: OtlpWalker) -> None:
        self.walker = walker
        self._names: dict[tuple[str, tuple[tuple[str, str], ...]], str] = {}

    def _name(self, base: str, attrs: list[Any]) -> str:
        pairs = tuple((str(a.get("key")), _text(a.get("value"))) for a in attrs)
        key = (base, pairs)
        name = self._names.get(key)
        if name is None:
            w = self.walker
            d = dict(pairs)
            keys = sorted(k for k in d if k not in w.skip) if w.select is None else [k for k in w.select if k in d]
            name = ".".join([base, *(d[k] for k in keys)])
            if len(self._names) < 100_000:
                self._names[key] = name
        return name

    def _plan(self, doc: Any) -> list[tuple[str | None, str, list[Any]]]:
        """(node, job, metrics) per resource; IngestError when the document is not a request."""
        w = self.walker
        if type(doc) is not dict:
            raise IngestError(f"not an OTLP ExportMetricsServiceRequest (JSON): a {type(doc).__name__}")
        plan = []
        for rm in doc.get("resourceMetrics") or []:
            res = {a["key"]: a.get("value") for a in (rm.get("resource") or {}).get("attributes") or []}
            node = next((_text(res[k]) for k in w.node_keys if k in res), None)
            job = _text(res[w.job_key]) if w.job_key and w.job_key in res else w.job_default
            metrics = [m for sm in rm.get("scopeMetrics") or [] for m in sm.get("metrics") or []]
            for m in metrics:
                if type(m) is not dict:
                    raise TypeError("a metric is an object")
            plan.append((node, job, metrics))
        return plan

    def __call__(self, value: bytes, key: bytes | None = None, when: float = 0.0) -> None:
        try:
            doc = orjson.loads(value)
            plan = self._plan(doc)
            # the odd metrics as generated classes first: a bad one refuses the message before any point
            slow = [
                (node, job, json_format.ParseDict(m, Metric(), ignore_unknown_fields=True))
                for node, job, metrics in plan
                for m in metrics
                if node is None or not ("gauge" in m or "sum" in m)
            ]
            fast = [
                self._points(node, job, m)
                for node, job, metrics in plan
                for m in metrics
                if node is not None and ("gauge" in m or "sum" in m)
            ]
        except IngestError:
            raise
        except (orjson.JSONDecodeError, json_format.ParseError, KeyError, TypeError, ValueError, AttributeError) as exc:
            raise IngestError(f"not an OTLP ExportMetricsServiceRequest (JSON): {str(exc)[:300]}") from None
        asm = self.walker.asm
        for node, job, metric in slow:
            self.walker._metric(metric, job, node, asm)
        for job, node, points in fast:
            for t, name, v, start, how in points:
                row = asm.row(job, node, t * NS)
                if row is None:
                    continue
                if how == 1:
                    row[name] = asm.rate(job, node, name, t * NS, v, start * NS)
                elif how == 2:
                    row[name] = _per_second(v, t * NS, start * NS)
                else:
                    row[name] = v
            asm.points += len(points)

    def _points(
        self, node: str, job: str, m: dict[str, Any]
    ) -> tuple[str, str, list[tuple[int, str, float, int, int]]]:
        """The points of a gauge or sum: (time ns, name, value, start ns, 0 gauge | 1 rate | 2 delta)."""
        data = m["gauge"] if "gauge" in m else m["sum"]
        how = 0
        if "sum" in m and data.get("isMonotonic") and self.walker.rates:
            how = 1 if data.get("aggregationTemporality") in CUMULATIVE_NAMES else 2
        base = str(m.get("name", ""))
        out = []
        for dp in data.get("dataPoints") or []:
            v = _number(dp["asDouble"]) if "asDouble" in dp else float(int(dp.get("asInt", 0)))
            if not math.isfinite(v):
                continue
            attrs = dp.get("attributes")
            name = self._name(base, attrs) if attrs else base
            out.append((int(dp.get("timeUnixNano", 0)), name, v, int(dp.get("startTimeUnixNano", 0)), how))
        return job, node, out
