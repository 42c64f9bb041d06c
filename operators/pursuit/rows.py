"""The rows of one period's analysis: a job's ring of smoothed rows per node, and the stacked
snapshots cut from it (METHODS.md §1.2 step 1; docs/pursuit.md).

:class:`JobState` holds, per job, each node's most recent smoothed rows; :func:`stacked_rows`
builds the period's matrix (rows = nodes × snapshots ``window`` samples apart, columns = metrics in
name order) and, for the evidence (:mod:`~perfsift.operators.pursuit.evidence`), the raw snapshots
as a nodes × snapshots × metrics block.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np
from perfsift.operators.pursuit.projection import across_processors


@dataclass(frozen=True)
class RowConfig:
    """The operator's parameters that shape the rows."""

    window: int
    row_mode: str
    h_max: int
    snapshot_norm: str
    target_rows_per_dim: int
    evidence_snapshots: int
    evidence_gap: int


class JobState:
    """Per job: a ring of each node's most recent smoothed rows, and the last result."""

    def __init__(self, capacity: int) -> None:
        self.metrics: list[str] = []
        self.metric_ix: dict[str, int] = {}
        self.nodes: list[str] = []
        self.node_ix: dict[str, int] = {}
        self.ring = np.full((0, capacity, 0), np.nan)  # node × position × metric
        self.ring_ts = np.full((0, capacity), np.nan)  # event time of each ring row
        self.count = np.zeros(0, dtype=np.int64)  # rows ever written per node (position = count % capacity)
        self.last_ts = np.zeros(0)  # newest event time per node
        self.period: int | None = None  # index of the open period
        self.first_period: int | None = None  # the job's first period
        self.late = 0
        self.version = 0
        self.selected: list[str] = []
        self.scores: dict[str, float] = {}
        self.index: float | None = None
        self.weights: np.ndarray | None = None  # B of the last result, rows = weight_names
        self.weight_names: list[str] = []
        self.row_id = np.zeros((0, 2), dtype=np.int64)  # (node, snapshot) of each row of the last matrix


def noise_scale(v: np.ndarray) -> np.ndarray:
    """Per metric, the robust scale of the nodes' own noise in ``v`` (nodes × snapshots × metrics):
    each snapshot centred on its median across nodes (a common trend or burst cancels), then
    1.4826 · the median |first difference| over snapshots of each node, / √2 -- an offset, a group
    or a slow drift cancels in the differences, and one bursty node cannot inflate a median. 1.0
    where it is 0 or undefined (a constant metric, or too few snapshots).

    >>> v = np.zeros((3, 4, 1)); v[0, :, 0] = 100.0; v[:, ::2, 0] += [[1.0], [-1.0], [0.0]]
    >>> noise_scale(v).round(3).tolist()  # node 0's offset of 100 does not count, its noise does
    [1.048]
    """
    # np.median where nothing is missing (the usual case): np.nanmedian on these small arrays is
    # about 3x slower, a tenth of an update at P = n = 12 (the same values)
    median = np.nanmedian if np.isnan(v).any() else np.median
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        c = v - median(v, axis=0, keepdims=True)
        s = 1.4826 * median(np.abs(np.diff(c, axis=1)), axis=(0, 1)) / np.sqrt(2)
    return np.where(np.isfinite(s) & (s > 0), s, 1.0)


