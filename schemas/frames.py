"""Column frames: many samples of one key in one Kafka message, as numpy columns.

perfsift writes the topics that only its own stages read (``perf.smoothed``,
``perf.smoothed.byjob``; :data:`~perfsift.streams.topics.TOPICS`' ``framed``) as column frames
instead of one JSON record per sample: a frame holds the rows of one message key (a job, or a
node) of one micro-batch, so ts, node, job and seq are written once per row as fixed-width
numbers, metric names once per frame, and each value as 8 bytes (float64, bit-exact, NaN for
missing) instead of ~18 characters of JSON. Layout, all little-endian::

    b"PSF\\x01"  u32 header length  header (JSON)  column bytes, in the header's order

The header: ``{"rows": k, "metrics": [...], "nodes": [...], "jobs": [...], "columns":
[[name, dtype, width], ...], "objects": {name: [...]}}``. Columns: ``ts`` (<f8), ``node`` and ``job``
(<u4 codes into the name lists), ``seq`` (<i8), ``values`` (<f8, k × len(metrics), row-major) and
the batch's one-dimensional numeric extras (e.g. ``warm``, |b1); object extras (a cleaner's flags)
go to ``objects`` as JSON. :func:`decode_frame` gives the same column batch back
(:func:`~perfsift.schemas.detect.decode_any` any message as records, for a reader).
"""

from __future__ import annotations

import struct
from typing import Any

import numpy as np
import orjson
from perfsift.operators.batch import Batch
from perfsift.schemas.records import RecordError

FRAME_MAGIC = b"PSF\x01"
#: rows per frame are capped so a frame stays well under Kafka's default 1 MB message size
FRAME_BYTES = 512_000
_LEN = struct.Struct("<I")
_FIXED = (("ts", "<f8"), ("node", "<u4"), ("job", "<u4"), ("seq", "<i8"))


def is_frame(value: bytes | None) -> bool:
    """Whether a message is a column frame."""
    return value is not None and value[:4] == FRAME_MAGIC


def encode_frames(batch: Batch, key: str) -> tuple[list[bytes], list[bytes]]:
    """The batch as column frames, one (or, over :data:`FRAME_BYTES`, several) per distinct
    ``key`` (``"job"`` or ``"node"``) in first-seen order, rows in batch order; and their keys.

    >>> b = Batch.from_columns(ts=[0, 1, 2], nodes=["a", "b", "a"], metrics=["x"], values=[[1.0], [2.0], [3.0]])
    >>> frames, keys = encode_frames(b, "node")
    >>> keys, [decode_frame(f).values[:, 0].tolist() for f in frames]
    ([b'a', b'b'], [[1.0, 3.0], [2.0]])
    """
    k = len(batch)
    if k == 0:
        return [], []
    names, idx = (batch.jobs, batch.job_idx) if key == "job" else (batch.nodes, batch.node_idx)
    cap = max(1, FRAME_BYTES // (8 * (len(batch.metrics) + 4)))
    order = np.argsort(idx, kind="stable")
    codes, starts = np.unique(idx[order], return_index=True)
    bounds = [*starts.tolist(), k]
    groups = sorted(
        ((int(order[a]), int(c), order[a:b]) for c, a, b in zip(codes.tolist(), bounds, bounds[1:], strict=False)),
        key=lambda g: g[0],
    )
    frames: list[bytes] = []
    keys: list[bytes] = []
    for _, code, rows in groups:
        name = names[code].encode()
        if len(rows) == k and k <= cap:
            frames.append(_frame(batch))
            keys.append(name)
            continue
        for s in range(0, len(rows), cap):
            frames.append(_frame(batch.take(rows[s : s + cap])))
            keys.append(name)
    return frames, keys


def _frame(batch: Batch) -> bytes:
    """One frame of all the batch's rows, with only the node and job names they use."""
    node_codes, node_idx = np.unique(batch.node_idx, return_inverse=True)
    job_codes, job_idx = np.unique(batch.job_idx, return_inverse=True)
    columns: list[tuple[str, np.ndarray]] = [
        ("ts", batch.ts.astype("<f8", copy=False)),
        ("node", node_idx.astype("<u4")),
        ("job", job_idx.astype("<u4")),
        ("seq", batch.seq.astype("<i8", copy=False)),
        ("values", np.ascontiguousarray(batch.values, dtype="<f8")),
    ]
    objects: dict[str, list[Any]] = {}
    for name, col in batch.extra.items():
        if col.ndim != 1:
            continue  # as in the JSON encoding: only one value per row travels
        if col.dtype == object:
            objects[name] = col.tolist()
        else:
            columns.append((name, np.ascontiguousarray(col)))
    header = {
        "rows": len(batch),
        "metrics": list(batch.metrics),
        "nodes": [batch.nodes[i] for i in node_codes.tolist()],
        "jobs": [batch.jobs[i] for i in job_codes.tolist()],
        "columns": [[name, col.dtype.str, col.shape[1] if col.ndim == 2 else 1] for name, col in columns],
        "objects": objects,
    }
    head = orjson.dumps(header)
    return b"".join([FRAME_MAGIC, _LEN.pack(len(head)), head, *(col.tobytes() for _, col in columns)])


def decode_frame(data: bytes, where: str = "") -> Batch:
    """The column batch of one frame; :class:`RecordError` if it is truncated or inconsistent."""
    if not is_frame(data):
        raise RecordError("not a perfsift column frame (wrong magic)", where)
    try:
        (n,) = _LEN.unpack_from(data, 4)
        header = orjson.loads(data[8 : 8 + n])
        k = int(header["rows"])
        metrics, nodes, jobs = tuple(header["metrics"]), tuple(header["nodes"]), tuple(header["jobs"])
        pos = 8 + n
        cols: dict[str, np.ndarray] = {}
        for name, dtype, width in header["columns"]:
            dt = np.dtype(dtype)
            if dt.kind not in "biuf":
                raise ValueError(f"column {name!r} of dtype {dtype!r}")
            count = k * int(width)
            arr = np.frombuffer(data, dt, count, pos)
            pos += count * dt.itemsize
            cols[name] = arr.reshape(k, int(width)) if name == "values" else arr
        if pos != len(data):
            raise ValueError(f"{len(data) - pos} bytes after the last column")
        node_idx, job_idx = cols.pop("node").astype(np.int64), cols.pop("job").astype(np.int64)
        if k and (node_idx.max() >= len(nodes) or job_idx.max() >= len(jobs)):
            raise ValueError("a node or job code outside the frame's name lists")
        values = cols.pop("values")
        if values.shape[1] != len(metrics):
            raise ValueError(f"{values.shape[1]} value columns for {len(metrics)} metrics")
        extra = {name: col.copy() for name, col in cols.items() if name not in ("ts", "seq")}
        for name, objs in header.get("objects", {}).items():
            col = np.empty(k, dtype=object)
            col[:] = objs
            extra[name] = col
        return Batch(
            ts=cols["ts"].astype(np.float64),
            node_idx=node_idx,
            values=values.astype(np.float64),
            metrics=metrics,
            nodes=nodes or ("",),
            job_idx=job_idx,
            jobs=jobs or ("default",),
            seq=cols["seq"].astype(np.int64),
            extra=extra,
        )
    except (ValueError, KeyError, TypeError, struct.error, orjson.JSONDecodeError) as exc:
        raise RecordError(f"corrupt column frame: {exc}"[:500], where) from None
