"""Numbers as perf.forecast carries them: rounded to :data:`FORECAST_DIGITS` significant digits."""

from __future__ import annotations

import math

import numpy as np

#: significant digits of the numbers on perf.forecast: far finer than any forecast's σ, and without
#: the binary-rounding tails (51.518299999999996) that make up a third of the compressed bytes
FORECAST_DIGITS = 9
#: σ of a forecast from its mean absolute error (METHODS.md §5.3): E|e| = σ·sqrt(2/π) for normal errors
MAE_SIGMA = float(np.sqrt(np.pi / 2))


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


def round_sig_one(x: float, digits: int = FORECAST_DIGITS) -> float:
    """:func:`round_sig` of one float, in plain Python (the same operations, so the same double: a
    reader that derives a forecast's bounds record by record gets the writer's bits, tested on
    values across the whole double range), about fifty times faster than a one-element array.

    >>> round_sig_one(51.518299999999996, 6), round_sig_one(-0.000123456789012, 6), round_sig_one(0.0)
    (51.5183, -0.000123457, 0.0)
    """
    if x != x or x == 0 or math.isinf(x):
        return x
    k = digits - 1 - math.floor(math.log10(abs(x)))
    try:
        p = 10.0 ** abs(k)
        rounded = round(x * p) / p if k >= 0 else round(x / p) * p
    except (OverflowError, ValueError):  # numpy's inf or nan there: the value is kept
        return x
    return rounded if math.isfinite(rounded) else x


def forecast_bounds(
    f: np.ndarray, s: np.ndarray, scale: float = 1.0
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Forecasts, error, lower and upper bounds (f ∓ 2·scale·error) as perf.forecast carries them
    (rounded to :data:`FORECAST_DIGITS`; rounding is monotone, so lower <= forecast <= upper holds).
    The error is σ (scale 1) or the MAE (scale :data:`MAE_SIGMA`)."""
    fr, sr = round_sig(f), round_sig(s)
    half = 2 * scale * sr
    return fr, sr, round_sig(fr - half), round_sig(fr + half)
