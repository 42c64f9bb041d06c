"""The bundled demo (#31): its application metric iter_time, the model and contract shipped for it,
and the stages ``perfsift run`` adds for it."""

from __future__ import annotations

import gzip
import hashlib
from pathlib import Path

import numpy as np
import orjson
import pytest
import yaml
from perfsift.models import bundled, bundled_contract
from perfsift.operators.contract import STATES
from perfsift.operators.contract.monitor import ContractMonitor
from perfsift.operators.predict import ModelPredictor
from perfsift.operators.smooth import SlidingMean
from perfsift.producers.demo import (
    APP_METRIC,
    COMPUTE_S,
    EPISODE,
    METRICS,
    PACKET_S,
    SLOW_NODE,
    STALL_S,
    demo_trace_path,
    generate_demo,
)
from perfsift.producers.traces import iter_samples
from perfsift.schemas import samples_to_batch
from perfsift.streams.config import load_pipeline
from perfsift.streams.presets import with_demo

#: sha256 of the bundled trace's records with only the twelve system metrics, as the trace was
#: before iter_time joined it (commit 91d1734's demo.jsonl.gz, every record re-encoded by orjson)
SYSTEM_METRICS_SHA256 = "31aa72aa47c3df8fce45cc36019358b6d281d93d09d9da74fa6a7598bbe4b2b9"


@pytest.fixture(scope="module")
def records() -> list[dict]:
    with gzip.open(demo_trace_path()) as fh:
        return [orjson.loads(line) for line in fh]


def test_the_twelve_system_metrics_are_the_bytes_they_were(records: list[dict]) -> None:
    h = hashlib.sha256()
    for r in records:
        h.update(orjson.dumps({**r, "metrics": {k: r["metrics"][k] for k in METRICS}}) + b"\n")
    assert h.hexdigest() == SYSTEM_METRICS_SHA256
    assert all(list(r["metrics"]) == [*METRICS, APP_METRIC] for r in records)


def test_the_bundled_trace_is_what_generate_demo_writes(tmp_path: Path) -> None:
    path = tmp_path / "demo.jsonl.gz"
    assert generate_demo(path) == 9600
    with gzip.open(path) as new, gzip.open(demo_trace_path()) as shipped:
        assert new.read() == shipped.read()


def test_iter_time_is_the_slowest_node_of_the_bundled_model(records: list[dict]) -> None:
    """Every rank reports the job's iteration time: max over nodes of the model's NodeTime, times
    a 2 % noise (|log| < 5 sigma), plus the stall of the slow node during the episode only."""
    model = yaml.safe_load(bundled("demo").read_text())
    assert model["parameters"]["Compute"]["value"] == COMPUTE_S
    assert model["parameters"]["PacketTime"]["value"] == PACKET_S
    steps = len(records) // 16
    for i in range(steps):
        step = [r["metrics"] for r in records[16 * i : 16 * (i + 1)]]
        assert len({m[APP_METRIC] for m in step}) == 1  # one value per iteration on every rank
        node = np.array([COMPUTE_S * (m["cpu_user"] + m["cpu_kern"]) / 100 + PACKET_S * m["pkts_in"] for m in step])
        if EPISODE[0] <= i < EPISODE[1]:
            node[SLOW_NODE] += STALL_S
        assert abs(np.log(step[0][APP_METRIC] / node.max())) < 0.1, i


def test_the_bundled_contract_flags_the_slow_minute_and_little_else(records: list[dict]) -> None:
    """The contract was derived from a run without the episode (generate_demo(episode=False)), not
    from this trace: the application violates it while n06 stalls, and hardly ever otherwise."""
    batch = samples_to_batch(iter_samples(demo_trace_path()))
    out = ContractMonitor(contract="demo").update(batch)
    violated = np.array(out.extra["state"]) == STATES.index("violated")
    step = (batch.ts - batch.ts.min()).astype(int)
    during = (step >= EPISODE[0] + 2) & (step < EPISODE[1])  # after the persistence of 2 samples
    outside = (step < EPISODE[0]) | (step >= EPISODE[1] + 5)  # and the hysteresis after it
    recall = violated[during].mean()
    false_alarms = violated[outside].mean()
    assert recall >= 0.8 and false_alarms <= 0.02, (recall, false_alarms)


def test_the_bundled_model_covers_iter_time_and_sees_the_slow_minute() -> None:
    """On the smoothed stream the pipeline gives it: outside the episode the ±2σ band holds the
    observed iter_time, during it the observed value lies above the band."""
    batch = samples_to_batch(iter_samples(demo_trace_path()))
    smoothed = SlidingMean(window=10, emit_every=10).update(batch)
    recs = ModelPredictor(model="demo").update(smoothed)
    t0 = float(batch.ts.min())
    during = [r for r in recs if EPISODE[0] + 9 <= r["ts"] - t0 < EPISODE[1]]
    outside = [r for r in recs if not EPISODE[0] <= r["ts"] - t0 < EPISODE[1] + 10]
    assert len(during) == 6 and len(outside) >= 45
    assert all(r["observed"] > r["upper"] for r in during)
    covered = np.mean([r["lower"] <= r["observed"] <= r["upper"] for r in outside])
    assert covered >= 0.9


def test_run_on_the_demo_adds_contract_prediction_and_data_reduction() -> None:
    cfg = with_demo(load_pipeline())
    assert list(cfg.stages) == ["node", "select", "contract", "predict", "reduction"]
    assert [op.type for op in cfg.stage("contract").operators] == ["contract"]
    assert cfg.stage("predict").operators[0].params == {"model": "demo"}
    reduction = cfg.stage("reduction")
    assert reduction.input == "perf.raw" and reduction.operators[0].params["perf_metric"] == APP_METRIC
    for st in cfg.stages.values():
        st.build_chain()  # the bundled names resolve
    assert bundled_contract("demo").is_file()
