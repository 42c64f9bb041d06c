"""perf.forecast records from the forecast bank's output batch (``schemas/forecast.avsc``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from perfsift.operators.base import BatchRecords
from perfsift.operators.batch import Batch
from perfsift.operators.forecast._nws_constants import PRIMARIES
from perfsift.operators.rounding import MAE_SIGMA, forecast_bounds

#: the fields of a perf.forecast record, in the order the records are made
FIELDS = (
    *("ts", "node", "job", "metric", "forecast", "sigma", "lower", "upper", "method"),
    *("mae_forecast", "mae", "lower_mae", "upper_mae"),
)


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


def forecast_records(out: Batch | Sequence[Batch]) -> list[dict[str, Any]]:
    """perf.forecast records (schemas/forecast.avsc): one per row and forecast metric, of one bank
    output batch or of several in order. The fields are taken from whole columns (``tolist``) and
    zipped, not indexed value by value, and the numbers of all the batches are rounded in one pass
    (elementwise, so the same values as batch by batch): one record per value is the select stage's
    hot spot on a wide job (docs/benchmarks.md)."""
    outs = [out] if isinstance(out, Batch) else list(out)
    cells = [np.nonzero(~np.isnan(b.values)) for b in outs]
    if not sum(len(r) for r, _ in cells):
        return []

    def column(get: Any) -> np.ndarray:
        """One field's values over every batch's cells (row-major per batch, batch after batch)."""
        return np.concatenate([get(b)[r, c] for b, (r, c) in zip(outs, cells, strict=True)])

    def names(table: Any, codes: Any) -> list[str]:
        """Names by their codes, batch after batch."""
        return [
            n
            for b, rc in zip(outs, cells, strict=True)
            for n in np.asarray(table(b), dtype=object)[codes(b, *rc)].tolist()
        ]

    fs, ss, lo, hi = forecast_bounds(column(lambda b: b.values), column(lambda b: b.extra["sigma"]))
    fa, ma, lo_a, hi_a = forecast_bounds(
        column(lambda b: b.extra["mae_forecast"]), column(lambda b: b.extra["mae"]), MAE_SIGMA
    )
    known, known_a = ~np.isnan(ss), ~np.isnan(ma)

    def or_none(x: np.ndarray, mask: np.ndarray) -> list[float | None]:
        """The values as floats, None where the error scale (σ or the MAE) is unknown."""
        y = x.astype(object)
        y[~mask] = None
        out: list[float | None] = y.tolist()
        return out

    ts = np.concatenate([b.ts[r] for b, (r, _) in zip(outs, cells, strict=True)])
    method = column(lambda b: b.extra["method"]).astype(np.int64)
    fields = zip(
        ts.tolist(),
        names(lambda b: b.nodes, lambda b, r, c: b.node_idx[r]),
        names(lambda b: b.jobs, lambda b, r, c: b.job_idx[r]),
        names(lambda b: b.metrics, lambda b, r, c: c),
        fs.tolist(),
        or_none(ss, known),
        or_none(lo, known),
        or_none(hi, known),
        np.asarray(PRIMARIES, dtype=object)[method].tolist(),
        fa.tolist(),
        or_none(ma, known_a),
        or_none(lo_a, known_a),
        or_none(hi_a, known_a),
        strict=True,
    )
    return [dict(zip(FIELDS, f, strict=True)) for f in fields]


class ForecastRecords(BatchRecords):
    """The perf.forecast records of forecast-bank output batches (:func:`forecast_records` of each,
    in order), made only when first read: an encoder that knows the batches
    (:func:`~perfsift.schemas.forecast_json.forecasts_json`) writes them column-wise without a
    dict per record, which costs more than the forecasts themselves (docs/benchmarks.md).
    One record per forecast value (a row's metrics without a forecast are NaN: none).

    >>> from perfsift.operators.forecast.forecast import ForecastBank
    >>> two = Batch.from_columns(ts=[0.0, 1.0], nodes=["a", "a"], metrics=["x"], values=[[1.0], [2.0]])
    >>> out = ForecastBank().update(two)
    >>> recs = ForecastRecords([out])
    >>> len(recs), recs == forecast_records(out), recs[-1]["forecast"]
    (2, True, 2.0)
    """

    def make(self, batches: list[Batch]) -> list[dict[str, Any]]:
        return forecast_records(batches)

    def size_of(self, batch: Batch) -> int:
        return int(np.count_nonzero(~np.isnan(batch.values)))
