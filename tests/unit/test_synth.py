"""Ground truth of the synthetic workloads, recomputed from the data they generate."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.stats
from perfsift.producers.synth import SPMD_SCENARIOS, TABLE1, spmd
from perfsift.schemas import samples_to_batch


def cube(samples: list[dict], truth: dict) -> np.ndarray:
    """time × node × metric."""
    b = samples_to_batch(samples)
    cols = [b.metrics.index(m) for m in truth["metrics"]]
    return b.values[:, cols].reshape(-1, truth["nodes"], len(cols))


@pytest.mark.parametrize("scenario", sorted(SPMD_SCENARIOS))
def test_spmd_ground_truth_holds_in_the_data(scenario: str) -> None:
    samples, truth = spmd(scenario, nodes=12, metrics=14, duration=600, seed=5)
    x = cube(samples, truth)
    names = truth["metrics"]
    assert names[:12] == list(TABLE1) and len(names) == 14
    col = {m: j for j, m in enumerate(names)}
    for m in truth["constant"]:
        assert np.ptp(x[:, :, col[m]]) == 0
    for m in truth["near_constant"]:
        v = x[:, :, col[m]]
        assert v.std() / v.mean() < 0.01
    for m in truth["common"]:  # every node follows the same trend: node series correlate strongly
        if m == "cpu_idle":
            continue
        r = np.corrcoef(x[:, :, col[m]].T)
        assert r[np.triu_indices(12, 1)].min() > 0.9, m
    for m in truth["interesting"]:  # independent bursts: heavy right tail across nodes, uncorrelated nodes
        v = x[:, :, col[m]]
        assert scipy.stats.skew(v.ravel()) > 2, m
        r = np.corrcoef(v.T)
        assert np.abs(r[np.triu_indices(12, 1)]).max() < 0.3, m
    for m in truth["phased"]:  # a wavefront: neighbours in phase order lag each other
        v = x[:, :, col[m]]
        assert np.corrcoef(v[:, 0], v[:, 6])[0, 1] < -0.5


def test_spmd_outliers_and_missing_values_are_where_the_truth_says() -> None:
    samples, truth = spmd("cactus", duration=200, seed=1, outliers=0.002, missing=0.01)
    assert truth["outliers"] and truth["missing"] > 0
    present = sum(v is not None for s in samples for v in s["metrics"].values())
    assert present == 200 * 12 * 12 - truth["missing"]
    by_key = {(s["ts"], s["node"]): s["metrics"] for s in samples}
    clean, _ = spmd("cactus", duration=200, seed=1)
    clean_by_key = {(s["ts"], s["node"]): s["metrics"] for s in clean}
    hits = 0
    for o in truth["outliers"]:
        v = by_key[(o["ts"], o["node"])][o["metric"]]
        if v is not None:
            hits += 1
            base = clean_by_key[(o["ts"], o["node"])][o["metric"]]
            assert v == 0 or v >= 19 * base  # multiplied by 20–100
    assert hits > 0
    with pytest.raises(ValueError, match="unknown SPMD scenario"):
        spmd("lu")


def test_gridftp_ground_truth_holds_in_the_data() -> None:
    from perfsift.producers.synth import gridftp

    samples, truth = gridftp(duration=800, seed=2)
    cols: dict[str, list[float]] = {}
    for s in samples:
        for m, v in s["metrics"].items():
            cols.setdefault(m if s["node"] == "app" else f"{s['node']}/{m}", []).append(v)
    x = {k: np.array(v) for k, v in cols.items()}
    for copy, original in truth["redundant"].items():
        assert abs(np.corrcoef(x[copy], x[original])[0, 1]) > truth["redundancy_level"], copy
    for m in truth["constant"]:
        assert np.ptp(x[m]) == 0
    y = x[truth["response"]]
    for m in truth["irrelevant"]:
        assert abs(np.corrcoef(x[m], y)[0, 1]) < 0.15, m
    design = np.column_stack([np.ones_like(y)] + [x[m] for m in truth["predictive"]] + [x[truth["quadratic"][0]] ** 2])
    resid = y - design @ np.linalg.lstsq(design, y, rcond=None)[0]
    assert 1 - resid.var() / y.var() > 0.9  # the stated model explains the rate


def test_master_worker_ground_truth_holds_in_the_data() -> None:
    from perfsift.producers.synth import master_worker

    samples, truth = master_worker(nodes=8, duration=120, seed=1, fewer_flops=[6, 7], load_node=3,
                                   load_start=40, load_end=80)  # fmt: skip
    ratio: dict[str, list[float]] = {}
    rate: dict[tuple[str, bool], list[float]] = {}
    t0 = min(s["ts"] for s in samples)
    for s in samples:
        m = s["metrics"]
        ratio.setdefault(s["node"], []).append(m["instructions_per_s"] / m["flops_per_s"])
        loaded = truth["load"]["start"] <= s["ts"] < truth["load"]["end"]
        rate.setdefault((s["node"], loaded), []).append(m["flops_per_s"])
    med = {n: float(np.median(v)) for n, v in ratio.items()}
    assert med[truth["master"]] > 4 * med["n01"]
    for n in truth["fewer_flops"]:
        assert med[n] == pytest.approx(med["n01"] / truth["flops_factor"], rel=0.05)
    node = truth["load"]["node"]
    assert np.median(rate[(node, True)]) == pytest.approx(
        truth["load"]["factor"] * np.median(rate[(node, False)]), rel=0.05
    )
    assert np.median(rate[("n02", True)]) == pytest.approx(np.median(rate[("n02", False)]), rel=0.05)
    assert t0 == 1.7e9


def test_cyclic_ground_truth_holds_in_the_data() -> None:
    from perfsift.producers.synth import cyclic

    samples, truth = cyclic(nodes=8, metrics=6, samples=3000, seed=2)
    b = samples_to_batch(samples)
    x = b.values[:, [b.metrics.index(m) for m in truth["metrics"]]].reshape(3000, 8, 6)
    clean, amp = truth["values"], truth["amplitude"]
    spike = np.zeros(x.shape, dtype=bool)
    for s in truth["spikes"]:
        p, j = int(s["node"][1:]), truth["metrics"].index(s["metric"])
        spike[s["step"], p, j] = True
        assert x[s["step"], p, j] - clean[s["step"], p, j] == pytest.approx(s["size"])
        assert 0.5 <= abs(s["size"]) / amp[p, j] <= 3.0
    ok = ~np.isnan(x) & ~spike
    assert np.array_equal(x[ok], clean[ok])  # nothing else is disturbed
    assert 0.005 < np.isnan(x).mean() < 0.015 and len(truth["spikes"]) > 500
    signs = {s["size"] > 0 for s in truth["spikes"]}
    assert signs == {True, False}
    for sh in truth["shifts"]:  # a sustained new level: the mean moves by the shift's size
        p, j, t = int(sh["node"][1:]), truth["metrics"].index(sh["metric"]), sh["step"]
        jump = clean[t : t + 5, p, j].mean() - clean[t - 5 : t, p, j].mean()
        assert abs(jump - sh["size"]) < 0.5 * abs(sh["size"])
    noise = np.diff(clean, axis=0).std(axis=0) / np.sqrt(2) / amp  # the cycles are smooth at this lag
    assert 0.015 < np.median(noise) < 0.07
