"""perfsift pursuit TRACE, as a user runs it."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import orjson
import pytest
from perfsift.producers.synth import spmd

from tests.e2e.cli import perfsift, perfsift_here

pytestmark = pytest.mark.e2e


def test_pursuit_writes_records_a_timeline_and_the_selection_plot(tmp_path: Path) -> None:
    samples, truth = spmd("cactus", duration=600, seed=4)
    trace = tmp_path / "cactus.jsonl"
    trace.write_bytes(b"".join(orjson.dumps(s) + b"\n" for s in samples))
    out, png = tmp_path / "sel.jsonl", tmp_path / "fig8.png"
    # --alpha 1: the projection's ranking without evidence (cactus' bursts are independent processes of
    # one rate on every node, exchangeable: the default evidence keeps them rarely; test_pursuit_evidence)
    r = perfsift(
        "pursuit", str(trace), "--window", "5", "--period", "60", "--alpha", "1", "--json", str(out), "--plot", str(png)
    )
    assert r.returncode == 0, r.stderr[-3000:]
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(records) == 11  # 600 s, not aligned to 60 s: 11 periods
    assert all(rec["kind"] == "pursuit" and rec["job"] == "cactus" for rec in records)
    picks = Counter(m for rec in records if not rec["skipped"] for m in rec["selected"])
    assert picks.most_common(1)[0][0] in truth["interesting"]
    assert "most often selected" in r.stdout and "period (s)" in r.stdout and "nothing differed in 0" in r.stdout
    assert png.stat().st_size > 10_000 and png.read_bytes()[:4] == b"\x89PNG"


def test_pursuit_refuses_bad_options_with_a_message(tmp_path: Path) -> None:
    trace = tmp_path / "t.jsonl"
    trace.write_text('{"ts": 1, "node": "a", "metrics": {"x": 1}}\n')
    r = perfsift_here("pursuit", str(trace), "--dims", "5")
    assert r.returncode != 0 and "dims must be 1, 2 or 3" in r.stderr + r.stdout
    r = perfsift_here("pursuit", str(trace), "--rows", "cells")
    assert r.returncode != 0 and "row_mode" in r.stderr + r.stdout
