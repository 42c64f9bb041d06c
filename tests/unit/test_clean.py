"""Cleaning (METHODS.md §0.2–0.4, §3): the spec's oracles, planted faults with ground truth,
imputation, counters, multiplexing and DTW quality (the knowledge base: test_knowledge_base.py)."""

from __future__ import annotations

import numpy as np
import pytest
from perfsift.analysis.quality import diff, dtw
from perfsift.operators import Batch, Clean
from perfsift.producers.synth import cyclic, multiplexed, spmd
from perfsift.schemas import samples_to_batch
from perfsift.streams.knowledge import clean_params


def series(x: np.ndarray, metric: str = "x", node: str = "a") -> Batch:
    return Batch.from_columns(ts=np.arange(len(x), dtype=float), nodes=[node] * len(x), metrics=[metric],
                              values=np.asarray(x, dtype=float)[:, None])  # fmt: skip


def flagged(out: Batch, rule: str | None = None) -> list[int]:
    return [i for i, f in enumerate(out.extra["flags"]) if f and any(rule is None or g["rule"] == rule for g in f)]


# -- the spec's oracles ----------------------------------------------------------------------------


def test_window_mode_flags_only_the_spike_and_clips_it_to_the_stated_value() -> None:
    x = np.sin(0.2 * np.arange(100))
    x[60] = 50.0
    out = Clean(mode="window", action="clip", impute="none").update(series(x))
    assert flagged(out) == [60]
    assert out.values[60, 0] == pytest.approx(2.1722477, abs=1e-7)
    assert out.values[60, 0] == pytest.approx(x[:60].mean() + 3 * x[:60].std())
    (f,) = out.extra["flags"][60]
    assert f == {"metric": "x", "rule": "nsigma", "action": "clip", "original": 50.0, "threshold": out.values[60, 0]}


def test_a_flagged_value_does_not_mask_itself_or_later_ones() -> None:
    x = np.sin(0.2 * np.arange(120))
    x[60] = 50.0
    x[70] = 2.5  # small, but above what the clean history allows: still caught after the spike
    for mode in ("window", "ewma", "hampel"):
        out = Clean(mode=mode, action="flag", impute="none").update(series(x))
        assert 60 in flagged(out) and 70 in flagged(out), mode


def test_a_permanent_level_shift_is_accepted_after_a_run_of_flags() -> None:
    x = np.concatenate([np.sin(np.arange(50)), 100 + np.sin(np.arange(50))])
    out = Clean(mode="window", action="flag", accept_after=10, impute="none").update(series(x))
    assert flagged(out) == list(range(50, 59))  # 9 flags, the 10th re-seeds the window


def test_hampel_flags_planted_spikes_and_window_mode_leaves_a_clean_sine_alone() -> None:
    t = np.arange(600)
    assert flagged(Clean(mode="window", impute="none").update(series(np.sin(0.2 * t)))) == []
    # The causal Hampel filter has the classical false-alarm rate of an 11-point MAD: a few
    # percent of clean noisy points, and every turning point of a noise-free curve (its window
    # lies on one side of the extreme). It still finds every spike and replaces it by the median.
    rng = np.random.default_rng(1)
    clean = np.sin(2 * np.pi * t / 200) + 0.05 * rng.normal(size=600)
    assert len(flagged(Clean(mode="hampel", impute="none").update(series(clean)))) < 0.03 * 600
    x = clean.copy()
    spikes = [100, 250, 251, 400]
    x[spikes] += 3.0
    out = Clean(mode="hampel", action="replace", impute="none").update(series(x))
    assert set(spikes) <= set(flagged(out))
    # replaced by the window median: it lags the trend by half a window (5 × 0.031) plus noise
    assert np.abs(out.values[spikes, 0] - np.sin(2 * np.pi * t[spikes] / 200)).max() < 0.3


def test_trimming_maps_shrink_distances_as_vetter_and_reed() -> None:
    x = np.sin(0.2 * np.arange(100))
    x[60] = 50.0
    plain = Clean(mode="window", action="flag", impute="none").update(series(x))
    mu, sd = x[:60].mean(), x[:60].std()
    r = (50.0 - mu) / sd
    for action, rho in (("trim_log", 3 * (1 + np.log(r / 3))), ("trim_sqrt", 3 * (3 - 2 / np.sqrt(r / 3)))):
        out = Clean(mode="window", action=action, impute="none").update(series(x))
        assert out.values[60, 0] == pytest.approx(mu + rho * sd)
        assert mu + 3 * sd < out.values[60, 0] < 50.0
    assert plain.values[60, 0] == 50.0


