"""Hampel's centred mode (METHODS.md §0.4): the window [t−half, t+half] of a series' original
values, truncated at its ends, against a slow per-value oracle (``statistics.median``)."""

from __future__ import annotations

import statistics

import numpy as np
import pytest
from perfsift.operators import Batch, Clean


def oracle(values: np.ndarray, keys: np.ndarray, half: int, k: float) -> tuple[np.ndarray, np.ndarray]:
    """Flags and window medians, one value at a time: a series is one key's present values of a
    metric in row order."""
    flagged = np.zeros(values.shape, dtype=bool)
    median = np.full(values.shape, np.nan)
    for j in range(values.shape[1]):
        for key in np.unique(keys):
            rows = [r for r in range(len(keys)) if keys[r] == key and not np.isnan(values[r, j])]
            x = [float(values[r, j]) for r in rows]
            for t, r in enumerate(rows):
                w = x[max(t - half, 0) : t + half + 1]
                m = statistics.median(w)
                mad = statistics.median([abs(v - m) for v in w])
                s = max(1.4826 * mad, 1e-9 * abs(m), 1e-300)
                median[r, j] = m
                flagged[r, j] = abs(x[t] - m) > k * s
    return flagged, median


def random_batch(rng: np.random.Generator, n: int = 600) -> tuple[Batch, np.ndarray]:
    """Three interleaved nodes, two metrics, 5 % missing, 3 % spikes, a level step, repeated values."""
    keys = rng.integers(0, 3, n)
    base = np.stack([rng.normal(50, 5, n), np.round(rng.normal(10, 1, n))], axis=1)  # rounded: MAD ties
    base[n // 2 :, 0] += 40.0
    spikes = rng.random((n, 2)) < 0.03
    base[spikes] += rng.choice([-1, 1], spikes.sum()) * rng.uniform(30, 80, spikes.sum())
    base[rng.random((n, 2)) < 0.05] = np.nan
    nodes = [f"n{k}" for k in keys]
    return Batch.from_columns(ts=np.arange(n) / 3, nodes=nodes, metrics=["a", "b"], values=base.tolist()), keys


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("half", [1, 3, 5])
def test_centred_hampel_equals_the_slow_oracle(seed: int, half: int) -> None:
    rng = np.random.default_rng(seed)
    batch, keys = random_batch(rng)
    op = Clean(mode="hampel", hampel_mode="centred", half=half, action="replace", impute="none")
    out = op.update(batch)
    flagged, median = oracle(batch.values, keys, half, 3.0)
    assert flagged.sum() > 10
    got = np.zeros_like(flagged)
    for r, flags in enumerate(out.extra["flags"]):
        for f in flags or ():
            assert f["rule"] == "hampel"
            got[r, batch.metrics.index(f["metric"])] = True
    np.testing.assert_array_equal(got, flagged)
    np.testing.assert_allclose(out.values[flagged], median[flagged], rtol=1e-12, atol=0)
    keep = ~flagged
    np.testing.assert_array_equal(out.values[keep], batch.values[keep])  # NaN where missing, too


def test_centred_window_finds_the_spikes_and_leaves_a_level_step_alone() -> None:
    """A clean level step and four spikes: the centred window holds a majority of the value's own
    level on either side of the step, so it flags all spikes and nothing near the step, while the
    causal window, all old level, flags the first values of the new one."""
    rng = np.random.default_rng(7)
    x = rng.normal(100.0, 1.0, 400)
    x[200:] += 30.0
    truth = np.zeros(400, dtype=bool)
    truth[[50, 120, 260, 330]] = True
    x[truth] += 25.0
    batch = Batch.from_columns(ts=range(400), nodes=["a"] * 400, metrics=["x"], values=x[:, None].tolist())

    def flagged(mode: str) -> np.ndarray:
        out = Clean(mode="hampel", hampel_mode=mode, action="flag", impute="none").update(batch)
        return np.array([bool(f) for f in out.extra["flags"]])

    centred = flagged("centred")
    assert (centred & truth).sum() == truth.sum()  # recall
    # the rest is the filter's rate on normal noise with an 11-value MAD (10 of 400 here), none at the step
    assert (centred & ~truth).sum() <= 16
    assert not centred[195:206].any()
    assert flagged("causal")[200:203].all()  # the causal window is all old level at the step


def test_centred_mode_is_offline_only() -> None:
    op = Clean(mode="hampel", hampel_mode="centred", impute="none")
    b = Batch.from_columns(ts=range(20), nodes=["a"] * 20, metrics=["x"], values=[[float(v % 3)] for v in range(20)])
    op.update(b)
    with pytest.raises(RuntimeError, match="whole trace in one batch"):
        op.update(b)
    with pytest.raises(ValueError, match="hampel_mode"):
        Clean(mode="hampel", hampel_mode="centered").update(b)
