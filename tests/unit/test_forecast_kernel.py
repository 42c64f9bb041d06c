"""The compiled forecaster kernel against the numpy reference implementation."""

from __future__ import annotations

from typing import Any

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from perfsift.operators import Batch
from perfsift.operators.forecast._nws_constants import RING
from perfsift.operators.forecast._nws_rows import window_sums
from perfsift.operators.forecast.forecast import ForecastBank


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
    """The fixed windows the primaries read (5, 31, 51) and one window per adaptive median, with room
    for its largest w, fit in the kernel's cache row."""
    from perfsift.operators.forecast import _nws_windows as k
    from perfsift.operators.forecast._nws_constants import ADAPTIVE
    from perfsift.operators.forecast.forecast import _WIN

    assert _WIN == k.WIN_TOTAL
    assert k.CAPS[: k.N_FIXED].tolist() == [5, 31, 51]
    assert [int(c) for c in k.CAPS[k.N_FIXED :]] == [hi for _, _, hi, _ in ADAPTIVE]
    for _, lo, _hi, step in ADAPTIVE:
        assert lo - step >= 1  # a candidate window is never empty


def test_adaptive_windows_that_move_every_step_match_the_reference() -> None:
    """Series built so the adaptive windows keep moving (alternating level shifts, rounded values with
    many ties, a short history at first): the windows the kernel grows and shrinks by a step give
    the reference's adaptive-median forecasts and the same winning methods."""
    rng = np.random.default_rng(3)
    p, t = 20, 400
    level = np.where((np.arange(t) // rng.integers(3, 12, size=1)[0]) % 2 == 0, 0.0, 30.0)
    vals = np.round(np.repeat(level, p)[:, None] + rng.normal(0, 3, (p * t, 2)), 0)
    vals[:, 1] = np.round(rng.standard_cauchy(p * t), 1)  # heavy tails: the medians matter
    b = Batch.from_columns(
        ts=np.repeat(np.arange(t, dtype=float), p),
        nodes=[f"n{i % p}" for i in range(p * t)],
        metrics=["shift", "cauchy"],
        values=vals,
    )
    ref_bank, fast_bank = ForecastBank(engine="numpy"), ForecastBank(engine="compiled")
    moves, ws = 0, None
    for start in range(0, p * t, 10 * p):  # ten steps per batch; w compared after each
        chunk = b.take(np.arange(start, start + 10 * p))
        ref, fast = ref_bank.update(chunk), fast_bank.update(chunk)
        np.testing.assert_allclose(fast.values, ref.values, rtol=1e-12, atol=1e-12)
        np.testing.assert_array_equal(fast.extra["method"], ref.extra["method"])
        w = ref_bank.adapt_w_[: ref_bank.n_series_].copy()
        np.testing.assert_array_equal(fast_bank.adapt_w_[: fast_bank.n_series_], w)
        np.testing.assert_allclose(fast_bank.pending_[:, 16:], ref_bank.pending_[:, 16:], rtol=1e-12)
        moves += 0 if ws is None else int((w != ws).sum())
        ws = w
    assert moves > 1000  # the windows did move, both ways and often


@settings(max_examples=300, deadline=None)
@given(
    window=st.lists(st.integers(0, 6), min_size=1, max_size=51),
    extra=st.lists(st.integers(0, 6), max_size=5),
    data=st.data(),
)
def test_order_statistics_without_and_with_a_few_values(window: list[int], extra: list[int], data: Any) -> None:
    """The adaptive median's candidates: the k-th value of a sorted window without a few of its
    values, or merged with a few more, by comparisons alone, equals the k-th of the sorted multiset
    (small integers: many ties)."""
    from perfsift.operators.forecast import _nws_windows as kern

    wv = np.full((2, 60), -1.0)
    wv[1, 3 : 3 + len(window)] = sorted(window)  # row 1, offset 3: the kernel's (series, window) layout
    gone = sorted(data.draw(st.permutations(window))[: data.draw(st.integers(0, min(5, len(window) - 1)))])
    vals = np.array(gone + [0.0] * (8 - len(gone)))
    rest = sorted(window)
    for g in gone:
        rest.remove(g)
    for k in range(len(rest)):
        assert kern._without(wv, 1, 3, vals, len(gone), k) == rest[k]
    vals = np.array(sorted(extra) + [0.0] * (8 - len(extra)), dtype=float)
    merged = sorted(window + extra)
    for k in range(len(merged)):
        assert kern._with(wv, 1, 3, len(window), vals, len(extra), k) == merged[k]


def test_a_column_major_batch_gives_the_same_forecasts() -> None:
    """The kernel writes into flat output cells: a batch whose values are column-major (or another
    dtype) must land in the same cells as a row-major one."""
    rng = np.random.default_rng(3)
    p, t = 5, 80
    vals = rng.normal(10, 2, (p * t, 3))
    vals[rng.random(vals.shape) < 0.1] = np.nan

    def batch(v: np.ndarray) -> Batch:
        return Batch.from_columns(
            ts=np.repeat(np.arange(t, dtype=float), p), nodes=[f"n{i % p}" for i in range(p * t)],
            metrics=["a", "b", "c"], values=v,
        )  # fmt: skip

    c = ForecastBank(engine="compiled").update(batch(vals))
    f = ForecastBank(engine="compiled").update(batch(np.asfortranarray(vals)))
    np.testing.assert_array_equal(f.values, c.values)
    np.testing.assert_array_equal(f.extra["method"], c.extra["method"])
    assert np.isnan(c.values[np.isnan(vals)]).all() and not np.isnan(c.values[~np.isnan(vals)]).any()


def test_small_calls_on_one_thread_forecast_as_on_numba_threads(monkeypatch: Any) -> None:
    """A call under ``PARALLEL_FROM`` values runs on the calling thread alone (threads.py): the
    forecasts are the same bits as with the series on numba's threads, and the thread count is
    given back after each call."""
    import numba
    from perfsift.operators.forecast import threads

    rng = np.random.default_rng(3)
    p, t = 40, 60
    rows = [
        Batch.from_columns(
            ts=[float(k)] * p, nodes=[f"n{i}" for i in range(p)], metrics=["a", "b"], values=rng.normal(50, 5, (p, 2))
        )
        for k in range(t)
    ]
    before = numba.get_num_threads()
    one = ForecastBank()
    seen: list[int] = []
    real = threads.kernel_threads

    def spy(items: int) -> Any:
        cm = real(items)

        class Spy:
            def __enter__(self) -> None:
                cm.__enter__()
                seen.append(numba.get_num_threads())

            def __exit__(self, *exc: Any) -> None:
                cm.__exit__(*exc)

        return Spy()

    monkeypatch.setattr("perfsift.operators.forecast.forecast.kernel_threads", spy)
    small = [one.update(b) for b in rows]
    assert seen == [1] * t and numba.get_num_threads() == before
    monkeypatch.setattr(threads, "PARALLEL_FROM", 0)
    monkeypatch.setattr("perfsift.operators.forecast.forecast.kernel_threads", threads.kernel_threads)
    many = ForecastBank()
    wide = [many.update(b) for b in rows]
    for a, b in zip(small, wide, strict=True):
        np.testing.assert_array_equal(a.values, b.values)
        np.testing.assert_array_equal(a.extra["sigma"], b.extra["sigma"])
        np.testing.assert_array_equal(a.extra["method"], b.extra["method"])


def test_window_sums_add_each_rows_last_errors_newest_first() -> None:
    """The numpy engine's direct window sums (taken after 1e9 jumps, where the kernel-vs-reference
    streams above never go): row i sums the last weff[i] errors of series s[i] in the ring, newest
    first, added one by one - the order the compiled kernel uses - bit for bit."""
    rng = np.random.default_rng(5)
    each = rng.normal(0, 1, (6, RING, 4)) ** 2 * 10.0 ** rng.integers(-6, 19, (6, RING, 4))
    s, k = np.array([4, 0, 2, 5]), np.array([7, 250, 100, 3])
    weff = np.array([0, 1, 100, 37])
    got = window_sums(each, s, k, weff)
    for i in range(len(s)):
        want = np.zeros(each.shape[2])
        for j in range(weff[i]):
            want = want + each[s[i], (k[i] - j) % RING]
        assert np.array_equal(got[i], want), i