def test_multiplexing_scaling_counters_and_wrap() -> None:
    # cumulative raw count and times (ms): the second interval runs 2.5 of 10 ms -> 1000 * 4 = 4000
    b = Batch.from_columns(ts=[0.0, 1.0, 2.0, 3.0], nodes=["a"] * 4, metrics=["cyc", "cyc:enabled", "cyc:running"],
                           values=[[0, 0, 0], [1000, 10, 2.5], [1000, 20, 2.5], [1010, 1000, 2.5 + 0.1]])  # fmt: skip
    out = Clean(mode="none", multiplexed=("cyc",), impute="none").update(b)
    assert out.metrics == ("cyc",)
    assert np.isnan(out.values[0, 0]) and out.values[1, 0] == 4000.0
    assert np.isnan(out.values[2, 0])  # zero running time: missing, not 0 or inf
    assert out.values[3, 0] == pytest.approx(10 * 980 / 0.1)
    low = [g for g in out.extra["flags"][3] if g["rule"] == "low_coverage"]
    assert low and low[0]["threshold"] == pytest.approx(0.1 / 980)
    width = 2**32
    ctr = Batch.from_columns(ts=[0.0, 2.0, 4.0, 6.0], nodes=["a"] * 4, metrics=["c"],
                             values=[[width - 10], [width - 2], [6], [3]])  # fmt: skip
    rate = Clean(mode="none", counters=("c",), counter_width=32, impute="none").update(ctr)
    assert np.isnan(rate.values[0, 0]) and rate.values[1, 0] == 4.0 and rate.values[2, 0] == 4.0
    assert rate.values[3, 0] == pytest.approx((width - 3) / 2)  # one wrap, as the spec says
    reset = Clean(mode="none", counters=("c",), impute="none").update(ctr)
    assert np.isnan(reset.values[2, 0]) and reset.extra["flags"][2][0]["rule"] == "counter_reset"


def test_knn_exact_match_rule_and_a_linear_relation() -> None:
    f = np.linspace(1, 50, 60)
    vals = np.column_stack([f, 2 * f, f**2])
    vals[59] = [f[10], np.nan, f[10] ** 2]  # the target matches reference 10 exactly
    out = Clean(mode="none", impute="knn").update(Batch.from_columns(
        ts=np.arange(60.0), nodes=["a"] * 60, metrics=["f", "e", "g"], values=vals))  # fmt: skip
    assert out.values[59, 1] == pytest.approx(2 * f[10], rel=1e-12)
    assert out.extra["flags"][59] == [{"metric": "e", "rule": "knn_impute", "action": "impute", "original": None,
                                       "threshold": None}]  # fmt: skip


def test_nothing_trainable_falls_back_to_the_last_value_with_a_flag() -> None:
    b = Batch.from_columns(ts=[0.0, 1.0, 2.0], nodes=["a"] * 3, metrics=["x"], values=[[5.0], [np.nan], [np.nan]])
    out = Clean(mode="none").update(b)
    assert out.values[1:, 0].tolist() == [5.0, 5.0]
    assert {g["rule"] for f in out.extra["flags"][1:] for g in f} == {"last_value"}
    first = Clean(mode="none").update(Batch.from_columns(ts=[0.0], nodes=["a"], metrics=["x"], values=[[np.nan]]))
    assert np.isnan(first.values[0, 0]) and first.extra["flags"][0][0]["rule"] == "no_reference"


# -- planted faults with ground truth --------------------------------------------------------------


def test_planted_outliers_are_found_with_precision_and_recall_of_ninety_percent() -> None:
    samples, truth = spmd("cactus", nodes=8, duration=1200, seed=5, outliers=0.005)
    batch = samples_to_batch(samples)
    metrics = [m for m in truth["common"] + truth["near_constant"] if m != "cpu_idle"]  # idle derives from user
    planted = {(o["ts"], o["node"], o["metric"]) for o in truth["outliers"] if o["metric"] in metrics}
    out = Clean(action="flag", impute="none").update(batch)
    nodes = out.node_names()
    found = {(out.ts[i], nodes[i], g["metric"]) for i, f in enumerate(out.extra["flags"]) if f for g in f
             if g["metric"] in metrics}  # fmt: skip
    precision = len(found & planted) / len(found)
    recall = len(found & planted) / len(planted)
    assert len(planted) > 250
    assert precision >= 0.9 and recall >= 0.9, (precision, recall)


