"""Random monitoring streams for the operators' property tests (tests/unit/test_properties_*.py):
level jumps of 1e9 (and back), gaps (missing values and missing rows), repeated timestamps, node
clocks skewed against each other, rows of all nodes interleaved by arrival time (each node's rows
in its own order, as a Kafka partition keeps them), and a random split into micro-batches."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
from hypothesis import strategies as st
from perfsift.operators.batch import Batch


@dataclass(frozen=True)
class Stream:
    batch: Batch
    #: row indexes where a micro-batch ends (the last is len(batch))
    cuts: tuple[int, ...]

    def parts(self) -> Iterator[Batch]:
        start = 0
        for end in self.cuts:
            yield self.batch.take(np.arange(start, end))
            start = end


@st.composite
def streams(
    draw: st.DrawFn,
    nodes: tuple[int, int] = (1, 3),
    metrics: tuple[int, int] = (1, 3),
    rows: tuple[int, int] = (3, 40),
    level: float = 100.0,
) -> Stream:
    """A :class:`Stream`: ``rows`` samples per node of ``metrics`` metrics around ``level``, one
    sample per second of the node's own clock."""
    n_nodes, n_metrics, n_rows = draw(st.integers(*nodes)), draw(st.integers(*metrics)), draw(st.integers(*rows))
    jumps, gaps, repeats, skew = (draw(st.booleans()) for _ in range(4))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    ts, node, vals = [], [], []
    for i in range(n_nodes):
        t = np.arange(n_rows, dtype=np.float64) + (rng.uniform(-0.9, 0.9) if skew else 0.0)
        if repeats:  # a sample stamped with the time of the one before it
            dup = np.flatnonzero(rng.random(n_rows) < 0.15)
            t[dup[dup > 0]] = t[dup[dup > 0] - 1]
        v = level + rng.normal(0.0, 5.0, (n_rows, n_metrics)) * (1 + np.arange(n_metrics))
        if jumps:  # a level jump of 1e9 on one metric, and maybe back down
            j, m = int(rng.integers(0, n_rows)), int(rng.integers(0, n_metrics))
            back = int(rng.integers(j, n_rows + 1))
            v[j:back, m] += 1e9
        keep = np.ones(n_rows, dtype=bool)
        if gaps:
            v[rng.random(v.shape) < 0.1] = np.nan
            keep = rng.random(n_rows) >= 0.1  # rows that never arrive
        ts.append(t[keep])
        node.append(np.full(int(keep.sum()), i))
        vals.append(v[keep])
    ts_a, node_a, vals_a = np.concatenate(ts), np.concatenate(node), np.concatenate(vals)
    order = np.argsort(ts_a, kind="stable")  # arrival by time; a node's rows keep their order
    k = len(order)
    batch = Batch(
        ts=ts_a[order],
        node_idx=node_a[order].astype(np.int64),
        values=vals_a[order],
        metrics=tuple(f"m{j}" for j in range(n_metrics)),
        nodes=tuple(f"n{i}" for i in range(n_nodes)),
        job_idx=np.zeros(k, dtype=np.int64),
        jobs=("job",),
    )
    n_cuts = draw(st.integers(0, 4))
    cuts = sorted({int(c) for c in rng.integers(1, max(k, 2), n_cuts)} | {k}) if k else [0]
    return Stream(batch, tuple(c for c in cuts if c <= k))


def per_node(batch: Batch) -> dict[int, np.ndarray]:
    """Row indexes of each node, in arrival order."""
    return {int(n): np.flatnonzero(batch.node_idx == n) for n in np.unique(batch.node_idx)}


def streamed(op: object, stream: Stream) -> list[Batch]:
    """The operator's outputs for the stream's micro-batches."""
    return [op.update(part) for part in stream.parts()]  # type: ignore[attr-defined]


def numbers(obj: Any) -> list[float]:
    """Every float in a decoded record (nested dicts and lists), to check that all are finite."""
    if isinstance(obj, float):
        return [obj]
    if isinstance(obj, dict):
        return [x for v in obj.values() for x in numbers(v)]
    if isinstance(obj, list):
        return [x for v in obj for x in numbers(v)]
    return []
