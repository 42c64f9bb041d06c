"""Step 1 of :class:`~perfsift.operators.clean.clean.Clean` (METHODS.md §3, Zhu): cumulative counters
become per-second rates and multiplexed PMU events are scaled to the whole interval, per (job, node).

A counter's rate is Δcount / Δt between consecutive samples of its key where it was present; a
counter that goes backwards wrapped (``counter_width`` bits: 2^width added once) or was reset (the
value becomes missing, flagged ``counter_reset``). A multiplexed event ``E`` with the cumulative
columns ``E:enabled`` and ``E:running`` becomes Δcount · Δt_enabled / Δt_running (missing when it
did not run), flagged ``low_coverage`` below ``low_coverage`` of the interval; the two time columns
are consumed. The state (the last raw value and time per key and state column) is the cleaner's:
``raw_last`` and ``raw_ts``, updated in place.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from perfsift.operators.batch import Batch

TIMES = ("enabled", "running")


def add_flag(flags: np.ndarray | list[Any], row: int, flag: dict[str, Any]) -> None:
    """``flag`` after the row's earlier flags (a new list: a row's list may be shared)."""
    had = flags[row]
    flags[row] = [flag] if had is None else [*had, flag]


def counter_columns(
    metrics: Sequence[str], counters: Sequence[str], multiplexed: Sequence[str]
) -> tuple[list[str], list[str], tuple[str, ...]]:
    """The batch's counters, its multiplexed events, and (sorted) every column they read."""
    mux = [m for m in multiplexed if m in metrics]
    ctr = [m for m in counters if m in metrics]
    times = (f"{m}:{s}" for m in mux for s in TIMES if f"{m}:{s}" in metrics)
    return ctr, mux, tuple(sorted({*ctr, *mux, *times}))


def to_rates(
    batch: Batch,
    flags: np.ndarray,
    keys: np.ndarray,
    state_col: dict[str, int],
    raw_last: np.ndarray,
    raw_ts: np.ndarray,
    counters: list[str],
    multiplexed: list[str],
    counter_width: int | None,
    low_coverage: float,
) -> Batch:
    """``batch`` with its ``counters`` as rates and its ``multiplexed`` events scaled (their time
    columns dropped); ``keys`` is each row's state key, ``state_col`` each column's state column."""
    values = batch.values.copy()
    width = None if counter_width is None else float(2**counter_width)

    def step(names: list[str]) -> tuple[list[np.ndarray], np.ndarray]:
        """Per-row differences of ``names`` and of the time to the previous sample of the same
        key where *all* of them were present (state carried over between batches). A row with
        any of them missing gives NaN and leaves the state alone, so Δcount and Δt always span
        the same interval: across a missing sample, on rows that carry other metrics only, and
        for a multiplexed event whose count is missing while its times are present."""
        js = [batch.metrics.index(n) for n in names]
        cs = [state_col[n] for n in names]
        xs = values[:, js]
        rows = np.flatnonzero(~np.isnan(xs).any(axis=1))
        rows = rows[np.argsort(keys[rows], kind="stable")]  # rows of one key in arrival order
        k = keys[rows]
        first = np.ones(len(rows), dtype=bool)
        first[1:] = k[1:] != k[:-1]
        last = np.ones(len(rows), dtype=bool)
        last[:-1] = k[1:] != k[:-1]

        def diff(state: np.ndarray, c: int, v: np.ndarray) -> np.ndarray:
            prev = np.empty(len(v))
            prev[1:] = v[:-1]
            prev[first] = state[k[first], c]
            state[k[last], c] = v[last]
            out = np.full(len(batch), np.nan)
            out[rows] = v - prev
            return out

        ds = [diff(raw_last, c, xs[rows, q]) for q, c in enumerate(cs)]
        return ds, diff(raw_ts, cs[0], batch.ts[rows].astype(float))

    for m in counters:
        if m in multiplexed:
            continue
        (d,), dt = step([m])
        wrap(d, width, m, values[:, batch.metrics.index(m)], flags)
        with np.errstate(divide="ignore", invalid="ignore"):
            values[:, batch.metrics.index(m)] = np.where(dt > 0, d / dt, np.nan)
    drop: list[str] = []
    for m in multiplexed:
        en, run = (f"{m}:{s}" for s in TIMES)
        if en not in batch.metrics or run not in batch.metrics:
            raise ValueError(f"multiplexed event {m!r} needs the columns {en!r} and {run!r}")
        (d, de, dr), dt = step([m, en, run])
        wrap(d, width, m, values[:, batch.metrics.index(m)], flags)
        with np.errstate(divide="ignore", invalid="ignore"):
            scaled = np.where(dr > 0, d * de / dr, np.nan)
            coverage = dr / de
        if m in counters:
            with np.errstate(divide="ignore", invalid="ignore"):
                scaled = np.where(dt > 0, scaled / dt, np.nan)
        for r in np.flatnonzero(coverage < low_coverage).tolist():
            flag = {
                "metric": m,
                "rule": "low_coverage",
                "action": "flag",
                "original": None,
                "threshold": float(coverage[r]),
            }
            add_flag(flags, r, flag)
        values[:, batch.metrics.index(m)] = scaled
        drop += [en, run]
    keep = [i for i, m in enumerate(batch.metrics) if m not in drop]
    return batch.with_values(values[:, keep], [batch.metrics[i] for i in keep])


def wrap(d: np.ndarray, width: float | None, metric: str, raw: np.ndarray, flags: np.ndarray) -> None:
    """Negative deltas ``d`` (in place): one wrap-around of the counter, else a reset (missing, flagged)."""
    neg = np.flatnonzero(d < 0)
    if width is not None:
        d[neg] += width
        neg = neg[d[neg] < 0]
    for r in neg.tolist():
        add_flag(
            flags,
            r,
            {"metric": metric, "rule": "counter_reset", "action": "drop", "original": float(raw[r]), "threshold": None},
        )
    d[neg] = np.nan
