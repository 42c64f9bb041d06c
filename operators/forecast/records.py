"""perf.forecast records from the forecast bank's output batch (``schemas/forecast.avsc``)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any, overload

import numpy as np
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


def forecast_records(out: Batch) -> list[dict[str, Any]]:
    """perf.forecast records (schemas/forecast.avsc): one per row and forecast metric. The fields
    are taken from whole columns (``tolist``) and zipped, not indexed value by value: one record
    per value is the select stage's hot spot on a wide job (docs/benchmarks.md)."""
    rows, cols = np.nonzero(~np.isnan(out.values))
    if not len(rows):
        return []
    fs, ss, lo, hi = forecast_bounds(out.values[rows, cols], out.extra["sigma"][rows, cols])
    fa, ma, lo_a, hi_a = forecast_bounds(out.extra["mae_forecast"][rows, cols], out.extra["mae"][rows, cols], MAE_SIGMA)
    known, known_a = ~np.isnan(ss), ~np.isnan(ma)

    def or_none(x: np.ndarray, mask: np.ndarray) -> list[float | None]:
        """The values as floats, None where the error scale (σ or the MAE) is unknown."""
        y = x.astype(object)
        y[~mask] = None
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
        or_none(ss, known),
        or_none(lo, known),
        or_none(hi, known),
        methods,
        fa.tolist(),
        or_none(ma, known_a),
        or_none(lo_a, known_a),
        or_none(hi_a, known_a),
        strict=True,
    )
    return [dict(zip(FIELDS, f, strict=True)) for f in fields]


class ForecastRecords(Sequence[dict[str, Any]]):
    """The perf.forecast records of forecast-bank output batches (:func:`forecast_records` of each,
    in order), made only when first read: an encoder that knows the batches
    (:func:`~perfsift.schemas.forecast_json.forecasts_json`) writes them column-wise without a
    dict per record, which costs more than the forecasts themselves (docs/benchmarks.md).

    >>> from perfsift.operators.forecast.forecast import ForecastBank
    >>> two = Batch.from_columns(ts=[0.0, 1.0], nodes=["a", "a"], metrics=["x"], values=[[1.0], [2.0]])
    >>> out = ForecastBank().update(two)
    >>> recs = ForecastRecords([out])
    >>> len(recs), recs == forecast_records(out), recs[-1]["forecast"]
    (2, True, 2.0)
    """

    def __init__(self, batches: Sequence[Batch] = ()) -> None:
        self.batches: list[Batch] = []
        self._count = 0
        self._made: list[dict[str, Any]] | None = None
        for b in batches:
            self.add(b)

    def add(self, out: Batch) -> None:
        """One more bank output batch (its records come after those already held)."""
        self.batches.append(out)
        self._count += int(np.count_nonzero(~np.isnan(out.values)))
        self._made = None

    def records(self) -> list[dict[str, Any]]:
        """Every record as a dict (made once)."""
        if self._made is None:
            self._made = [r for b in self.batches for r in forecast_records(b)]
        return self._made

    def __len__(self) -> int:
        return self._count

    @overload
    def __getitem__(self, i: int) -> dict[str, Any]: ...

    @overload
    def __getitem__(self, i: slice) -> list[dict[str, Any]]: ...

    def __getitem__(self, i: int | slice) -> dict[str, Any] | list[dict[str, Any]]:
        return self.records()[i]

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return iter(self.records())

    def __eq__(self, other: object) -> bool:
        if isinstance(other, ForecastRecords | list):
            return self.records() == list(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]  # mutable, as a list

    def __repr__(self) -> str:
        return f"ForecastRecords({len(self.batches)} batches, {self._count} records)"
