"""Evidence for a period's selection: which metrics differ across nodes beyond their own noise.

Projection pursuit always finds *some* interesting direction, also in pure noise; what it names is
worth keeping only when the nodes really differ in it. :func:`metric_evidence` tests, per metric,
the null "the nodes' values are exchangeable in every snapshot and independent from one snapshot to
the next" -- no node differs beyond its own noise, whatever that noise looks like (heavy tails,
common trends, common bursts, a constant) -- on the stacked snapshots of the period (nodes ×
snapshots, snapshots ``window`` samples apart so they share no smoothing window).

Everything works on the **ranks of the nodes within each snapshot** (average ranks for ties,
centred): a common trend, a common burst or a change of units leaves them unchanged, heavy tails
do not matter, and the null distributions are known analytically, so no permutations are needed
(microseconds per metric). With ``u[i, t]`` the centred rank of node i in snapshot t,
``C_t = Σ_i u[i, t]²`` and ``R_i = Σ_t u[i, t]``:

* **Friedman** (nodes = treatments, snapshots = blocks): ``Q = (P − 1) Σ_i R_i² / Σ_t C_t`` is
  χ²(P − 1) under the null -- nodes that keep their places (an offset, two groups, a node drifting
  away, a per-node scale of a positive metric);
* **one node apart** (the max of the per-node rank sums): ``z_i = R_i / sqrt(Σ_t C_t / P)`` is
  standard normal under the null; the largest |z_i| with a Bonferroni factor P -- a single bursty
  or drifting node among many, which Friedman dilutes over P − 1 degrees of freedom;
* **one node the extreme** (the top, or the bottom, of a snapshot by itself): under the null each
  node is it with probability 1/P in each snapshot, so its count is binomial -- exact, where the
  normal tail of the rank sum is far too heavy for a node on top in 6 of 6 snapshots (top and
  bottom share one Bonferroni slot, factor 2P);
* **persistence** (lags 1 and 2, two-sided): ``S_k = Σ_t Σ_i u[i, t] u[i, t+k]`` has mean 0 and
  variance ``Σ_t C_t C_{t+k} / (P − 1)`` under the null (independent permutations; the terms are
  uncorrelated) -- order across nodes that lasts a while but moves (a per-node phase), which the
  rank sums average away. Two lags because a phase that turns by a quarter cycle between
  snapshots leaves lag 1 uncorrelated but lag 2 reversed (``max(|cos θ|, |cos 2θ|) ≥ 1/2``).

All of them run over two horizons, the newest ``RECENT`` snapshots (a node that has just
started to differ) and all of them (rare bursts); a metric's p-value is the smallest of the five
tests times 5 and times the horizons (Bonferroni), and metrics are kept by
Holm's step-down over the metrics at level ``alpha``, so the chance that a period keeps any metric
when no metric differs is at most ``alpha`` (up to the normal approximations). The period's
p-value is the smallest Holm-adjusted one (a test of the global null).
"""

from __future__ import annotations

import numpy as np

TESTS = 5  # Friedman, one node's rank sum, one node top or bottom (counted once), lags 1 and 2
RECENT = 6  # snapshots of the short horizon: a node that has just started to differ


def metric_pvalues(v: np.ndarray) -> np.ndarray:
    """Per metric, the p-value of "no node differs beyond its own noise" for ``v`` = nodes ×
    snapshots × metrics, newest snapshot first (NaN = missing: a snapshot missing a metric on any
    node is left out for that metric): the rank tests of the module docstring over the newest
    ``RECENT`` snapshots and over all of them, Bonferroni over tests and horizons. 1.0 when a
    metric has fewer than 3 nodes or 2 usable snapshots, or does not vary within any snapshot.

    >>> rng = np.random.default_rng(0)
    >>> v = rng.normal(size=(8, 10, 2)); v[0, :, 1] += 3.0  # node 0 apart in metric 1
    >>> p = metric_pvalues(v); bool(p[0] > 0.05), bool(p[1] < 1e-4)
    (True, True)
    """
    nodes, snaps, n = v.shape
    if nodes < 3 or snaps < 2:
        return np.ones(n)
    ok = ~np.isnan(v).any(axis=0)  # snapshots × metrics usable
    r = _ranks(np.where(np.isnan(v), 0.0, v))  # average ranks for ties
    u = np.where(ok[None], r - (nodes + 1) / 2, 0.0)
    # a node is the top (bottom) of a snapshot when it alone holds the largest (smallest) rank
    top = ok[None] & (r == r.max(axis=0, keepdims=True))
    top &= top.sum(axis=0, keepdims=True) == 1
    bottom = ok[None] & (r == r.min(axis=0, keepdims=True))
    bottom &= bottom.sum(axis=0, keepdims=True) == 1
    horizons = [h for h in (RECENT, snaps) if h <= snaps] if snaps > RECENT else [snaps]
    p = np.ones(n)
    for h in horizons:
        p = np.minimum(p, _tests(u[:, :h], top[:, :h], bottom[:, :h], ok[:h]))
    return np.minimum(len(horizons) * TESTS * p, 1.0)


def warm_up() -> None:
    """Import what the rank tests use (scipy.special) now: a stage calls this as it starts
    (``ProjectionPursuit.warm_up``), so its first period does not pay the import (about 0.5 CPU-s),
    which every other perfsift process skips. Not scipy.stats (about 1 CPU-s more): the ranks
    are :func:`_ranks`' own."""
    import scipy.special  # noqa: F401


