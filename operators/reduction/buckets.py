"""Time buckets of one job's samples: the rows of data reduction's regression (METHODS.md §2.2)."""

from __future__ import annotations

import numpy as np
from perfsift.operators.batch import Batch


def bucket_rows(
    batch: Batch, interval: float, perf_metric: str | None
) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[str]]:
    """(bucket index per row, values [buckets, features], response [buckets], feature names) of one
    job's samples: the mean of each ``node/metric`` and of ``perf_metric`` (over nodes) per bucket."""
    b = np.floor(batch.ts / interval).astype(np.int64)
    buckets, inv = np.unique(b, return_inverse=True)
    rows, cols = np.nonzero(~np.isnan(batch.values))
    is_y = np.array([m == perf_metric for m in batch.metrics])[cols]
    feat_names = [
        f"{batch.nodes[batch.node_idx[r]]}/{batch.metrics[c]}" for r, c in zip(rows[~is_y], cols[~is_y], strict=True)
    ]
    names, fidx = (
        np.unique(np.array(feat_names, dtype=object), return_inverse=True)
        if feat_names
        else (np.array([], dtype=object), np.array([], dtype=np.int64))
    )
    sums = np.zeros((len(buckets), len(names)))
    cnt = np.zeros((len(buckets), len(names)))
    rx, cx = rows[~is_y], cols[~is_y]
    np.add.at(sums, (inv[rx], fidx), batch.values[rx, cx])
    np.add.at(cnt, (inv[rx], fidx), 1)
    ysum = np.zeros(len(buckets))
    ycnt = np.zeros(len(buckets))
    np.add.at(ysum, inv[rows[is_y]], batch.values[rows[is_y], cols[is_y]])
    np.add.at(ycnt, inv[rows[is_y]], 1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return buckets, sums / cnt, ysum / ycnt, [str(n) for n in names]
