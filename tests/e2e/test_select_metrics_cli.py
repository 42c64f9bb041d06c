"""perfsift select-metrics, as a user runs it on archived traces."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import orjson
import pytest
from perfsift.producers.synth import gridftp

from tests.e2e.cli import perfsift, perfsift_here

pytestmark = pytest.mark.e2e


def write(path: Path, seed: int) -> Path:
    path.write_bytes(b"".join(orjson.dumps(s) + b"\n" for s in gridftp(seed=seed, duration=800)[0]))
    return path


def test_select_metrics_with_verification_rand_main_and_sweep(tmp_path: Path) -> None:
    train, verify = write(tmp_path / "train.jsonl", 1), write(tmp_path / "verify.jsonl", 2)
    out, png = tmp_path / "sel.json", tmp_path / "sweep.png"
    r = perfsift(
        "select-metrics",
        str(train),
        "--perf-metric",
        "transfer_rate",
        "--verify",
        str(verify),
        "--quadratic",
        "--f-out",
        "6.63",
        "--main",
        "srv1/cpu_user,srv2/mem_free",
        "--sweep",
        "--plot",
        str(png),
        "--json",
        str(out),
    )
    assert r.returncode == 0, r.stderr
    res = json.loads(out.read_text())
    for key in (
        "selected",
        "clusters",
        "zero_variation",
        "quadratic",
        "threshold",
        "r2_train",
        "r2_verify",
        "reduction_degree",
        "rand_r2_verify",
        "main_r2_verify",
        "sweep",
    ):
        assert key in res
    assert len(res["selected"]) == 3 and res["reduction_degree"] == pytest.approx(0.75)
    assert res["r2_verify"][0] >= 0.9 > res["rand_r2_verify"][0] + 0.2
    assert res["main_r2_verify"][0] < res["r2_verify"][0]
    assert [round(s["threshold"], 2) for s in res["sweep"]] == [round(0.05 * i, 2) for i in range(1, 21)]
    assert png.read_bytes()[:4] == b"\x89PNG"
    assert "reduction degree 0.75" in r.stdout


def test_select_metrics_errors(tmp_path: Path) -> None:
    train = write(tmp_path / "train.jsonl", 1)
    r = perfsift_here("select-metrics", str(train), "--perf-metric", "nope")
    assert r.returncode == 2 and "no performance metric 'nope'" in r.stderr
    r = perfsift_here("select-metrics", str(train), "-p", "transfer_rate", "--verify", str(train), "--main", "x/y")
    assert r.returncode == 2 and "--main names unknown features ['x/y']" in r.stderr


def test_select_metrics_warns_when_the_selection_is_not_better_than_chance(tmp_path: Path) -> None:
    """The response replaced by noise: whatever F_out = 1 lets in does no better than random subsets."""
    rng = np.random.default_rng(0)
    paths = []
    for seed in (1, 2):
        samples = gridftp(seed=seed, duration=400)[0]
        for s in samples:
            if s["node"] == "app":
                s["metrics"]["transfer_rate"] = float(rng.normal())
        paths.append(tmp_path / f"noise{seed}.jsonl")
        paths[-1].write_bytes(b"".join(orjson.dumps(s) + b"\n" for s in samples))
    out = tmp_path / "sel.json"
    args = ("select-metrics", str(paths[0]), "-p", "transfer_rate", "--f-out", "1", "--json", str(out))
    r = perfsift_here(*args, "--verify", str(paths[1]))
    assert r.returncode == 0, r.stderr
    res = json.loads(out.read_text())
    assert res["selected"] and res["rand"][0]["subsets"] == 50 and res["rand"][0]["p_value"] > 0.05
    assert "warning: the selection is not better than chance" in r.stdout
    good = perfsift_here(
        "select-metrics", str(write(tmp_path / "t.jsonl", 1)), "-p", "transfer_rate", "--f-out", "6.63"
    )
    assert good.returncode == 0 and "not better than chance" not in good.stdout
    assert "RAND on t.jsonl (training trace: no --verify given)" in good.stdout
