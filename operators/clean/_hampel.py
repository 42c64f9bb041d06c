"""Hampel's centred mode (METHODS.md §0.4), offline: the window ``[t−half, t+half]`` of a series'
original values, truncated at the series' ends, gives the median ``m_t`` and the robust sigma
``max(1.4826·MAD, 1e-9·|m_t|, 1e-300)``; ``x_t`` is flagged when ``|x_t − m_t| > k·σ_t``.

The window needs the ``half`` values *after* ``x_t``, so a streaming operator would have to hold
each series back by ``half`` samples and emit rows late - rows the batch contract (one output row
per input row, in the same batch) has no place for. The centred mode therefore runs on one batch
that holds the whole trace (``perfsift clean --hampel-mode centred``); :class:`Clean` refuses a
second batch in this mode.
"""

from __future__ import annotations

import numpy as np
from perfsift.operators.clean._clean_kernel import EPS_REL


def hampel_centred(
    vals: np.ndarray, keys: np.ndarray, half: int, nsig: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per cell of ``vals`` (rows × metrics): flagged, the window median and sigma. A series is
    one key's present values of one metric, in row order; missing cells are NaN in all three
    outputs (and not flagged).

    >>> v = np.array([[10.0], [11.0], [10.0], [90.0], [11.0], [10.0], [11.0]])
    >>> flagged, median, _ = hampel_centred(v, np.zeros(7, dtype=np.int64), half=2, nsig=3.0)
    >>> np.flatnonzero(flagged[:, 0]).tolist(), float(median[3, 0])
    ([3], 11.0)
    """
    n_rows, n_metrics = vals.shape
    center = np.full(vals.shape, np.nan)
    sigma = np.full(vals.shape, np.nan)
    order = np.lexsort((np.arange(n_rows), keys))  # by key, then row
    offsets = np.arange(-half, half + 1)
    for j in range(n_metrics):
        v = vals[order, j]
        ok = ~np.isnan(v)
        rows, x, kk = order[ok], v[ok], keys[order][ok]
        n = len(x)
        if n == 0:
            continue
        pos = np.arange(n)[:, None] + offsets[None, :]
        clipped = np.clip(pos, 0, n - 1)
        inside = (pos >= 0) & (pos < n) & (kk[clipped] == kk[:, None])  # truncated at the series' ends
        window = np.where(inside, x[clipped], np.nan)
        med = np.nanmedian(window, axis=1)
        mad = np.nanmedian(np.abs(window - med[:, None]), axis=1)
        center[rows, j] = med
        sigma[rows, j] = np.maximum(np.maximum(1.4826 * mad, EPS_REL * np.abs(med)), 1e-300)
    with np.errstate(invalid="ignore"):
        flagged = np.abs(vals - center) > nsig * sigma
    return flagged, center, sigma


def apply_centred(
    vals: np.ndarray,
    keys: np.ndarray,
    half: int,
    nsig: float,
    action: str,
    out: np.ndarray,
    rule: np.ndarray,
    thr: np.ndarray,
    stat_rule: int = 1,
) -> None:
    """Flag with :func:`hampel_centred` and write the action's value, the rule code and the
    threshold into ``out``/``rule``/``thr`` where it flags (a statistical flag wins over the
    knowledge-base and sign rules, as in the causal kernel)."""
    flagged, center, sigma = hampel_centred(vals, keys, half, nsig)
    rows, cols = np.nonzero(flagged)
    if not len(rows):
        return
    x, c, s = vals[rows, cols], center[rows, cols], sigma[rows, cols]
    up = x > c
    threshold = np.where(up, c + nsig * s, c - nsig * s)
    if action == "flag":
        y = x
    elif action == "clip":
        y = threshold
    elif action == "replace":
        y = c
    elif action == "drop":
        y = np.full_like(x, np.nan)
    else:  # Vetter & Reed's distance maps, as in the causal kernel
        d = np.abs(x - c) / s / nsig
        rho = nsig * (1.0 + np.log(d)) if action == "trim_log" else nsig * (3.0 - 2.0 / np.sqrt(d))
        y = np.where(up, c + rho * s, c - rho * s)
    out[rows, cols] = y
    rule[rows, cols] = stat_rule
    thr[rows, cols] = threshold
