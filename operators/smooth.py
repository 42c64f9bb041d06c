"""Smoothing per (job, node) and metric: sliding-window average and EWMA (METHODS.md §0.3).

Both operators see rows in arrival order per key (Kafka keeps a node's samples in order within a
partition); missing values (NaN) are skipped, so a window averages the values that are there.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np
import numpy.typing as npt
from perfsift.operators._keyed import KeyedColumns, group_rows, grow
from perfsift.operators.base import Transformer
from perfsift.operators.batch import Batch


def _smoothed(batch: Batch, values: np.ndarray, **extra: np.ndarray) -> Batch:
    """The batch with smoothed values and new columns. The cleaner's ``flags`` stay behind: they
    describe the values of perf.clean, not the means (sample.avsc), so a stage that cleans and
    smooths publishes the same smoothed records as two stages with a topic between them."""
    out = batch.with_values(values, None, **extra)
    if "flags" in out.extra:
        out = replace(out, extra={k: v for k, v in out.extra.items() if k != "flags"})
    return out


def _window_sums(padded: np.ndarray, starts: npt.NDArray[np.int64], w: int) -> np.ndarray:
    """Sums of ``padded[s : s + w]`` for every s in ``starts``, exactly, in O(len · log w).

    Binary lifting: level j holds the sums of 2**j consecutive rows, built from two halves of
    level j-1, and a window of w rows is the sum of the levels of w's binary digits. Every sum
    adds disjoint pieces, so no running total is subtracted and nothing drifts or cancels
    (a 1e15 spike leaves no residue in later windows, unlike a running sum or a cumsum).
    """
    out = np.zeros((len(starts), *padded.shape[1:]), dtype=padded.dtype)
    level = padded
    offset = np.zeros_like(starts)
    span, bit = 1, 0
    while span <= w:
        if w >> bit & 1:
            out += level[starts + offset]
            offset = offset + span
        if span * 2 > w:
            break
        level = level[:-span] + level[span:]
        span *= 2
        bit += 1
    return out


class SlidingMean(Transformer):
    """Average of the last ``window`` samples of each (job, node) and metric.

    ``x̄_t = (1/w) Σ_{k<w} x_{t-k}`` over the values present (NaN skipped). Before ``window``
    samples exist the average is over what is there and the row's ``warm`` column is False.

    Parameters
    ----------
    window : int
        Number of samples w in the window (>= 1).
    emit_every : int
        Output every ``emit_every``-th sample of each (job, node) only: its ``emit_every``-th,
        ``2·emit_every``-th, ... (counted over the key's whole stream, so the output does not depend
        on the micro-batches). 1 (the default) is the full-rate stream; ``emit_every == window``
        gives non-overlapping window means, each one warm (the default pipeline's setting).

    Examples
    --------
    >>> from perfsift.operators import Batch
    >>> op = SlidingMean(window=2)
    >>> out = op.update(Batch.from_columns(ts=[0, 1, 2], nodes=["a"] * 3, metrics=["cpu"],
    ...                                     values=[[1.0], [3.0], [8.0]]))
    >>> out.values[:, 0].tolist(), out.extra["warm"].tolist()
    ([1.0, 2.0, 5.5], [False, True, True])
    >>> op = SlidingMean(window=2, emit_every=2)
    >>> op.update(Batch.from_columns(ts=[0, 1, 2, 3], nodes=["a"] * 4, metrics=["cpu"],
    ...                              values=[[1.0], [3.0], [8.0], [2.0]])).values[:, 0].tolist()
    [2.0, 5.0]
    """

    def __init__(self, window: int = 10, emit_every: int = 1) -> None:
        self.window = window
        self.emit_every = emit_every

    def reset(self) -> None:
        if not isinstance(self.window, int) or self.window < 1:
            raise ValueError(f"window must be an integer >= 1, got {self.window!r}")
        if not isinstance(self.emit_every, int) or self.emit_every < 1:
            raise ValueError(f"emit_every must be an integer >= 1, got {self.emit_every!r}")
        self.cols_ = KeyedColumns()
        # last (window - 1) rows of every key, oldest first: [keys, window-1, metrics]
        self.buf_ = np.full((0, self.window - 1, 0), np.nan)
        self.seen_ = np.zeros(0, dtype=np.int64)

    def update(self, batch: Batch) -> Batch:
        if len(batch) == 0:
            return _smoothed(batch, batch.values.copy(), warm=np.zeros(0, dtype=bool))
        w, h = self.window, self.window - 1
        cols = self.cols_.metric_columns(batch.metrics)
        keys = self.cols_.row_keys(batch)
        n_state = len(self.cols_.metrics)
        self.buf_ = grow(grow(self.buf_, 0, len(self.cols_.keys), np.nan), 2, n_state, np.nan)
        self.seen_ = grow(self.seen_, 0, len(self.cols_.keys), 0)

        order, uniq, counts, rank = group_rows(keys)
        n_groups, k = len(uniq), len(batch)
        # Each group's segment = its h buffered rows followed by its new rows.
        seg_start = np.cumsum(counts + h) - (counts + h)
        padded = np.empty((k + n_groups * h, len(cols)))
        new_pos = np.repeat(seg_start + h, counts) + rank
        padded[new_pos] = batch.values[order]
        if h:
            buf_pos = (seg_start[:, None] + np.arange(h)).reshape(-1)
            padded[buf_pos] = self.buf_[uniq][:, :, cols].reshape(-1, len(cols))
        present = ~np.isnan(padded)
        stacked = np.concatenate([np.where(present, padded, 0.0), present.astype(np.float64)], axis=1)
        sums = _window_sums(stacked, new_pos - h, w)
        n = len(cols)
        with np.errstate(invalid="ignore", divide="ignore"):
            means_sorted = sums[:, :n] / sums[:, n:]
        means = np.empty_like(means_sorted)
        means[order] = means_sorted
        count = np.empty(k, dtype=np.int64)  # the row's number in its key's stream, from 1
        count[order] = self.seen_[np.repeat(uniq, counts)] + rank + 1
        warm = count >= w

        if h:
            tail = (seg_start + counts)[:, None] + np.arange(h)
            self.buf_[np.ix_(uniq, np.arange(h), cols)] = padded[tail]
        self.seen_[uniq] += counts
        out = _smoothed(batch, means, warm=warm)
        return out if self.emit_every == 1 else out.take(np.flatnonzero(count % self.emit_every == 0))

    def _state(self) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        nk, nm = len(self.cols_.keys), len(self.cols_.metrics)
        meta = {"keys": self.cols_.keys, "metrics": self.cols_.metrics}
        return meta, {"buf": self.buf_[:nk, :, :nm], "seen": self.seen_[:nk]}

    def _load_state(self, meta: dict[str, Any], arrays: dict[str, np.ndarray]) -> None:
        self.cols_.load(meta["keys"], meta["metrics"])
        self.buf_ = arrays["buf"].astype(np.float64).copy()
        self.seen_ = arrays["seen"].astype(np.int64).copy()


class Ewma(Transformer):
    """Exponentially weighted mean and variance per (job, node) and metric.

    ``m_t = m_{t-1} + α (x_t − m_{t-1})`` and ``v_t = (1−α)(v_{t-1} + α (x_t − m_{t-1})²)``,
    started at ``m_1 = x_1, v_1 = 0``; a missing value leaves both unchanged. The output values
    are the means; the ``ewm_var`` extra column holds the variances (rows × metrics).

    Parameters
    ----------
    alpha : float
        Smoothing gain in (0, 1]; the equivalent window is about 2/α − 1.

    Examples
    --------
    >>> from perfsift.operators import Batch
    >>> op = Ewma(alpha=0.5)
    >>> out = op.update(Batch.from_columns(ts=[0, 1, 2], nodes=["a"] * 3, metrics=["x"],
    ...                                     values=[[10.0], [20.0], [30.0]]))
    >>> out.values[:, 0].tolist(), out.extra["ewm_var"][:, 0].tolist()
    ([10.0, 15.0, 22.5], [0.0, 25.0, 68.75])
    """

    def __init__(self, alpha: float = 0.2) -> None:
        self.alpha = alpha

    def reset(self) -> None:
        if not 0.0 < float(self.alpha) <= 1.0:
            raise ValueError(f"alpha must be in (0, 1], got {self.alpha!r}")
        self.cols_ = KeyedColumns()
        self.mean_ = np.full((0, 0), np.nan)
        self.var_ = np.full((0, 0), np.nan)

    def update(self, batch: Batch) -> Batch:
        k = len(batch)
        cols = self.cols_.metric_columns(batch.metrics)
        keys = self.cols_.row_keys(batch)
        nk, nm = len(self.cols_.keys), len(self.cols_.metrics)
        self.mean_ = grow(grow(self.mean_, 0, nk, np.nan), 1, nm, np.nan)
        self.var_ = grow(grow(self.var_, 0, nk, np.nan), 1, nm, np.nan)
        out_m = np.empty((k, len(cols)))
        out_v = np.empty((k, len(cols)))
        if k == 0:
            return _smoothed(batch, out_m, ewm_var=out_v)
        a = float(self.alpha)
        order, _, _, rank = group_rows(keys)
        sorted_keys = keys[order]
        # The recursion is sequential per key but independent across keys: step through the
        # r-th row of every key at once, so the Python loop runs (max rows per key) times.
        for r in range(int(rank.max()) + 1):
            rows = order[rank == r]
            kk = sorted_keys[rank == r][:, None]
            m = self.mean_[kk, cols]
            v = self.var_[kk, cols]
            x = batch.values[rows]
            has_x = ~np.isnan(x)
            first = has_x & np.isnan(m)
            delta = x - m
            m_new = np.where(first, x, np.where(has_x, m + a * delta, m))
            v_new = np.where(first, 0.0, np.where(has_x, (1 - a) * (v + a * delta * delta), v))
            self.mean_[kk, cols] = m_new
            self.var_[kk, cols] = v_new
            out_m[rows] = m_new
            out_v[rows] = v_new
        return _smoothed(batch, out_m, ewm_var=out_v)

    def _state(self) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        nk, nm = len(self.cols_.keys), len(self.cols_.metrics)
        meta = {"keys": self.cols_.keys, "metrics": self.cols_.metrics}
        return meta, {"mean": self.mean_[:nk, :nm], "var": self.var_[:nk, :nm]}

    def _load_state(self, meta: dict[str, Any], arrays: dict[str, np.ndarray]) -> None:
        self.cols_.load(meta["keys"], meta["metrics"])
        self.mean_ = arrays["mean"].astype(np.float64).copy()
        self.var_ = arrays["var"].astype(np.float64).copy()
