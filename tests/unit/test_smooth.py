"""Smoothing operators against the spec (METHODS.md §0.3) and direct numpy computations."""

from __future__ import annotations

import numpy as np
import pytest
from perfsift.operators import Batch, Ewma, SlidingMean


def direct_sliding_mean(values: np.ndarray, keys: list[str], w: int) -> np.ndarray:
    """The definition, row by row: mean of the last w present values of the row's key."""
    out = np.full_like(values, np.nan)
    history: dict[str, list[np.ndarray]] = {}
    for i, key in enumerate(keys):
        h = history.setdefault(key, [])
        h.append(values[i])
        win = np.array(h[-w:])
        for j in range(values.shape[1]):
            col = win[:, j][~np.isnan(win[:, j])]
            if len(col):
                out[i, j] = col.sum() / len(col)
    return out


def random_batch(k: int = 3000, n: int = 5, nodes: int = 7, seed: int = 0, missing: float = 0.1) -> Batch:
    rng = np.random.default_rng(seed)
    vals = rng.normal(100, 10, size=(k, n))
    vals[rng.random((k, n)) < missing] = np.nan
    names = [f"n{i}" for i in rng.integers(0, nodes, k)]
    return Batch.from_columns(
        ts=np.arange(k, dtype=float),
        nodes=names,
        metrics=[f"m{j}" for j in range(n)],
        values=vals,
        jobs=["j"] * k,
        seq=np.arange(k),
    )


@pytest.mark.parametrize("w", [1, 2, 5, 10, 33])
def test_sliding_mean_equals_the_definition(w: int) -> None:
    b = random_batch()
    out = SlidingMean(window=w).update(b)
    expected = direct_sliding_mean(b.values, b.node_names(), w)
    np.testing.assert_allclose(out.values, expected, rtol=1e-12, atol=0)
    assert np.array_equal(np.isnan(out.values), np.isnan(expected))


def test_warm_flag_and_partial_windows() -> None:
    b = Batch.from_columns(ts=range(4), nodes=["a", "b", "a", "a"], metrics=["x"], values=[[2], [5], [4], [9]])
    out = SlidingMean(window=2).update(b)
    assert out.values[:, 0].tolist() == [2.0, 5.0, 3.0, 6.5]
    assert out.extra["warm"].tolist() == [False, False, True, True]


def test_spike_leaves_no_residue() -> None:
    """A running sum would keep rounding error from 1e15 after the spike leaves the window."""
    vals = np.array([[1e15]] + [[0.1]] * 20)
    out = SlidingMean(window=4).update(Batch.from_columns(ts=range(21), nodes=["a"] * 21, metrics=["x"], values=vals))
    assert out.values[-1, 0] == pytest.approx(0.1, rel=1e-15)


def test_large_offsets_keep_precision() -> None:
    """Counters near 1e9 with small variations: the window mean must not cancel."""
    rng = np.random.default_rng(3)
    vals = 1e9 + rng.normal(0, 1e-3, size=(500, 1))
    out = SlidingMean(window=50).update(
        Batch.from_columns(ts=range(500), nodes=["a"] * 500, metrics=["c"], values=vals)
    )
    expected = np.array([vals[max(0, i - 49) : i + 1, 0].mean() for i in range(500)])
    # within a few ulps of 1e9 (~1.2e-7); a running sum with subtractions drifts to ~1e-4 here
    np.testing.assert_allclose(out.values[:, 0] - 1e9, expected - 1e9, atol=1e-6)


def test_metrics_and_nodes_that_appear_later() -> None:
    op = SlidingMean(window=3)
    op.update(Batch.from_columns(ts=[0, 1], nodes=["a", "a"], metrics=["x"], values=[[1], [2]]))
    out = op.update(Batch.from_columns(ts=[2, 3], nodes=["a", "b"], metrics=["y", "x"], values=[[7, 3], [1, 10]]))
    assert out.metrics == ("y", "x")
    assert out.values.tolist() == [[7.0, 2.0], [1.0, 10.0]]


def test_ewma_matches_the_recursion_of_the_spec() -> None:
    rng = np.random.default_rng(1)
    x = rng.normal(size=200)
    x[rng.random(200) < 0.1] = np.nan
    a = 0.15
    out = Ewma(alpha=a).update(Batch.from_columns(ts=range(200), nodes=["a"] * 200, metrics=["x"], values=x[:, None]))
    m = v = np.nan
    for i, xi in enumerate(x):
        if not np.isnan(xi):
            if np.isnan(m):
                m, v = xi, 0.0
            else:
                d = xi - m
                m, v = m + a * d, (1 - a) * (v + a * d * d)
        assert out.values[i, 0] == pytest.approx(m, rel=1e-13, nan_ok=True)
        assert out.extra["ewm_var"][i, 0] == pytest.approx(v, rel=1e-12, nan_ok=True)


def test_ewma_equivalent_window() -> None:
    """After a step from 0 to 1, the EWMA passes 1 - (1-α)^k: the spec's 2/α - 1 window scale."""
    a = 0.1
    x = np.r_[np.zeros(10), np.ones(40)][:, None]
    out = Ewma(alpha=a).update(Batch.from_columns(ts=range(50), nodes=["a"] * 50, metrics=["x"], values=x))
    k = np.arange(1, 41)
    np.testing.assert_allclose(out.values[10:, 0], 1 - (1 - a) ** k, rtol=1e-12)


@pytest.mark.parametrize("params", [{"window": 0}, {"window": 2.5}])
def test_bad_window_is_refused(params: dict) -> None:
    with pytest.raises(ValueError, match="window"):
        SlidingMean(**params).reset()
    with pytest.raises(ValueError, match="alpha"):
        Ewma(alpha=0).reset()


@pytest.mark.parametrize(("w", "every"), [(10, 10), (5, 3), (4, 1)])
def test_emit_every_keeps_every_kth_mean_of_each_key_whatever_the_batches(w: int, every: int) -> None:
    """emit_every = e gives exactly the full-rate means whose number in their key's stream is a
    multiple of e, in input order, however the stream is cut into micro-batches."""
    batch = random_batch(k=1200, nodes=5)
    full = SlidingMean(window=w).update(batch)
    count = np.zeros(len(batch), dtype=np.int64)
    seen: dict[int, int] = {}
    for i, node in enumerate(batch.node_idx.tolist()):
        seen[node] = seen.get(node, 0) + 1
        count[i] = seen[node]
    want = full.take(np.flatnonzero(count % every == 0))
    op = SlidingMean(window=w, emit_every=every)
    cuts = np.sort(np.random.default_rng(3).choice(np.arange(1, len(batch)), 17, replace=False))
    parts = [op.update(batch.take(rows)) for rows in np.split(np.arange(len(batch)), cuts)]
    got = Batch.concat(parts)
    assert len(got) == len(want) == sum(c // every for c in seen.values())
    assert np.array_equal(got.values, want.values, equal_nan=True) and np.array_equal(got.ts, want.ts)
    assert got.extra["warm"].tolist() == want.extra["warm"].tolist()
    if every == w:  # non-overlapping windows: every emitted mean is over a full window
        assert got.extra["warm"].all()


def test_emit_every_must_be_a_positive_integer() -> None:
    with pytest.raises(ValueError, match="emit_every"):
        SlidingMean(window=3, emit_every=0).update(random_batch(k=10))
