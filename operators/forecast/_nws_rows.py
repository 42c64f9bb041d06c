"""Row-wise statistics of the NWS forecaster bank's numpy reference engine
(``ForecastBank(engine="numpy")``): each row is one series' window of newest values, NaN where the
series is shorter; the compiled kernel (:mod:`perfsift.operators.forecast._nws_kernel`) is held to these."""

from __future__ import annotations

import numpy as np
from perfsift.operators.forecast._nws_constants import HISTORY, RING, TIE, TRIM


def first_min(err: np.ndarray) -> np.ndarray:
    """Per row, the lowest index whose value is within ``TIE`` (relative) of the row minimum.

    Forecasters that are equal in exact arithmetic (running and sliding means before the window
    fills, say) differ by rounding only; the spec's "ties go to the lowest index" must not depend
    on that noise.
    """
    low = np.min(err, axis=1, keepdims=True)
    return np.argmax(err <= low + TIE * np.abs(low), axis=1)


def last_values(hist: np.ndarray, s: np.ndarray, pos: np.ndarray, count: np.ndarray, width: int) -> np.ndarray:
    """The last ``width`` values of series ``s``, newest last; NaN where a series is shorter.

    Gathers only those cells from the history ring (not whole rows)."""
    idx = (pos[:, None] - width + np.arange(width)[None, :]) % HISTORY
    vals = hist[s[:, None], idx]
    too_old = np.arange(width)[None, :] < (width - np.minimum(count, width))[:, None]
    vals[too_old] = np.nan
    return vals


def row_median(vals: np.ndarray) -> np.ndarray:
    """Row medians ignoring NaN (mean of the two middle values for an even count; NaN if empty).

    One sort per call: ``np.nanmedian`` falls back to a Python loop per row on small arrays.
    """
    c = (~np.isnan(vals)).sum(axis=1)
    if len(c) and (c == vals.shape[1]).all():  # full windows (the steady state): partial sort
        w = vals.shape[1]
        kth = sorted({(w - 1) // 2, w // 2})
        part = np.partition(vals, kth, axis=1)
        return (part[:, (w - 1) // 2] + part[:, w // 2]) / 2
    s = np.sort(vals, axis=1)  # NaN sorts last
    rows = np.arange(len(s))
    lo, hi = np.maximum((c - 1) // 2, 0), np.maximum(c // 2, 0)
    out = (s[rows, lo] + s[rows, hi]) / 2
    out[c == 0] = np.nan
    return out


def row_mean(vals: np.ndarray) -> np.ndarray:
    c = (~np.isnan(vals)).sum(axis=1)
    with np.errstate(all="ignore"):
        return np.nansum(vals, axis=1) / c


def median_last(vals: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Median of the last ``lengths[i]`` entries of row i of ``vals`` (newest last; NaN ignored)."""
    if len(lengths) and (lengths == lengths[0]).all():  # one length for all rows: just slice
        return row_median(vals[:, vals.shape[1] - int(lengths[0]) :])
    width = int(lengths.max()) if len(lengths) else 0
    vals = vals[:, vals.shape[1] - width :]
    v = vals.copy()
    v[np.arange(width)[None, :] < (width - lengths)[:, None]] = np.nan
    return row_median(v)


def trimmed_mean(vals: np.ndarray) -> np.ndarray:
    """α-trimmed mean (α = 0.3) of the non-NaN values of each row: mean of sorted[T : M-T], T = ⌊αM⌋."""
    m = (~np.isnan(vals)).sum(axis=1)
    full = m == vals.shape[1]
    if full.all() and len(m):
        return _trimmed_full(vals)
    out = _trimmed_general(vals, m)
    if full.any():  # the path depends only on the row's own window, so results never depend on batching
        out[full] = _trimmed_full(vals[full])
    return out


def _trimmed_full(vals: np.ndarray) -> np.ndarray:
    """Trimmed mean of full windows: a partial sort finds the kept middle."""
    w = vals.shape[1]
    t = int(np.floor(TRIM * w))
    part = np.partition(vals, [t, w - t - 1], axis=1) if t else vals
    return part[:, t : w - t].mean(axis=1)


def _trimmed_general(vals: np.ndarray, m: np.ndarray) -> np.ndarray:
    s = np.sort(vals, axis=1)  # NaN sorts last
    t = np.floor(TRIM * m).astype(np.int64)
    cs = np.concatenate([np.zeros((len(s), 1)), np.cumsum(np.nan_to_num(s), axis=1)], axis=1)
    rows = np.arange(len(s))
    with np.errstate(all="ignore"):
        return (cs[rows, m - t] - cs[rows, t]) / (m - 2 * t)


def window_sums(each: np.ndarray, s: np.ndarray, k: np.ndarray, weff: np.ndarray) -> np.ndarray:
    """Per row, the sum of the last ``weff`` scores' errors of every primary, newest first (the
    compiled kernel adds in the same order).

    One gather of every row's last ``max(weff)`` errors (zeros past a row's own ``weff``: adding
    +0.0 changes no sum of errors >= 0), then a running sum along them: ``cumsum`` adds one by one,
    newest first, so its last column is the loop's sum bit for bit.
    """
    width = int(weff.max(initial=0))
    if width == 0:
        return np.zeros((len(s), each.shape[2]))
    j = np.arange(width)
    errs = each[s[:, None], (k[:, None] - j[None, :]) % RING]
    errs[j[None, :] >= weff[:, None]] = 0.0
    return np.cumsum(errs, axis=1)[:, -1]
