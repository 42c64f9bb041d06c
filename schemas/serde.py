"""Encode and decode records; convert samples to and from column batches.

JSON (orjson) is the default encoding; Avro (fastavro) uses the schemas beside this module and
Avro's single-object encoding (2 marker bytes + the schema's CRC-64-AVRO fingerprint + body), so
a reader can tell which schema wrote a message without a schema registry.

Malformed input raises :class:`RecordError`, which says what is wrong and where; a decoder never
returns half a record.

Documented rules for samples (the dead-letter topic gets everything else):

- ``ts`` must be a finite number; ``node`` a non-empty string; ``job`` a string (default
  ``"default"``); ``seq`` an integer (default -1, meaning not tracked); ``metrics`` an object of
  at most ``MAX_METRICS`` names to numbers or null (missing).
- JSON booleans are not numbers here: a boolean ``ts``, ``seq`` or metric value is rejected.
- Unknown top-level fields are ignored (forward compatibility); they are not passed on.
"""

from __future__ import annotations

import io
import itertools
import json
import math
from collections.abc import Callable, Iterable, Sequence
from functools import cache
from importlib import resources
from typing import Any, cast

import fastavro
import numpy as np
import orjson
from perfsift.operators.batch import Batch

MAX_METRICS = 4096
#: seq is a signed 64-bit counter (JSON parsers give integers up to 2**64 - 1)
SEQ_MIN, SEQ_MAX = -(2**63), 2**63 - 1
SCHEMA_NAMES = (
    "sample",
    "reduced",
    "selection",
    "contract",
    "forecast",
    "prediction",
    "control",
    "deadletter",
    "state",
)
_AVRO_MARKER = b"\xc3\x01"


class RecordError(ValueError):
    """A record that cannot be decoded or is not valid. ``where`` names the place it came from."""

    def __init__(self, reason: str, where: str = "", index: int = -1) -> None:
        self.reason = reason
        self.where = where
        #: position of the record in the input of :func:`decode_samples` (-1 elsewhere)
        self.index = index
        super().__init__(f"{where}: {reason}" if where else reason)


# -- schemas ------------------------------------------------------------------------------------
@cache
def load_schema(name: str) -> dict[str, Any]:
    """The parsed Avro schema ``schemas/<name>.avsc``."""
    if name not in SCHEMA_NAMES:
        raise KeyError(f"no schema {name!r}; known: {', '.join(SCHEMA_NAMES)}")
    text = resources.files("perfsift.schemas").joinpath(f"{name}.avsc").read_text()
    return cast(dict[str, Any], fastavro.parse_schema(json.loads(text)))


# -- validation of one sample ---------------------------------------------------------------------
def _is_number(v: object) -> bool:
    t = type(v)
    return t is float or t is int


_FLOAT_ONLY = {float}


def validate_sample(obj: object, where: str = "") -> dict[str, Any]:
    """Check a decoded sample and return it normalised (defaults filled, unknown fields dropped)."""
    if type(obj) is not dict:
        raise RecordError(f"a sample must be a JSON object, got {type(obj).__name__}", where)
    ts = obj.get("ts")
    if not _is_number(ts) or not math.isfinite(ts):  # type: ignore[arg-type]
        raise RecordError(f"'ts' must be a finite number, got {ts!r:.80}", where)
    node = obj.get("node")
    if type(node) is not str or not node:
        raise RecordError(f"'node' must be a non-empty string, got {node!r:.80}", where)
    job = obj.get("job", "default")
    if type(job) is not str:
        raise RecordError(f"'job' must be a string, got {job!r:.80}", where)
    seq = obj.get("seq", -1)
    if type(seq) is not int or not SEQ_MIN <= seq <= SEQ_MAX:
        raise RecordError(f"'seq' must be a 64-bit signed integer, got {seq!r:.80}", where)
    metrics = obj.get("metrics")
    if type(metrics) is not dict:
        raise RecordError(f"'metrics' must be an object of name -> number, got {metrics!r:.80}", where)
    if len(metrics) > MAX_METRICS:
        raise RecordError(f"{len(metrics)} metrics in one sample, more than the limit {MAX_METRICS}", where)
    vals = metrics.values()
    if set(map(type, vals)) <= _FLOAT_ONLY and math.isfinite(sum(vals)):  # the common case, at C speed
        return {"ts": float(ts), "node": node, "job": job, "seq": seq, "metrics": dict(metrics)}  # type: ignore[arg-type]
    clean: dict[str, float | None] = {}
    for name, v in metrics.items():
        if v is None:
            clean[name] = None
        elif _is_number(v) and math.isfinite(v):
            clean[name] = float(v)
        else:
            raise RecordError(f"metric {name!r:.80} must be a finite number or null, got {v!r:.80}", where)
    return {"ts": float(ts), "node": node, "job": job, "seq": seq, "metrics": clean}  # type: ignore[arg-type]


