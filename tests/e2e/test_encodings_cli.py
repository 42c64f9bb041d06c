"""`perfsift run` end to end in Avro: published, processed and reported without a dead letter."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from perfsift.producers import demo_trace_path
from perfsift.producers.traces import iter_samples, write_samples
from perfsift.streams.config import default_pipeline_path, load_pipeline
from perfsift.streams.presets import with_demo

from tests.e2e.cli import perfsift_here

pytestmark = pytest.mark.e2e


#: the three stages ``perfsift run`` adds for the bundled demo (streams/presets.py, with_demo), in a
#: pipeline file: the bundled contract and model, data reduction on iter_time
DEMO_STAGES = """
  contract:
    input: perf.smoothed.byjob
    outputs: [perf.contract]
    operators: [{type: contract, contract: demo}]
  predict:
    input: perf.smoothed.byjob
    outputs: [perf.prediction]
    operators: [{type: predict, model: demo}]
  reduction:
    input: perf.raw
    outputs: [perf.selection]
    operators: [{type: data_reduction, perf_metric: iter_time, interval: 1.0, window: 200, recluster_every: 60}]
"""


def test_run_in_avro_processes_and_reports_every_sample(tmp_path: Path) -> None:
    """The demo's stages on the demo's first 400 s, paced as the demo is: the data reduction's
    refits (every 60 rows after 200) cost in proportion to the length, and the select stage's
    first period closes (slack: 32 rows of 10-s means) after 350 s: before that it holds its
    reduced records (the first 300 s gave 16)."""
    config = tmp_path / "pipeline.yaml"
    config.write_text(default_pipeline_path().read_text() + DEMO_STAGES)
    assert load_pipeline(config).stages == with_demo(load_pipeline()).stages  # the demo's pipeline
    trace = tmp_path / "demo400.jsonl"
    t0 = next(iter_samples(demo_trace_path()))["ts"]
    write_samples((x for x in iter_samples(demo_trace_path()) if x["ts"] < t0 + 400), trace)
    # through main() in this process, the stages as threads (the run as a process: test_cli.py)
    r = perfsift_here("run", "--set", "encoding=avro", "--threads", "--report", str(tmp_path / "rep"), "-c",
                      str(config), "--trace", str(trace), "--speed", "40", "--summary-json", str(tmp_path / "s.json"),
                      cwd=tmp_path)  # fmt: skip
    assert r.returncode == 0, r.stderr[-3000:]
    s = json.loads((tmp_path / "s.json").read_text())
    assert s["published"] == 6400 and all(st["dead_letters"] == 0 for st in s["stages"])
    assert [st["stage"] for st in s["stages"]] == ["node", "select", "contract", "predict", "reduction"]
    node, select, contract, predict, reduction = s["stages"]  # the demo's contract, model, data reduction
    assert contract["records_out"] > 0 and predict["records_out"] > 0 and reduction["records_in"] == 6400
    assert node["records_in"] == 6400 and select["records_in"] > 0  # select reads column frames of means
    reduced = [json.loads(line) for line in (tmp_path / "rep" / "reduced.jsonl").read_text().splitlines()]
    # every reduced record the select stage wrote was read back as a record: one per smoothed mean
    # (one per node every 10 samples: 640), but an open period (3 means per node, + 1) can be held
    assert len(reduced) == select["by_topic"]["perf.reduced"] > 640 - 16 * 4
    assert len(reduced) <= 640
    assert {r["job"] for r in reduced} == {"demo"} and all(isinstance(r["metrics"], dict) for r in reduced)
    assert (tmp_path / "rep" / "report.html").exists()


def test_analyze_is_json_lines_whatever_the_wire_encoding(tmp_path: Path) -> None:
    """The offline analysis passes JSON between its stages and writes JSON lines: the same files
    with PERFSIFT_ENCODING=avro as with JSON (it used to decode its own JSON as Avro and process
    nothing)."""
    import os
    import subprocess
    import sys

    from perfsift.producers import demo_trace_path

    # JSON through main() in this process, Avro in a process of its own (its environment set at start)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PERFSIFT_ENCODING", "json")
        r = perfsift_here("analyze", str(demo_trace_path()), "--out", str(tmp_path / "json"), cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    r = subprocess.run([sys.executable, "-m", "perfsift", "analyze", str(demo_trace_path()), "--out",
                        str(tmp_path / "avro")], capture_output=True, text=True, timeout=300, cwd=tmp_path,
                       env={**os.environ, "PERFSIFT_ENCODING": "avro"})  # fmt: skip
    assert r.returncode == 0, r.stderr[-2000:]
    for name in ("reduced.jsonl", "forecast.jsonl", "selection.jsonl"):
        json_out = (tmp_path / "json" / name).read_bytes()
        assert json_out.count(b"\n") > 10 and (tmp_path / "avro" / name).read_bytes() == json_out, name
