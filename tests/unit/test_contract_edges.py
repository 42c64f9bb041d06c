"""Contracts at the edges (issue #33, items 2 and 6): the share of a job's nodes in violation when
node clocks disagree within one sampling interval, and metric names that hold `/`, `%`, `-` and
spaces (nmon's, from the Exathlon runs in tests/data/exathlon)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from perfsift.cli.ui import read_trace
from perfsift.operators import Batch
from perfsift.operators.contract import (
    ContractError,
    ContractMonitor,
    Dimension,
    contract_records,
    derive_contract,
    job_summary,
    parse_space,
)

EXATHLON = Path(__file__).resolve().parents[1] / "data" / "exathlon" / "app1_run15.csv"
CONTRACT = {"spaces": [{"name": "s", "dims": ["x"], "classes": [{"centroid": [2.0], "tolerance": [0.1]}]}]}


def four_nodes(skew: list[float], rounds: int = 6, bad: tuple[int, ...] = (3,)) -> list[dict]:
    """Four nodes sampled every second, node i's clock ``skew[i]`` seconds late; nodes in ``bad``
    run at 10x the contract's rate from the start (violated after two rounds)."""
    n = len(skew)
    ts = np.array([r + skew[i] for r in range(rounds) for i in range(n)])
    nodes = [f"n{i}" for _ in range(rounds) for i in range(n)]
    x = np.array([1000.0 if i in bad else 100.0 for _ in range(rounds) for i in range(n)])
    b = Batch.from_columns(ts=ts, nodes=nodes, metrics=["x"], values=x[:, None])
    return contract_records(ContractMonitor(CONTRACT).update(b))


@pytest.mark.parametrize("skew", [[0.0] * 4, [0.0, 0.0, 0.0, 0.01], [0.0, 0.01, 0.005, 0.9], [0.9, 0.3, 0.0, 0.0]])
def test_one_node_of_four_in_violation_is_a_quarter_whatever_the_clock_skew(skew: list[float]) -> None:
    recs = four_nodes(skew)
    assert sum(r["state"] == "violated" for r in recs) == 5  # n3, from its second row on
    summary = job_summary(recs)
    assert summary["interval"] == pytest.approx(1.0)
    assert summary["max_share_violated"] == {"default": 0.25}


def test_two_of_four_and_none_of_four_with_skew() -> None:
    assert job_summary(four_nodes([0.0, 0.4, 0.01, 0.9], bad=(1, 3)))["max_share_violated"]["default"] == 0.5
    assert job_summary(four_nodes([0.0, 0.4, 0.01, 0.9], bad=()))["max_share_violated"]["default"] == 0.0


def test_a_node_counts_once_per_bucket_by_its_last_state() -> None:
    recs = four_nodes([0.0, 0.0, 0.0, 0.0])
    extra = [dict(r, ts=r["ts"] + 0.5) for r in recs if r["node"] == "n3"]  # n3 reports twice a round
    summary = job_summary(recs + extra, interval=1.0)
    assert summary["max_share_violated"]["default"] == 0.25
    with pytest.raises(ValueError, match="interval"):
        job_summary(recs, interval=0.0)


@settings(max_examples=30, deadline=None)
@given(skew=st.lists(st.floats(0.0, 0.95), min_size=2, max_size=6), data=st.data())
def test_share_equals_an_aligned_clock_oracle(skew: list[float], data: st.DataObject) -> None:
    """Any skew below one interval: the share equals the one with aligned clocks (the oracle)."""
    n = len(skew)
    bad = tuple(data.draw(st.sets(st.integers(0, n - 1))))
    skewed = job_summary(four_nodes(skew, bad=bad))["max_share_violated"]["default"]
    aligned = job_summary(four_nodes([0.0] * n, bad=bad))["max_share_violated"]["default"]
    assert skewed == aligned == len(bad) / n


# -- names with /, %, - and spaces (item 6) ----------------------------------------------------------


