"""Compiled per-batch updates of the imputation state of :class:`perfsift.operators.clean.clean.Clean`
(numba): the reference rows each key keeps and its last value, sum and count per metric.

One pass over the batch's rows in order, writing what the former whole-column numpy version wrote
(``np.bincount`` per column, a sort per column for the last values, a grouping of the rows by key
for the ring), so the state is the same to the bit; these were a third of the cleaner's time.
"""

from __future__ import annotations

import numpy as np
from numba import njit
from perfsift.operators import _numba  # noqa: F401  (sets the kernel cache directory)


@njit(cache=True)
def remember_rows(refs, ref_pos, ref_n, window, out, keys, cols):  # type: ignore[no-untyped-def]
    """Each row of ``out`` with at least one value goes into its key's ring of references
    (``refs[key]``: ``window`` rows of every state metric, written at ``ref_pos``, ``ref_n`` of them
    filled), its batch column jb into state column ``cols[jb]``, the other state columns NaN."""
    n_rows, n_metrics = out.shape
    width = refs.shape[2]
    for i in range(n_rows):
        seen = False
        for jb in range(n_metrics):
            if out[i, jb] == out[i, jb]:
                seen = True
                break
        if not seen:
            continue
        k = keys[i]
        p = ref_pos[k]
        for c in range(width):
            refs[k, p, c] = np.nan
        for jb in range(n_metrics):
            refs[k, p, cols[jb]] = out[i, jb]
        ref_pos[k] = (p + 1) % window
        if ref_n[k] < window:
            ref_n[k] += 1


@njit(cache=True)
def track_values(last, total, count, out, keys, cols):  # type: ignore[no-untyped-def]
    """Per (key, metric): the last value of ``out`` that is not missing, and the sum and count of
    them added to ``total`` and ``count`` (the batch's sum first, from 0, then added: the order of
    additions of a bincount per column)."""
    n_rows, n_metrics = out.shape
    n_keys = total.shape[0]
    batch_sum = np.zeros((n_keys, n_metrics))
    batch_cnt = np.zeros((n_keys, n_metrics), dtype=np.int64)
    touched = np.zeros(n_keys, dtype=np.bool_)
    order = np.empty(n_rows, dtype=np.int64)
    n_touched = 0
    for i in range(n_rows):
        k = keys[i]
        if not touched[k]:
            touched[k] = True
            order[n_touched] = k
            n_touched += 1
        for jb in range(n_metrics):
            x = out[i, jb]
            if x == x:
                batch_sum[k, jb] += x
                batch_cnt[k, jb] += 1
                last[k, cols[jb]] = x
    for q in range(n_touched):
        k = order[q]
        for jb in range(n_metrics):
            if batch_cnt[k, jb]:
                c = cols[jb]
                total[k, c] += batch_sum[k, jb]
                count[k, c] += batch_cnt[k, jb]
