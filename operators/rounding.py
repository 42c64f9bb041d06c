"""Numbers as perf.forecast carries them: rounded to :data:`FORECAST_DIGITS` significant digits."""

from __future__ import annotations

import numpy as np

#: significant digits of the numbers on perf.forecast: far finer than any forecast's σ, and without
#: the binary-rounding tails (51.518299999999996) that make up a third of the compressed bytes
FORECAST_DIGITS = 9


def round_sig(x: np.ndarray, digits: int = FORECAST_DIGITS) -> np.ndarray:
    """``x`` rounded to ``digits`` significant digits, each value the double nearest that decimal
    (so JSON writes it with at most ``digits`` digits); 0, NaN and infinities unchanged.

    >>> round_sig(np.array([51.518299999999996, -0.000123456789012, 0.0, np.nan, 1.5e300]), 6).tolist()
    [51.5183, -0.000123457, 0.0, nan, 1.5e+300]
    """
    x = np.asarray(x, dtype=np.float64)
    ok = np.isfinite(x) & (x != 0)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        k = np.where(ok, digits - 1 - np.floor(np.log10(np.abs(np.where(ok, x, 1.0)))), 0.0)
        up = k >= 0  # scale up by an exact power of ten, round, divide back: correctly rounded
        p = 10.0 ** np.abs(k)
        rounded = np.where(up, np.round(x * p) / p, np.round(x / p) * p)
    return np.where(ok & np.isfinite(rounded), rounded, x)


def forecast_bounds(f: np.ndarray, s: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Forecasts, σ, lower and upper bounds (f ∓ 2σ) as perf.forecast carries them (rounded to
    :data:`FORECAST_DIGITS`; rounding is monotone, so lower <= forecast <= upper holds)."""
    fr, sr = round_sig(f), round_sig(s)
    return fr, sr, round_sig(fr - 2 * sr), round_sig(fr + 2 * sr)