# -- samples <-> column batches ---------------------------------------------------------------------
def samples_to_batch(samples: Iterable[dict[str, Any]]) -> Batch:
    """Column batch of already-valid samples (see :func:`validate_sample`).

    >>> b = samples_to_batch([{"ts": 1.0, "node": "n1", "metrics": {"cpu": 5.0}},
    ...                       {"ts": 2.0, "node": "n2", "job": "j", "seq": 7, "metrics": {"mem": None}}])
    >>> b.metrics, b.values.tolist(), b.job_names(), b.seq.tolist()
    (('cpu', 'mem'), [[5.0, nan], [nan, nan]], ['default', 'j'], [-1, 7])
    """
    rows = list(samples)
    builder = _BatchBuilder()
    for r in rows:
        builder.add(r["ts"], r["node"], r.get("job", "default"), r.get("seq", -1), r["metrics"])
    batch, bad = builder.build()
    if bad:
        i, reason = bad[0]
        raise RecordError(reason, f"sample {i}")
    return batch


def batch_to_samples(batch: Batch) -> list[dict[str, Any]]:
    """Records of a batch; NaN becomes None (JSON null). Extra columns with one value per row
    (such as ``warm``) are included."""
    names = batch.metrics
    nodes, jobs = batch.nodes, batch.jobs
    extras = {k: v.tolist() for k, v in batch.extra.items() if v.ndim == 1}
    out = []
    for i, (t, ni, ji, s, row) in enumerate(
        zip(
            batch.ts.tolist(),
            batch.node_idx.tolist(),
            batch.job_idx.tolist(),
            batch.seq.tolist(),
            batch.values.tolist(),
            strict=True,
        )
    ):
        rec: dict[str, Any] = {
            "ts": t,
            "node": nodes[ni],
            "job": jobs[ji],
            "seq": s,
            "metrics": {m: (None if v != v else v) for m, v in zip(names, row, strict=True)},
        }
        for k, col in extras.items():
            rec[k] = col[i]
        out.append(rec)
    return out


