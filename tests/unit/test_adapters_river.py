"""perfsift's operators as river estimators (perfsift.adapters.river): river's own estimator checks
where they apply, and river pipelines that give the batch operators' numbers."""

from __future__ import annotations

import os

import numpy as np
import pytest

if os.environ.get("CI"):  # CI installs the test extra, river included: a missing river is a failure there
    import river  # noqa: F401
river_checks = pytest.importorskip("river.checks", reason="pip install 'perfsift[river]'")

from perfsift.adapters.river import (  # noqa: E402
    CleanDetector,
    NWSForecaster,
    SelectionTransformer,
    SlidingMeanForecaster,
)
from perfsift.operators import Batch  # noqa: E402
from perfsift.operators.clean.clean import Clean  # noqa: E402
from perfsift.operators.forecast.forecast import ForecastBank  # noqa: E402
from perfsift.operators.pursuit.pursuit import ProjectionPursuit  # noqa: E402
from perfsift.operators.smooth import SlidingMean  # noqa: E402
from river import compose  # noqa: E402

ESTIMATORS = [CleanDetector(), SlidingMeanForecaster(), NWSForecaster(), SelectionTransformer()]


def general_checks(model: object) -> list:
    """river's checks that need no downloaded data set (those come first in ``yield_checks``; the
    data-set ones need scikit-learn and river's downloads, which this machine does not have)."""
    out: list = []
    gen = river_checks.yield_checks(model)
    while True:
        try:
            check = next(gen)
        except (StopIteration, ImportError):
            return out
        if "dataset" in getattr(check, "keywords", {}):
            return out
        out.append(check)


@pytest.mark.parametrize("model", ESTIMATORS, ids=lambda m: type(m).__name__)
def test_river_estimator_checks(model: object) -> None:
    checks = general_checks(model)
    assert len(checks) >= 14
    for check in checks:
        check(model.clone())  # type: ignore[attr-defined]


@pytest.mark.parametrize("model", [SlidingMeanForecaster(), NWSForecaster()], ids=lambda m: type(m).__name__)
def test_river_forecaster_checks(model: object) -> None:
    """river's forecaster checks (learn_one then forecast(horizon) of that length) on its own series."""
    data = [({"t": float(t)}, 10.0 + 2 * t + (t % 3)) for t in range(8)]
    river_checks.time_series.check_learn_one(model.clone(), data)  # type: ignore[attr-defined]
    river_checks.time_series.check_forecast(model.clone(), data)  # type: ignore[attr-defined]


def series(n: int = 400, seed: int = 1) -> np.ndarray:
    rng = np.random.default_rng(seed)
    t = np.arange(n)
    y = 50 + 10 * np.sin(t / 15) + rng.normal(0, 1, n)
    y[[60, 170, 300]] += [80.0, -70.0, 90.0]  # planted spikes
    return y


def test_clean_detector_scores_are_the_batch_operators_flags() -> None:
    rng = np.random.default_rng(2)
    y = series()
    z = 3 * y + rng.normal(0, 1, len(y))
    z[[100, 250]] += 200.0
    rows = [{"cpu": float(a), "io": float(b)} for a, b in zip(y, z, strict=True)]
    det = CleanDetector()
    scores = []
    cleaned = []
    for x in rows:
        scores.append(det.score_one(x))
        det.learn_one(x)
        cleaned.append([det.cleaned["cpu"], det.cleaned["io"]])
    out = Clean().update(
        Batch.from_columns(
            ts=np.arange(len(rows), dtype=float),
            nodes=["river"] * len(rows),
            metrics=["cpu", "io"],
            values=[[r["cpu"], r["io"]] for r in rows],
        )
    )
    want = [len({f["metric"] for f in (fl or []) if f["rule"] == "residual"}) / 2 for fl in out.extra["flags"]]
    assert scores == want
    np.testing.assert_array_equal(np.array(cleaned), out.values)
    # the planted spikes are what it finds: precision and recall against the plant
    found = {i for i, s in enumerate(scores) if s > 0}
    planted = {60, 170, 300, 100, 250}
    assert len(found & planted) / len(planted) == 1.0  # recall
    assert len(found & planted) / len(found) >= 0.8  # precision


def test_a_river_pipeline_of_the_detector_filters_the_spikes() -> None:
    """river's AnomalyFilter around the wrapper (a river pipeline): the spikes are kept out."""
    from river import anomaly

    flt = anomaly.ThresholdFilter(CleanDetector(), threshold=0.5)
    y = series()
    kept = []
    for t, v in enumerate(y):
        x = {"cpu": float(v)}
        score = flt.score_one(x)
        if not flt.classify(score):
            kept.append(t)
        flt.learn_one(x)
    assert not {60, 170, 300} & set(kept)
    assert len(kept) >= len(y) - 10


@pytest.mark.parametrize(
    ("model", "op", "column"),
    [
        (SlidingMeanForecaster(window=7), SlidingMean(window=7), None),
        (NWSForecaster(), ForecastBank(), "sigma"),
    ],
    ids=["sliding_mean", "nws"],
)
def test_forecasters_give_the_batch_operators_numbers(model, op, column) -> None:  # type: ignore[no-untyped-def]
    y = series()
    got = []
    for v in y:
        model.learn_one(float(v))
        got.append(model.forecast(3))
    out = op.update(
        Batch.from_columns(
            ts=np.arange(len(y), dtype=float), nodes=["river"] * len(y), metrics=["y"], values=y[:, None]
        )
    )
    assert all(len(g) == 3 and g[0] == g[1] == g[2] for g in got)
    np.testing.assert_array_equal(np.array([g[0] for g in got]), out.values[:, 0])
    if column == "sigma":
        assert model.sigma == pytest.approx(float(out.extra["sigma"][-1, 0]), rel=0, abs=0)


def steps(n: int = 300, nodes: int = 6, seed: int = 4) -> list[dict[str, dict[str, float]]]:
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        step = {}
        for i in range(nodes):
            apart = 40.0 if i == 0 else 0.0  # node 0 differs in "io" only
            step[f"n{i}"] = {
                "cpu": float(rng.normal(10, 1)),
                "mem": float(rng.normal(5, 1)),
                "io": float(rng.normal(20 + apart, 1)),
                "net": float(rng.normal(1, 0.1)),
            }
        out.append(step)
    return out


def test_pursuit_transformer_gives_the_batch_operators_selections() -> None:
    data = steps()
    params: dict = {"period": 50.0, "seed": 3}
    model = compose.Pipeline(SelectionTransformer(params=params))
    reduced = []
    for x in data:
        model.learn_one(x)
        reduced.append(model.transform_one(x))
    wrapper = model.steps[next(iter(model.steps))]
    nodes = [n for x in data for n in x]
    metrics = ["cpu", "io", "mem", "net"]
    batch = Batch.from_columns(
        ts=[float(t) for t, x in enumerate(data) for _ in x],
        nodes=nodes,
        metrics=metrics,
        values=[[x[n][m] for m in metrics] for x in data for n in x],
        jobs=["default"] * len(nodes),
    )
    want = ProjectionPursuit(**params).update(batch)
    assert len(want) >= 4
    assert wrapper.selections == want
    assert "io" in wrapper.selected
    assert set(reduced[-1]["n0"]) == set(wrapper.selected) < set(metrics)
