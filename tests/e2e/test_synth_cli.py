"""perfsift synth: traces and ground truth files, as a user makes them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from perfsift.producers.traces import detect_format, iter_samples

from tests.e2e.cli import perfsift, perfsift_here

pytestmark = pytest.mark.e2e


@pytest.mark.parametrize(
    "scenario,out,args,nodes",
    [
        ("sweep3d", "s.sddf", ["--nodes", "6", "--duration", "30"], 6),
        ("cactus", "c.sddfb", ["--nodes", "4", "--duration", "20", "--metrics", "14", "--missing", "0.1"], 4),
        ("master-worker", "m.csv", ["--nodes", "5", "--duration", "30", "--load-node", "3"], 5),
        ("gridftp", "g.jsonl.gz", ["--duration", "50"], 3),
    ],
)
def test_synth_writes_a_trace_and_its_truth(
    tmp_path: Path, scenario: str, out: str, args: list[str], nodes: int
) -> None:
    path = tmp_path / out
    # the first as a user runs it, a process of its own; the others through the same main() here
    run = perfsift if scenario == "sweep3d" else perfsift_here
    r = run("synth", "--scenario", scenario, "--out", str(path), "--seed", "3", *args)
    assert r.returncode == 0, r.stderr[-2000:]
    truth = json.loads((tmp_path / (out.split(".")[0] + ".truth.json")).read_text())
    assert truth["scenario"] == scenario
    samples = list(iter_samples(path))
    assert len({s["node"] for s in samples}) == nodes
    assert detect_format(path) in ("sddf", "csv", "jsonl")
    if scenario == "master-worker":
        assert truth["load"]["node"] == "n03"
    if scenario == "cactus":
        assert len(samples[0]["metrics"]) == 14
        assert sum(v is None for s in samples for v in s["metrics"].values()) == truth["missing"]


def test_synth_errors_are_clear(tmp_path: Path) -> None:
    r = perfsift_here("synth", "--scenario", "lu", "--out", str(tmp_path / "x.csv"))
    assert r.returncode != 0 and "unknown" in r.stdout + r.stderr
    r = perfsift_here("synth", "--scenario", "cactus", "--out", str(tmp_path / "x.parquet"))
    assert r.returncode != 0 and "cannot tell the format" in r.stdout + r.stderr
