"""perf.forecast records from the forecast bank's output batch (``schemas/forecast.avsc``)."""

from __future__ import annotations

from typing import Any

import numpy as np
from perfsift.operators.batch import Batch
from perfsift.operators.forecast._nws_constants import PRIMARIES
from perfsift.operators.rounding import forecast_bounds


def forecast_records(out: Batch) -> list[dict[str, Any]]:
    """perf.forecast records (schemas/forecast.avsc): one per row and forecast metric. The fields
    are taken from whole columns (``tolist``) and zipped, not indexed value by value: one record
    per value is the select stage's hot spot on a wide job (docs/benchmarks.md)."""
    rows, cols = np.nonzero(~np.isnan(out.values))
    if not len(rows):
        return []
    fs, ss, lo, hi = forecast_bounds(out.values[rows, cols], out.extra["sigma"][rows, cols])
    known = ~np.isnan(ss)

    def or_none(x: np.ndarray) -> list[float | None]:
        """The values as floats, None where σ is unknown."""
        y = x.astype(object)
        y[~known] = None
        out: list[float | None] = y.tolist()
        return out

    node_names = np.asarray(out.nodes, dtype=object)[out.node_idx[rows]].tolist()
    job_names = np.asarray(out.jobs, dtype=object)[out.job_idx[rows]].tolist()
    metrics = np.asarray(out.metrics, dtype=object)[cols].tolist()
    methods = np.asarray(PRIMARIES, dtype=object)[out.extra["method"][rows, cols].astype(np.int64)].tolist()
    fields = zip(
        out.ts[rows].tolist(),
        node_names,
        job_names,
        metrics,
        fs.tolist(),
        or_none(ss),
        or_none(lo),
        or_none(hi),
        methods,
        strict=True,
    )
    return [
        {"ts": t, "node": n, "job": j, "metric": m, "forecast": f, "sigma": s, "lower": lo_, "upper": hi_, "method": k}
        for t, n, j, m, f, s, lo_, hi_, k in fields
    ]
