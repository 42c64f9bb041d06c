"""Sorted windows of each series' newest values, for the compiled NWS kernel
(:mod:`perfsift.operators.forecast._nws_kernel`): numba primitives it calls.

Each series keeps its newest values sorted in five windows: the fixed 5, 31 and 51 (medians,
sliding and trimmed means are read off directly, sums in ascending order: equal to the reference's
to rounding) and, per adaptive median, one of exactly its current w values. A new value costs one
binary search and one shift per window. The adaptive median's candidates w ± step then differ from
its window by at most step values (the oldest ones, or the next older ones from the history ring),
so each is a few order statistics away instead of a scan: the k-th value of the window without (or
merged with) d sorted values takes d comparisons, no search; when w moves, the window drops or
merges in those few values in one pass. Equal values are interchangeable in a sorted window, so no
arrival indexes are kept.

A window is the cells ``wv[sid, o : o + m]`` of series sid's row (offset o, m values); the history
ring ``hist[sid]`` holds the newest values, the next write at position p.

They are compiled as functions of their own (LLVM may still inline them), not inlined into the
kernel by numba (``inline="always"``, as the kernel's own helpers are): numba's inlining of these
too made the kernel's first compile 190 CPU-s instead of 58, for 9 % of its speed (40 batches of
2,000 rows × 4 metrics, one thread: 0.73 against 0.67 CPU-s, the same outputs bit for bit;
2026-11-27, issue #29) - minutes on every fresh install and CI run against a share of the forecast's
CPU that the pipeline does not notice (0.24 of about 4 CPU-s in the select stage).

numba checks a cached kernel against its own file only; :mod:`perfsift.operators._numba` names the
cache folder after every kernel module's content, so a change here compiles afresh.
"""

from __future__ import annotations

import numpy as np
from numba import njit
from perfsift.operators import _numba  # noqa: F401  (sets the kernel cache directory)
from perfsift.operators.forecast._nws_constants import HISTORY, SORTED_WINDOWS, TRIM

#: sorted windows kept per series (SORTED_WINDOWS: the fixed 5, 31 and 51, then one per
#: adaptive median, as large as its largest w), and where each starts in win_v
CAPS = np.array(SORTED_WINDOWS, dtype=np.int64)
OFFSETS = np.concatenate([[0], np.cumsum(CAPS)]).astype(np.int64)
WIN_TOTAL = int(OFFSETS[-1])
N_FIXED = 3  # windows 0..2 keep the newest min(cap, n) values; window 3 + a the newest min(w_a, n)
F5, F31, F51 = int(OFFSETS[0]), int(OFFSETS[1]), int(OFFSETS[2])


@njit(cache=True, error_model="numpy")
def back(p: int, size: int) -> int:
    """Ring index of the value ``size`` places before position p (no modulo: it is slow)."""
    j = p - 1 - size
    return j + HISTORY if j < 0 else j


@njit(cache=True, error_model="numpy")
def _lower(wv: np.ndarray, sid: int, o: int, m: int, v: float) -> int:
    """First index in the sorted window at offset o (m values) holding a value >= v."""
    lo, hi = o, o + m
    while lo < hi:
        mid = (lo + hi) >> 1
        if wv[sid, mid] < v:
            lo = mid + 1
        else:
            hi = mid
    return lo


@njit(cache=True, error_model="numpy")
def insert(wv: np.ndarray, sid: int, o: int, m: int, v: float) -> None:
    """Insert v into the sorted window at offset o holding m values (fewer than its capacity)."""
    i = o + m
    while i > o and wv[sid, i - 1] > v:
        wv[sid, i] = wv[sid, i - 1]
        i -= 1
    wv[sid, i] = v


@njit(cache=True, error_model="numpy")
def replace(wv: np.ndarray, sid: int, o: int, m: int, old: float, v: float) -> None:
    """Swap the value ``old`` (one of the m values of the sorted window at offset o) for v: one
    binary search and one shift. Equal values are interchangeable, so any copy of old may go."""
    r = _lower(wv, sid, o, m, old)
    end = o + m
    if v >= old:  # the slot of the leaving value moves right to where v belongs
        while r + 1 < end and wv[sid, r + 1] < v:
            wv[sid, r] = wv[sid, r + 1]
            r += 1
    else:
        while r > o and wv[sid, r - 1] > v:
            wv[sid, r] = wv[sid, r - 1]
            r -= 1
    wv[sid, r] = v


