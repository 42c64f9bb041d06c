"""Property tests of smoothing (sliding mean, EWMA) on random streams with 1e9 level jumps, gaps,
repeated timestamps and skewed node clocks (tests/property_streams.py), against slow per-record
oracles: the streamed output equals the one-batch output and the oracle's."""

from __future__ import annotations

import math

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from perfsift.operators.batch import Batch
from perfsift.operators.smooth import Ewma, SlidingMean

from tests.property_streams import Stream, per_node, streamed, streams

EPS = np.finfo(np.float64).eps


def sliding_oracle(batch: Batch, window: int) -> tuple[np.ndarray, np.ndarray]:
    """Per node and metric, in arrival order: the exact mean (math.fsum) of the values present among
    the node's last ``window`` rows, and a bound on the float error of any summation order."""
    means = np.full(batch.values.shape, np.nan)
    tol = np.zeros(batch.values.shape)
    for rows in per_node(batch).values():
        for i, r in enumerate(rows):
            for m in range(batch.values.shape[1]):
                xs = [x for x in batch.values[rows[max(0, i - window + 1) : i + 1], m] if x == x]
                if xs:
                    means[r, m] = math.fsum(xs) / len(xs)
                    tol[r, m] = 4 * window * EPS * max(abs(x) for x in xs)
    return means, tol


@settings(max_examples=25, deadline=None)
@given(stream=streams(), window=st.integers(1, 7))
def test_sliding_mean_equals_the_exact_window_mean(stream: Stream, window: int) -> None:
    """A window that no longer holds a 1e9 value has no residue of it (tol scales with the window's
    own values)."""
    got = Batch.concat(streamed(SlidingMean(window=window), stream))
    whole = SlidingMean(window=window).update(stream.batch)
    np.testing.assert_array_equal(got.values, whole.values)
    want, tol = sliding_oracle(stream.batch, window)
    np.testing.assert_array_equal(np.isnan(whole.values), np.isnan(want))
    ok = ~np.isnan(want)
    assert (np.abs(whole.values[ok] - want[ok]) <= tol[ok]).all()


@settings(max_examples=25, deadline=None)
@given(stream=streams(), alpha=st.sampled_from([0.05, 0.2, 0.5, 1.0]))
def test_ewma_equals_the_recursion_record_by_record(stream: Stream, alpha: float) -> None:
    b = stream.batch
    mean, var = np.full(b.values.shape, np.nan), np.full(b.values.shape, np.nan)
    scale = np.zeros(b.values.shape)
    for rows in per_node(b).values():
        for m in range(b.values.shape[1]):
            mu, v, seen = None, 0.0, 0.0
            for r in rows:
                x = b.values[r, m]
                if x == x:
                    seen = max(seen, abs(x))
                    if mu is None:
                        mu, v = x, 0.0
                    else:
                        d = x - mu
                        mu, v = mu + alpha * d, (1 - alpha) * (v + alpha * d * d)
                if mu is not None:
                    mean[r, m], var[r, m], scale[r, m] = mu, v, seen
    got = streamed(Ewma(alpha=alpha), stream)
    whole = Ewma(alpha=alpha).update(b)
    np.testing.assert_array_equal(Batch.concat(got).values, whole.values)
    np.testing.assert_array_equal(np.concatenate([g.extra["ewm_var"] for g in got]), whole.extra["ewm_var"])
    np.testing.assert_array_equal(np.isnan(whole.values), np.isnan(mean))
    ok = ~np.isnan(mean)
    assert (np.abs(whole.values[ok] - mean[ok]) <= 8 * EPS * scale[ok]).all()
    assert (np.abs(whole.extra["ewm_var"][ok] - var[ok]) <= 64 * EPS * scale[ok] ** 2).all()
    assert (whole.extra["ewm_var"][ok] >= 0).all()
