"""Property tests of the NWS forecaster bank on random streams with 1e9 level jumps, gaps,
repeated timestamps and skewed node clocks (tests/property_streams.py), against slow per-record
oracles written from METHODS.md §5, not from the code: the forecast is the prediction of the
primary named in ``method`` (for the primaries with a closed form here), σ and the MAE are the
realised errors of the published forecasts themselves, and the streamed output equals the
one-batch output."""

from __future__ import annotations

import math
import statistics

import numpy as np
import pytest
from hypothesis import given, settings
from perfsift.operators.batch import Batch
from perfsift.operators.forecast.forecast import PRIMARIES, ForecastBank

from tests.property_streams import Stream, per_node, streamed, streams

EPS = np.finfo(np.float64).eps


def primary(name: str, xs: list[float]) -> float | None:
    """The next-value prediction of a primary with a closed form, from the series' values so far
    (METHODS.md §5.1); None for the others (exponential smoothers, trimmed and adaptive ones)."""
    if name == "last_value":
        return xs[-1]
    if name == "running_mean":
        return math.fsum(xs) / len(xs)
    for kind, fn in (("sliding_mean_", lambda w: math.fsum(w) / len(w)), ("median_", statistics.median)):
        if name.startswith(kind):
            return float(fn(xs[-int(name.removeprefix(kind)) :]))
    return None


@settings(max_examples=15, deadline=None)
@given(stream=streams(rows=(3, 60)))
def test_forecasts_sigma_and_mae_equal_per_record_oracles(stream: Stream) -> None:
    b = stream.batch
    got = streamed(ForecastBank(), stream)
    whole = ForecastBank().update(b)
    streamed_all = Batch.concat(got)
    for key in ("sigma", "mae_forecast", "mae", "lower", "upper", "lower_mae", "upper_mae", "method"):
        np.testing.assert_array_equal(np.concatenate([g.extra[key] for g in got]), whole.extra[key], err_msg=key)
    np.testing.assert_array_equal(streamed_all.values, whole.values)
    checked = 0
    for rows in per_node(b).values():
        for m in range(b.values.shape[1]):
            xs: list[float] = []
            prev: tuple[float, float] | None = None  # the last published (forecast, mae_forecast)
            sq: list[float] = []
            ab: list[float] = []
            for r in rows:
                x = b.values[r, m]
                if x != x:  # a missing value: no forecast, nothing scored
                    assert np.isnan(whole.values[r, m])
                    continue
                if prev is not None:
                    sq.append((prev[0] - x) ** 2)
                    ab.append(abs(prev[1] - x))
                xs.append(x)
                f, fa = whole.values[r, m], whole.extra["mae_forecast"][r, m]
                assert np.isfinite(f) and np.isfinite(fa)
                sigma, mae = whole.extra["sigma"][r, m], whole.extra["mae"][r, m]
                if sq:
                    # sums of squares after a 1e9 miss: relative precision, not absolute
                    assert sigma == pytest.approx(math.sqrt(math.fsum(sq) / len(sq)), rel=1e-9)
                    assert mae == pytest.approx(math.fsum(ab) / len(ab), rel=1e-9)
                else:
                    assert np.isnan(sigma) and np.isnan(mae)
                want = primary(PRIMARIES[int(whole.extra["method"][r, m])], xs)
                if want is not None:
                    assert abs(f - want) <= 64 * EPS * max(abs(v) for v in xs[-31:] or [1.0]) + 1e-9 * abs(want)
                    checked += 1
                prev = (f, fa)
    assert checked or not np.isfinite(whole.values).any()
