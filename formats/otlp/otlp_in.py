"""OTLP metrics (``ExportMetricsServiceRequest``, as the Collector's Kafka exporter writes one per
message with ``encoding: otlp_proto`` or ``otlp_json``) into an :class:`Assembler`.

- node: the first of the mapping's ``node`` attributes on the resource, else on the data point;
  job: the ``job`` attribute of the resource (default ``service.name``), else ``job_default``.
- metric name: the metric's name, then the values of the point's attributes (all but node and
  job, in key order, or those the mapping lists), joined by dots: ``system.cpu.time{cpu=cpu0,
  state=user}`` -> ``system.cpu.time.cpu0.user``.
- gauges and non-monotonic sums: the value. Monotonic sums: cumulative ones become per-second
  rates from consecutive points (as the clean operator treats counters), delta ones value /
  interval; with ``rates: false`` the value as it is.
- histograms: ``<name>.count`` and ``<name>.sum`` as monotonic sums, and ``<name>.p50`` ... the
  chosen quantiles, interpolated in the buckets (as Prometheus' ``histogram_quantile``) of the
  counts since the previous point (cumulative) or of the point (delta). Exponential histograms:
  count and sum. Summaries: count, sum and the quantiles they carry.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

from google.protobuf import json_format
from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest
from perfsift.formats.assemble import Assembler, IngestError

CUMULATIVE = 2  # AggregationTemporality.AGGREGATION_TEMPORALITY_CUMULATIVE
NS = 1e-9


def quantile_label(q: float) -> str:
    """``0.5`` -> ``p50``, ``0.999`` -> ``p99.9``."""
    return f"p{q * 100:g}"


def bucket_quantile(q: float, bounds: Sequence[float], counts: Sequence[int]) -> float | None:
    """The q-quantile of explicit-bucket counts (``counts[i]`` in ``(bounds[i-1], bounds[i]]``, the
    last bucket unbounded), interpolated linearly within its bucket as Prometheus does; None
    without observations."""
    total = sum(counts)
    if total <= 0 or not counts:
        return None
    rank = q * total
    seen = 0.0
    for i, c in enumerate(counts):
        if c and seen + c >= rank:
            if i >= len(bounds):  # the overflow bucket: its lower bound
                return float(bounds[-1]) if bounds else None
            hi = float(bounds[i])
            lo = float(bounds[i - 1]) if i > 0 else (0.0 if hi > 0 else hi)
            return lo + (hi - lo) * (rank - seen) / c
        seen += c
    return float(bounds[-1]) if bounds else None


def anyvalue(av: Any) -> str:
    s = av.string_value
    if s:
        return str(s)
    which = av.WhichOneof("value")
    return str(getattr(av, which)) if which else ""


class OtlpWalker:
    """Turns a parsed request into points of an assembler (one walker per mapping)."""

    def __init__(self, asm: Assembler) -> None:
        self.asm = asm
        m = asm.map
        self.node_keys = m.node
        self.job_key = m.job
        self.job_default = m.job_default
        self.skip = {*m.node, *([m.job] if m.job else [])}
        self.select = m.attributes
        self.quantiles = m.quantiles
        self.rates = m.rates
        self._names: dict[tuple[str, tuple[tuple[str, str], ...]], str] = {}

    def _name(self, base: str, attrs: Sequence[Any]) -> str:
        pairs = tuple([(kv.key, kv.value.string_value) for kv in attrs])
        key = (base, pairs)
        name = self._names.get(key)
        if name is None:
            d = {kv.key: anyvalue(kv.value) for kv in attrs}  # non-string values too
            sel = self.select
            keys = sorted(k for k in d if k not in self.skip) if sel is None else [k for k in sel if k in d]
            name = ".".join([base, *(d[k] for k in keys)])
            if all(v for _, v in pairs) and len(self._names) < 100_000:  # string attributes: a safe key
                self._names[key] = name
        return name

    def _node_of_point(self, attrs: Sequence[Any]) -> str | None:
        for kv in attrs:
            if kv.key in self.node_keys:
                return anyvalue(kv.value)
        return None

    def walk(self, req: Any) -> None:
        asm = self.asm
        row_of = asm.row
        name_of = self._name
        rates = self.rates
        for rm in req.resource_metrics:
            res = {kv.key: kv.value for kv in rm.resource.attributes}
            node = next((anyvalue(res[k]) for k in self.node_keys if k in res), None)
            job = anyvalue(res[self.job_key]) if self.job_key and self.job_key in res else self.job_default
            last_t, row = -1, None
            for sm in rm.scope_metrics:
                for metric in sm.metrics:
                    kind = metric.WhichOneof("data")
                    if node is None or (kind != "gauge" and kind != "sum"):
                        self._metric(metric, job, node, asm)
                        continue
                    # the common case, inline: gauges and sums of a resource that names its node
                    data = metric.gauge if kind == "gauge" else metric.sum
                    if kind == "sum" and data.is_monotonic and rates:
                        self._metric(metric, job, node, asm)
                        continue
                    base = metric.name
                    n = 0
                    for dp in data.data_points:
                        n += 1
                        t = dp.time_unix_nano
                        if t != last_t:  # one collection: usually one time for all
                            row, last_t = row_of(job, node, t * NS), t
                        if row is None:
                            continue
                        v = dp.as_double or dp.as_int
                        if v - v == 0:  # finite
                            row[name_of(base, dp.attributes) if len(dp.attributes) else base] = v
                    asm.points += n

    def _target(self, job: str, node: str | None, dp: Any) -> tuple[str, dict[str, float | None]] | None:
        """(node, row) of a data point, or None (unmapped or late; counted)."""
        if node is None:
            node = self._node_of_point(dp.attributes)
            if node is None:
                self.asm.unmapped_point(1, f"no node attribute ({', '.join(self.node_keys)}) on the resource or point")
                return None
        row = self.asm.row(job, node, dp.time_unix_nano * NS)
        return None if row is None else (node, row)

    def _metric(self, metric: Any, job: str, node: str | None, asm: Assembler) -> None:
        kind = metric.WhichOneof("data")
        base = metric.name
        if kind == "gauge" or kind == "sum":
            data = metric.gauge if kind == "gauge" else metric.sum
            counter = kind == "sum" and data.is_monotonic and self.rates
            cumulative = counter and data.aggregation_temporality == CUMULATIVE
            for dp in data.data_points:
                name = self._name(base, dp.attributes) if dp.attributes else base
                t = self._target(job, node, dp)
                if t is None:
                    continue
                v = float(dp.as_double or dp.as_int)
                if not math.isfinite(v):
                    continue
                if counter:
                    ts = dp.time_unix_nano * NS
                    start = dp.start_time_unix_nano * NS
                    t[1][name] = asm.rate(job, t[0], name, ts, v, start) if cumulative else _per_second(v, ts, start)
                else:
                    t[1][name] = v
            asm.points += len(data.data_points)
        elif kind in ("histogram", "exponential_histogram", "summary"):
            data = getattr(metric, kind)
            cumulative = kind == "summary" or data.aggregation_temporality == CUMULATIVE
            for dp in data.data_points:
                name = self._name(base, dp.attributes) if dp.attributes else base
                t = self._target(job, node, dp)
                if t is None:
                    continue
                self._distribution(kind, name, dp, job, t, cumulative)
            asm.points += len(data.data_points)

    def _distribution(
        self, kind: str, name: str, dp: Any, job: str, t: tuple[str, dict[str, float | None]], cumulative: bool
    ) -> None:
        asm, (node, row) = self.asm, t
        ts, start = dp.time_unix_nano * NS, dp.start_time_unix_nano * NS
        pairs: list[tuple[str, float]] = [("count", float(dp.count))]
        if kind == "summary" or dp.HasField("sum"):
            pairs.append(("sum", float(dp.sum)))
        for suffix, v in pairs:
            key = f"{name}.{suffix}"
            if not self.rates:
                row[key] = v
            elif cumulative:
                row[key] = asm.rate(job, node, key, ts, v, start)
            else:
                row[key] = _per_second(v, ts, start)
        if kind == "summary":
            for qv in dp.quantile_values:
                row[f"{name}.{quantile_label(qv.quantile)}"] = float(qv.value)
        elif kind == "histogram" and self.quantiles:
            counts = list(dp.bucket_counts)
            if cumulative and self.rates:
                window = asm.window(job, node, f"{name}#buckets", ts, counts, start)
            else:
                window = counts
            bounds = list(dp.explicit_bounds)
            for q in self.quantiles:
                row[f"{name}.{quantile_label(q)}"] = None if window is None else bucket_quantile(q, bounds, window)


def _per_second(v: float, ts: float, start: float) -> float | None:
    """A delta sum's value per second of its interval (None without an interval)."""
    return v / (ts - start) if start > 0 and ts > start else None


