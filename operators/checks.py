"""The conformance suite every operator passes, in the spirit of ``river.checks``.

:func:`check_operator` runs every check on one configured operator; each check is also a function of
its own (:data:`CHECKS`), so a test suite can report them one by one. A check raises
``AssertionError`` with what went wrong. The properties, for any operator and role:

- ``update`` on one batch gives what ``update`` on the same rows split in pieces gives (with what
  ``flush`` still holds at the end), and the interleaving of different (job, node) keys changes
  nothing but the order of rows;
- a snapshot restored into a fresh operator continues exactly as the original does, and a
  snapshot is refused by an operator of other parameters or of other file content;
- the fingerprint changes with every parameter and with the content of the files parameters name;
- the input is never mutated, the state stays bounded on a long stream, metrics may disappear and
  nodes appear at any time, and ``repr``/``clone`` round-trip the parameters.

>>> from perfsift.operators import SlidingMean
>>> check_operator(SlidingMean(window=4))
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from perfsift.operators.base import Decider, Operator, Router, SnapshotError
from perfsift.operators.batch import Batch


def stream(k: int = 2000, seed: int = 0, metrics: tuple[str, ...] = ("a", "b", "c", "d"), t0: float = 0.0) -> Batch:
    """A test stream: ``k`` rows of 9 nodes in 2 jobs, one row per second from ``t0``, independent
    normal values around 50 with 5 % gaps."""
    rng = np.random.default_rng(seed)
    vals = rng.normal(50, 5, size=(k, len(metrics)))
    vals[rng.random(vals.shape) < 0.05] = np.nan
    return Batch.from_columns(
        ts=t0 + np.arange(k, dtype=float),
        nodes=[f"n{i}" for i in rng.integers(0, 9, k)],
        metrics=list(metrics),
        values=vals,
        jobs=[f"j{i}" for i in rng.integers(0, 2, k)],
        seq=np.arange(k),
    )


# -- outputs as comparable values ----------------------------------------------------------------
def _rows(batch: Batch) -> list[str]:
    """One canonical text per row: job, node, time, the known values and the extra columns."""
    nodes, jobs = batch.node_names(), batch.job_names()
    out = []
    for i in range(len(batch)):
        known = {m: float(v) for m, v in zip(batch.metrics, batch.values[i].tolist(), strict=True) if v == v}
        extra = {k: np.asarray(col[i]).tolist() for k, col in sorted(batch.extra.items())}
        out.append(json.dumps([jobs[i], nodes[i], float(batch.ts[i]), known, extra], sort_keys=True, default=str))
    return out


def _records(records: list[dict[str, Any]]) -> list[str]:
    return [json.dumps(r, sort_keys=True, default=str) for r in records]


def emitted(op: Operator, out: Any) -> dict[str, list[str]]:
    """What an ``update`` or ``flush`` result says, as sortable text per kind of output: a
    transformer's rows, a decider's records, a router's rows or records per kind."""
    if out is None:
        return {}
    if isinstance(op, Router):
        return {
            kind: [r for part in out.get(kind, []) for r in (_rows(part) if is_batch else _records([part]))]
            for kind, is_batch in op.outputs.items()
        }
    if isinstance(op, Decider):
        return {op.output: _records(op.records(out))}
    return {"sample": _rows(out)}