class _BatchBuilder:
    """Collects rows grouped by their metric-name tuple, then builds one matrix per group.

    Rows of a stream almost always share the same metric names in the same order, so the values
    of a group become a float64 matrix in one ``np.array`` call instead of a per-value loop.
    """

    def __init__(self) -> None:
        self.ts: list[float] = []
        self.node: list[int] = []
        self.job: list[int] = []
        self.seq: list[int] = []
        self.node_ix: dict[str, int] = {}
        self.job_ix: dict[str, int] = {}
        self.groups: dict[tuple[str, ...], tuple[list[int], list[list[Any]]]] = {}

    def add(self, ts: float, node: str, job: str, seq: int, metrics: dict[str, Any]) -> None:
        row = len(self.ts)
        self.ts.append(ts)
        ni = self.node_ix.get(node)
        if ni is None:
            ni = self.node_ix[node] = len(self.node_ix)
        self.node.append(ni)
        ji = self.job_ix.get(job)
        if ji is None:
            ji = self.job_ix[job] = len(self.job_ix)
        self.job.append(ji)
        self.seq.append(seq)
        names = tuple(metrics)
        g = self.groups.get(names)
        if g is None:
            g = self.groups[names] = ([], [])
        g[0].append(row)
        g[1].append(list(metrics.values()))

    def build(self) -> tuple[Batch, list[tuple[int, str]]]:
        """The batch of the valid rows, and (row, reason) for rows with bad metric values."""
        k = len(self.ts)
        ok = np.ones(k, dtype=bool)
        bad: list[tuple[int, str]] = []
        mats = [
            (names, rows, _to_float_matrix(vals, rows, names, bad, ok)) for names, (rows, vals) in self.groups.items()
        ]
        # columns come only from records that are kept: a rejected record adds no metric
        live = [(names, rows, mat) for names, rows, mat in mats if ok[rows].any()]
        metric_ix: dict[str, int] = {}
        for names, _, _ in live:
            for m in names:
                metric_ix.setdefault(m, len(metric_ix))
        values = np.full((k, len(metric_ix)), np.nan)
        for names, rows, mat in live:
            values[np.ix_(rows, [metric_ix[m] for m in names])] = mat
        batch = Batch(
            ts=np.array(self.ts, dtype=np.float64),
            node_idx=np.array(self.node, dtype=np.int64),
            values=values,
            metrics=tuple(metric_ix),
            nodes=tuple(self.node_ix),
            job_idx=np.array(self.job, dtype=np.int64),
            jobs=tuple(self.job_ix) or ("default",),
            seq=np.array(self.seq, dtype=np.int64),
        )
        if bad:
            batch = batch.take(ok)
        return batch, bad


def _to_float_matrix(
    vals: list[list[Any]], rows: list[int], names: tuple[str, ...], bad: list[tuple[int, str]], ok: np.ndarray
) -> np.ndarray:
    """float64 matrix of one metric-name group; rows with non-numbers are reported in ``bad``."""
    if not names:
        return np.empty((len(vals), 0))
    try:
        arr = np.array(vals)
    except (ValueError, TypeError):  # nested lists or mixed shapes: the per-value check names them
        arr = np.empty(0, dtype=object)
    numbers = set(map(type, itertools.chain.from_iterable(vals))) <= {float, int}  # np.array takes True as 1.0
    if numbers and arr.dtype.kind == "f" and np.isfinite(arr).all():
        return arr
    if numbers and arr.dtype.kind == "i" and arr.ndim == 2:
        return arr.astype(np.float64)
    # Slow path (only for groups holding a null, a non-number or a non-finite value): check each
    # value. JSON booleans are refused; orjson gives int/float/None for numbers and null.
    out = np.full((len(vals), len(names)), np.nan)
    for i, row in enumerate(vals):
        for j, v in enumerate(row):
            t = type(v)
            if v is None:
                continue
            if (t is float or t is int) and math.isfinite(v):
                out[i, j] = v
            else:
                bad.append((rows[i], f"metric {names[j]!r:.80} must be a finite number or null, got {v!r:.80}"))
                ok[rows[i]] = False
                break
    return out


