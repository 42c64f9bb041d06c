"""perf.forecast records from the forecast bank's output batch (``schemas/forecast.avsc``)."""

from __future__ import annotations

from typing import Any

import numpy as np
from perfsift.operators.batch import Batch
from perfsift.operators.forecast._nws_constants import PRIMARIES
from perfsift.operators.rounding import MAE_SIGMA, forecast_bounds


def bank_output(
    batch: Batch, out: np.ndarray, sigma: np.ndarray, mae_f: np.ndarray, mae: np.ndarray, method: np.ndarray
) -> Batch:
    """The forecast bank's output batch: values = MSE forecasts, with the extra columns ``sigma``,
    ``lower``/``upper`` (forecast ∓ 2σ), ``method``, ``mae_forecast``, ``mae`` (realised MAE of the
    MAE forecasts) and ``lower_mae``/``upper_mae`` (mae_forecast ∓ 2·sqrt(π/2)·mae, METHODS.md §5.3)."""
    s_mae = MAE_SIGMA * mae
    return batch.with_values(
        out,
        sigma=sigma,
        lower=out - 2 * sigma,
        upper=out + 2 * sigma,
        method=method,
        mae_forecast=mae_f,
        mae=mae,
        lower_mae=mae_f - 2 * s_mae,
        upper_mae=mae_f + 2 * s_mae,
    )


def forecast_records(out: Batch) -> list[dict[str, Any]]:
    """perf.forecast records (schemas/forecast.avsc): one per row and forecast metric."""
    recs = []
    nodes, jobs = out.node_names(), out.job_names()
    method = out.extra["method"]
    rows, cols = np.nonzero(~np.isnan(out.values))
    fs, ss, lo, hi = forecast_bounds(out.values[rows, cols], out.extra["sigma"][rows, cols])
    fa, ma, lo_a, hi_a = forecast_bounds(out.extra["mae_forecast"][rows, cols], out.extra["mae"][rows, cols], MAE_SIGMA)
    for n, (i, j) in enumerate(zip(rows.tolist(), cols.tolist(), strict=True)):
        s, a = float(ss[n]), float(ma[n])
        known, known_a = s == s, a == a
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
                "mae_forecast": float(fa[n]),
                "mae": a if known_a else None,
                "lower_mae": float(lo_a[n]) if known_a else None,
                "upper_mae": float(hi_a[n]) if known_a else None,
            }
        )
    return recs
