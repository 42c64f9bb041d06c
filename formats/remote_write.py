"""Prometheus remote_write in: the snappy-compressed protobuf ``WriteRequest`` a Prometheus server
(or an agent: Grafana Agent, vmagent, the Collector's ``prometheusremotewrite`` exporter) posts;
and out: :func:`encode_series` builds the requests ``perfsift export --remote-write`` posts.

- :class:`RemoteWriteReceiver` answers ``POST /api/v1/write`` on an ingest worker's HTTP port:
  it checks the body (snappy, then protobuf; 400 when it is neither: Prometheus does not retry
  it), splits the request by node and publishes one request per node, keyed by the node, to the
  stage's input topic, then answers 204 once Kafka has it (503 otherwise: Prometheus retries);
- :func:`remote_write_decoder` reads those messages (any snappy-compressed ``WriteRequest``) in
  the ingest stage. Series are named as ``prometheus_text`` names them (:func:`.series_name`:
  ``__name__{labels}``, node and job labels left out). Prometheus 2.x sends metric types only in
  separate metadata requests, so a series is a counter (a rate) when its name ends in
  ``_total``, ``_count`` or ``_sum`` (a histogram's or summary's), and ``_bucket`` series with an
  ``le`` label are a histogram's buckets (their quantiles since the previous sample); everything
  else is a gauge. The node is the ``instance`` label without its port (``node-1:9100`` ->
  ``node-1``: one node's exporters meet in one sample), the job the ``job`` label.

The message classes are built at import from the definitions of ``prompb/remote.proto`` and
``prompb/types.proto`` (Prometheus 2.x; the fields perfsift reads: labels, samples, metadata)
and parsed by protobuf's C backend (upb); no generated module is needed.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from perfsift.formats.assemble import Assembler, IngestError
from perfsift.formats.prometheus import BUCKET, COUNTER, GAUGE, _quantiles, series_name
from perfsift.formats.text import Decoder

_T = descriptor_pb2.FieldDescriptorProto


def _file() -> descriptor_pb2.FileDescriptorProto:
    f = descriptor_pb2.FileDescriptorProto(name="perfsift_prompb.proto", package="prometheus", syntax="proto3")

    def msg(name: str, *fields: tuple[str, int, int, int, str]) -> None:
        m = f.message_type.add(name=name)
        for fname, number, typ, label, type_name in fields:
            fd = m.field.add(name=fname, number=number, type=typ, label=label)
            if type_name:
                fd.type_name = type_name

    opt, rep = _T.LABEL_OPTIONAL, _T.LABEL_REPEATED
    msg("Label", ("name", 1, _T.TYPE_STRING, opt, ""), ("value", 2, _T.TYPE_STRING, opt, ""))
    msg("Sample", ("value", 1, _T.TYPE_DOUBLE, opt, ""), ("timestamp", 2, _T.TYPE_INT64, opt, ""))
    msg(
        "TimeSeries",
        ("labels", 1, _T.TYPE_MESSAGE, rep, ".prometheus.Label"),
        ("samples", 2, _T.TYPE_MESSAGE, rep, ".prometheus.Sample"),
    )
    msg(
        "MetricMetadata",
        ("type", 1, _T.TYPE_INT32, opt, ""),
        ("metric_family_name", 2, _T.TYPE_STRING, opt, ""),
        ("help", 4, _T.TYPE_STRING, opt, ""),
        ("unit", 5, _T.TYPE_STRING, opt, ""),
    )
    msg(
        "WriteRequest",
        ("timeseries", 1, _T.TYPE_MESSAGE, rep, ".prometheus.TimeSeries"),
        ("metadata", 3, _T.TYPE_MESSAGE, rep, ".prometheus.MetricMetadata"),
    )
    return f


_pool = descriptor_pool.DescriptorPool()
_pool.Add(_file())
WriteRequest: Any = message_factory.GetMessageClass(_pool.FindMessageTypeByName("prometheus.WriteRequest"))
#: MetricMetadata.type values that mean a counter (COUNTER) and a histogram (HISTOGRAM)
META_COUNTER, META_HISTOGRAM = 1, 3


def read_request(body: bytes) -> Any:
    """The ``WriteRequest`` of a snappy-compressed body (ValueError when it is not one)."""
    import cramjam

    try:
        raw = bytes(cramjam.snappy.decompress_raw(body))
    except Exception as exc:  # cramjam.DecompressionError
        raise ValueError(f"not snappy-compressed (block format): {exc}") from None
    try:
        return WriteRequest.FromString(raw)
    except Exception as exc:  # google.protobuf.message.DecodeError
        raise ValueError(f"not a remote_write WriteRequest (protobuf): {exc}") from None


def write_request(series: list[Any]) -> bytes:
    """A snappy-compressed ``WriteRequest`` of ``series`` (TimeSeries messages)."""
    import cramjam

    req = WriteRequest()
    req.timeseries.extend(series)
    return bytes(cramjam.snappy.compress_raw(req.SerializeToString()))


def encode_series(series: Iterable[tuple[Sequence[tuple[str, str]], Sequence[tuple[int, float]]]]) -> bytes:
    """A snappy-compressed ``WriteRequest`` of ``(labels, samples)`` pairs: labels as (name,
    value) with ``__name__`` among them, samples as (milliseconds since the epoch, value). Labels
    are sent in name order, as the remote_write specification requires; this is what
    ``perfsift export --remote-write`` posts, read back by :func:`read_request` like any request."""
    import cramjam

    req = WriteRequest()
    for labels, samples in series:
        ts = req.timeseries.add()
        for name, value in sorted(labels):
            lb = ts.labels.add()
            lb.name, lb.value = name, value
        for t, v in samples:
            s = ts.samples.add()
            s.timestamp, s.value = t, v
    return bytes(cramjam.snappy.compress_raw(req.SerializeToString()))


def host_of(instance: str) -> str:
    """``instance`` without its port: ``node-1:9100`` -> ``node-1``, ``[::1]:9100`` -> ``[::1]``."""
    head, colon, port = instance.rpartition(":")
    return head if colon and port.isdigit() and head and not head.endswith(":") else instance


def remote_write_decoder(asm: Assembler) -> Decoder:
    """The ``remote_write`` decoder writing into ``asm`` (see the module docstring)."""
    m = asm.map
    drop = {*m.node, *([m.job] if m.job else []), "__name__"}
    kinds: dict[tuple[tuple[str, str], ...], tuple[int, str, str | None, str | None, str, float]] = {}
    families: dict[str, int] = {}

    def resolve(labels: tuple[tuple[str, str], ...]) -> tuple[int, str, str | None, str | None, str, float]:
        d = dict(labels)
        name = d.get("__name__", "")
        node = next((host_of(d[k]) if k == "instance" else d[k] for k in m.node if d.get(k)), None)
        job = d.get(m.job) if m.job else None
        own = [
            (k, v)
            for k, v in labels
            if k not in drop and (m.attributes is None or k in m.attributes or k in ("quantile", "le"))
        ]
        if name.endswith("_bucket") and "le" in d:
            base = name[: -len("_bucket")]
            return BUCKET, series_name(base, [(k, v) for k, v in own if k != "le"]), node, job, "", float(d["le"])
        full = series_name(name, own)
        if not name or not m.keep(m.rename.get(full, full) if m.rename else full):
            return -1, full, node, job, "", 0.0
        fam = families.get(name.removesuffix("_total").removesuffix("_count").removesuffix("_sum"))
        counter = name.endswith(("_total", "_count", "_sum")) or fam == META_COUNTER
        return (COUNTER if counter and m.rates else GAUGE), full, node, job, "", 0.0

    def decode(value: bytes, key: bytes | None = None, when: float = 0.0) -> None:
        try:
            req = read_request(value)
        except ValueError as exc:
            raise IngestError(str(exc)) from None
        for md in req.metadata:
            families[md.metric_family_name] = md.type
        buckets: dict[tuple[str, str, float, str], tuple[int, list[float], list[float]]] = {}
        written: set[tuple[int, str]] = set()
        collisions: list[str] = []
        for ts in req.timeseries:
            labels = tuple((lb.name, lb.value) for lb in ts.labels)
            info = kinds.get(labels)
            if info is None:
                if len(kinds) > 200_000:
                    kinds.clear()
                info = kinds[labels] = resolve(labels)
            kind, name, node, job_label, _, le = info
            if kind < 0:
                continue
            if node is None:
                asm.unmapped_point(len(ts.samples), f"no node label ({', '.join(m.node)}) on {name[:80]!r}")
                continue
            job = job_label or m.job_default
            for s in ts.samples:
                asm.points += 1
                t = s.timestamp / 1000.0
                row = asm.row(job, node, t)
                if row is None:
                    continue
                v = s.value
                if kind == BUCKET:
                    b = buckets.setdefault((job, node, t, name), (BUCKET, [], []))
                    b[1].append(le)
                    b[2].append(v)
                    continue
                seen = (id(row), name)
                if seen in written:
                    collisions.append(name)
                    continue
                written.add(seen)
                if kind == COUNTER:
                    row[name] = asm.rate(job, node, name, t, v, 0.0)
                elif math.isfinite(v):  # Prometheus' stale marker is a NaN
                    row[name] = v
        for (job, node, t, group), (kind, bounds, cum) in buckets.items():
            row = asm.row(job, node, t)
            if row is not None and m.quantiles:
                _quantiles(asm, row, job, node, t, group, kind, bounds, cum)
        if collisions:
            asm.collision(collisions)

    return decode


class RemoteWriteReceiver:
    """``POST /api/v1/write`` -> one snappy ``WriteRequest`` per node on ``topic`` (see the module
    docstring). ``produce(topic, value, key)`` and ``flush(timeout) -> messages left`` come from
    a Kafka producer of its own (not the stage's: that one may be transactional)."""

    def __init__(
        self, producer: Any, topic: str, node_labels: tuple[str, ...] = ("instance",), timeout_s: float = 10.0
    ) -> None:
        self.producer = producer
        self.topic = topic
        self.node_labels = node_labels
        self.timeout_s = timeout_s
        self.requests = 0
        self.series = 0
        self.refused = 0
        self._lock = threading.Lock()

    def handle(self, body: bytes, headers: Any) -> tuple[int, bytes]:
        """(HTTP status, body) of one POST."""
        try:
            req = read_request(body)
        except ValueError as exc:
            with self._lock:
                self.refused += 1
            return 400, f"{exc}\n".encode()
        by_node: dict[str, list[Any]] = {}
        for ts in req.timeseries:
            d = {lb.name: lb.value for lb in ts.labels}
            node = next((host_of(d[k]) if k == "instance" else d[k] for k in self.node_labels if d.get(k)), "")
            by_node.setdefault(node, []).append(ts)
        failed: list[str] = []

        def delivered(err: Any, msg: Any) -> None:
            if err is not None:
                failed.append(str(err))

        try:
            for node, series in by_node.items():
                self.producer.produce(self.topic, write_request(series), node.encode() or None, on_delivery=delivered)
            left = self.producer.flush(self.timeout_s)
        except (BufferError, Exception) as exc:  # KafkaException: the topic or the broker is not there
            return 503, f"cannot publish to {self.topic}: {exc}\n".encode()
        if left or failed:
            return 503, f"cannot publish to {self.topic}: {failed[0] if failed else f'{left} not delivered'}\n".encode()
        with self._lock:
            self.requests += 1
            self.series += len(req.timeseries)
        return 204, b""


PostRoute = Callable[[bytes, Any], tuple[int, bytes]]
