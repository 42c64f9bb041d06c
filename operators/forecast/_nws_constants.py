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
#: a windowed error sum below this share of the running sum it is a difference of is summed from
#: the scores' own errors instead (relative rounding error then <= ~1e-11, not lost to a huge prefix)
PRECISE = 2.0**-17
