"""Levers of statistical data reduction on real traces: lags and smoothing of the predictors, RAND
with the selection's term structure, squares centred where they are refitted."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import orjson
import pytest
from perfsift.cli.select import _table_of
from perfsift.operators.reduction.reduction import DataReduction, reduce_metrics
from perfsift.operators.reduction.regression import SQUARE, expand_predictors, expand_row, rand_subsets, refit
from perfsift.schemas import samples_to_batch


def _features(rng: np.random.Generator, n: int, d: int = 6) -> tuple[np.ndarray, list[str]]:
    return rng.normal(size=(n, d)), [f"h/m{j}" for j in range(d)]


def test_lags_find_a_driver_that_acts_one_bucket_later() -> None:
    rng = np.random.default_rng(1)
    x, names = _features(rng, 600)
    y = np.r_[np.nan, 3 * x[:-1, 2]] + 0.3 * rng.normal(size=600)  # y_t follows m2 at t - 1
    plain = reduce_metrics(x, y, names)
    assert plain["r2_train"] < 0.1  # without the lag nothing explains y
    xl, nl = expand_predictors(x, names, lags=1)
    lagged = reduce_metrics(xl, y, nl)
    assert "h/m2@t-1" in lagged["selected"]
    assert lagged["r2_train"] > 0.95


def test_smoothing_recovers_a_response_to_the_recent_mean() -> None:
    rng = np.random.default_rng(2)
    x, names = _features(rng, 800)
    trailing = np.convolve(x[:, 4], np.ones(4) / 4)[:800]  # mean of the last 4 buckets
    y = 5 * trailing + 0.1 * rng.normal(size=800)
    assert reduce_metrics(x, y, names)["r2_train"] < 0.5
    xs, ns = expand_predictors(x, names, smooth=4)
    res = reduce_metrics(xs[4:], y[4:], ns)
    assert "h/m4" in res["selected"]
    assert res["r2_train"] > 0.99


def test_a_gap_in_the_buckets_is_not_bridged() -> None:
    x = np.array([[1.0], [2.0], [3.0], [10.0]])
    z, names = expand_predictors(x, ["a"], lags=2, smooth=1, buckets=np.array([5, 6, 8, 9]))
    assert names == ["a", "a@t-1", "a@t-2"]
    # bucket 8 has no bucket 7 before it; bucket 9's t-2 is bucket 7 (absent), its t-1 is bucket 8
    np.testing.assert_array_equal(z[:, 1], [np.nan, 1.0, np.nan, 3.0])
    np.testing.assert_array_equal(z[:, 2], [np.nan, np.nan, 2.0, np.nan])
    with pytest.raises(ValueError):
        expand_predictors(x, ["a"], smooth=0)


def test_rand_subsets_have_the_selections_term_structure() -> None:
    live = [f"f{i}" for i in range(30)]
    terms = ["f1", "f2", "f3", "f2" + SQUARE, "f7" + SQUARE, "f9" + SQUARE]  # 1 both, 2 linear, 2 square-only
    for pick, t in rand_subsets(live, terms, 40, np.random.default_rng(0)):
        lin = {s for s in t if not s.endswith(SQUARE)}
        sq = {s.removesuffix(SQUARE) for s in t if s.endswith(SQUARE)}
        assert len(pick) == 5 and set(pick) == lin | sq
        assert (len(lin & sq), len(lin - sq), len(sq - lin)) == (1, 2, 2)


def test_a_refit_centres_squares_on_the_refitted_trace() -> None:
    """A verification run at another level: (x - c)² about the training centre is a mostly linear
    term there; centred on the run's own mean (centers=None) it is the curvature again."""
    rng = np.random.default_rng(3)
    x = rng.normal(size=(500, 1))
    y = x[:, 0] ** 2 + 0.1 * rng.normal(size=500)
    shifted = x + 50.0  # the same curvature about a level 50 higher
    own, *_ = refit(shifted, y, ["a"], ["a" + SQUARE], None)
    stale, *_ = refit(shifted, y, ["a"], ["a" + SQUARE], {"a": 0.0})
    assert own > 0.95
    assert stale < 0.5