def _joined(parts: list[dict[str, list[str]]]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for part in parts:
        for kind, rows in part.items():
            out.setdefault(kind, []).extend(rows)
    return out


def _same(x: dict[str, list[str]], y: dict[str, list[str]], what: str) -> None:
    kinds = set(x) | set(y)
    for kind in sorted(kinds):
        a, b = sorted(x.get(kind, [])), sorted(y.get(kind, []))
        assert a == b, f"{what}: {kind} outputs differ ({len(a)} vs {len(b)} rows/records)"


def _run(op: Operator, batches: list[Batch], flush: bool = True) -> dict[str, list[str]]:
    parts = [emitted(op, op.update(b)) for b in batches]
    if flush:
        parts.append(emitted(op, op.flush()))
    return _joined(parts)


#: the one-batch runs the split and key-order checks both compare against, computed once: keyed
#: by the operator's class, parameters and fingerprint (file content) and the stream's content
_ONE_BATCH: dict[tuple[type, str, str, str], dict[str, list[str]]] = {}


def _content(data: Batch) -> str:
    h = hashlib.sha256(json.dumps([data.metrics, data.nodes, data.jobs, sorted(data.extra)]).encode())
    for col in (
        data.ts,
        data.values,
        data.node_idx,
        data.job_idx,
        data.seq,
        *(data.extra[k] for k in sorted(data.extra)),
    ):
        a = np.asarray(col)  # an object column's bytes would be its pointers: its values' repr instead
        h.update(repr(a.tolist()).encode() if a.dtype == object else np.ascontiguousarray(a).tobytes())
    return h.hexdigest()


def _one_batch(op: Operator, data: Batch) -> dict[str, list[str]]:
    """``_run(op.clone(), [data])``, from the cache when the same configuration ran on the same rows."""
    key = (type(op), repr(op), op.fingerprint(), _content(data))
    if key not in _ONE_BATCH:
        while len(_ONE_BATCH) >= 8:
            del _ONE_BATCH[next(iter(_ONE_BATCH))]
        _ONE_BATCH[key] = _run(op.clone(), [data])
    return {kind: list(rows) for kind, rows in _ONE_BATCH[key].items()}


# -- the checks ----------------------------------------------------------------------------------
def check_split_batches_equal_one_batch(op: Operator, data: Batch) -> None:
    whole = _one_batch(op, data)
    assert any(whole.values()), f"{op!r} emitted nothing on the test stream: the check would prove nothing"
    pieces = [data.take(np.arange(s, min(s + 137, len(data)))) for s in range(0, len(data), 137)]
    _same(_run(op.clone(), pieces), whole, f"{op!r} on batches of 137 rows vs one batch")


def check_key_order_within_a_batch(op: Operator, data: Batch) -> None:
    """Rows of other keys interleaved differently: only each key's own order counts."""
    keys = data.job_idx * (len(data.nodes) + 1) + data.node_idx
    perm = np.argsort(keys, kind="stable")
    _same(_run(op.clone(), [data.take(perm)]), _one_batch(op, data), f"{op!r} on rows grouped by key")


def check_snapshot_restore_continues_identically(op: Operator, data: Batch) -> None:
    first, rest = data.take(np.arange(len(data) * 3 // 5)), data.take(np.arange(len(data) * 3 // 5, len(data)))
    original = op.clone()
    original.update(first)
    restored = op.clone()
    restored.restore(original.snapshot())
    _same(_run(restored, [rest]), _run(original, [rest]), f"{op!r} restored from a snapshot vs the original")


def _changed_params(op: Operator) -> list[tuple[str, Operator]]:
    """Operators that differ from ``op`` in one numeric parameter (those a valid value exists for)."""
    out = []
    for name, value in op.get_params().items():
        if isinstance(value, bool) or not isinstance(value, int | float):
            continue
        for new in (value * 2 if value else 1, value + 1, value / 2):
            try:
                other = type(op)(**{**op.get_params(), name: type(value)(new)})
            except (TypeError, ValueError):
                continue
            if getattr(other, name) != value:
                out.append((name, other))
                break
    return out


def check_fingerprint_follows_parameters(op: Operator, data: Batch) -> None:
    changed = _changed_params(op)
    assert changed or not any(isinstance(v, int | float) for v in op.get_params().values()), (
        f"{op!r}: no numeric parameter could be changed to a valid value"
    )
    snap = op.clone()
    snap.update(data.take(np.arange(50)))
    blob = snap.snapshot()
    for name, other in changed:
        assert other.fingerprint() != op.fingerprint(), f"{op!r}: fingerprint ignores {name}"
        try:
            other.restore(blob)
        except SnapshotError:
            continue
        raise AssertionError(f"{op!r}: a snapshot was restored into an operator with another {name}")
    assert op.clone().fingerprint() == op.fingerprint(), f"{op!r}: fingerprint differs between equal operators"


def check_fingerprint_follows_file_content(op: Operator, data: Batch) -> None:
    """For each parameter naming a file: the same operator on a copy of the file with other content
    (one more line at the end, which leaves YAML and JSON valid) has another fingerprint and
    refuses the original's snapshot."""
    for name in type(op).FILE_PARAMS:
        path = op.param_file(name)
        if path is None:
            continue
        with tempfile.TemporaryDirectory() as tmp:
            copy = Path(tmp) / path.name
            shutil.copyfile(path, copy)
            same = type(op)(**{**op.get_params(), name: str(copy)})
            assert same.fingerprint() == op.fingerprint(), f"{op!r}: fingerprint depends on the path of {name}"
            with copy.open("a") as fh:
                fh.write("\n\n")
            edited = type(op)(**{**op.get_params(), name: str(copy)})
        assert edited.fingerprint() != op.fingerprint(), f"{op!r}: fingerprint ignores the content of {name}"
        with contextlib.suppress(SnapshotError):
            edited.restore(op.snapshot())
            raise AssertionError(f"{op!r}: a snapshot was restored under other content of {name}")


def check_input_is_not_mutated(op: Operator, data: Batch) -> None:
    b = data.take(np.arange(300))
    before = (b.values.copy(), b.ts.copy(), b.node_idx.copy(), {k: v.copy() for k, v in b.extra.items()})
    op.clone().update(b)
    assert np.array_equal(b.values, before[0], equal_nan=True), f"{op!r} changed its input's values"
    assert np.array_equal(b.ts, before[1]) and np.array_equal(b.node_idx, before[2]), f"{op!r} changed its input"
    assert all(np.array_equal(b.extra[k], v, equal_nan=v.dtype.kind == "f") for k, v in before[3].items())


def check_state_stays_bounded(op: Operator, data: Batch) -> None:
    op = op.clone()
    op.update(stream(1000, seed=1, metrics=tuple(data.metrics)))
    size = len(op.snapshot())
    for seed in range(2, 12):
        op.update(stream(1000, seed=seed, metrics=tuple(data.metrics), t0=(seed - 1) * 1000.0))
    assert len(op.snapshot()) <= size * 1.1, f"{op!r}: state grew from {size} to {len(op.snapshot())} bytes"


def check_metrics_that_disappear_and_new_nodes(op: Operator, data: Batch) -> None:
    """Late rows from a new node, with one known metric gone and an unknown one: every sample is
    still accounted for (a transformer keeps both rows; a router lets both samples out)."""
    op = op.clone()
    op.update(data.take(np.arange(200)))
    t = float(data.ts[199]) + 1e4
    late = Batch.from_columns(
        ts=[t, t + 1], nodes=["new1", "n1"], metrics=[data.metrics[-1], "zz"], values=[[1.0, np.nan], [np.nan, 3.0]]
    )
    out = _joined([emitted(op, op.update(late)), emitted(op, op.flush())])
    if isinstance(op, Router):
        samples = [r for kind, is_batch in op.outputs.items() if is_batch for r in out.get(kind, [])]
        assert sum('"new1"' in r or '"zz": 3.0' in r for r in samples) == 2, f"{op!r} lost a late sample"
    elif not isinstance(op, Decider):
        rows = out["sample"]
        assert len(rows) == 2, f"{op!r} returned {len(rows)} rows for 2"


def check_repr_and_clone(op: Operator, data: Batch) -> None:
    assert repr(op.clone()) == repr(op), f"{op!r}: clone has another repr"
    assert op.clone().get_params() == op.get_params()
    assert type(op).role in ("transform", "decide", "route"), f"{type(op).__name__} has no role"


#: every check, in the order :func:`check_operator` runs them
CHECKS: list[Callable[[Operator, Batch], None]] = [
    check_repr_and_clone,
    check_input_is_not_mutated,
    check_split_batches_equal_one_batch,
    check_key_order_within_a_batch,
    check_snapshot_restore_continues_identically,
    check_fingerprint_follows_parameters,
    check_fingerprint_follows_file_content,
    check_state_stays_bounded,
    check_metrics_that_disappear_and_new_nodes,
]


def check_operator(op: Operator, data: Batch | None = None) -> None:
    """Run every check on ``op`` (a configured operator; it is cloned, never changed) with ``data``
    (default :func:`stream`); raises AssertionError naming the first property that fails."""
    data = stream() if data is None else data
    for check in CHECKS:
        check(op, data)
