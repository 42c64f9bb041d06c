"""Counter rates at the edges (issue #33, item 1): a rate is Δcount/Δt between two samples of the
*same* counter on the same node, whatever else arrives in between — a missing sample, rows that
carry only other metrics, a multiplexed event whose count is missing while its times are there."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from perfsift.operators import Batch, Clean

NAN = float("nan")


def rates(ts: list[float], rows: list[list[float]], metrics: list[str], **kw: object) -> np.ndarray:
    b = Batch.from_columns(ts=ts, nodes=["a"] * len(ts), metrics=metrics, values=rows)
    out = Clean(mode="none", impute="none", **kw).update(b)  # type: ignore[arg-type]
    return out.values[:, out.metrics.index(metrics[0])]


def test_a_missing_sample_does_not_double_the_next_rate() -> None:
    r = rates([0.0, 1.0, 2.0, 3.0, 4.0], [[0], [10], [NAN], [30], [40]], ["c"], counters=("c",))
    assert np.isnan(r[0]) and np.isnan(r[2])
    assert r[[1, 3, 4]].tolist() == [10.0, 10.0, 10.0]


def test_rows_alternating_with_another_metric_keep_the_counters_own_time_base() -> None:
    # an ingest stage emits one row per exporter report: the counter at t, another metric at t + 0.5
    ts = [t + h for t in range(6) for h in (0.0, 0.5)]
    rows = [[10.0 * t, NAN] if h == 0.0 else [NAN, 1.0] for t in range(6) for h in (0.0, 0.5)]
    r = rates(ts, rows, ["c", "other"], counters=("c",))
    assert r[2::2].tolist() == [10.0] * 5
    assert np.isnan(r[1::2]).all() and np.isnan(r[0])


def test_state_carries_over_batches_across_a_gap() -> None:
    op = Clean(mode="none", impute="none", counters=("c",))
    b1 = Batch.from_columns(ts=[0.0, 1.0, 2.0], nodes=["a"] * 3, metrics=["c", "o"],
                            values=[[0, 1], [10, 1], [NAN, 1]])  # fmt: skip
    b2 = Batch.from_columns(ts=[3.0, 4.0], nodes=["a"] * 2, metrics=["c", "o"], values=[[30, 1], [40, 1]])
    op.update(b1)
    assert op.update(b2).values[:, 0].tolist() == [10.0, 10.0]


def test_a_multiplexed_counter_with_a_missing_count_keeps_its_rate() -> None:
    # 10 events/s over full coverage; the count is lost at t = 2 while its enabled/running times arrive
    rows = [[10.0 * t, 1000.0 * t, 1000.0 * t] for t in range(5)]
    rows[2][0] = NAN
    r = rates([0.0, 1.0, 2.0, 3.0, 4.0], rows, ["e", "e:enabled", "e:running"], counters=("e",),
              multiplexed=("e",))  # fmt: skip
    assert np.isnan(r[0]) and np.isnan(r[2])
    assert r[[1, 3, 4]] == pytest.approx([10.0, 10.0, 10.0], rel=1e-12)


def test_a_multiplexed_counter_at_half_coverage_is_scaled_across_a_gap() -> None:
    # the event is counted half of the time: 5 counted per second, scaled to 10/s
    rows = [[5.0 * t, 1000.0 * t, 500.0 * t] for t in range(5)]
    rows[2][0] = NAN
    r = rates([0.0, 1.0, 2.0, 3.0, 4.0], rows, ["e", "e:enabled", "e:running"], counters=("e",),
              multiplexed=("e",), low_coverage=0.1)  # fmt: skip
    assert r[[1, 3, 4]] == pytest.approx([10.0, 10.0, 10.0], rel=1e-12)


@settings(max_examples=40, deadline=None)
@given(
    n=st.integers(3, 30),
    seed=st.integers(0, 2**31 - 1),
    nodes=st.integers(1, 3),
    batches=st.integers(1, 3),
)
def test_rates_equal_a_slow_per_counter_oracle(n: int, seed: int, nodes: int, batches: int) -> None:
    """Random gaps, other-metric rows, 1e9 level jumps, repeated timestamps and skewed node clocks."""
    rng = np.random.default_rng(seed)
    rows, ts, names = [], [], []
    for i in range(nodes):
        skew = rng.uniform(-0.9, 0.9)
        level, t = 0.0, 0.0
        for _ in range(n):
            t += float(rng.choice([0.0, 0.5, 1.0, 2.0]))  # repeated timestamps too
            level += float(rng.choice([0.0, 3.0, 1e9])) * float(rng.uniform(0.5, 1.5))
            present = rng.random() < 0.7
            rows.append([level if present else NAN, float(rng.random())])
            ts.append(t + skew)
            names.append(f"n{i}")
    order = np.argsort(ts, kind="stable")
    ts_a, rows_a, names_a = np.asarray(ts)[order], np.asarray(rows)[order], [names[j] for j in order]
    expected = np.full(len(ts_a), np.nan)
    last: dict[str, tuple[float, float]] = {}
    for r in range(len(ts_a)):  # the oracle: the same counter's own previous sample on the same node
        x = rows_a[r, 0]
        if x == x:
            if names_a[r] in last:
                pt, px = last[names_a[r]]
                expected[r] = (x - px) / (ts_a[r] - pt) if ts_a[r] > pt else np.nan
            last[names_a[r]] = (ts_a[r], x)
    op = Clean(mode="none", impute="none", counters=("c",))
    got = []
    for part in np.array_split(np.arange(len(ts_a)), batches):
        b = Batch.from_columns(ts=ts_a[part], nodes=[names_a[j] for j in part], metrics=["c", "o"],
                               values=rows_a[part])  # fmt: skip
        got.append(op.update(b).values[:, 0])
    got_a = np.concatenate(got)
    np.testing.assert_array_equal(np.isnan(got_a), np.isnan(expected))
    ok = ~np.isnan(expected)
    np.testing.assert_allclose(got_a[ok], expected[ok], rtol=1e-12)
