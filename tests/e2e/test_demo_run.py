"""``perfsift run`` with no flags (the bundled demo, streamed through the embedded broker) tells the
truth about the demo (#32): it keeps only the planted metrics and names the bursty writers. It reads
the session's run (tests/e2e/conftest.py: its summary and its report in the default folder)."""

from __future__ import annotations

import json
import re
from collections import Counter

import pytest

from tests.e2e.conftest import DemoRun

pytestmark = pytest.mark.e2e

TRUTH = {"bwrite", "pkts_in", "pkts_out"}  # the metrics in which the demo's nodes differ
WRITERS = {"n00", "n04", "n08", "n12"}  # bwrite bursts in 15 % of their samples, 2 % on the others


def test_the_streamed_demo_keeps_the_planted_metrics_and_names_the_bursty_writers(demo_run: DemoRun) -> None:
    r, report = demo_run, demo_run.report
    assert r.returncode == 0, r.stderr[-3000:]
    recs = [json.loads(line) for line in (report / "selection.jsonl").read_text().splitlines()]
    pursuit = [rec for rec in recs if rec["kind"] == "pursuit"]
    analysed = [rec for rec in pursuit if not rec["skipped"]]
    assert len(analysed) >= 18, len(analysed)  # 600 s of 30-s periods; the last stays open
    # the cause this guards: every period's analysis saw every node, none came after it closed
    assert [rec["diagnostics"]["nodes"] for rec in analysed] == [16] * len(analysed)
    picks = [m for rec in pursuit for m in rec["selected"]]
    assert len(picks) >= 2 * len(analysed) and sum(m in TRUTH for m in picks) >= 0.9 * len(picks), Counter(picks)
    named = Counter(d["node"] for rec in pursuit for d in rec["deviant_nodes"])
    writers = sum(c for n, c in named.items() if n in WRITERS)
    others = sum(c for n, c in named.items() if n not in WRITERS)
    assert writers >= 6 and writers >= 5 * others, named
    # the closing line says the same: what the reduced stream keeps and who stood apart
    job = r.summary["jobs"]["demo"]
    assert job["kept"] and set(job["kept"]) <= TRUTH, job["kept"]
    assert job["nodes_apart"] == dict(named) and job["nodes_seen"] == job["fewest_nodes"] == 16
    line = " ".join(r.stdout.split())  # the console wraps long lines
    closing = re.search(r"demo: keeps ([\w, ]+) \(selection v\d+\).*?nodes apart: ((?:n\d+ \(\d+[a-z ]*\),? ?)+)", line)
    assert closing is not None, r.stdout[-3000:]
    assert set(closing.group(1).split(", ")) == set(job["kept"])
    shown = dict(re.findall(r"(n\d+) \((\d+)", closing.group(2)))
    assert {n: int(c) for n, c in shown.items()} == dict(named)
    assert "pursuit analysed only" not in line