def test_a_slash_inside_a_name_is_part_of_the_name_and_a_ratio_has_spaces() -> None:
    assert parse_space("net=NET_ib0-read-KB/s,NET_ib0-write-KB/s")[1] == [
        Dimension("NET_ib0-read-KB/s", "NET_ib0-read-KB/s", None, None),
        Dimension("NET_ib0-write-KB/s", "NET_ib0-write-KB/s", None, None),
    ]
    d = Dimension.parse("CPU_ALL_User% / CPU_ALL_Sys%@cpu")
    assert (d.num, d.den, d.unit) == ("CPU_ALL_User%", "CPU_ALL_Sys%", "cpu")
    q = parse_space('s="a, b / c" / "say \\"hi\\"",disk busy time')[1]
    assert [(x.num, x.den) for x in q] == [("a, b / c", 'say "hi"'), ("disk busy time", None)]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('"unclosed', "not closed"),
        ("a / b / c", "more than one ' / '"),
        ("a@b@c", "more than one '@'"),
        ("a / ", "both sides"),
        ('"a"b', "outside the quotes"),
    ],
)
def test_bad_dimensions_say_what_is_wrong(text: str, message: str) -> None:
    with pytest.raises(ContractError, match=message):
        Dimension.parse(text)


def test_exathlon_nmon_names_make_a_contract_and_the_error_says_what_it_parsed() -> None:
    batch = read_trace(EXATHLON)
    spaces = {"net": ["NET_ib0-read-KB/s", "NET_ib0-write-KB/s"], "cpu": ["CPU_ALL_User% / CPU_ALL_Sys%"]}
    c = derive_contract(batch, spaces)
    assert [s["dims"] for s in c["spaces"]] == [spaces["net"], spaces["cpu"]]
    ib = batch.values[:, [batch.metrics.index(m) for m in spaces["net"]]]
    ib = ib[~np.isnan(ib).any(axis=1)]
    sizes = sum(k["size"] for k in c["spaces"][0]["classes"])
    assert sizes == len(ib)  # every sample with both nmon metrics is in a class
    recs = contract_records(ContractMonitor(c).update(batch))
    assert {r["spaces"]["net"]["violation"] is not None for r in recs if r["node"] != "driver"} == {True}
    with pytest.raises(ContractError) as err:
        derive_contract(batch, {"old": ["CPU_ALL_User%/CPU_ALL_Sys%", "NET_ib0-read-KB/s"]})
    text = str(err.value)
    assert "metric 'CPU_ALL_User%/CPU_ALL_Sys%'; metric 'NET_ib0-read-KB/s'" in text
    assert "not in the baseline: ['CPU_ALL_User%/CPU_ALL_Sys%']" in text
    assert "write 'CPU_ALL_User% / CPU_ALL_Sys%'" in text


def test_weighted_combination_of_dimension_levels() -> None:
    """combine: weighted (§4.6): v = Σ w_j v_j / Σ w_j over the dimensions' levels."""
    c = {"spaces": [{"name": "s", "dims": ["x", "y"], "classes": [{"centroid": [2.0, 2.0], "tolerance": [0.1, 0.1]}]}]}
    b = Batch.from_columns(ts=[0.0], nodes=["a"], metrics=["x", "y"], values=[[10**2.1, 100.0]])  # x at d=1, y at 0
    levels = {comb: ContractMonitor(c, combine=comb, weights={"s:x": 3.0}).update(b).extra["violation"][0]
              for comb in ("max", "mean", "weighted")}  # fmt: skip
    assert levels["max"] == pytest.approx(1.0) and levels["mean"] == pytest.approx(0.5)
    assert levels["weighted"] == pytest.approx(0.75)
    with pytest.raises(ValueError, match="not found: \\['s:z'\\]"):
        ContractMonitor(c, combine="weighted", weights={"s:z": 1.0}).reset()


def test_the_issue_command_derives_a_contract_from_nmon_names(tmp_path: Path) -> None:
    import json

    from perfsift.cli import app
    from typer.testing import CliRunner

    out = tmp_path / "c.json"
    r = CliRunner().invoke(
        app, ["contract", "derive", str(EXATHLON), "-s", "net=NET_ib0-read-KB/s,NET_ib0-write-KB/s", "-o", str(out)]
    )
    assert r.exit_code == 0, r.output
    assert json.loads(out.read_text())["spaces"][0]["dims"] == ["NET_ib0-read-KB/s", "NET_ib0-write-KB/s"]
