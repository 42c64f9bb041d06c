"""Contract and forecast stages on the real embedded broker."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from perfsift.operators.contract import derive_contract
from perfsift.producers.publish import publish_samples
from perfsift.producers.synth import master_worker
from perfsift.schemas import samples_to_batch
from perfsift.streams.clients import create_pipeline_topics
from perfsift.streams.config import load_pipeline
from perfsift.streams.runner import StageRunner, run_in_thread

from tests.conftest import read_topic

pytestmark = pytest.mark.integration


def test_contract_and_forecast_stages_publish_their_records(kafka: dict, prefix: str, tmp_path: Path) -> None:
    base, _ = master_worker(seed=1, duration=120)
    contract = derive_contract(samples_to_batch(base), {"execution": ["instructions_per_s", "messages_per_s"]})
    cpath = tmp_path / "contract.json"
    cpath.write_text(json.dumps(contract))
    (tmp_path / "p.yaml").write_text(f"""
topic_prefix: "{prefix}"
partitions: 2
commit_interval_s: 0.2
stages:
  contract:
    input: perf.raw
    outputs: [perf.contract]
    emit: contract
    operators:
      - type: contract
        contract: {cpath}
  forecast:
    input: perf.raw
    outputs: [perf.forecast]
    emit: forecast
    operators:
      - type: forecast
        metrics: [messages_per_s]
""")
    cfg = load_pipeline(tmp_path / "p.yaml")
    create_pipeline_topics(cfg, kafka)
    runners = [StageRunner(cfg.stage(n), cfg, kafka, embedded=True) for n in ("contract", "forecast")]
    threads = [run_in_thread(r) for r in runners]
    run, _ = master_worker(seed=9, duration=60, load_node=3, load_start=20, load_end=40)
    publish_samples(kafka, cfg.topic("perf.raw"), run)
    contracts = read_topic(kafka, cfg.topic("perf.contract"), lambda r: len(r) >= len(run))
    forecasts = read_topic(kafka, cfg.topic("perf.forecast"), lambda r: len(r) >= len(run))
    for r in runners:
        r.stop()
    for t in threads:
        t.join(20)
    assert len(contracts) == len(run) and len(forecasts) == len(run)
    violated = {(c["node"], round(c["ts"] - 1.7e9)) for c in contracts if c["state"] == "violated"}
    assert {n for n, _ in violated} == {"n03"}
    assert all(21 <= t <= 41 for _, t in violated)  # raised after 2 loaded rows, cleared once the EWMA drops
    f = [x for x in forecasts if x["node"] == "n05"]
    assert all(x["metric"] == "messages_per_s" for x in f)
    assert all(x["lower"] <= x["forecast"] <= x["upper"] for x in f if x["sigma"] is not None)