def evidence_block(
    st: JobState, live: np.ndarray, newest: np.ndarray, oldest: np.ndarray, cfg: RowConfig
) -> np.ndarray:
    """The raw snapshots for the evidence: nodes × snapshots × metrics (ring order of metrics),
    snapshots ``evidence_gap · window`` samples apart (also in ``row_mode="processors"``), as many
    as the median node has (at most ``evidence_snapshots``); nodes with fewer are left out of it.
    Two windows apart by default, not one: noise with a memory of a few samples (AR(1)) would
    otherwise make adjacent window means of a node alike, which the evidence would take for a
    difference."""
    cap = st.ring.shape[1]
    step = cfg.evidence_gap * cfg.window
    avail = np.minimum((newest - oldest) // step + 1, cfg.evidence_snapshots)
    h = int(np.median(avail))
    keep = avail >= h
    k, i = live[keep], newest[keep]
    pos = (i[:, None] - step * np.arange(h)[None, :]) % cap
    return st.ring[k[:, None], pos]


def stacked_rows(
    st: JobState, start: float, end: float, cfg: RowConfig
) -> tuple[np.ndarray, list[str], dict[str, Any], np.ndarray]:
    """(rows, metric names, diagnostics, evidence block): rows = the nodes that reported in
    [start, end) × stacked snapshots of their rows before end, columns = metrics in name order
    (§1.2 step 1); the evidence block is :func:`evidence_block` with its metrics in name order."""
    cap = st.ring.shape[1]
    w = cfg.window if cfg.row_mode == "stacked" else 1
    # nodes in name order and metrics in name order: the matrix (and with it every rounding in the
    # analysis) does not depend on the order in which nodes and metrics first appeared
    ks = np.array(sorted(range(len(st.nodes)), key=st.nodes.__getitem__), dtype=np.int64)
    ks = ks[st.count[ks] > 0]
    n = st.count[ks]
    oldest = np.maximum(n - cap, 0)
    back = n[:, None] - 1 - np.arange(cap)[None, :]  # each node's rows, newest first (as counts)
    valid = back >= oldest[:, None]
    ts = st.ring_ts[ks[:, None], back % cap]
    sentinel = np.ones((len(ks), 1), dtype=bool)
    # the newest row before end (rows past the period: not yet), then how many rows in [start, end)
    # lead up to it; NaN times compare false, as they did one row at a time
    first = np.argmax(np.c_[~valid | ~(ts >= end), sentinel], axis=1)
    at = np.minimum(first, cap - 1)
    each = np.arange(len(ks))
    live_mask = (first < cap) & valid[each, at] & ~(ts[each, at] < start)  # else no row in this period
    past = np.c_[~valid | ~(ts >= start), sentinel] & (np.arange(cap + 1)[None, :] >= first[:, None])
    in_period = (np.argmax(past, axis=1) - first)[live_mask]
    live_a = ks[live_mask]
    newest_abs = (n - 1 - first)[live_mask]
    oldest_abs = oldest[live_mask]
    newest_a = newest_abs % cap
    avail_a = np.minimum((newest_abs - oldest_abs) // w + 1, cfg.h_max)
    info: dict[str, Any] = {"nodes": len(live_a)}
    if len(live_a):
        info["samples_per_node"] = float(np.mean(in_period))
    order = sorted(range(len(st.metrics)), key=st.metrics.__getitem__)
    names = [st.metrics[j] for j in order]
    if not len(live_a):
        return np.zeros((0, len(st.metrics))), names, info, np.zeros((0, 0, len(st.metrics)))
    v = evidence_block(st, live_a, newest_abs, oldest_abs, cfg)

    def snapshots(h: int) -> np.ndarray:
        """Snapshot j (the j-th newest, w samples apart) of every node that has it, for j < h."""
        keep = [j for j in range(h) if j == 0 or (avail_a > j).sum() >= 2]
        if avail_a.min() >= len(keep):  # every node has every snapshot: one block, normalised at once
            pos = (newest_a[None, :] - w * np.arange(len(keep))[:, None]) % cap
            st.row_id = np.c_[np.tile(live_a, len(keep)), np.repeat(keep, len(live_a))]
            block = across_processors(st.ring[live_a[None, :], pos], cfg.snapshot_norm)
            return block.reshape(-1, block.shape[2])
        rows = [(live_a[avail_a > j], (newest_a[avail_a > j] - w * j) % cap) for j in keep]
        st.row_id = np.concatenate([np.c_[k, np.full(len(k), j)] for (k, _), j in zip(rows, keep, strict=True)])
        return np.concatenate([across_processors(st.ring[k, p], cfg.snapshot_norm) for k, p in rows], axis=0)

    if cfg.row_mode == "processors":
        h, x = 1, snapshots(1)
    else:
        probe = snapshots(cfg.h_max)
        ok = ~np.isnan(probe)
        present = ok.mean(axis=0) >= 0.5
        with warnings.catch_warnings():  # all-NaN columns: their sd is NaN, which the test rejects
            warnings.simplefilter("ignore", RuntimeWarning)
            sd = np.nanstd(probe, axis=0)
            mean = np.abs(np.nanmean(probe, axis=0))
        n_eff = int((present & (sd > np.maximum(1e-9 * mean, 1e-12))).sum())
        h = int(np.clip(np.ceil(cfg.target_rows_per_dim * max(n_eff, 1) / len(live_a)), 1, cfg.h_max))
        upto = st.row_id[:, 1] < h  # the first h snapshots: the probe's first rows, not made again
        x, st.row_id = probe[upto], st.row_id[upto]
    info["snapshots"] = h
    v = v[:, :, order]
    x = x[:, order]
    if cfg.snapshot_norm == "noise":  # centred per snapshot above; now in units of each metric's noise
        x = x / noise_scale(v)
    return x, names, info, v