@njit(cache=True, error_model="numpy")
def _sort_small(v: np.ndarray, d: int) -> None:
    """Insertion sort of v[:d] (d is at most a step + 1)."""
    for i in range(1, d):
        x = v[i]
        j = i
        while j > 0 and v[j - 1] > x:
            v[j] = v[j - 1]
            j -= 1
        v[j] = x


@njit(cache=True, error_model="numpy")
def _without(wv: np.ndarray, sid: int, o: int, vals: np.ndarray, d: int, k: int) -> float:
    """The k-th smallest (0-based) of the window without the sorted vals[:d] (all in the window):
    one comparison per removed value, no search. Each removed value at or below the current pick
    pushes the pick one up; equal values are interchangeable, so which copy goes does not matter."""
    j = o + k
    for i in range(d):
        j += vals[i] <= wv[sid, j]  # a select, not a branch: the outcome is a coin toss
    return wv[sid, j]


@njit(cache=True, error_model="numpy")
def _with(wv: np.ndarray, sid: int, o: int, m: int, vals: np.ndarray, d: int, k: int) -> float:
    """The k-th smallest (0-based) of the window (m values) merged with the sorted vals[:d]: t of
    vals are among the k + 1 smallest, where vals[j] counts while it is no larger than the window's
    (k - j)-th value (a prefix of vals, so the count needs no branch), and the k-th is the larger of
    the last of vals taken and the window's (k - t)-th."""
    t = 0
    for j in range(d):
        r = k - j
        t += (r >= 0) & ((r >= m) | (wv[sid, o + min(max(r, 0), m - 1)] >= vals[j]))
    a = vals[t - 1] if t > 0 else -np.inf
    b = wv[sid, o + k - t] if k - t >= 0 else -np.inf
    return max(a, b)


@njit(cache=True, error_model="numpy")
def _cswap(v: np.ndarray, i: int, j: int) -> None:
    a, b = v[i], v[j]
    v[i] = min(a, b)
    v[j] = max(a, b)


@njit(cache=True, error_model="numpy")
def _sort5(v: np.ndarray) -> None:
    """v[:5] sorted by a 9-comparator network: no branch to mispredict."""
    _cswap(v, 0, 1)
    _cswap(v, 3, 4)
    _cswap(v, 2, 4)
    _cswap(v, 2, 3)
    _cswap(v, 0, 3)
    _cswap(v, 0, 2)
    _cswap(v, 1, 4)
    _cswap(v, 1, 3)
    _cswap(v, 1, 2)


@njit(cache=True, error_model="numpy")
def _oldest(hist: np.ndarray, sid: int, p: int, first: int, last: int, vals: np.ndarray) -> int:
    """The values of ages first..last - 1 (0 = newest; next ring write at p) into vals, sorted."""
    d = last - first
    for j in range(d):
        vals[j] = hist[sid, back(p, first + j)]
    if d == 5:
        _sort5(vals)
    else:
        _sort_small(vals, d)
    return d