def test_default_filter_finds_spikes_on_cycles_and_trends_and_accepts_level_shifts() -> None:
    samples, truth = cyclic(seed=3)
    batch = samples_to_batch(samples)
    op = Clean(action="flag", impute="none")
    assert op.mode == "predict"
    out = op.update(batch)
    nodes = out.node_names()
    found = {(out.ts[i], nodes[i], g["metric"]) for i, f in enumerate(out.extra["flags"]) if f for g in f}
    spikes = {(s["ts"], s["node"], s["metric"]) for s in truth["spikes"]}
    # a new level is flagged until it is accepted: count those flags apart from spike flags
    after_shift = [{(sh["ts"] + d, sh["node"], sh["metric"]) for d in range(3 * op.accept_after)} - spikes
                   for sh in truth["shifts"]]  # fmt: skip
    shift_flags = [len(found & zone) for zone in after_shift]
    assert len(truth["shifts"]) >= 15 and min(shift_flags) >= 1
    assert max(shift_flags) <= op.accept_after, shift_flags
    rest = found - set().union(*after_shift)
    precision, recall = len(rest & spikes) / len(rest), len(found & spikes) / len(spikes)
    assert len(spikes) > 500
    assert precision >= 0.9 and recall >= 0.9, (precision, recall)
    # the spec's window filter, the old default, fails on this kind of signal
    old = Clean(mode="window", action="flag", impute="none").update(batch)
    old_found = {(old.ts[i], nodes[i], g["metric"]) for i, f in enumerate(old.extra["flags"]) if f for g in f}
    assert len(old_found & spikes) / len(old_found) < 0.5


def test_predict_mode_replaces_a_spike_on_a_ramp_by_the_prediction() -> None:
    x = 2.0 * np.arange(60) + np.sin(np.arange(60))  # a trend with some wiggle
    x[40] += 50.0
    out = Clean(impute="none", action="replace").update(series(x))
    assert flagged(out) == [40]
    assert flagged(out, "residual") == [40]
    assert abs(out.values[40, 0] - (x[40] - 50.0)) < 3.0  # the line's one-step prediction


def test_partial_reference_rows_and_f_min_as_the_spec_says() -> None:
    nan = np.nan
    rows = [[10.0, 1.0, nan], [20.0, 1.0, 5.0], [30.0, 2.0, 5.0], [nan, 1.0, 5.0]]  # columns e, f1, f2
    b = Batch.from_columns(ts=np.arange(4.0), nodes=["a"] * 4, metrics=["e", "f1", "f2"], values=np.array(rows))

    def imputed(f_min: int) -> tuple[float, str]:
        out = Clean(mode="none", f_min=f_min).update(b)
        return float(out.values[3, 0]), out.extra["flags"][3][0]["rule"]

    # every candidate has f1, not all have f2: with f_min = 1 the shared set {f1} is enough and
    # rows 0 and 1 match exactly; with f_min = 2 each candidate's own features count, row 0 (f1
    # only) is not usable, and row 1 matches on both
    assert imputed(1) == (15.0, "knn_impute")
    assert imputed(2) == (20.0, "knn_impute")


def test_knn_imputes_multiplexed_counters_from_partial_rows() -> None:
    samples, truth = multiplexed(nodes=8, events=6, samples=400, seed=1)
    b = samples_to_batch(samples)
    cols = [b.metrics.index(m) for m in truth["metrics"]]
    gaps = np.isnan(b.values[:, cols])
    true = truth["values"].reshape(-1, len(cols))[gaps]
    assert gaps.sum(axis=1).min() >= 1  # no sample is complete

    def imputed(impute: str) -> tuple[np.ndarray, Batch]:
        out = Clean(mode="none", impute=impute).update(b)
        return out.values[:, cols][gaps], out

    knn, out = imputed("knn")
    last, _ = imputed("last")
    rules = [g["rule"] for f in out.extra["flags"] if f for g in f]
    assert rules.count("knn_impute") >= 0.95 * gaps.sum()
    assert set(rules) <= {"knn_impute", "last_value", "no_reference"}
    ok = ~np.isnan(last)
    assert np.isnan(knn).sum() == rules.count("no_reference")  # the rest is explained in flags
    rmse_knn = np.sqrt(np.mean((knn[ok] - true[ok]) ** 2))
    rmse_last = np.sqrt(np.mean((last[ok] - true[ok]) ** 2))
    assert rmse_knn <= 0.5 * rmse_last, (rmse_knn, rmse_last)


