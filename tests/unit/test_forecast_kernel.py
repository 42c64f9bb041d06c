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
