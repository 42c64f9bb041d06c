"""perfsift explain DIR on an analysis of a trace with a planted deviant node (issue #23)."""

from __future__ import annotations

import re
from pathlib import Path

import orjson
import pytest

from tests.e2e.cli import perfsift, perfsift_here
from tests.planted import NODE, planted_trace

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def analysis(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("explain")
    trace = tmp / "planted.jsonl"
    trace.write_bytes(b"".join(orjson.dumps(s) + b"\n" for s in planted_trace()))
    r = perfsift_here("analyze", str(trace), "--out", str(tmp / "out"))  # as a subprocess: test_report.py
    assert r.returncode == 0, r.stderr[-3000:]
    return tmp / "out"


def test_explain_names_the_planted_node_and_only_it(analysis: Path) -> None:
    r = perfsift("explain", str(analysis))
    assert r.returncode == 0, r.stderr[-3000:]
    text = r.stdout
    for heading in ("What was kept and why", "Nodes that stood apart", "Contracts", "Predictions"):
        assert f"## {heading}" in text
    apart = re.findall(r"^(\S+) stood apart in (\d+) period", text, flags=re.M)
    assert [n for n, _ in apart] == [NODE] and int(apart[0][1]) >= 2
    assert re.search(r"z \d+\.\d; differs most in disk_[lp]write \+\d+", text)
    assert "no contract ran" in text and "forecasts:" in text


def test_explain_narrows_to_a_period_and_a_node(analysis: Path) -> None:
    planted = perfsift_here("explain", str(analysis), "--period", "250", "--node", NODE)
    assert planted.returncode == 0, planted.stderr[-3000:]
    assert f"{NODE} stood apart in 1 period" in planted.stdout
    assert len(re.findall(r"^cactus \+\d+ s\.\.", planted.stdout, flags=re.M)) == 1  # one period's selection
    calm = perfsift_here("explain", str(analysis), "--period", "500", "--node", NODE)
    assert calm.returncode == 0 and f"no node {NODE} stood apart" in calm.stdout
    other = perfsift_here("explain", str(analysis), "--node", "n00")
    assert "no node n00 stood apart" in other.stdout


def test_explain_refuses_a_folder_without_outputs(tmp_path: Path) -> None:
    r = perfsift_here("explain", str(tmp_path))
    assert r.returncode != 0
    assert "no selection, reduced, contract" in r.stderr + r.stdout