def test_knn_imputation_beats_mean_replacement_at_least_twofold() -> None:
    samples, truth = spmd("cactus", nodes=8, duration=1200, seed=6, missing=0.05)
    full, _ = spmd("cactus", nodes=8, duration=1200, seed=6)
    b, ref = samples_to_batch(samples), samples_to_batch(full)
    metrics = [m for m in truth["common"] + truth["near_constant"] if m != "cpu_idle"]
    cols = [b.metrics.index(m) for m in metrics]
    gaps = np.isnan(b.values[:, cols])
    truth_vals = ref.values[:, [ref.metrics.index(m) for m in metrics]][gaps]

    def rmse(impute: str) -> float:
        out = Clean(impute=impute).update(b).values[:, cols][gaps]
        ok = ~np.isnan(out)
        return float(np.sqrt(np.mean((out[ok] - truth_vals[ok]) ** 2)))

    knn, mean = rmse("knn"), rmse("mean")
    assert knn * 2 <= mean, (knn, mean)


def test_cleaning_moves_a_faulty_trace_closer_to_the_clean_reference_in_dtw() -> None:
    faulty, _ = spmd("cactus", nodes=2, duration=600, seed=7, outliers=0.01, missing=0.03)
    clean_ref, _ = spmd("cactus", nodes=2, duration=600, seed=7)
    repeat, _ = spmd("cactus", nodes=2, duration=600, seed=8)  # an independent clean run: the natural variation

    def col(samples: list[dict], b: Batch | None = None) -> np.ndarray:
        b = b or samples_to_batch(samples)
        rows = np.array([n == "n00" for n in b.node_names()])
        return b.values[rows, b.metrics.index("cpu_user")]

    raw = samples_to_batch(faulty)
    cleaned = Clean().update(raw)
    ref, rep = col(clean_ref), col(repeat)
    d_ref = dtw(ref, rep)
    filled_raw = np.where(np.isnan(col([], raw)), np.nanmean(col([], raw)), col([], raw))
    before = diff(dtw(filled_raw, ref), d_ref)
    after = diff(dtw(col([], cleaned), ref), d_ref)
    assert after < before and after < 0.5 * before, (before, after)


def test_bad_parameters_are_refused() -> None:
    for bad in ({"mode": "median"}, {"action": "fix"}, {"impute": "spline"}, {"k": 0}):
        with pytest.raises(ValueError):
            Clean(**bad)
    with pytest.raises(ValueError, match="kb and app go together"):
        clean_params({"kb": "x.db"})


# -- DTW --------------------------------------------------------------------------------------------


def test_dtw_oracles() -> None:
    assert dtw([1, 2, 3], [1, 2, 2, 3]) == 0
    assert dtw([0, 0, 1, 2, 1, 0], [0, 1, 2, 1, 0, 0]) == 0
    assert dtw([1, 2, 3], [2, 3, 4]) == 2
    rng = np.random.default_rng(0)
    a, b = rng.normal(size=40), rng.normal(size=55)
    assert dtw(a, b) == pytest.approx(dtw(b, a)) and dtw(a, a) == 0
    assert dtw(a, b, band=15) >= dtw(a, b)
    brute = np.full((41, 56), np.inf)
    brute[0, 0] = 0
    for i in range(1, 41):
        for j in range(1, 56):
            brute[i, j] = (a[i - 1] - b[j - 1]) ** 2 + min(brute[i - 1, j], brute[i, j - 1], brute[i - 1, j - 1])
    assert dtw(a, b, cost="sq") == pytest.approx(brute[40, 55])
    assert diff(3.0, 2.0) == 0.5 and diff(0.0, 0.0) == 0.0 and diff(1.0, 0.0) == float("inf")
