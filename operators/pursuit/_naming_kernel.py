"""The compiled part of :func:`~perfsift.operators.pursuit.deviants.name_nodes`: every row minus the
median of the other nodes' rows in its sampling interval (numpy's sort-based version cost ~10 ms per
period at 12 nodes × 12 metrics; this loop, well under one)."""

from __future__ import annotations

import numpy as np
from numba import njit
from perfsift.operators import _numba  # noqa: F401  (sets the kernel cache directory)


@njit(cache=True)
def residuals_from_others(grid: np.ndarray) -> np.ndarray:  # pragma: no cover - compiled
    """grid (node × interval × metric, NaN = missing) minus, per interval and metric, the median of
    the other nodes' values; NaN where the node has no value or no other node has one."""
    k_n, bins, n = grid.shape
    out = np.full(grid.shape, np.nan)
    vals = np.empty(k_n)
    who = np.empty(k_n, dtype=np.int64)
    for b in range(bins):
        for j in range(n):
            c = 0
            for k in range(k_n):
                v = grid[k, b, j]
                if v == v:
                    vals[c] = v
                    who[c] = k
                    c += 1
            if c < 2:
                continue
            if c <= 64:
                for r in range(1, c):  # insertion sort of the few values, their nodes alongside
                    v, k = vals[r], who[r]
                    q = r - 1
                    while q >= 0 and vals[q] > v:
                        vals[q + 1], who[q + 1] = vals[q], who[q]
                        q -= 1
                    vals[q + 1], who[q + 1] = v, k
            else:
                order = np.argsort(vals[:c])
                vals[:c] = vals[:c][order]
                who[:c] = who[:c][order]
            i1 = (c - 2) // 2  # the others are c - 1 values: their median's two middle positions
            i2 = (c - 1) // 2
            for r in range(c):
                a = i1 + 1 if i1 >= r else i1
                z = i2 + 1 if i2 >= r else i2
                out[who[r], b, j] = vals[r] - 0.5 * (vals[a] + vals[z])
    return out


@njit(cache=True)
def cell_sums(res: np.ndarray, period_of: np.ndarray, memory: int) -> tuple[np.ndarray, ...]:  # pragma: no cover
    """Per node × period × metric of the residuals ``res`` (node × interval × metric, NaN = missing;
    ``period_of`` each interval's period): the count and the sum of the values, and the count and
    the sum of squares of the differences between consecutive intervals of the same period."""
    k_n, bins, n = res.shape
    cnt = np.zeros((k_n, memory, n))
    s1 = np.zeros((k_n, memory, n))
    cd = np.zeros((k_n, memory, n))
    s2d = np.zeros((k_n, memory, n))
    for k in range(k_n):
        for b in range(bins):
            p = period_of[b]
            same = b > 0 and period_of[b - 1] == p
            for j in range(n):
                v = res[k, b, j]
                if v != v:
                    continue
                cnt[k, p, j] += 1.0
                s1[k, p, j] += v
                if same:
                    u = res[k, b - 1, j]
                    if u == u:
                        cd[k, p, j] += 1.0
                        s2d[k, p, j] += (v - u) * (v - u)
    return cnt, s1, cd, s2d