def _ranks(v: np.ndarray) -> np.ndarray:
    """Average ranks (1..P, ties share their mean rank) along axis 0 of ``v`` (no NaN); by
    comparison counts for a few dozen nodes (no sort: faster there), else by sorting
    (:func:`_sorted_ranks`). Both equal scipy.stats' ``rankdata(v, axis=0)`` bit for bit
    (tests/unit/test_pursuit_ranks.py).

    >>> _ranks(np.array([[3.0], [1.0], [3.0]])).ravel().tolist()
    [2.5, 1.0, 2.5]
    """
    if len(v) > 48:
        return _sorted_ranks(v)
    less = (v[None, :] < v[:, None]).sum(axis=1)
    equal = (v[None, :] == v[:, None]).sum(axis=1)
    return less + (equal + 1) / 2


def _sorted_ranks(v: np.ndarray) -> np.ndarray:
    """Average ranks along axis 0 by a stable sort: the k-th smallest value's rank is k + 1, and a
    run of equal values (positions lo..hi in sorted order) each gets ``(lo + hi) / 2 + 1`` -- a
    half-integer, exact in float64, as scipy's ``rankdata`` computes it.

    >>> _sorted_ranks(np.array([[3.0, 0.0], [1.0, 0.0], [3.0, 2.0]])).tolist()
    [[2.5, 1.5], [1.0, 1.5], [2.5, 3.0]]
    """
    n = len(v)
    order = np.argsort(v, axis=0, kind="stable")
    s = np.take_along_axis(v, order, axis=0)
    at = np.arange(n, dtype=np.float64).reshape((n,) + (1,) * (v.ndim - 1))
    first = np.empty(s.shape, dtype=bool)  # the start of a run of equal values
    first[0] = True
    first[1:] = s[1:] != s[:-1]
    last = np.empty(s.shape, dtype=bool)  # the end of one
    last[-1] = True
    last[:-1] = first[1:]
    lo = np.maximum.accumulate(np.where(first, at, 0.0), axis=0)
    hi = np.flip(np.minimum.accumulate(np.flip(np.where(last, at, n - 1.0), axis=0), axis=0), axis=0)
    ranks = np.empty(s.shape)
    np.put_along_axis(ranks, order, (lo + hi) / 2 + 1, axis=0)
    return ranks


def _tests(u: np.ndarray, top: np.ndarray, bottom: np.ndarray, ok: np.ndarray) -> np.ndarray:
    """The smallest p-value of the five rank tests per metric (not yet corrected for their number)."""
    from scipy.special import bdtrc, chdtrc, ndtr  # here, not at import: see _ranks

    nodes, snaps, _ = u.shape
    c = (u**2).sum(axis=0)  # snapshots × metrics
    total = c.sum(axis=0)
    rs = u.sum(axis=1)  # nodes × metrics
    live = (total > 0) & (ok.sum(axis=0) >= 2)
    safe = np.where(live, total, 1.0)
    p = chdtrc(nodes - 1, (nodes - 1) * (rs**2).sum(axis=0) / safe)  # Friedman
    z = np.abs(rs).max(axis=0) / np.sqrt(safe / nodes)
    p = np.minimum(p, np.minimum(nodes * 2 * ndtr(-z), 1.0))  # one node's rank sum
    for ext in (top, bottom):  # one node the extreme far more often than 1 in P: exact binomial
        trials = ext.any(axis=0).sum(axis=0)
        hits = ext.sum(axis=1).max(axis=0)
        tail = np.where(hits > 0, bdtrc(np.maximum(hits - 1, 0), trials, 1 / nodes), 1.0)  # P(count >= hits)
        p = np.minimum(p, np.minimum(2 * nodes * tail, 1.0))
    for k in (1, 2):
        if snaps > k:
            s = (u[:, :-k] * u[:, k:]).sum(axis=(0, 1))
            var = (c[:-k] * c[k:]).sum(axis=0) / (nodes - 1)
            p = np.minimum(p, np.where(var > 0, 2 * ndtr(-np.abs(s) / np.sqrt(np.where(var > 0, var, 1.0))), 1.0))
    return np.where(live, p, 1.0)


def holm(p: np.ndarray) -> np.ndarray:
    """Holm's step-down adjusted p-values (monotone, capped at 1).

    >>> holm(np.array([0.01, 0.04, 0.03])).round(2).tolist()
    [0.03, 0.06, 0.06]
    """
    m = len(p)
    if m == 0:
        return p.copy()
    order = np.argsort(p, kind="stable")
    adj = np.minimum(np.maximum.accumulate((m - np.arange(m)) * p[order]), 1.0)
    out = np.empty(m)
    out[order] = adj
    return out


def significant(
    named: list[str], scores: dict[str, float], metric_p: dict[str, float], snapshots: int, alpha: float, k: int
) -> tuple[list[str], str | None, float]:
    """(selected, reason when none, the period's p-value): of the metrics whose nodes differ at
    level ``alpha``, the ones projection pursuit named first (in its order), then the others by
    importance (``scores``), at most ``k``. Under 3 ``snapshots`` per node the reason says there is
    too little history (the operator then skips the period instead of keeping nothing)."""
    sig = {m for m, p in metric_p.items() if p <= alpha}
    rest = sorted(sig - set(named), key=lambda m: (-scores.get(m, 0.0), metric_p[m], m))
    selected = ([m for m in named if m in sig] + rest)[:k]
    p_value = min(metric_p.values(), default=1.0)
    reason = None
    if not selected:
        reason = f"no metric differs across nodes beyond its own noise (p = {p_value:.3g} > alpha = {alpha:g})"
        if snapshots < 3:
            reason = f"too little history to tell noise from differences ({snapshots} snapshots per node)"
    return selected, reason, float(p_value)
