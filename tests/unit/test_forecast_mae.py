"""The MAE-based bound of perf.forecast (METHODS.md §5.2–5.3): ``mae`` is the realised mean absolute
error of the MAE forecasts, and ``mae_forecast ± 2·sqrt(π/2)·mae`` covers what the error law says."""

from __future__ import annotations

import numpy as np
import pytest
from perfsift.operators import Batch
from perfsift.operators.forecast.forecast import ForecastBank
from perfsift.operators.forecast.records import forecast_records
from perfsift.operators.rounding import MAE_SIGMA


def series_batch(x: np.ndarray) -> Batch:
    return Batch.from_columns(ts=range(len(x)), nodes=["a"] * len(x), metrics=["x"], values=x[:, None].tolist())


def forecast(x: np.ndarray, engine: str, parts: int = 3) -> dict[str, np.ndarray]:
    """The bank's columns for one series fed in ``parts`` batches."""
    bank = ForecastBank(engine=engine)
    outs = [bank.update(series_batch(p)) for p in np.array_split(x, parts)]
    cols = {
        k: np.concatenate([o.extra[k][:, 0] for o in outs]) for k in ("mae_forecast", "mae", "lower_mae", "upper_mae")
    }
    cols["forecast"] = np.concatenate([o.values[:, 0] for o in outs])
    return cols


@pytest.mark.parametrize("engine", ["compiled", "numpy"])
def test_mae_is_the_realised_mae_of_the_mae_forecasts(engine: str) -> None:
    """Oracle: ``mae`` at row t is the mean of |mae_forecast(s-1) - x(s)| over s <= t, computed
    directly from the bank's own MAE forecasts, and the bounds are mae_forecast ∓ 2·sqrt(π/2)·mae,
    to 1e-9 - on noise, a level jump of 1e9 and back."""
    rng = np.random.default_rng(11)
    x = np.concatenate([rng.laplace(100.0, 3.0, 300), 1e9 + rng.normal(0, 5, 200), rng.normal(7, 1, 300)])
    c = forecast(x, engine)
    err = np.abs(c["mae_forecast"][:-1] - x[1:])
    oracle = np.r_[np.nan, np.cumsum(err) / np.arange(1, len(err) + 1)]
    assert np.isnan(c["mae"][0])  # nothing scored yet
    np.testing.assert_allclose(c["mae"][1:], oracle[1:], rtol=1e-9, atol=0)
    half = 2 * np.sqrt(np.pi / 2) * oracle[1:]
    np.testing.assert_allclose(c["lower_mae"][1:], c["mae_forecast"][1:] - half, rtol=1e-9)
    np.testing.assert_allclose(c["upper_mae"][1:], c["mae_forecast"][1:] + half, rtol=1e-9)
    assert pytest.approx(1.2533141373155, abs=1e-12) == MAE_SIGMA


@pytest.mark.parametrize(
    ("noise", "coverage"),
    [
        # normal errors: sqrt(π/2)·E|e| = σ, so ±2σ covers P(|Z| <= 2)
        (lambda rng, n: rng.normal(0.0, 4.0, n), 0.9545),
        # Laplace(b): E|e| = b, so the bound is ±2·sqrt(π/2)·b and covers 1 - exp(-2·sqrt(π/2))
        (lambda rng, n: rng.laplace(0.0, 4.0, n), 1 - np.exp(-2 * np.sqrt(np.pi / 2))),
    ],
    ids=["normal", "laplace"],
)
def test_the_mae_bound_covers_what_the_error_law_says(noise: object, coverage: float) -> None:
    """Noise of a known law around a constant: the share of next values inside [lower_mae,
    upper_mae] is the law's coverage of ±2·sqrt(π/2)·MAE, within 0.015 (3000 forecasts after a
    warm-up of 200; the standard error is 0.005). A factor of 1 instead of sqrt(π/2) gives 0.89
    (normal) and 0.86 (Laplace); a bound 1.5 times too wide gives >= 0.98."""
    rng = np.random.default_rng(3)
    x = 500.0 + noise(rng, 3200)  # type: ignore[operator]
    c = forecast(x, "compiled")
    lo, hi, nxt = c["lower_mae"][200:-1], c["upper_mae"][200:-1], x[201:]
    inside = float(np.mean((lo <= nxt) & (nxt <= hi)))
    assert inside == pytest.approx(coverage, abs=0.015)


def test_records_carry_the_mae_bound_null_before_the_first_score() -> None:
    rng = np.random.default_rng(2)
    x = rng.normal(10, 1, 50)
    recs = forecast_records(ForecastBank().update(series_batch(x)))
    assert [recs[0][k] for k in ("mae", "lower_mae", "upper_mae")] == [None, None, None]
    r = recs[-1]
    assert r["lower_mae"] < r["mae_forecast"] < r["upper_mae"]
    assert r["upper_mae"] - r["lower_mae"] == pytest.approx(4 * np.sqrt(np.pi / 2) * r["mae"], rel=1e-8)


def test_old_records_without_the_mae_fields_still_read() -> None:
    """The new fields default to null: a record written under the schema without them reads under
    the new one (Avro schema resolution), its MAE fields null."""
    import io

    import fastavro
    from perfsift.schemas import load_schema

    new = load_schema("forecast")
    added = ("mae_forecast", "mae", "lower_mae", "upper_mae")
    old = {**new, "fields": [f for f in new["fields"] if f["name"] not in added]}
    rec = forecast_records(ForecastBank().update(series_batch(np.arange(5.0))))[-1]
    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, fastavro.parse_schema(old), {k: v for k, v in rec.items() if k not in added})
    buf.seek(0)
    back = fastavro.schemaless_reader(buf, fastavro.parse_schema(old), fastavro.parse_schema(new))
    assert isinstance(back, dict)
    assert [back[k] for k in added] == [None] * 4
    assert back["forecast"] == rec["forecast"]
