"""The compiled forecaster kernel against the numpy reference implementation."""

from __future__ import annotations

import numpy as np
from perfsift.operators import Batch
from perfsift.operators.forecast import ForecastBank


def test_the_kernel_equals_the_numpy_reference() -> None:
    """Many series with gaps, trends and constants, over the 1000-score re-base: same forecasts,
    same winning methods, same bounds."""
    rng = np.random.default_rng(11)
    p, t = 60, 1100
    vals = rng.normal(100, 10, (p * t, 3))
    vals[rng.random(vals.shape) < 0.05] = np.nan
    vals[:, 1] = np.repeat(np.arange(t), p) * 1.0 + rng.normal(size=p * t)
    vals[:, 2] = 5.0
    b = Batch.from_columns(
        ts=np.repeat(np.arange(t, dtype=float), p),
        nodes=[f"n{i % p}" for i in range(p * t)],
        metrics=["noise", "trend", "constant"],
        values=vals,
    )
    ref = ForecastBank(engine="numpy").update(b)
    fast = ForecastBank(engine="compiled").update(b)
    np.testing.assert_allclose(fast.values, ref.values, rtol=1e-12, atol=1e-12)
    np.testing.assert_array_equal(fast.extra["method"], ref.extra["method"])
    np.testing.assert_allclose(fast.extra["sigma"], ref.extra["sigma"], rtol=1e-9, atol=1e-12)


def test_batches_split_anywhere_and_a_restore_give_the_same_forecasts() -> None:
    """The kernel's sorted windows are a cache rebuilt from the history ring: a bank restored from a
    snapshot mid-stream, or fed row by row, forecasts exactly as one fed the whole stream at once."""
    rng = np.random.default_rng(5)
    p, t = 7, 300
    vals = np.round(rng.normal(50, 5, (p * t, 2)), 1)  # rounding makes equal values (ties) common
    b = Batch.from_columns(
        ts=np.repeat(np.arange(t, dtype=float), p),
        nodes=[f"n{i % p}" for i in range(p * t)],
        metrics=["a", "b"],
        values=vals,
    )
    whole = ForecastBank().update(b)
    first = ForecastBank()
    first.update(b.take(np.arange(900)))
    restored = ForecastBank()
    restored.restore(first.snapshot())
    rest = restored.update(b.take(np.arange(900, p * t)))
    np.testing.assert_array_equal(rest.values, whole.values[900:])
    np.testing.assert_array_equal(rest.extra["method"], whole.extra["method"][900:])
    one = ForecastBank()
    rows = np.concatenate([one.update(b.take([i])).values for i in range(0, 600)])
    np.testing.assert_array_equal(rows, whole.values[:600])


def test_the_kernel_windows_cover_the_adaptive_medians() -> None:
    """Every median the bank takes fits in the sorted windows the kernel keeps."""
    from perfsift.operators import _nws_kernel as k
    from perfsift.operators.forecast import _WIN, ADAPTIVE

    assert _WIN == k.WIN_TOTAL
    assert {5, 31, 51} <= set(k.CAPS.tolist())
    for a, (_, _lo, hi, step) in enumerate(ADAPTIVE):
        assert k.CAPS[k.ADAPT_BEFORE[a]] >= hi + step  # candidates w + step before the new value
        assert k.CAPS[k.ADAPT_AFTER[a]] >= hi