@njit(cache=True, error_model="numpy")
def candidate(wv: np.ndarray, hist: np.ndarray, sid: int, p: int, o: int, m: int, c: int, vals: np.ndarray) -> float:
    """Median of the newest c values (next ring write at p) from the sorted window at offset o of
    the newest m: without its m - c oldest when c < m, with the c - m next older when c > m."""
    if c == m:
        return median_of(wv, sid, o, m)
    if c < m:
        d = _oldest(hist, sid, p, c, m, vals)
        hi = _without(wv, sid, o, vals, d, c // 2)
        return hi if c % 2 else 0.5 * (_without(wv, sid, o, vals, d, c // 2 - 1) + hi)
    d = _oldest(hist, sid, p, m, c, vals)
    hi = _with(wv, sid, o, m, vals, d, c // 2)
    return hi if c % 2 else 0.5 * (_with(wv, sid, o, m, vals, d, c // 2 - 1) + hi)


@njit(cache=True, error_model="numpy")
def resize(
    wv: np.ndarray,
    hist: np.ndarray,
    sid: int,
    p: int,
    o: int,
    m: int,
    m1: int,
    xv: float,
    vals: np.ndarray,
) -> None:
    """Turn the sorted window at offset o of the newest m values (next ring write at p, xv not yet
    written) into that of the newest m1 values counting xv: the old values of ages m1 - 1 .. m - 1
    leave, or those of ages m .. m1 - 2 join, and xv enters."""
    if m1 - 1 == m:
        insert(wv, sid, o, m, xv)
        return
    if m1 - 1 > m:  # join: merge the sorted newcomers (xv among them) from the back, one pass
        d = _oldest(hist, sid, p, m, m1 - 1, vals)
        vals[d] = xv
        _sort_small(vals, d + 1)
        i, j = o + m - 1, d
        for out in range(o + m1 - 1, o - 1, -1):
            if j < 0:
                break
            if i >= o and wv[sid, i] > vals[j]:
                wv[sid, out] = wv[sid, i]
                i -= 1
            else:
                wv[sid, out] = vals[j]
                j -= 1
        return
    if m1 == m:  # the oldest leaves, xv enters
        replace(wv, sid, o, m, hist[sid, back(p, m - 1)], xv)
        return
    d = _oldest(hist, sid, p, m1 - 1, m, vals)  # several leave: compact in one pass, then insert xv
    w = _lower(wv, sid, o, m, vals[0])  # nothing below the smallest leaver moves
    r = 0
    for i in range(w, o + m):
        if r < d and wv[sid, i] == vals[r]:  # a leaver (the values are never NaN)
            r += 1
        else:
            wv[sid, w] = wv[sid, i]
            w += 1
    insert(wv, sid, o, m - d, xv)


@njit(cache=True, error_model="numpy")
def rebuild(wv: np.ndarray, hist: np.ndarray, adapt_w: np.ndarray, sid: int, p: int, n: int) -> None:
    """Sort the newest values of series sid (next ring write at p) into every window."""
    for q in range(CAPS.shape[0]):
        size = min(CAPS[q], n) if q < N_FIXED else min(adapt_w[sid, q - N_FIXED], n)
        for age in range(size):
            insert(wv, sid, OFFSETS[q], age, hist[sid, back(p, age)])


@njit(cache=True, error_model="numpy")
def median_of(wv: np.ndarray, sid: int, o: int, m: int) -> float:
    return 0.5 * (wv[sid, o + (m - 1) // 2] + wv[sid, o + m // 2])


@njit(cache=True, error_model="numpy")
def _sum(wv: np.ndarray, sid: int, lo: int, hi: int) -> float:
    """Sum of wv[sid, lo:hi] as four interleaved partial sums (one chain of dependent additions
    would wait on each; the result agrees with the reference's arrival-order sum to rounding)."""
    s0 = s1 = s2 = s3 = 0.0
    i = lo
    while i + 4 <= hi:
        s0 += wv[sid, i]
        s1 += wv[sid, i + 1]
        s2 += wv[sid, i + 2]
        s3 += wv[sid, i + 3]
        i += 4
    while i < hi:
        s0 += wv[sid, i]
        i += 1
    return (s0 + s1) + (s2 + s3)


@njit(cache=True, error_model="numpy")
def mean_of(wv: np.ndarray, sid: int, o: int, m: int) -> float:
    """Mean of a window (the reference sums in arrival order: the two agree to rounding)."""
    return _sum(wv, sid, o, o + m) / m


@njit(cache=True, error_model="numpy")
def trimmed_of(wv: np.ndarray, sid: int, o: int, m: int) -> float:
    """Mean of the sorted window without its floor(0.3 m) smallest and largest values."""
    t = int(np.floor(TRIM * m))
    return _sum(wv, sid, o + t, o + m - t) / (m - 2 * t)
