"""perfsift clean, quality and kb, as a user runs them."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from subprocess import CompletedProcess

import numpy as np
import pytest
from perfsift.producers.synth import spmd
from perfsift.producers.traces import write_samples

from tests.e2e.cli import perfsift, perfsift_here

pytestmark = pytest.mark.e2e


def test_clean_quality_and_the_knowledge_base(tmp_path: Path) -> None:
    faulty, truth = spmd("cactus", nodes=3, duration=300, seed=3, outliers=0.01, missing=0.02)
    ref, _ = spmd("cactus", nodes=3, duration=300, seed=3)
    rep, _ = spmd("cactus", nodes=3, duration=300, seed=4)
    paths = {n: tmp_path / f"{n}.sddfb" for n in ("faulty", "ref", "rep")}
    for name, s in (("faulty", faulty), ("ref", ref), ("rep", rep)):
        write_samples(s, paths[name])
    cleaned = tmp_path / "clean.jsonl"
    r = perfsift("clean", str(paths["faulty"]), "--out", str(cleaned), "--action", "replace")
    assert r.returncode == 0, r.stderr[-2000:]
    assert "residual" in r.stdout and "knn_impute" in r.stdout
    records = [json.loads(line) for line in cleaned.read_text().splitlines()]
    assert len(records) == 900
    flags = [f for rec in records for f in rec["flags"] or []]
    assert {f["rule"] for f in flags} >= {"residual", "knn_impute"}
    assert sum(f["rule"] == "residual" for f in flags) >= 0.8 * len(truth["outliers"])
    assert all(v is not None for rec in records[30:] for v in rec["metrics"].values())  # gaps filled

    def median_diff(test: Path, run: Callable[..., CompletedProcess[str]] = perfsift_here) -> float:
        q = run("quality", str(test), str(paths["ref"]), str(paths["rep"]), "-m", "cpu_user", "-m", "pkts_in")
        assert q.returncode == 0, q.stderr[-2000:]
        return float(q.stdout.split("median Diff")[1].split()[0])

    assert median_diff(cleaned, perfsift) < median_diff(paths["faulty"])

    db = tmp_path / "kb.sqlite"
    r = perfsift("kb", "add", str(paths["ref"]), "--app", "cactus", "--db", str(db), "--platform", "xeon")
    assert r.returncode == 0 and "run 1 of cactus: 12 events" in r.stdout, r.stderr
    listing = perfsift_here("kb", "list", "--db", str(db)).stdout
    assert "cactus" in listing and "xeon" in listing and "1.0" in listing  # the interval, from the samples
    assert "cpu_user" in perfsift_here("kb", "show", "1", "--db", str(db)).stdout
    key = ("--kb", str(db), "--app", "cactus", "--platform", "xeon", "--interval", "1")
    r = perfsift_here("clean", str(paths["faulty"]), "--out", str(cleaned), "--action", "flag", "--mode", "none", *key)
    assert r.returncode == 0, r.stderr[-2000:]
    maxima: dict[str, float] = {}
    for sample in ref:
        for m, v in sample["metrics"].items():
            maxima[m] = max(maxima.get(m, -np.inf), v)
    kb_flags = [(m, f) for rec in map(json.loads, cleaned.read_text().splitlines()) for f in rec["flags"] or []
                for m in [f["metric"]] if f["rule"] == "kb_max"]  # fmt: skip
    assert kb_flags and all(f["original"] > maxima[m] and f["threshold"] == maxima[m] for m, f in kb_flags)
    r = perfsift_here("clean", str(paths["faulty"]), "--out", str(cleaned), "--mode", "none", "--kb", str(db),
                 "--app", "cactus", "--platform", "epyc")  # fmt: skip
    assert r.returncode == 0 and "kb_max" not in r.stdout  # another key: no maxima known
    assert perfsift_here("kb", "show", "7", "--db", str(db)).returncode != 0


def test_clean_refuses_bad_settings(tmp_path: Path) -> None:
    trace = tmp_path / "t.jsonl"
    trace.write_text('{"ts": 1, "node": "a", "metrics": {"x": 1}}\n')
    r = perfsift_here("clean", str(trace), "--out", str(tmp_path / "o.jsonl"), "--mode", "median")
    assert r.returncode != 0 and "mode must be one of" in r.stdout + r.stderr
    r = perfsift_here("clean", str(trace), "--out", str(tmp_path / "o.jsonl"), "--kb", "x.sqlite")
    assert r.returncode != 0 and "kb and app go together" in r.stdout + r.stderr