def _decode_uniform(values: Sequence[bytes | None]) -> Batch | None:
    """The common case at C speed: every message a valid JSON sample with the same metric names in
    the same order. One pass per field (list comprehensions, set-of-types checks) instead of
    per-record branches. None as soon as anything is off: the general path then decodes the
    batch record by record and says what is wrong where."""
    if not values:
        return None
    loads = orjson.loads
    try:
        objs = [loads(v) for v in values]  # type: ignore[arg-type]
    except (orjson.JSONDecodeError, TypeError):
        return None
    if {type(o) for o in objs} != {dict}:
        return None
    ts = [o.get("ts") for o in objs]
    nodes = [o.get("node") for o in objs]
    jobs = [o.get("job", "default") for o in objs]
    seqs = [o.get("seq", -1) for o in objs]
    metrics = [o.get("metrics") for o in objs]
    if (
        not {type(t) for t in ts} <= {float, int}
        or {type(n) for n in nodes} != {str}
        or {type(j) for j in jobs} != {str}
        or {type(q) for q in seqs} != {int}
        or {type(m) for m in metrics} != {dict}
    ):
        return None
    names = {tuple(m) for m in metrics}
    if len(names) != 1 or min(seqs) < SEQ_MIN or max(seqs) > SEQ_MAX:
        return None
    (metric_names,) = names
    ts_arr = np.array(ts, dtype=np.float64)
    node_ix = {n: i for i, n in enumerate(dict.fromkeys(nodes))}
    if "" in node_ix or len(metric_names) > MAX_METRICS or not np.isfinite(ts_arr).all():
        return None
    k, n = len(objs), len(metric_names)
    columns = [m.values() for m in metrics]
    if not set(map(type, itertools.chain.from_iterable(columns))) <= {float, int}:
        return None  # nulls, booleans, strings, ...: checked value by value
    try:
        matrix = np.fromiter(itertools.chain.from_iterable(columns), np.float64, k * n).reshape(k, n)
    except OverflowError:
        return None
    if not np.isfinite(matrix).all():
        return None
    job_ix = {j: i for i, j in enumerate(dict.fromkeys(jobs))}
    return Batch(
        ts=ts_arr,
        node_idx=np.array([node_ix[n] for n in nodes], dtype=np.int64),
        values=matrix,
        metrics=metric_names,
        nodes=tuple(node_ix),
        job_idx=np.array([job_ix[j] for j in jobs], dtype=np.int64),
        jobs=tuple(job_ix),
        seq=np.array(seqs, dtype=np.int64),
    )


def decode_samples(
    values: Sequence[bytes | None], where: Callable[[int], str] | None = None, codec: str = "json"
) -> tuple[Batch, list[int], list[RecordError]]:
    """Decode many messages into one column batch.

    Returns ``(batch, kept, errors)``: ``kept[i]`` is the input position of batch row i, and each
    error names its input position via ``where`` (e.g. ``"perf.raw:3:1042"``). Bad records are
    left out whole; the others are kept in input order.
    """
    if codec == "json":
        uniform = _decode_uniform(values)
        if uniform is not None:
            return uniform, list(range(len(values))), []
    loc = where or (lambda i: f"record {i}")
    builder = _BatchBuilder()
    positions: list[int] = []
    errors: list[RecordError] = []
    avro = codec == "avro"
    loads = orjson.loads
    avro_codec = AvroCodec("sample") if avro else None
    for i, raw in enumerate(values):
        if raw is None:
            errors.append(RecordError("empty message (null value)", loc(i), i))
            continue
        try:
            obj = avro_codec.decode(raw) if avro_codec is not None else loads(raw)
        except (orjson.JSONDecodeError, RecordError, ValueError, EOFError, IndexError) as exc:
            reason = exc.reason if isinstance(exc, RecordError) else str(exc)
            errors.append(RecordError(f"cannot decode: {reason}"[:500], loc(i), i))
            continue
        # Fast structural checks; the metric values are checked per group in build().
        if type(obj) is not dict:
            errors.append(RecordError(f"a sample must be a JSON object, got {type(obj).__name__}", loc(i), i))
            continue
        ts, node, job, seq, metrics = (
            obj.get("ts"),
            obj.get("node"),
            obj.get("job", "default"),
            obj.get("seq", -1),
            obj.get("metrics"),
        )
        tt = type(ts)
        if (
            (tt is not float and tt is not int)
            or type(node) is not str
            or not node
            or type(job) is not str
            or type(seq) is not int
            or not SEQ_MIN <= seq <= SEQ_MAX
            or type(metrics) is not dict
            or len(metrics) > MAX_METRICS
            or not math.isfinite(ts)  # type: ignore[arg-type]
        ):
            try:
                validate_sample(obj, loc(i))
            except RecordError as exc:
                exc.index = i
                errors.append(exc)
            continue
        positions.append(i)
        builder.add(float(ts), node, job, seq, metrics)  # type: ignore[arg-type]
    batch, bad = builder.build()
    if bad:
        bad_rows = {r for r, _ in bad}
        for r, reason in bad:
            errors.append(RecordError(reason, loc(positions[r]), positions[r]))
        positions = [p for r, p in enumerate(positions) if r not in bad_rows]
        errors.sort(key=lambda e: e.index)
    return batch, positions, errors


