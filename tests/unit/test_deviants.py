"""Nodes that stand apart on the projection (operators/pursuit/deviants.py, issue #23)."""

from __future__ import annotations

import numpy as np
import pytest
from perfsift.cli.pursuit import run_pursuit
from perfsift.operators import ProjectionPursuit
from perfsift.operators.pursuit.deviants import node_deviants, robust_z
from perfsift.schemas import AvroCodec, samples_to_batch

from tests.planted import NODE, START, STOP, T0, planted_trace

WINDOW, PERIOD = 5, 30.0
REACH = 10 * WINDOW  # stacked snapshots reach this far back before a period's end (h_max · w)


def records(seed: int, z_threshold: float = 3.0) -> list[dict]:
    op = ProjectionPursuit(period=PERIOD, window=WINDOW, z_threshold=z_threshold)
    return run_pursuit(samples_to_batch(planted_trace(seed)), op, WINDOW, show_progress=False)


@pytest.mark.parametrize("seed", [0, 4])
def test_the_planted_node_stands_apart_in_its_periods_and_no_node_in_calm_ones(seed: int) -> None:
    recs = [r for r in records(seed) if r["skipped"] is None]
    # from the second period inside the episode: the first whole one is evidence too short (issue #32:
    # a metric is selected only when its nodes differ beyond their noise; the node is named from the
    # next period, docs/pursuit.md)
    planted = [r for r in recs if r["period_start"] >= T0 + START + PERIOD and r["period_end"] <= T0 + STOP]
    calm = [r for r in recs if r["period_end"] <= T0 + START or r["period_end"] - REACH >= T0 + STOP]
    assert len(planted) >= 1 and len(calm) >= 12
    for r in planted:
        assert [d["node"] for d in r["deviants"]] == [NODE], r["deviants"]
        top = r["deviants"][0]["metrics"][0]
        assert top["metric"] in ("disk_lwrite", "disk_pwrite") and top["deviation"] > 100
        assert max(r["node_z"], key=r["node_z"].get) == NODE
    for r in calm:
        assert r["deviants"] == [], (r["period_start"] - T0, r["deviants"])
        assert len(r["node_z"]) == 12  # every node scored


def test_threshold_is_honoured_and_records_round_trip_through_avro() -> None:
    strict = [r for r in records(0, z_threshold=1000.0) if r["skipped"] is None]
    assert strict and all(r["deviants"] == [] for r in strict)
    codec = AvroCodec("selection")
    loose = [r for r in records(0, z_threshold=3.0) if r["deviants"]]
    assert loose
    for r in loose:
        back = codec.decode(codec.encode(r))
        assert back["deviants"] == r["deviants"] and back["node_position"] == r["node_position"]
    with pytest.raises(ValueError, match="z_threshold"):
        ProjectionPursuit(z_threshold=0.0)


def test_robust_z_ignores_the_outlier_in_its_scale() -> None:
    """The scale is that of the typical nodes: how far the outlier lies changes no other score."""
    base = np.random.default_rng(1).normal(size=11)
    near, far = robust_z(np.r_[base, 50.0][:, None])[:, 0], robust_z(np.r_[base, 5000.0][:, None])[:, 0]
    np.testing.assert_allclose(near[:-1], far[:-1])
    assert near[-1] > 10 * np.abs(near[:-1]).max()


def test_a_node_apart_in_the_projection_only_by_fitted_noise_is_not_named() -> None:
    """Node 0 lies apart along the projection, but the selected metric does not differ on it."""
    rng = np.random.default_rng(2)
    nodes, snaps = 12, 8
    row_id = np.array([(k, s) for s in range(snaps) for k in range(nodes)])
    x = rng.normal(size=(len(row_id), 2))
    x[row_id[:, 0] == 0, 1] += 40.0  # node 0 differs in metric b
    weights = np.array([[0.0], [1.0]])  # the projection is metric b
    names, nodes_l = ["a", "b"], [f"n{k}" for k in range(nodes)]
    node_z, pos, apart = node_deviants(x, names, row_id, nodes_l, weights, names, ["b"], 3.0)
    assert [d["node"] for d in apart] == ["n0"] and node_z["n0"] > 10
    assert pos["n0"][0] > 10 and all(abs(p[0]) < 3 for n, p in pos.items() if n != "n0")
    assert apart[0]["metrics"][0]["metric"] == "b"
    _, _, apart = node_deviants(x, names, row_id, nodes_l, weights, names, ["a"], 3.0)  # only "a" selected
    assert apart == []
