"""perfsift synth --scenario sor, perfsift predict and perfsift balance, as a user runs them."""

from __future__ import annotations

import json
from pathlib import Path

import orjson
import pytest

from tests.e2e.cli import perfsift, perfsift_here

pytestmark = pytest.mark.e2e


def test_predict_flags_the_slowed_node_and_balance_reports_both_strategies(tmp_path: Path) -> None:
    trace = tmp_path / "sor.jsonl"
    r = perfsift_here("synth", "--scenario", "sor", "--nodes", "4", "--duration", "200", "--slowdown", "2:100:150:1.6",
                 "-o", str(trace))  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert json.loads((tmp_path / "sor.truth.json").read_text())["slowed"][120] is True
    out, png = tmp_path / "p.jsonl", tmp_path / "p.png"
    r = perfsift("predict", "sor", "--trace", str(trace), "--json", str(out), "--plot", str(png))
    assert r.returncode == 0, r.stderr
    assert png.stat().st_size > 10_000
    recs = [orjson.loads(line) for line in out.read_bytes().splitlines()]
    assert {x["output"] for x in recs} == {"IterTime", "NodeTime"}
    violated = {x["node"] for x in recs if x["state"] == "violated" and x["output"] == "NodeTime"}
    slowed = [x for x in recs if x["node"] == "node02" and 102 <= x["ts"] - 1.7e9 < 150]
    assert sum(x["state"] == "violated" for x in slowed) > 0.9 * len(slowed)
    assert "node02" in violated
    assert "node02" in r.stdout and "coverage" in r.stdout

    res = tmp_path / "b.json"
    r = perfsift("balance", "sor", "--trace", str(trace), "--json", str(res), "--runs", "2000")
    assert r.returncode == 0, r.stderr
    b = json.loads(res.read_text())
    assert sum(b["mean"]["work"]) == sum(b["conservative"]["work"]) == 1_000_000
    assert "95th percentile" in r.stdout


def test_bad_model_and_missing_metrics_are_reported(tmp_path: Path) -> None:
    model = tmp_path / "m.yaml"
    model.write_text("parameters:\n  x: {metric: cpu}\ncomponents:\n  t: 1 / x\noutputs: [t]\n")
    trace = tmp_path / "t.jsonl"
    trace.write_text('{"ts": 1, "node": "a", "metrics": {"mem": 1.0}}\n')
    r = perfsift_here("predict", str(model), "--trace", str(trace))
    assert r.returncode != 0 and "m.yaml:4" in r.stderr and "can be zero" in r.stderr
    model.write_text("parameters:\n  x: {metric: cpu, min: 0.1}\ncomponents:\n  t: 1 / x\noutputs: [t]\n")
    r = perfsift_here("predict", str(model), "--trace", str(trace))
    assert r.returncode != 0 and "needs metric" in r.stderr and "cpu" in r.stderr
    r = perfsift_here("predict", "nosuchmodel", "--trace", str(trace))
    assert r.returncode != 0 and "sor.yaml" in r.stderr
    r = perfsift_here("balance", str(model))
    assert r.returncode != 0 and "no balance" in r.stderr