class OtlpDecoder:
    """Decodes one message (``otlp_proto`` or ``otlp_json``) into an assembler; it raises
    :class:`IngestError` for a message that is not a request. ``many`` (``otlp_proto``) decodes a
    poll's messages at once (:mod:`.otlp_fast`) and returns the problems per message."""

    def __init__(self, asm: Assembler, fmt: str) -> None:
        self.walker = OtlpWalker(asm)
        self.fmt = fmt
        #: set by :func:`~perfsift.formats.decoder_for` for ``otlp_proto`` (:mod:`.otlp_fast`)
        self.many: Callable[[list[bytes]], list[tuple[int, str, str]]] | None = None

    def __call__(self, value: bytes, key: bytes | None = None, when: float = 0.0) -> None:
        req = ExportMetricsServiceRequest()
        if self.fmt == "otlp_proto":
            try:
                req.ParseFromString(value)
            except DecodeError as exc:
                raise IngestError(f"not an OTLP ExportMetricsServiceRequest (protobuf): {exc}") from None
        else:
            try:
                json_format.Parse(value, req, ignore_unknown_fields=True)
            except (json_format.ParseError, UnicodeDecodeError, ValueError) as exc:
                raise IngestError(f"not an OTLP ExportMetricsServiceRequest (JSON): {str(exc)[:300]}") from None
        self.walker.walk(req)


def otlp_json_reference(asm: Assembler) -> OtlpDecoder:
    """``otlp_json`` read entirely by ``json_format`` and the generated classes (the reference the
    dict reader of :mod:`.otlp_json` is tested against)."""
    return OtlpDecoder(asm, "otlp_json")


def otlp_decoder(asm: Assembler, fmt: str) -> OtlpDecoder:
    """The decoder of ``otlp_proto`` or ``otlp_json`` messages into ``asm``."""
    return OtlpDecoder(asm, fmt)
