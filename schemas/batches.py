"""Samples to and from column batches: many messages (JSON or Avro) decoded into one batch, and
a batch's rows as sample records.

A bad record is left out whole and reported as a :class:`~perfsift.schemas.records.RecordError`
naming its place; the others are kept in input order.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace
from typing import Any

import numpy as np
import orjson
from perfsift.operators.batch import Batch
from perfsift.schemas.frames import decode_frame, is_frame
from perfsift.schemas.records import MAX_METRICS, SEQ_MAX, SEQ_MIN, RecordError, validate_sample


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


_WARM_SAMPLE = b'{"ts":1.0,"node":"n","job":"j","seq":0,"metrics":{"m":0.5}}'


def warm_up_decoder() -> None:
    """Load the raw-sample scanner's compiled code (numba's cache; compiled there the first time)
    so that a stage's first micro-batch does not wait for it; a no-op once loaded."""
    if _decode_scanned([_WARM_SAMPLE]) is None:  # pragma: no cover - the sample has the shape
        raise AssertionError("the raw-sample scanner refused its warm-up sample")


def _decode_scanned(values: Sequence[bytes | None]) -> Batch | None:
    """The raw sample shape of perfsift's producers, scanned at C speed
    (:mod:`~perfsift.schemas._json_scan`); None for anything else, which orjson then decodes."""
    # here, not at import: the scanner loads numba (~0.7 CPU-s), which a process that never decodes
    # JSON samples (the CLI's help, a stage of another encoding) should not pay; warm_up_decoder loads it
    from perfsift.schemas._json_scan import scan_samples

    try:
        blob = b"".join(values)  # type: ignore[arg-type]
    except TypeError:  # a null message
        return None
    offsets = np.fromiter(itertools.accumulate(map(len, values), initial=0), np.int64, len(values) + 1)  # type: ignore[arg-type]
    scanned = scan_samples(blob, offsets, MAX_METRICS, SEQ_MIN, SEQ_MAX)
    if scanned is None:
        return None
    ts, (node_idx, nodes), (job_idx, jobs), seq, names, matrix = scanned
    if len(set(names)) < len(names):
        return None  # a repeated name: orjson keeps the last value
    return Batch(
        ts=ts,
        node_idx=node_idx,
        values=matrix,
        metrics=tuple(names),
        nodes=tuple(nodes),
        job_idx=job_idx,
        jobs=tuple(jobs),
        seq=seq,
    )


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


#: one message to the record it holds (``orjson.loads``, or a record codec's ``decode``)
Loads = Callable[[bytes], Any]
#: a whole micro-batch at C speed, or None when it does not have the shape it takes
Fast = Callable[[Sequence[bytes | None]], Batch | None]


def json_fast(values: Sequence[bytes | None]) -> Batch | None:
    """JSON samples at C speed: the producers' raw shape through the numba scanner, else samples of
    one set of metric names through orjson (never column frames); None for anything else."""
    scanned = _decode_scanned(values)  # never takes a column frame: a frame does not start with "{"
    if scanned is not None or any(map(is_frame, values)):
        return scanned
    return _decode_uniform(values)


def decode_samples_by(
    values: Sequence[bytes | None], where: Callable[[int], str] | None, loads: Loads, fast: Fast | None = None
) -> tuple[Batch, list[int], list[RecordError]]:
    """Decode many messages into one column batch, each message by ``loads`` (after ``fast``, when
    given, declined the whole batch); the wire encoding's
    :meth:`~perfsift.schemas.encodings.Encoding.decode_samples`.

    Returns ``(batch, kept, errors)``: ``kept[i]`` is the input position of batch row i, and each
    error names its input position via ``where`` (e.g. ``"perf.raw:3:1042"``). Bad records are
    left out whole; the others are kept in input order. Column frames
    (:mod:`~perfsift.schemas.frames`) are recognised whatever the encoding: each gives its rows, all
    with the frame's input position in ``kept``.
    """
    if fast is not None and values:
        quick = fast(values)
        if quick is not None:
            return quick, list(range(len(values))), []
    if any(map(is_frame, values)):
        return _decode_with_frames(values, where, lambda part, here: decode_samples_by(part, here, loads, fast))
    loc = where or (lambda i: f"record {i}")
    builder = _BatchBuilder()
    positions: list[int] = []
    errors: list[RecordError] = []
    for i, raw in enumerate(values):
        if raw is None:
            errors.append(RecordError("empty message (null value)", loc(i), i))
            continue
        try:
            obj = loads(raw)
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


def _decode_with_frames(
    values: Sequence[bytes | None],
    where: Callable[[int], str] | None,
    decode_rest: Callable[[Sequence[bytes | None], Callable[[int], str]], tuple[Batch, list[int], list[RecordError]]],
) -> tuple[Batch, list[int], list[RecordError]]:
    """:func:`decode_samples_by` of messages some of which are column frames: each run of frames or of
    records decoded on its own, the batches joined in input order."""
    loc = where or (lambda i: f"record {i}")
    batches: list[Batch] = []
    kept: list[int] = []
    errors: list[RecordError] = []
    i = 0
    while i < len(values):
        j = i
        framed = is_frame(values[i])
        while j < len(values) and is_frame(values[j]) == framed:
            j += 1
        if framed:
            for p in range(i, j):
                try:
                    b = decode_frame(values[p], loc(p))  # type: ignore[arg-type]
                except RecordError as exc:
                    exc.index = p
                    errors.append(exc)
                    continue
                batches.append(replace(b, extra={}))  # as from JSON: extra fields are not passed on
                kept += [p] * len(b)
        else:

            def here(q: int, start: int = i) -> str:
                return loc(q + start)

            b, pos, errs = decode_rest(values[i:j], here)
            batches.append(b)
            kept += [p + i for p in pos]
            for e in errs:
                e.index += i
            errors += errs
        i = j
    return Batch.concat(batches), kept, errors
