"""Sizes and tolerances of the NWS forecaster bank (METHODS.md §5) that both its engines use: the
numpy reference in :mod:`perfsift.operators.forecast.forecast` and the compiled kernel
(:mod:`perfsift.operators.forecast._nws_kernel`), which reads them as compile-time constants."""

from __future__ import annotations

HISTORY = 100  # values kept per series (MAX_DATA_ENTRIES)
RING = 101  # cumulative-error ring length (>= largest window + 1)
ADAPTIVE = ((10, 5, 21, 1), (30, 21, 51, 5))  # (init, min, max, step)
TRIM = 0.3  # share trimmed off each end by the trimmed means
#: newest values the compiled kernel keeps sorted per series, per window: 5 and 31 (medians, sliding
#: and trimmed means), 51 (trimmed mean), then one window per adaptive median holding its current w
#: values (room for its largest w)
SORTED_WINDOWS = (5, 31, 51, *(hi for _, _, hi, _ in ADAPTIVE))
TIE = 1e-12  # errors within this relative distance of the minimum are ties
#: the 18 primary forecasters of METHODS.md §5.1, in the order of their index
GAINS = (0.05, 0.10, 0.15, 0.20, 0.30, 0.40, 0.50, 0.75)
PRIMARIES = (
    "last_value",
    "running_mean",
    *(f"exp_smooth_{int(g * 100)}" for g in GAINS),
    "median_31",
    "median_5",
    "sliding_mean_31",
    "sliding_mean_5",
    "trimmed_mean_31",
    "trimmed_mean_51",
    "adaptive_median_5_21",
    "adaptive_median_21_51",
)
N_PRIMARY = len(PRIMARIES)  # 18
#: a windowed error sum below this share of the running sum it is a difference of is summed from
#: the scores' own errors instead (relative rounding error then <= ~1e-11, not lost to a huge prefix)
PRECISE = 2.0**-17
