"""Which nodes stand apart on a period's projection (docs/pursuit.md, "Nodes that stand apart").

Projection pursuit names the metrics in which the nodes of a job differ; :func:`node_deviants`
names the nodes that differ, the actionable half of Vetter & Reed's figures (the projected
processors with the outliers labelled).

The rows of a period are stacked snapshots: every node once per snapshot. In each snapshot a
node's projected position (its row times the analysis' metric-space weights B) gets a robust
z-score across the nodes of that snapshot, per projection axis: (position − median over nodes) /
(1.4826 · MAD over nodes); the norm of these over the axes is the node's robust distance from the
typical node in that snapshot (its |z| on a 1-D projection). A node's ``z`` is the **median of that
distance over the period's snapshots** (≥ 0; a typical node of a 3-D projection scores about 1.5).
The distance, not the largest axis, because the offset of a node can be split across the axes.
Taking the median of per-snapshot scores (rather than scoring each node's median position once)
asks that a node stand apart *in most snapshots*: projection pursuit can always find some
direction in which one of a dozen nodes' noise averages lie apart, but not one in which the same
node is apart snapshot after snapshot unless it really behaves differently.

A node's *deviation* in a metric is scored the same way (median over snapshots of the robust z
across nodes of the metric's value). A node **stands apart** when ``z ≥ threshold`` and its
largest |deviation| in a selected metric also reaches the threshold: the projection is fitted to
the same rows, and in a period with few rows (the first period of a trace, ``--rows processors``)
it can place a node apart by noise alone, in a mix of metrics none of which differs. Each node that
stands apart lists the selected metrics of largest |deviation|.
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
from perfsift.operators.pursuit._naming_kernel import cell_sums, residuals_from_others

MAD_SCALE = 1.4826  # MAD of a normal sample × 1.4826 ≈ its standard deviation
TOP_METRICS = 3  # metrics listed per node that stands apart


def robust_z(v: np.ndarray) -> np.ndarray:
    """Robust z-scores of the rows of v (nodes × k) per column: (v − median) / (1.4826 · MAD).

    A column whose MAD is 0 (half the nodes or more equal) falls back to 1.2533 × the mean
    absolute deviation from the median (the normal-consistent scale of the mean deviation); a
    column with no spread at all scores 0. A stack (… × nodes × k) is scored block by block, with
    the same values as one block at a time.

    >>> robust_z(np.array([[0.0], [1.0], [2.0], [3.0], [30.0]])).ravel().round(2).tolist()
    [-1.35, -0.67, 0.0, 0.67, 18.89]
    """
    med = np.median(v, axis=-2, keepdims=True)
    dev = v - med
    mad = MAD_SCALE * np.median(np.abs(dev), axis=-2, keepdims=True)
    mean_dev = 1.2533 * np.mean(np.abs(dev), axis=-2, keepdims=True)
    scale = np.where(mad > 0, mad, mean_dev)
    tiny = scale <= 1e-12 * np.maximum(np.abs(med), 1.0)
    return np.where(tiny, 0.0, dev / np.where(tiny, 1.0, scale))


def snapshot_scores(v: np.ndarray, row_id: np.ndarray, distance: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """(nodes that have a score, their scores): for rows ``v`` (rows × k) with ``row_id`` = (node,
    snapshot) per row, the robust z of each row across the rows of its snapshot (snapshots with
    fewer than 3 nodes are left out) -- with ``distance`` the norm of the row's z over the k
    columns -- then per node the median over its snapshots."""
    return _node_medians(_snapshot_z(v, row_id), row_id, distance)


def _snapshot_z(v: np.ndarray, row_id: np.ndarray) -> np.ndarray:
    """The robust z of each row across the rows of its snapshot (NaN in snapshots of < 3 rows)."""
    z = np.full(v.shape, np.nan)
    order = np.argsort(row_id[:, 1], kind="stable")  # by snapshot, each one's rows in row order
    _, first, counts = np.unique(row_id[order, 1], return_index=True, return_counts=True)
    for c in np.unique(counts[counts >= 3]):  # the snapshots with as many rows at once: one 3-D block
        rows = order[first[counts == c, None] + np.arange(c)]
        z[rows] = robust_z(v[rows])
    return z


def _node_medians(z: np.ndarray, row_id: np.ndarray, distance: bool) -> tuple[np.ndarray, np.ndarray]:
    """:func:`snapshot_scores` from the per-row z of :func:`_snapshot_z`."""
    scored = ~np.isnan(z[:, 0]) if z.shape[1] else np.zeros(len(z), dtype=bool)
    node = row_id[scored, 0]
    order = np.argsort(node, kind="stable")
    codes, first, counts = np.unique(node[order], return_index=True, return_counts=True)
    zz = z[scored][order]
    if distance:
        zz = np.linalg.norm(zz, axis=1, keepdims=True)
    out = np.zeros((len(codes), zz.shape[1]))
    for c in np.unique(counts):  # nodes with as many snapshots at once: one median over a 3-D block
        which = np.flatnonzero(counts == c)
        out[which] = np.median(zz[first[which, None] + np.arange(c)], axis=1)
    return codes, out


def node_deviants(
    x: np.ndarray,
    names: list[str],
    row_id: np.ndarray,
    nodes: list[str],
    weights: np.ndarray,
    weight_names: list[str],
    selected: list[str],
    threshold: float,
) -> tuple[dict[str, float], dict[str, list[float]], list[dict[str, Any]]]:
    """(z of every node, its position, the nodes that stand apart) for one analysed period. The
    position is, per projection axis, the median over the snapshots of the node's robust z (what a
    scatter of the projected nodes draws).

    ``x``: the rows the analysis ran on (columns ``names``); ``row_id``: each row's (index into
    ``nodes``, snapshot); ``weights``: the analysis' metric-space weights B (rows ``weight_names``,
    a subset of ``names``); ``selected``: the metrics the period selected. Each node that stands
    apart (``z`` and its largest |deviation| in a selected metric ≥ ``threshold``) is ``{"node",
    "z", "metrics": [{"metric", "deviation"}, ...]}`` (the selected metrics of largest |deviation|,
    at most three, largest first), the list ordered by decreasing z.
    Periods with fewer than three nodes per snapshot give no scores.
    """
    if weights.size == 0 or len(x) == 0:
        return {}, {}, []
    col = {m: j for j, m in enumerate(names)}
    xs = x[:, [col[m] for m in weight_names]]
    sd = xs.std(axis=0)
    y = ((xs - xs.mean(axis=0)) / np.where(sd > 0, sd, 1.0)) @ weights  # rows × axes
    y_z = _snapshot_z(y, row_id)  # one robust z per row for both the distance and the position
    present, dist = _node_medians(y_z, row_id, distance=True)
    if not len(present):
        return {}, {}, []
    z = dist[:, 0]
    node_z = {nodes[int(k)]: float(v) for k, v in zip(present, z, strict=True)}
    has_pos, pos = _node_medians(y_z, row_id, distance=False)
    node_pos = {nodes[int(k)]: [float(v) for v in p] for k, p in zip(has_pos, pos, strict=True)}
    candidates = [int(i) for i in np.argsort(-z, kind="stable") if z[i] >= threshold]
    sel = [m for m in selected if m in col]
    if not candidates or not sel:
        return node_z, node_pos, []
    has, dev_all = snapshot_scores(x[:, [col[m] for m in sel]], row_id)
    where = {int(k): r for r, k in enumerate(has)}
    out: list[dict[str, Any]] = []
    for i in candidates:
        dev = dev_all[where[int(present[i])]]
        if not np.abs(dev).max() >= threshold:
            continue  # apart in a fitted mix of metrics only (see the module docstring)
        top = np.argsort(-np.abs(dev), kind="stable")[:TOP_METRICS]
        metrics = [{"metric": sel[j], "deviation": float(dev[j])} for j in top]
        out.append({"node": nodes[int(present[i])], "z": float(z[i]), "metrics": metrics})
    return node_z, node_pos, out


# -- naming per period: which nodes deviate *now* (issue #32) ----------------------------------------
# The projection-based ``deviants`` above score a node by the median over the stacked history, so a
# node that starts to deviate is named late and a short episode never. :func:`name_nodes` scores each
# node on the current period's rows alone, against a noise scale pooled over the last few periods.

ALPHA = 0.01  # chance that a calm period names any node (Bonferroni over nodes × metrics × 3 sides)
MEMORY = 8  # periods (the current one and up to 7 before it, as far as the ring reaches) pooled for the scale
MIN_PERIODS = 3  # periods with rows pooled before anyone is named (the first ones of a job: no baseline yet)
KINDS = ("level", "noise")
MAD_EFFICIENCY = 0.37  # asymptotic efficiency of the MAD scale at the normal: ~0.37·N degrees of freedom


def _cells(ring: np.ndarray, ring_ts: np.ndarray, tau: float, end: float, memory: int) -> tuple[np.ndarray, ...]:
    """(mean, sd, valid) per node × period × metric of each node's rows in the last ``memory`` periods
    before ``end`` (period r = 0 the oldest, r = memory − 1 the current one), after subtracting from
    every row the median over the nodes of the rows in its sampling interval: what every node does at
    once (trends, common bursts) leaves neither the level nor the noise."""
    k_n, _, n = ring.shape
    lo = end - memory * tau
    ok = (ring_ts >= lo) & (ring_ts < end)
    kk, pp = np.nonzero(ok)
    if not len(kk):
        z = np.zeros((k_n, memory, n))
        return z, z, z.astype(bool)
    ts = ring_ts[kk, pp]
    busiest = np.bincount(kk).argmax()
    steps = np.diff(np.sort(ts[kk == busiest]))
    steps = steps[steps > 0]
    dt = float(np.median(steps)) if len(steps) else tau
    dt = min(dt, tau)
    bins = int(np.ceil(memory * tau / dt - 1e-9))
    b = np.minimum(((ts - lo) / dt).astype(np.int64), bins - 1)
    grid = np.full((k_n, bins, n), np.nan)
    grid[kk, b] = ring[kk, pp]  # two rows of a node in one interval: one of them
    grid = residuals_from_others(grid)
    starts = np.unique(np.minimum((np.arange(memory) * tau / dt).astype(np.int64), bins - 1))
    first = (starts * dt / tau + 1e-9).astype(np.int64)  # the period each start opens
    period_of = first[np.searchsorted(starts, np.arange(bins), side="right") - 1]
    # the noise: RMS of first differences (consecutive intervals of the same period). Through a
    # sliding mean of w samples the differences (x_t - x_{t-w}) / w are correlated only w apart, so
    # a period's m rows give ~m terms where the rows' own spread has ~m / w.
    cnt, s1, cd, s2d = cell_sums(grid, period_of, memory)
    # a cell counts with >= 2 rows and >= half the rows of the fullest node of its period (a node's
    # oldest period can be cut short by the ring, a joining node's first one by its start)
    valid = (cnt >= 2) & (cnt >= 0.5 * cnt.max(axis=0, keepdims=True))
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = np.where(valid, s1 / cnt, np.nan)
        sd = np.where(valid & (cd >= 1), np.sqrt(s2d / np.maximum(cd, 1)), np.nan)
    return mean, sd, valid


def _nanmedian0(a: np.ndarray) -> np.ndarray:
    """The median over axis 0 ignoring NaN (NaN where a column has none): np.nanmedian's result,
    without its masked-array path (ten times slower on these small arrays).

    >>> _nanmedian0(np.array([[1.0, np.nan], [5.0, np.nan], [2.0, 3.0]])).tolist()
    [2.0, 3.0]
    """
    s = np.sort(a, axis=0)  # NaN last
    c = (~np.isnan(a)).sum(axis=0)
    lo = np.clip((c - 1) // 2, 0, a.shape[0] - 1)[None]
    hi = np.clip(c // 2, 0, a.shape[0] - 1)[None]
    med = 0.5 * (np.take_along_axis(s, lo, axis=0) + np.take_along_axis(s, hi, axis=0))[0]
    return np.where(c > 0, med, np.nan)


def _pooled_z(d: np.ndarray, valid: np.ndarray, floor: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(z of the current period, pooled cells per metric): ``d`` (node × period × metric) centred per
    period across nodes, scaled by 1.4826 × the median |d| over every valid cell of the memory."""
    a = np.where(valid, np.abs(d), np.nan)
    scale = MAD_SCALE * _nanmedian0(a.reshape(-1, d.shape[2]))
    scale = np.where(np.isfinite(scale), scale, 0.0)
    tiny = scale <= floor
    z = np.where(tiny[None, :] | ~valid[:, -1], 0.0, d[:, -1] / np.where(tiny, 1.0, scale)[None, :])
    return z, valid.reshape(-1, d.shape[2]).sum(axis=0)


