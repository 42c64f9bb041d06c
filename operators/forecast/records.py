"""perf.forecast records from the forecast bank's output batch (``schemas/forecast.avsc``)."""

from __future__ import annotations

from typing import Any

import numpy as np
from perfsift.operators.batch import Batch
from perfsift.operators.forecast._nws_constants import PRIMARIES
from perfsift.operators.rounding import forecast_bounds


def forecast_records(out: Batch) -> list[dict[str, Any]]:
    """perf.forecast records (schemas/forecast.avsc): one per row and forecast metric."""
    recs = []
    nodes, jobs = out.node_names(), out.job_names()
    method = out.extra["method"]
    rows, cols = np.nonzero(~np.isnan(out.values))
    fs, ss, lo, hi = forecast_bounds(out.values[rows, cols], out.extra["sigma"][rows, cols])
    for n, (i, j) in enumerate(zip(rows.tolist(), cols.tolist(), strict=True)):
        s = float(ss[n])
        known = s == s
        recs.append(
            {
                "ts": float(out.ts[i]),
                "node": nodes[i],
                "job": jobs[i],
                "metric": out.metrics[j],
                "forecast": float(fs[n]),
                "sigma": s if known else None,
                "lower": float(lo[n]) if known else None,
                "upper": float(hi[n]) if known else None,
                "method": PRIMARIES[int(method[i, j])],
            }
        )
    return recs
