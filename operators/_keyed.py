"""Shared bookkeeping for operators that keep state per (job, node) key and per metric name."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
from perfsift.operators.batch import Batch


class KeyedColumns:
    """Grows name tables for (job, node) keys and metrics; maps a batch onto them.

    Keys and metrics may appear at any time; indexes are stable once given.
    """

    def __init__(self) -> None:
        self.keys: list[tuple[str, str]] = []
        self.key_ix: dict[tuple[str, str], int] = {}
        self.metrics: list[str] = []
        self.metric_ix: dict[str, int] = {}

    def load(self, keys: list[list[str]] | list[tuple[str, str]], metrics: list[str] | tuple[str, ...] = ()) -> None:
        """Register keys and metrics in snapshot order (JSON gives keys back as lists)."""
        for job, node in keys:
            self.key_ix[(job, node)] = len(self.keys)
            self.keys.append((job, node))
        self.metric_columns(tuple(metrics))

    def metric_columns(self, metrics: tuple[str, ...]) -> npt.NDArray[np.int64]:
        """State column of each batch metric, registering new metrics."""
        ix = self.metric_ix
        for m in metrics:
            if m not in ix:
                ix[m] = len(self.metrics)
                self.metrics.append(m)
        return np.fromiter((ix[m] for m in metrics), dtype=np.int64, count=len(metrics))

    def row_keys(self, batch: Batch) -> npt.NDArray[np.int64]:
        """State key index of each batch row, registering new (job, node) keys."""
        n_nodes = max(len(batch.nodes), 1)
        pair = batch.job_idx * n_nodes + batch.node_idx
        uniq, inverse = np.unique(pair, return_inverse=True)
        mapped = np.empty(len(uniq), dtype=np.int64)
        for i, code in enumerate(uniq.tolist()):
            key = (batch.jobs[code // n_nodes], batch.nodes[code % n_nodes])
            k = self.key_ix.get(key)
            if k is None:
                k = self.key_ix[key] = len(self.keys)
                self.keys.append(key)
            mapped[i] = k
        return mapped[inverse.reshape(-1)]


def group_rows(
    keys: npt.NDArray[np.int64],
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64], npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """Stable grouping of rows by key.

    Returns ``order`` (row indexes sorted by key, arrival order kept within a key), the distinct
    keys ``uniq`` in sorted order, each group's size ``counts`` and each sorted row's rank within
    its group.
    """
    order = np.argsort(keys, kind="stable")
    uniq, counts = np.unique(keys[order], return_counts=True)
    starts = np.cumsum(counts) - counts
    rank = np.arange(len(keys)) - np.repeat(starts, counts)
    return order, uniq, counts, rank


def grow(arr: np.ndarray, axis: int, size: int, fill: float) -> np.ndarray:
    """Return ``arr`` enlarged along ``axis`` to at least ``size`` (capacity doubles), new cells = fill."""
    cur = arr.shape[axis]
    if size <= cur:
        return arr
    new = max(size, 2 * cur, 4)
    shape = list(arr.shape)
    shape[axis] = new - cur
    return np.concatenate([arr, np.full(shape, fill, dtype=arr.dtype)], axis=axis)