def naming_threshold(tests: int, pooled: float, alpha: float = ALPHA) -> float:
    """The z a node must reach: the one-sided Student-t quantile at alpha / tests with
    MAD_EFFICIENCY × pooled degrees of freedom (the pooled MAD is itself an estimate; few pooled cells,
    as in the first periods of a 4-node job, raise the threshold rather than the false names).

    >>> round(naming_threshold(4 * 8 * 3, 10**6), 2), round(naming_threshold(4 * 8 * 3, 32), 2)
    (3.71, 5.27)
    """
    from scipy.special import stdtrit

    # scipy.stats.t.isf(q, df) is -stdtrit(df, q) (its _isf) behind argument checks that cost more
    return float(-stdtrit(max(MAD_EFFICIENCY * pooled, 1.0), alpha / max(tests, 1)))


def name_nodes(
    ring: np.ndarray,
    ring_ts: np.ndarray,
    nodes: list[str],
    metrics: list[str],
    tau: float,
    end: float,
    alpha: float = ALPHA,
    memory: int = MEMORY,
) -> dict[str, Any]:
    """The nodes that deviate in the period [end − tau, end), from its own rows (the record's
    ``deviant_*`` fields; docs/pursuit.md, "Naming a node as it starts").

    ``ring`` (node × row × metric) and ``ring_ts`` (node × row) hold each node's recent smoothed rows
    in any order. Per node, period and metric: the mean and the standard deviation of its rows. Two
    statistics, both centred per period on the median over the nodes: the **level** (the mean; a
    burst, a shift) and the **noise** (log of the sd; a variance burst, one-sided: only more noise).
    Each is divided by 1.4826 × the median |centred value| over every node and the last ``memory``
    periods, a scale that includes what smoothing, common trends and persistent node differences
    leave, is robust to the deviant node itself and, pooled over nodes × periods, steady even at 4
    nodes. A node is named when a z reaches :func:`naming_threshold` (Bonferroni over nodes ×
    metrics × 3 at ``alpha``: the level two-sided, the noise one-sided). No memory of names: naming
    ends with the episode.
    """
    empty: dict[str, Any] = {"deviant_nodes": [], "deviant_scores": {}, "deviant_threshold": None}
    if ring.size == 0 or not len(nodes) or not len(metrics):
        return empty
    mean, sd, valid = _cells(ring[:, :, : len(metrics)], ring_ts, tau, end, memory)
    live = np.flatnonzero(valid[:, -1].any(axis=1))
    if len(live) < 3:
        return empty
    mean, sd, valid = mean[live], sd[live], valid[live]
    with np.errstate(invalid="ignore", divide="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        # each cell minus the median of the other nodes' cells (leaving the node out gives every node's
        # residual the same law, at 4 nodes as at 128): the kernel of the rows, on the cells
        level = residuals_from_others(mean)
        spread = _nanmedian0(np.where(valid, sd, np.nan).reshape(-1, len(metrics)))
        floor_sd = np.where(np.isfinite(spread) & (spread > 0), 1e-3 * spread, 1e-300)
        lsd = np.log(np.maximum(sd, floor_sd[None, None, :]))
        noise = residuals_from_others(lsd)
        typical = _nanmedian0(np.abs(mean).reshape(-1, len(metrics)))
    typical = np.where(np.isfinite(typical), typical, 0.0)
    z_level, n_level = _pooled_z(level, valid, 1e-9 * np.maximum(typical, 1e-300))
    z_noise, _ = _pooled_z(noise, valid & (sd > 0), np.full(len(metrics), 1e-9))
    z_noise = np.maximum(z_noise, 0.0)  # one-sided: a quiet node is not a deviation
    used = n_level > 0
    if not used.any():
        return empty
    thr = naming_threshold(3 * len(live) * int(used.sum()), float(np.median(n_level[used])), alpha)
    if int(valid.any(axis=(0, 2)).sum()) < MIN_PERIODS:
        # a heavy-tailed metric's scale from one or two periods is too unsteady for the t correction
        # (the demo's bwrite named 5 of its 12 calm-ish nodes in its first two periods)
        thr = np.inf
    both = np.stack([np.abs(z_level), z_noise], axis=2)

    def _signed(f: int, i: int) -> float:
        return float(z_level[i, f // 2]) if f % 2 == 0 else float(z_noise[i, f // 2])

    # node × metric × {level, noise}
    score = both.reshape(len(live), -1).max(axis=1)
    out: list[dict[str, Any]] = []
    for i in np.argsort(-score, kind="stable"):
        if not score[i] >= thr:
            break
        flat = both[i].ravel()
        top = [int(f) for f in np.argsort(-flat, kind="stable")[:TOP_METRICS] if flat[f] >= thr]
        named = [{"metric": metrics[f // 2], "kind": KINDS[f % 2], "z": _signed(f, i)} for f in top]
        out.append({"node": nodes[int(live[i])], "score": float(score[i]), "metrics": named})
    scores = {nodes[int(k)]: float(s) for k, s in zip(live, score, strict=True)}
    return {"deviant_nodes": out, "deviant_scores": scores, "deviant_threshold": thr if np.isfinite(thr) else None}
