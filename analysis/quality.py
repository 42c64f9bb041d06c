"""Cleaning quality (METHODS.md §3.5): dynamic time warping and Zhu's ``Diff``."""

from __future__ import annotations

import numpy as np
from numba import njit
from perfsift.operators import _numba  # noqa: F401  (sets the kernel cache directory)


@njit(cache=True)
def _dtw(a: np.ndarray, b: np.ndarray, squared: bool, band: float) -> float:  # pragma: no cover - compiled
    n, m = len(a), len(b)
    prev = np.full(m + 1, np.inf)
    cur = np.full(m + 1, np.inf)
    prev[0] = 0.0
    for i in range(1, n + 1):
        cur[0] = np.inf
        for j in range(1, m + 1):
            if band >= 0 and abs(i - j * n / m) > band:
                cur[j] = np.inf
                continue
            d = a[i - 1] - b[j - 1]
            cost = d * d if squared else abs(d)
            best = prev[j]
            if cur[j - 1] < best:
                best = cur[j - 1]
            if prev[j - 1] < best:
                best = prev[j - 1]
            cur[j] = cost + best
        prev, cur = cur, prev
    return float(prev[m])


def dtw(
    a: np.ndarray | list[float],
    b: np.ndarray | list[float],
    cost: str = "abs",
    band: int | None = None,
    normalize: str = "none",
) -> float:
    """DTW distance with local cost ``|a_i − b_j|`` (``cost="sq"``: squared), an optional
    Sakoe–Chiba ``band`` and optional z-score normalisation. O(nm) time, O(m) memory.

    >>> dtw([1, 2, 3], [1, 2, 2, 3]), dtw([1, 2, 3], [2, 3, 4])
    (0.0, 2.0)
    """
    x = np.asarray(a, dtype=np.float64)
    y = np.asarray(b, dtype=np.float64)
    if cost not in ("abs", "sq"):
        raise ValueError(f"cost must be abs or sq, got {cost!r}")
    if normalize == "zscore":
        x = (x - x.mean()) / (x.std() or 1.0)
        y = (y - y.mean()) / (y.std() or 1.0)
    elif normalize != "none":
        raise ValueError(f"normalize must be none or zscore, got {normalize!r}")
    if len(x) == 0 or len(y) == 0:
        return 0.0 if len(x) == len(y) else float("inf")
    if np.isnan(x).any() or np.isnan(y).any():
        raise ValueError("DTW needs complete series (impute or drop missing values first)")
    if band is not None and band < abs(len(x) - len(y)):
        raise ValueError(f"band {band} is narrower than the length difference {abs(len(x) - len(y))}")
    return _dtw(x, y, cost == "sq", -1.0 if band is None else float(band))


def diff(d_test: float, d_ref: float) -> float:
    """Zhu's quality measure ``(D_test − D_ref) / D_ref``; smaller is better.

    >>> diff(3.0, 2.0), diff(0.0, 0.0), diff(1.0, 0.0)
    (0.5, 0.0, inf)
    """
    if d_ref == 0:
        return 0.0 if d_test == 0 else float("inf")
    return (d_test - d_ref) / d_ref