def _lagged_trace(seed: int, n: int = 400) -> list[dict]:
    """Node ``srv`` with ``load`` and ``other``, node ``app`` with ``perf`` = 2 × ``load`` one second
    earlier plus noise: a response only a lag explains."""
    rng = np.random.default_rng(seed)
    load, other = rng.normal(size=n), rng.normal(size=n)
    perf = np.r_[0.0, 2 * load[:-1]] + 0.2 * rng.normal(size=n)
    samples = []
    for t in range(n):
        samples.append(
            {"ts": float(t), "node": "srv", "job": "j", "metrics": {"load": float(load[t]), "other": float(other[t])}}
        )
        samples.append({"ts": float(t), "node": "app", "job": "j", "metrics": {"perf": float(perf[t])}})
    return samples


def test_select_metrics_honours_lags_and_smooth(tmp_path: Path) -> None:
    """The options reach the regression: a response that follows ``load`` one bucket later is
    explained with ``--lags 1`` through ``srv/load@t-1``, and ``--smooth`` changes the features."""
    recs = _lagged_trace(seed=4)
    path = tmp_path / "trace.jsonl"
    path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in recs))
    x0, _, n0 = _table_of(path, "perf", 1.0)
    x1, y1, n1 = _table_of(path, "perf", 1.0, lags=1)
    xs, _, _ = _table_of(path, "perf", 1.0, smooth=3)
    assert n0 == ["srv/load", "srv/other"] and n1 == [*n0, "srv/load@t-1", "srv/other@t-1"]
    np.testing.assert_allclose(xs[10, 0], x0[8:11, 0].mean())
    res = reduce_metrics(x1, y1, n1)
    assert res["selected"] == ["srv/load@t-1"]


def test_the_streaming_rows_are_the_offline_ones() -> None:
    """expand_row (one bucket at a time, as DataReduction sees them) equals expand_predictors on
    the whole table, gaps included."""
    rng = np.random.default_rng(7)
    buckets = np.array([0, 1, 2, 4, 5, 6, 7, 9, 10, 11])
    x = rng.normal(size=(len(buckets), 2))
    x[3, 1] = np.nan
    table, names = expand_predictors(x, ["a", "b"], lags=2, smooth=3, buckets=buckets)
    recent: dict[int, dict[str, float]] = {}
    for i, b in enumerate(buckets.tolist()):
        recent = {k: r for k, r in recent.items() if k > b - 5} | {b: {"a": x[i, 0], "b": x[i, 1]}}
        row = expand_row(recent, b, lags=2, smooth=3)
        want = {n: v for n, v in zip(names, table[i], strict=True) if not np.isnan(v)}
        assert row.keys() == want.keys()
        np.testing.assert_allclose([row[n] for n in want], list(want.values()), rtol=1e-12)


def test_the_streaming_operator_honours_lags() -> None:
    """DataReduction(lags=1): a response that follows ``load`` one bucket later is explained by
    ``srv/load@t-1``, whatever the batching; without lags it is not."""
    batch = samples_to_batch(_lagged_trace(seed=8))

    def records(op: DataReduction, pieces: int) -> list[dict]:
        op.reset()
        return [r for rows in np.array_split(np.arange(len(batch)), pieces) for r in op.update(batch.take(rows))]

    lagged = records(DataReduction(perf_metric="perf", window=200, blocks=4, lags=1), 1)
    assert lagged and lagged[-1]["selected"] == ["srv/load@t-1"] and lagged[-1]["r2_train"] > 0.9
    again = records(DataReduction(perf_metric="perf", window=200, blocks=4, lags=1), 7)
    assert [r["selected"] for r in again] == [r["selected"] for r in lagged]
    plain = records(DataReduction(perf_metric="perf", window=200, blocks=4), 1)
    # without the lag the regression runs and explains little (a None would hide a fit that never ran)
    assert plain and all(r["r2_train"] is not None and r["r2_train"] < 0.2 for r in plain)
    with pytest.raises(ValueError):
        DataReduction(smooth=0).reset()
