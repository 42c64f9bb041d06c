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

from typing import Any

import numpy as np

MAD_SCALE = 1.4826  # MAD of a normal sample × 1.4826 ≈ its standard deviation
TOP_METRICS = 3  # metrics listed per node that stands apart


def robust_z(v: np.ndarray) -> np.ndarray:
    """Robust z-scores of the rows of v (nodes × k) per column: (v − median) / (1.4826 · MAD).

    A column whose MAD is 0 (half the nodes or more equal) falls back to 1.2533 × the mean
    absolute deviation from the median (the normal-consistent scale of the mean deviation); a
    column with no spread at all scores 0.

    >>> robust_z(np.array([[0.0], [1.0], [2.0], [3.0], [30.0]])).ravel().round(2).tolist()
    [-1.35, -0.67, 0.0, 0.67, 18.89]
    """
    med = np.median(v, axis=0)
    dev = v - med
    mad = MAD_SCALE * np.median(np.abs(dev), axis=0)
    mean_dev = 1.2533 * np.mean(np.abs(dev), axis=0)
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
    snaps = row_id[:, 1]
    for s in np.unique(snaps):
        rows = np.flatnonzero(snaps == s)
        if len(rows) >= 3:
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
