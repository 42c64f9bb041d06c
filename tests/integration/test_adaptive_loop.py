"""The closed adaptive loop end to end on the real embedded broker: in one ``perfsift run
--adaptive`` the select stage's own perf.control records drive the replaying producer, and the
bytes stored on perf.raw fall by the share the selection predicts."""

from __future__ import annotations

import json
from pathlib import Path

import orjson
import pytest
from perfsift.producers import demo_trace_path
from perfsift.producers.adaptive import loop_bytes
from perfsift.streams.clients import read_topic_to_end

from tests.e2e.cli import perfsift_here
from tests.integration.test_producers import setup

pytestmark = pytest.mark.integration


def test_run_adaptive_shrinks_perf_raw_by_the_predicted_share(kafka: dict, prefix: str, tmp_path: Path) -> None:
    config = setup(kafka, prefix, tmp_path)
    summary = tmp_path / "s.json"
    bs = kafka["bootstrap.servers"]
    # through main() in this process, the stages as threads (the run as a process: tests/e2e)
    r = perfsift_here("run", "-b", bs, "-c", str(config), "--adaptive", "--speed", "40", "--threads", "--no-report",
                      "--summary-json", str(summary), "--timeout", "120")  # fmt: skip
    assert r.returncode == 0, r.stderr[-3000:]
    s = json.loads(summary.read_text())
    assert s["published"] == 9600  # every demo sample went out, most of them reduced
    raw = read_topic_to_end(kafka, f"{prefix}perf.raw")
    controls = [orjson.loads(v) for v in read_topic_to_end(kafka, f"{prefix}perf.control")]
    assert len(raw) == 9600
    assert controls and all(c["job"] == "demo" and 0 < len(c["keep"]) < 12 for c in controls)  # the stage's own
    rows = loop_bytes(demo_trace_path(), raw, controls, 30.0)
    first = min(c["ts"] for c in controls)
    # before the first control record everything goes out whole
    assert all(r["stored"] == r["full"] for r in rows if r["start"] + 30.0 <= first)
    # The first control record (stamped with the job's first period's end) leaves select once a
    # node is `slack` (32) rows of 10-s means past that period (docs/pipeline.md: deterministic
    # outputs), then needs a few seconds to reach the producer: the loop takes effect then.
    reached = min(r["start"] for r in rows if r["stored"] < r["full"])
    assert first < reached <= first + 32 * 10.0 + 90.0, (first, reached)
    # from the next period on perf.raw carries what the selection predicts: its share of the
    # full bytes, to 3 % of the full bytes
    late = [r for r in rows if r["start"] > reached]
    assert len(late) >= 5
    stored, predicted, full = (sum(r[k] for r in late) for k in ("stored", "predicted", "full"))
    assert abs(stored - predicted) <= 0.03 * full, (stored, predicted, full)
    assert stored < 0.6 * full  # the loop really reduced the raw stream
    assert s["adaptive"]["bytes_sent"] == sum(len(v) for v in raw)
    assert "adaptive:" in r.stdout


def test_the_host_sampler_follows_the_selection_of_its_own_samples(kafka: dict, prefix: str, tmp_path: Path) -> None:
    """``--sample-host``: this machine sampled into perf.raw (job ``host``) while the demo
    replays; the select stage's data reduction (response ``cpu_idle``, a short window so a
    selection comes within seconds) selects among the host's own metrics, and the sampler, following
    perf.control, then sends only those."""
    config = setup(kafka, prefix, tmp_path)
    text = config.read_text().replace(
        "        policy: union",
        "        reduction: {perf_metric: cpu_idle, interval: 0.5, window: 40, blocks: 4}\n        policy: union",
    )
    # data reduction fits on rows at the sampling rate: full-rate means, pursuit snapshots a window
    # apart (what --perf-metric sets up; docs/pipeline.md)
    for lean, full_rate in (("emit_every: 10", "emit_every: 1"), ("window: 1\n", "window: 10\n")):
        assert lean in text
        text = text.replace(lean, full_rate)
    config.write_text(text)
    summary = tmp_path / "s.json"
    bs = kafka["bootstrap.servers"]
    # the sampler runs while the demo replays: 30 s at 20x, so that on a loaded machine the rules
    # still reach it with time left (at 40x, 15 s, its samples all went out whole in a loaded CI run)
    r = perfsift_here("run", "-b", bs, "-c", str(config), "--adaptive", "--speed", "20", "--sample-host", "0.5",
                      "--threads", "--no-report", "--summary-json", str(summary), "--timeout", "120")  # fmt: skip
    assert r.returncode == 0, r.stderr[-3000:]
    s = json.loads(summary.read_text())
    controls = [orjson.loads(v) for v in read_topic_to_end(kafka, f"{prefix}perf.control")]
    host_rules = [c for c in controls if c["job"] == "host"]
    assert host_rules, controls[:3]  # the stage's own records for the sampler's job
    kept_ever = {m for c in host_rules for m in c["keep"]}
    host = [orjson.loads(v) for v in read_topic_to_end(kafka, f"{prefix}perf.raw")]
    host = sorted((h for h in host if h["job"] == "host"), key=lambda h: h["seq"])
    assert len(host) == s["host_sampler"]["published"] >= 20
    full = len(host[0]["metrics"])
    assert full >= 10
    reduced = [h for h in host if len(h["metrics"]) < full]
    assert len(reduced) >= 3 and s["host_sampler"]["reduced_samples"] == len(reduced)
    assert all(h["metrics"] and set(h["metrics"]) <= kept_ever for h in reduced)  # never empty
    first = host.index(reduced[0])
    assert all(len(h["metrics"]) == full for h in host[:first])  # whole until the first rule arrived
    assert s["host_sampler"]["bytes_sent"] < s["host_sampler"]["bytes_full"]
