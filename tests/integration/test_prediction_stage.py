"""A structural-model prediction stage on the real embedded broker."""

from __future__ import annotations

from pathlib import Path

import pytest
from perfsift.operators.predict import ModelPredictor
from perfsift.producers.publish import publish_samples
from perfsift.producers.synth import sor
from perfsift.schemas import samples_to_batch
from perfsift.streams.clients import create_pipeline_topics
from perfsift.streams.config import load_pipeline
from perfsift.streams.runner import StageRunner, run_in_thread

from tests.conftest import read_topic

pytestmark = pytest.mark.integration


def test_the_prediction_stage_publishes_what_the_operator_computes(kafka: dict, prefix: str, tmp_path: Path) -> None:
    (tmp_path / "p.yaml").write_text(f"""
topic_prefix: "{prefix}"
partitions: 1
commit_interval_s: 0.2
stages:
  predict:
    input: perf.raw
    outputs: [perf.prediction]
    emit: prediction
    operators:
      - type: predict
        model: sor
        samples: 500
""")
    cfg = load_pipeline(tmp_path / "p.yaml")
    create_pipeline_topics(cfg, kafka)
    runner = StageRunner(cfg.stage("predict"), cfg, kafka, embedded=True)
    thread = run_in_thread(runner)
    samples, _ = sor(steps=80, seed=5, slowdown=(1, 40, 60, 1.7))
    expected = ModelPredictor("sor", samples=500).update(samples_to_batch(samples))
    # a model reads every node of a job: in a pipeline its input is job-keyed (perf.smoothed.byjob);
    # perf.raw is keyed by node, so this test gives it a single partition
    publish_samples(kafka, cfg.topic("perf.raw"), samples)
    got = read_topic(kafka, cfg.topic("perf.prediction"), lambda r: len(r) >= len(expected))
    runner.stop()
    thread.join(20)
    assert len(got) == len(expected)
    key = lambda r: (r["ts"], r["output"], r["node"])  # noqa: E731
    by = {key(r): r for r in got}
    for e in expected:
        g = by[key(e)]
        assert g["mean"] == pytest.approx(e["mean"], rel=1e-9) and g["state"] == e["state"]
    assert any(r["state"] == "violated" and r["node"] == "node01" for r in got)
