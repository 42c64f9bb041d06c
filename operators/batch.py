"""Column batches: how samples travel inside operators.

A batch holds k samples as columns: event times ``ts[k]``, node and job indexes into name
tables, producer sequence numbers ``seq[k]`` and a float64 matrix ``values[k, n]`` whose columns
are named by ``metrics`` (NaN = missing). Operators work on whole columns, never per record.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


@dataclass(frozen=True, eq=False)
class Batch:
    """k samples in columns.

    Parameters
    ----------
    ts : float64[k]
        Event time in seconds.
    node_idx : int64[k]
        Index into ``nodes`` of each row's node.
    values : float64[k, n]
        Metric values; NaN marks a missing value.
    metrics : tuple of n str
        Column names of ``values``.
    nodes : tuple of str
        Node names (the name table ``node_idx`` points into).
    job_idx : int64[k]
        Index into ``jobs`` of each row's job.
    jobs : tuple of str
        Job names.
    seq : int64[k]
        Producer sequence number per (job, node); -1 when not tracked.
    extra : mapping of str to array[k]
        Per-row columns an operator adds (e.g. ``warm`` from smoothing).

    Examples
    --------
    >>> b = Batch.from_columns(ts=[0.0, 1.0], nodes=["a", "b"], metrics=["cpu"], values=[[1.0], [2.0]])
    >>> len(b), b.metrics, b.node_names()
    (2, ('cpu',), ['a', 'b'])
    """

    ts: FloatArray
    node_idx: IntArray
    values: FloatArray
    metrics: tuple[str, ...]
    nodes: tuple[str, ...]
    job_idx: IntArray
    jobs: tuple[str, ...] = ("default",)
    seq: IntArray = field(default_factory=lambda: np.empty(0, dtype=np.int64))
    extra: Mapping[str, np.ndarray] = field(default_factory=dict)

    def __post_init__(self) -> None:
        k = self.ts.shape[0]
        if self.values.shape != (k, len(self.metrics)):
            raise ValueError(
                f"values has shape {self.values.shape}, expected ({k}, {len(self.metrics)}) (rows x metrics)"
            )
        if self.node_idx.shape != (k,) or self.job_idx.shape != (k,):
            raise ValueError("node_idx and job_idx must have one entry per row")
        if self.seq.shape != (k,):
            object.__setattr__(self, "seq", np.full(k, -1, dtype=np.int64))
        for name, col in self.extra.items():
            if col.shape[0] != k:
                raise ValueError(f"extra column {name!r} has {col.shape[0]} rows, expected {k}")

    def __len__(self) -> int:
        return int(self.ts.shape[0])

    @classmethod
    def from_columns(
        cls,
        ts: Sequence[float] | FloatArray,
        nodes: Sequence[str],
        metrics: Sequence[str],
        values: Sequence[Sequence[float]] | FloatArray,
        jobs: Sequence[str] | None = None,
        seq: Sequence[int] | IntArray | None = None,
    ) -> Batch:
        """Build a batch from per-row node (and job) names; name tables are made here."""
        node_table: dict[str, int] = {}
        node_idx = np.fromiter((node_table.setdefault(n, len(node_table)) for n in nodes), dtype=np.int64)
        job_names = list(jobs) if jobs is not None else ["default"] * len(node_idx)
        job_table: dict[str, int] = {}
        job_idx = np.fromiter((job_table.setdefault(j, len(job_table)) for j in job_names), dtype=np.int64)
        vals = np.asarray(values, dtype=np.float64).reshape(len(node_idx), len(metrics))
        return cls(
            ts=np.asarray(ts, dtype=np.float64),
            node_idx=node_idx,
            values=vals,
            metrics=tuple(metrics),
            nodes=tuple(node_table),
            job_idx=job_idx,
            jobs=tuple(job_table) or ("default",),
            seq=np.asarray(seq, dtype=np.int64) if seq is not None else np.full(len(node_idx), -1, np.int64),
        )

    @classmethod
    def empty(cls, metrics: Sequence[str] = ()) -> Batch:
        return cls(
            ts=np.empty(0),
            node_idx=np.empty(0, dtype=np.int64),
            values=np.empty((0, len(metrics))),
            metrics=tuple(metrics),
            nodes=(),
            job_idx=np.empty(0, dtype=np.int64),
            jobs=(),
            seq=np.empty(0, dtype=np.int64),
        )

    def node_names(self) -> list[str]:
        return [self.nodes[i] for i in self.node_idx.tolist()]

    def job_names(self) -> list[str]:
        return [self.jobs[i] for i in self.job_idx.tolist()]

    def take(self, rows: npt.ArrayLike) -> Batch:
        """The rows selected by an index array or boolean mask, in that order."""
        r = np.asarray(rows)
        return Batch(
            ts=self.ts[r],
            node_idx=self.node_idx[r],
            values=self.values[r],
            metrics=self.metrics,
            nodes=self.nodes,
            job_idx=self.job_idx[r],
            jobs=self.jobs,
            seq=self.seq[r],
            extra={k: v[r] for k, v in self.extra.items()},
        )

    def with_values(self, values: FloatArray, metrics: Sequence[str] | None = None, **extra: np.ndarray) -> Batch:
        """Same rows, new value matrix (and optionally new metric names and extra columns)."""
        return Batch(
            ts=self.ts,
            node_idx=self.node_idx,
            values=values,
            metrics=self.metrics if metrics is None else tuple(metrics),
            nodes=self.nodes,
            job_idx=self.job_idx,
            jobs=self.jobs,
            seq=self.seq,
            extra={**self.extra, **extra},
        )

    @staticmethod
    def concat(batches: Sequence[Batch]) -> Batch:
        """Stack batches row-wise, merging their name tables and metric columns (NaN where absent)."""
        batches = [b for b in batches if len(b)]
        if not batches:
            return Batch.empty()
        if len(batches) == 1:
            return batches[0]
        metric_ix: dict[str, int] = {}
        node_ix: dict[str, int] = {}
        job_ix: dict[str, int] = {}
        for b in batches:
            for m in b.metrics:
                metric_ix.setdefault(m, len(metric_ix))
            for n in b.nodes:
                node_ix.setdefault(n, len(node_ix))
            for j in b.jobs:
                job_ix.setdefault(j, len(job_ix))
        k = sum(len(b) for b in batches)
        values = np.full((k, len(metric_ix)), np.nan)
        node_idx = np.empty(k, dtype=np.int64)
        job_idx = np.empty(k, dtype=np.int64)
        extra_keys = set.intersection(*(set(b.extra) for b in batches))
        start = 0
        for b in batches:
            stop = start + len(b)
            cols = np.fromiter((metric_ix[m] for m in b.metrics), dtype=np.int64, count=len(b.metrics))
            values[start:stop, cols] = b.values
            node_map = np.fromiter((node_ix[n] for n in b.nodes), dtype=np.int64, count=len(b.nodes))
            job_map = np.fromiter((job_ix[j] for j in b.jobs), dtype=np.int64, count=len(b.jobs))
            node_idx[start:stop] = node_map[b.node_idx]
            job_idx[start:stop] = job_map[b.job_idx]
            start = stop
        return Batch(
            ts=np.concatenate([b.ts for b in batches]),
            node_idx=node_idx,
            values=values,
            metrics=tuple(metric_ix),
            nodes=tuple(node_ix),
            job_idx=job_idx,
            jobs=tuple(job_ix),
            seq=np.concatenate([b.seq for b in batches]),
            extra={key: np.concatenate([b.extra[key] for b in batches]) for key in sorted(extra_keys)},
        )
