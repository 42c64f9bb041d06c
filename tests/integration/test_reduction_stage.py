"""The data-reduction stage on the embedded broker: selections keyed by job in perf.selection."""

from __future__ import annotations

from pathlib import Path

import pytest
from perfsift.producers.publish import publish_samples
from perfsift.producers.synth import gridftp
from perfsift.streams.clients import create_pipeline_topics
from perfsift.streams.config import load_pipeline
from perfsift.streams.runner import StageRunner, run_in_thread

from tests.conftest import read_topic

pytestmark = pytest.mark.integration


def test_reduction_stage_publishes_selections_keyed_by_job(kafka: dict, prefix: str, tmp_path: Path) -> None:
    (tmp_path / "p.yaml").write_text(f"""
topic_prefix: "{prefix}"
partitions: 1
commit_interval_s: 0.2
stages:
  reduction:
    input: perf.raw
    outputs: [perf.selection]
    emit: selection
    operators:
      - type: data_reduction
        perf_metric: transfer_rate
        window: 400
        quadratic: true
        f_out: 6.63
""")
    cfg = load_pipeline(tmp_path / "p.yaml")
    create_pipeline_topics(cfg, kafka)
    runner = StageRunner(cfg.stage("reduction"), cfg, kafka, embedded=True)
    thread = run_in_thread(runner)
    samples, _ = gridftp(seed=6, duration=1200)
    publish_samples(kafka, cfg.topic("perf.raw"), samples)
    msgs = read_topic(
        kafka,
        cfg.topic("perf.selection"),
        lambda r: any(m.key() == b"gridftp" and m.value() for m in r) and runner.stats.records_in >= len(samples),
        decode=False,
    )
    runner.stop()
    thread.join(20)
    import orjson

    recs = [orjson.loads(m.value()) for m in msgs]
    assert all(m.key() == b"gridftp" for m in msgs)
    assert recs and recs[-1]["kind"] == "reduction" and recs[-1]["r2_train"] > 0.9
    assert len(set(recs[-1]["selected"]) & {"srv2/disk_read", "srv2/disk_ops"}) == 1
    assert runner.stats.dead_letters == 0
