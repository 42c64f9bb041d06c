"""Missing-value imputation for :class:`~perfsift.operators.clean.clean.Clean` (METHODS.md §3.4): the
causal fallbacks (last value, running mean) and the KNN regression of one row's missing cells; the
reference rows each (job, node) keeps and the fallbacks' state are updated by ``_impute_kernel.py``.

The state arrays are the cleaner's (one row per key, one column per metric it has seen); these
functions read them or update them in place, so the cleaner's snapshots stay what they were.
"""

from __future__ import annotations

import numpy as np


def causal_fallbacks(
    last: np.ndarray,
    total_before: np.ndarray,
    count_before: np.ndarray,
    observed: np.ndarray,
    keys: np.ndarray,
    cols: np.ndarray,
    order: np.ndarray,
    start_of: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """Per row and column: the key's last observed value before the row, and the mean of its
    observed values before the row (earlier batches included: ``last``, ``total_before`` and
    ``count_before`` per key and metric)."""
    n = len(keys)
    v = observed[order]
    ok = ~np.isnan(v)
    idx = np.where(ok, np.arange(n)[:, None], -1)
    ff = np.maximum.accumulate(idx, axis=0)
    prev = np.vstack([np.full((1, v.shape[1]), -1), ff[:-1]])  # exclusive: strictly before the row
    prev[prev < start_of[:, None]] = -1
    state_last = last[keys[order]][:, cols]
    last_sorted = np.where(prev >= 0, v[np.maximum(prev, 0), np.arange(v.shape[1])], state_last)
    filled = np.where(ok, v, 0.0)
    csum = np.cumsum(filled, axis=0) - filled
    ccnt = np.cumsum(ok, axis=0) - ok
    base_sum = (np.cumsum(filled, axis=0) - filled)[start_of]
    base_cnt = (np.cumsum(ok, axis=0) - ok)[start_of]
    total = total_before[keys[order]][:, cols] + csum - base_sum
    count = count_before[keys[order]][:, cols] + ccnt - base_cnt
    with np.errstate(invalid="ignore", divide="ignore"):
        mean_sorted = np.where(count > 0, total / count, np.nan)
    last_val = np.empty_like(last_sorted)
    mean_val = np.empty_like(mean_sorted)
    last_val[order] = last_sorted
    mean_val[order] = mean_sorted
    return last_val, mean_val


def key_references(
    ring: np.ndarray, n: int, pos: int, window: int, observed: np.ndarray, mine: np.ndarray, complete: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """(one key's reference rows in time order: its ring - ``n`` rows, written next at ``pos`` -
    then this batch's rows that ``complete`` marks as references; for each of the key's batch
    rows ``mine``, how many reference rows precede it)."""
    # a full ring starts at its write position (the oldest row); a filling one at slot 0
    ring = np.roll(ring, -pos, axis=0) if n == window else ring[:n]
    ok = complete[mine]
    refs = np.concatenate([ring, observed[mine[ok]]])
    before = len(ring) + np.cumsum(ok) - ok  # exclusive: rows strictly before
    return refs, before


def knn_row(
    out: np.ndarray,
    r: int,
    miss: np.ndarray,
    refs: np.ndarray,
    fallback: np.ndarray | None,
    k: float,
    uniform: bool,
    log1p: bool,
    f_min: int,
) -> np.ndarray:
    """Impute the missing cells ``miss`` of row r from ``refs`` (the key's newest references
    before r) - and from ``fallback`` (the knowledge base's samples) when there are fewer than
    ``k``; returns which cells were filled."""
    done = np.zeros(len(miss), dtype=bool)
    if len(refs) < k and fallback is not None:
        refs = np.concatenate([refs, fallback]) if len(refs) else fallback
    if len(refs) == 0:
        return done
    from perfsift.operators.clean import _clean_kernel as kern

    refs = np.ascontiguousarray(refs, dtype=np.float64)
    row = out[r].copy()  # the observed row: a cell imputed here is no feature for the next one
    for q, e in enumerate(miss.tolist()):
        pred = kern.knn_impute(refs, row, e, int(k), uniform, log1p, int(f_min))
        if pred == pred:
            out[r, e] = pred
            done[q] = True
    return done
