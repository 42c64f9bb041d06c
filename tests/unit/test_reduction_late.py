"""Streaming data reduction and late samples (issue #33, item 4): each bucket becomes one row. A
sample whose bucket is still pending is merged into it; one whose bucket already became a row is
dropped and counted (``late_values``), never filed as a second, partial row."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from perfsift.operators import Batch
from perfsift.operators.reduction.reduction import DataReduction


def rows(ts: list[float], x: list[float], perf: list[float], node: str = "a") -> Batch:
    return Batch.from_columns(ts=ts, nodes=[node] * len(ts), metrics=["x", "perf"],
                              values=np.column_stack([x, perf]))  # fmt: skip


def op() -> DataReduction:
    return DataReduction(perf_metric="perf", interval=1.0, window=96, lateness=1)


def test_a_late_sample_for_an_emitted_bucket_is_dropped_and_counted() -> None:
    rng = np.random.default_rng(0)
    x = rng.normal(size=30)
    r = op()
    r.update(rows(list(np.arange(30) + 0.2), list(x), list(2 * x)))
    assert r.jobs_["default"].filled == 29  # buckets 0..28; 29 waits for lateness
    before = r.jobs_["default"].ring_x[:29].copy()
    r.update(rows([5.5], [100.0], [7.0]))  # bucket 5 became a row long ago
    r.update(rows([30.2], [1.0], [2.0]))  # bucket 29 now is ready: one more row, not two
    st_ = r.jobs_["default"]
    assert st_.filled == 30
    np.testing.assert_array_equal(st_.ring_x[:29], before)
    assert st_.ring_t[:30].tolist() == [float(b) for b in range(30)]
    assert r.late_values() == {"default": 2}


def test_a_late_sample_for_a_pending_bucket_is_merged() -> None:
    r = op()
    r.update(rows([0.1, 1.1, 2.1], [1.0, 2.0, 3.0], [1.0, 2.0, 3.0]))  # bucket 2 pending
    r.update(rows([2.9], [5.0], [5.0]))  # same bucket, still pending: merged into its mean
    r.update(rows([3.5], [0.0], [0.0]))
    st_ = r.jobs_["default"]
    assert st_.filled == 3 and st_.ring_x[2, 0] == 4.0 and st_.ring_y[2] == 4.0
    assert r.late_values() == {"default": 0}


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), n_late=st.integers(1, 8), cut=st.integers(1, 5))
def test_late_samples_never_change_the_rows_or_the_records(seed: int, n_late: int, cut: int) -> None:
    """The oracle: the same stream without the late samples. Late ones (older than their bucket's
    row, 1e9 level jumps among them) come in random batches; rows and records stay the same."""
    rng = np.random.default_rng(seed)
    n = 60
    x = rng.normal(size=n) + np.where(np.arange(n) > 30, 1e9, 0.0)
    y = 3 * x + rng.normal(size=n)
    ts = np.arange(n) + rng.uniform(0, 0.99, n)
    clean, with_late = op(), op()
    rec_a, rec_b = [], []
    parts = np.array_split(np.arange(n), cut)
    for p in parts:
        rec_a += clean.update(rows(list(ts[p]), list(x[p]), list(y[p])))
        rec_b += with_late.update(rows(list(ts[p]), list(x[p]), list(y[p])))
        done = with_late.jobs_["default"].done
        if done is not None:
            old = rng.uniform(0, done + 0.999, n_late)  # buckets at or before the newest row
            rec_b += with_late.update(
                rows(list(old), list(rng.normal(size=n_late) * 1e9), list(rng.normal(size=n_late)))
            )
    a, b = clean.jobs_["default"], with_late.jobs_["default"]
    assert a.filled == b.filled == int(np.floor(ts.max()))  # buckets 0 .. newest - 1
    np.testing.assert_array_equal(a.ring_x, b.ring_x)
    np.testing.assert_array_equal(a.ring_y, b.ring_y)
    assert rec_a == rec_b
    assert sum(with_late.late_values().values()) >= 2 * n_late * (len(parts) - 1)