def encode_batch(batch: Batch, codec: str = "json", schema: str = "sample") -> list[bytes]:
    """One encoded record per batch row (see :func:`batch_to_samples`).

    JSON is built column-wise: orjson serialises each numpy column or matrix in one call (NaN and
    infinities as null), and a per-batch template joins the pieces, so no per-row dict is made.

    >>> b = samples_to_batch([{"ts": 1.5, "node": "a", "seq": 3, "metrics": {"x": None, "y": 2.0}}])
    >>> encode_batch(b)[0]
    b'{"ts":1.5,"node":"a","job":"default","seq":3,"metrics":{"x":null,"y":2.0}}'
    """
    if codec != "json":
        c = codec_for(codec, schema)
        return [c.encode(r) for r in batch_to_samples(batch)]
    k = len(batch)
    if k == 0:
        return []

    cells = json_cells

    def esc(b: bytes) -> bytes:  # literal parts of a %-template
        return b.replace(b"%", b"%%")

    metric_part = b",".join(esc(orjson.dumps(m)) + b":%s" for m in batch.metrics)
    extras = [(name, col) for name, col in batch.extra.items() if col.ndim == 1]
    extra_part = b"".join(b"," + esc(orjson.dumps(name)) + b":%s" for name, _ in extras)
    template = b'{"ts":%s,"node":%s,"job":%s,"seq":%d,"metrics":{' + metric_part + b"}" + extra_part + b"}"
    ts = cells(batch.ts)
    node_json = [orjson.dumps(n) for n in batch.nodes]
    job_json = [orjson.dumps(j) for j in batch.jobs]
    nodes = [node_json[i] for i in batch.node_idx.tolist()]
    jobs = [job_json[i] for i in batch.job_idx.tolist()]
    seq = batch.seq.tolist()
    # object columns (clean's per-row flag lists) are small and mostly None: one dumps per row
    extra_cols = [[orjson.dumps(v) for v in col.tolist()] if col.dtype == object else cells(col) for _, col in extras]
    if batch.values.shape[1]:
        body = orjson.dumps(np.ascontiguousarray(batch.values, dtype=np.float64), option=orjson.OPT_SERIALIZE_NUMPY)
        rows = [r.split(b",") for r in body[2:-2].split(b"],[")]
    else:
        rows = [[] for _ in range(k)]
    if extra_cols:
        return [template % (ts[i], nodes[i], jobs[i], seq[i], *rows[i], *(c[i] for c in extra_cols)) for i in range(k)]
    return [template % (ts[i], nodes[i], jobs[i], seq[i], *rows[i]) for i in range(k)]


def json_cells(arr: np.ndarray) -> list[bytes]:
    """The JSON text of each value of a 1-D array (NaN and infinities as ``null``), in one orjson
    call; the same text orjson writes for the Python float."""
    text = orjson.dumps(np.ascontiguousarray(arr), option=orjson.OPT_SERIALIZE_NUMPY)
    return text[1:-1].split(b",")


def encode_forecasts(out: Batch, methods: Sequence[str]) -> tuple[list[bytes], list[bytes]]:
    """perf.forecast records in JSON, column-wise, and their keys (node): the bytes that
    ``orjson.dumps`` gives for ``forecast_records(out)``, without a dict per record.

    ``out`` is a forecaster's batch (values = forecasts, NaN where none; extra ``sigma`` and
    ``method``, codes into ``methods``)."""
    rows, cols = np.nonzero(~np.isnan(out.values))
    if not len(rows):
        return [], []
    f = out.values[rows, cols]
    s = out.extra["sigma"][rows, cols]
    node_json = [orjson.dumps(n) for n in out.nodes]
    job_json = [orjson.dumps(j) for j in out.jobs]
    metric_json = [orjson.dumps(m) for m in out.metrics]
    method_json = [orjson.dumps(m) for m in methods]
    node_codes = out.node_idx[rows].tolist()
    columns = [
        json_cells(out.ts[rows]),
        [node_json[i] for i in node_codes],
        [job_json[i] for i in out.job_idx[rows].tolist()],
        [metric_json[j] for j in cols.tolist()],
        json_cells(f),
        json_cells(s),
        json_cells(f - 2 * s),
        json_cells(f + 2 * s),
        [method_json[m] for m in out.extra["method"][rows, cols].astype(np.int64).tolist()],
    ]
    template = b'{"ts":%s,"node":%s,"job":%s,"metric":%s,"forecast":%s,"sigma":%s,"lower":%s,"upper":%s,"method":%s}'
    node_keys = [n.encode() for n in out.nodes]
    return [template % r for r in zip(*columns, strict=True)], [node_keys[i] for i in node_codes]


