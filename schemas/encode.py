"""Encoding many records at once in JSON, built column-wise: a batch's samples and a forecaster's
batch (orjson serialises each numpy column in one call, a template joins the pieces, no dict per
record). The wire encodings (:mod:`~perfsift.schemas.encodings`) use them; other records and
encodings go one record at a time through :mod:`~perfsift.schemas.codecs`."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import orjson
from perfsift.operators.batch import Batch
from perfsift.operators.rounding import round_sig


def encode_batch_json(batch: Batch) -> list[bytes]:
    """One JSON record per batch row (the record of
    :func:`~perfsift.schemas.batches.batch_to_samples`).

    JSON is built column-wise: orjson serialises each numpy column or matrix in one call (NaN and
    infinities as null), and a per-batch template joins the pieces, so no per-row dict is made.

    >>> from perfsift.schemas import samples_to_batch
    >>> b = samples_to_batch([{"ts": 1.5, "node": "a", "seq": 3, "metrics": {"x": None, "y": 2.0}}])
    >>> encode_batch_json(b)[0]
    b'{"ts":1.5,"node":"a","job":"default","seq":3,"metrics":{"x":null,"y":2.0}}'
    """
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


def encode_forecasts(out: Batch | Sequence[Batch], methods: Sequence[str]) -> tuple[list[bytes], list[bytes]]:
    """perf.forecast records in JSON, column-wise, and their keys (node): the bytes that
    ``orjson.dumps`` gives for ``forecast_on_wire(r)`` of each ``r`` in ``forecast_records(out)``,
    without a dict per record. The bounds are not written, nor ``mae_forecast`` where it equals
    the forecast: readers derive them (:mod:`~perfsift.schemas.forecast_wire`).

    ``out`` is a forecaster's batch, or several in order (values = forecasts, NaN where none; extra
    ``sigma``, ``method`` - codes into ``methods`` - and ``mae_forecast``, ``mae``); several are
    encoded in one pass (the numbers elementwise, so the same bytes as batch by batch)."""
    outs = [out] if isinstance(out, Batch) else list(out)
    cells = [np.nonzero(~np.isnan(b.values)) for b in outs]
    if not sum(len(r) for r, _ in cells):
        return [], []
    pairs = list(zip(outs, cells, strict=True))

    def column(name: str) -> np.ndarray:
        return np.concatenate([(b.values if name == "" else b.extra[name])[r, c] for b, (r, c) in pairs])

    def texts(names: Sequence[str], codes: np.ndarray) -> list[bytes]:
        encoded = [orjson.dumps(n) for n in names]
        return [encoded[i] for i in codes.tolist()]

    f, s = round_sig(column("")), round_sig(column("sigma"))
    f_mae, mae = round_sig(column("mae_forecast")), round_sig(column("mae"))
    method_json = [orjson.dumps(m) for m in methods]
    columns = [
        json_cells(np.concatenate([b.ts[r] for b, (r, _) in pairs])),
        [t for b, (r, _) in pairs for t in texts(b.nodes, b.node_idx[r])],
        [t for b, (r, _) in pairs for t in texts(b.jobs, b.job_idx[r])],
        [t for b, (_, c) in pairs for t in texts(b.metrics, c)],
        json_cells(f),
        json_cells(s),
        [method_json[m] for m in column("method").astype(np.int64).tolist()],
        # mae_forecast only where it differs from the forecast (readers take the forecast where it is absent)
        [
            b"" if same else b',"mae_forecast":' + c
            for same, c in zip((f_mae == f).tolist(), json_cells(f_mae), strict=True)
        ],
        json_cells(mae),
    ]
    template = b'{"ts":%s,"node":%s,"job":%s,"metric":%s,"forecast":%s,"sigma":%s,"method":%s%s,"mae":%s}'
    keys = [k for b, (r, _) in pairs for k in _names(b.nodes, b.node_idx[r])]
    return [template % r for r in zip(*columns, strict=True)], keys


def _names(names: Sequence[str], codes: np.ndarray) -> list[bytes]:
    """Each code's name, UTF-8 (a message key)."""
    encoded = [n.encode() for n in names]
    return [encoded[i] for i in codes.tolist()]
