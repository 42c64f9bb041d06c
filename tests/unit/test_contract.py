"""Performance contracts (METHODS.md §4) and the paper's experiments on synthetic master-worker runs."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from perfsift.operators.contract import (
    ContractError,
    ContractMonitor,
    contract_records,
    derive_contract,
    job_summary,
    leader_clusters,
    load_contract,
)
from perfsift.producers.synth import master_worker
from perfsift.schemas import samples_to_batch

SPACES = {
    "intrinsic": ["instructions_per_s / flops_per_s", "messages_per_s / bytes_per_s"],
    "execution": ["instructions_per_s", "messages_per_s"],
}


@pytest.fixture(scope="module")
def contract() -> dict:
    base, _ = master_worker(seed=1)
    return derive_contract(samples_to_batch(base), SPACES)


def evaluate(contract: dict, samples: list[dict]) -> list[dict]:
    return contract_records(ContractMonitor(contract).update(samples_to_batch(samples)))


def test_leader_clustering_oracle() -> None:
    pts = np.array([[0], [0.05], [1], [1.04], [0.02]])
    labels = leader_clusters(pts, 0.1)
    assert labels.tolist() == [0, 0, 1, 1, 0]
    assert pts[labels == 0].mean() == pytest.approx(0.07 / 3) and pts[labels == 1].mean() == pytest.approx(1.02)


def test_point_at_centroid_edge_and_three_quarters() -> None:
    c = {"spaces": [{"name": "s", "dims": ["x"], "classes": [{"centroid": [2.0], "tolerance": [0.1]}]}]}
    mon = ContractMonitor(c)
    b = samples_to_batch([{"ts": 0.0, "node": "a", "metrics": {"x": 10**v}} for v in (2.0, 2.1, 2.075)])
    out = mon.update(b)
    np.testing.assert_allclose(out.extra["distance"][:, 0], [0, 1, 0.75], atol=1e-9)
    np.testing.assert_allclose(out.extra["violation"], [0, 1, 0.5], atol=1e-6)


def test_baseline_stays_within_contract(contract: dict) -> None:
    recs = evaluate(contract, master_worker(seed=2)[0])
    states = [r["state"] for r in recs]
    assert states.count("violated") / len(states) <= 0.01
    assert np.mean([r["violation"] for r in recs]) < 0.05


def test_fewer_flops_gives_intrinsic_violations_on_6_to_11_only(contract: dict) -> None:
    recs = evaluate(contract, master_worker(seed=3, fewer_flops=range(6, 12))[0])
    summary = job_summary(recs)["nodes"]
    for node, s in summary.items():
        if int(node[1:]) >= 6:
            assert s["violated"] >= 0.95 * s["rows"] and s["mean_level"] > 0.9
        else:
            assert s["violated"] == 0
    bad = [r for r in recs if int(r["node"][1:]) >= 6]
    assert all(r["driver"] == "intrinsic:instructions_per_s / flops_per_s" for r in bad)
    # communication is satisfied
    assert max(r["spaces"]["intrinsic"]["dims"]["messages_per_s / bytes_per_s"] for r in bad) < 0.05


def test_external_load_violates_execution_space_on_that_node_while_it_lasts(contract: dict) -> None:
    t0 = 1.7e9
    recs = evaluate(contract, master_worker(seed=4, load_node=3, load_start=100, load_end=200)[0])
    n3 = [r for r in recs if r["node"] == "n03"]
    during = [r for r in n3 if t0 + 102 <= r["ts"] < t0 + 200]
    outside = [r for r in n3 if r["ts"] < t0 + 100 or r["ts"] >= t0 + 203]
    assert all(r["state"] == "violated" for r in during)
    assert all(r["driver"].startswith("execution:") for r in during)
    assert all(r["state"] == "ok" for r in outside)
    others = [r for r in recs if r["node"] not in ("n03",)]
    assert sum(r["state"] == "violated" for r in others) == 0


def test_missing_dimension_is_unknown_not_a_crash(contract: dict) -> None:
    s = master_worker(seed=5, duration=3)[0]
    del s[4]["metrics"]["flops_per_s"]
    recs = evaluate(contract, s)
    assert recs[4]["state"] == "unknown" and recs[4]["violation"] is None
    assert recs[4]["spaces"]["execution"]["violation"] is not None
    assert all(r["state"] != "unknown" for i, r in enumerate(recs) if i != 4)


def test_persistence_and_hysteresis() -> None:
    c = {"spaces": [{"name": "s", "dims": ["x"], "classes": [{"centroid": [0.0], "tolerance": [0.1]}]}]}
    # distances 0, 2 (one spike), 0, 2, 2, 0.5 (level 0), ...
    levels = [0, 2, 0, 2, 2, 2, 0, 0, 0]
    out = ContractMonitor(c).update(
        samples_to_batch(
            [{"ts": float(i), "node": "a", "metrics": {"x": 10 ** (0.1 * d)}} for i, d in enumerate(levels)]
        )
    )
    states = out.extra["state"].tolist()
    # a single spike (smoothed 0.5) does not raise; two in a row do; clearing waits for smoothed < 0.3
    assert states == [0, 0, 0, 0, 1, 1, 1, 0, 0]


def test_contract_files_are_checked(tmp_path: Path, contract: dict) -> None:
    path = tmp_path / "c.json"
    path.write_text(json.dumps(contract))
    assert load_contract(path)["spaces"][0]["name"] == "intrinsic"
    path.write_text("{ not json")
    with pytest.raises(ContractError, match=r"c.json:1:3: not valid JSON"):
        load_contract(path)
    bad = dict(contract, rulebase="var x(0, 1) { set triangle A (0, 1); }")
    path.write_text(json.dumps(bad))
    with pytest.raises(ContractError, match=r"rulebase:1:.*expected ','"):
        load_contract(path)
    path.write_text(json.dumps({"spaces": [{"name": "s", "dims": ["a /"], "classes": []}]}))
    with pytest.raises(ContractError, match="bad dimension 'a /'"):
        load_contract(path)


def test_capabilities_project_the_signature() -> None:
    """A node half as fast (in its capability file) is expected to run at half the rate."""
    base, _ = master_worker(seed=6, duration=100)
    c = derive_contract(
        samples_to_batch(base),
        {"exec": ["instructions_per_s@flops"]},
        capabilities={f"n{p:02d}": {"flops": 1e9} for p in range(12)},
    )
    slow, _ = master_worker(seed=7, duration=50, load_node=5, load_factor=0.5)
    c_slow = dict(c, capabilities={**c["capabilities"], "n05": {"flops": 0.5e9}})
    plain = job_summary(evaluate(c, slow))["nodes"]["n05"]
    projected = job_summary(evaluate(c_slow, slow))["nodes"]["n05"]
    assert plain["violated"] > 40 and projected["violated"] == 0


def test_capabilities_from_baseline_means_and_from_forecasts() -> None:
    """Expectations scaled by a forecast of the available CPU (§4.1 with §5): a slowdown that the
    load explains stops being a violation, the paper's idea for runs without a matching baseline."""
    from perfsift.operators.contract import baseline_capabilities

    base = samples_to_batch(master_worker(seed=1)[0])
    caps = baseline_capabilities(base, {"cpu": "cpu_avail"})
    assert caps["n03"]["cpu"] == pytest.approx(1.0, abs=0.01)
    c = derive_contract(base, {"execution": ["instructions_per_s@cpu", "messages_per_s@cpu"]}, capabilities=caps)
    loaded = samples_to_batch(master_worker(seed=2, load_node=3, load_start=100, load_end=200)[0])
    fixed = job_summary(contract_records(ContractMonitor(c).update(loaded)))["nodes"]["n03"]
    mon = ContractMonitor(c, capability_forecasts={"cpu": "cpu_avail"})
    half = len(loaded) // 2
    first = contract_records(mon.update(loaded.take(np.arange(half))))
    restored = ContractMonitor(c, capability_forecasts={"cpu": "cpu_avail"})
    restored.restore(mon.snapshot())
    rest = contract_records(restored.update(loaded.take(np.arange(half, len(loaded)))))
    forecast = job_summary(first + rest)["nodes"]["n03"]
    assert fixed["violated"] >= 95
    assert forecast["violated"] <= 3  # only while the forecast catches up with the step
    with pytest.raises(ContractError, match="no metric 'nope'"):
        baseline_capabilities(base, {"cpu": "nope"})