def encode_records(records: Iterable[dict[str, Any]], codec: str = "json", schema: str = "sample") -> list[bytes]:
    """Encode records of any schema (JSON: orjson, NaN as null; Avro: single-object encoding)."""
    if codec == "json":
        return [orjson.dumps(r) for r in records]
    c = codec_for(codec, schema)
    return [c.encode(r) for r in records]


# -- codecs for single records -----------------------------------------------------------------------
class JsonCodec:
    """orjson codec for any record type. NaN and infinities are written as null."""

    name = "json"

    def __init__(self, schema: str = "sample") -> None:
        self.schema = schema

    def encode(self, record: dict[str, Any]) -> bytes:
        return orjson.dumps(record)

    def decode(self, data: bytes, where: str = "") -> dict[str, Any]:
        try:
            obj = orjson.loads(data)
        except orjson.JSONDecodeError as exc:
            raise RecordError(f"not valid JSON: {exc}", where) from None
        if self.schema == "sample":
            return validate_sample(obj, where)
        if type(obj) is not dict:
            raise RecordError(f"a {self.schema} record must be a JSON object", where)
        return obj


class AvroCodec:
    """fastavro codec in Avro single-object encoding for one of the schemas in this folder."""

    name = "avro"

    def __init__(self, schema: str = "sample") -> None:
        self.schema = schema
        self._parsed = load_schema(schema)
        fp = fastavro.schema.fingerprint(fastavro.schema.to_parsing_canonical_form(self._parsed), "CRC-64-AVRO")
        self._header = _AVRO_MARKER + bytes.fromhex(fp)[::-1]  # fingerprint little-endian

    def encode(self, record: dict[str, Any]) -> bytes:
        buf = io.BytesIO()
        buf.write(self._header)
        try:
            fastavro.schemaless_writer(buf, self._parsed, _nan_to_none(record))
        except (ValueError, TypeError, KeyError) as exc:
            raise RecordError(f"does not fit the Avro schema {self.schema!r}: {exc}") from None
        return buf.getvalue()

    def decode(self, data: bytes, where: str = "") -> dict[str, Any]:
        if not data.startswith(self._header):
            raise RecordError(
                f"not an Avro single-object record of schema {self.schema!r} (wrong marker or fingerprint)",
                where,
            )
        try:
            rec = fastavro.schemaless_reader(io.BytesIO(data[len(self._header) :]), self._parsed, None)
        except (ValueError, EOFError, IndexError, UnicodeDecodeError, TypeError) as exc:
            raise RecordError(f"truncated or corrupt Avro record: {exc!r}", where) from None
        if not isinstance(rec, dict):
            raise RecordError("Avro record did not decode to a record", where)
        if self.schema == "sample":
            return validate_sample(rec, where)
        return rec


def _nan_to_none(obj: Any) -> Any:
    if isinstance(obj, float) and obj != obj:
        return None
    if isinstance(obj, dict):
        return {k: _nan_to_none(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_nan_to_none(v) for v in obj]
    return obj


def codec_for(name: str, schema: str = "sample") -> JsonCodec | AvroCodec:
    """The codec called ``name`` ("json" or "avro") for records of ``schema``."""
    if name == "json":
        return JsonCodec(schema)
    if name == "avro":
        return AvroCodec(schema)
    raise ValueError(f"unknown encoding {name!r}: use 'json' or 'avro'")
