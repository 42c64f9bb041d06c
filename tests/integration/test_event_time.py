"""A stage reads a backlog on 4 partitions in event-time order (event_time_skew_s, streams/align.py)."""

from __future__ import annotations

import math
import uuid
from pathlib import Path
from typing import Any

import orjson
import pytest
from confluent_kafka.admin import AdminClient
from perfsift.producers.publish import publish_samples
from perfsift.streams.clients import (
    create_pipeline_topics,
    ensure_topics,
    read_topic_to_end,
)
from perfsift.streams.config import load_pipeline
from perfsift.streams.runner import StageRunner, run_in_thread

from tests.conftest import wait_until

pytestmark = pytest.mark.integration

NODES, STEPS, EVERY = 16, 150, 10.0  # 16 nodes on 4 partitions, 1,500 s of samples every 10 s
SKEW = 60.0


def samples() -> list[dict[str, Any]]:
    return [
        {"ts": 1000.0 + t * EVERY, "node": f"n{n:02d}", "metrics": {"cpu": float(t + n)}}
        for t in range(STEPS)
        for n in range(NODES)
    ]


def output_skew(records: list[dict]) -> float:
    """Over the output in order: the largest difference between a record's ts and the lowest
    newest ts over the nodes (a node not seen yet counts at the trace's start)."""
    latest = {f"n{n:02d}": 1000.0 for n in range(NODES)}
    worst = 0.0
    for r in records:
        latest[r["node"]] = max(latest[r["node"]], r["ts"])
        worst = max(worst, r["ts"] - min(latest.values()))
    return worst


def run_stage(tmp_path: Path, kafka: dict[str, str], skew: float, hold: int | None = None) -> tuple[list[dict], Any]:
    """The stage's output in order and its counters; ``hold``: ``event_time_hold_bytes`` (None:
    the default)."""
    prefix = f"evt{uuid.uuid4().hex[:8]}."
    path = tmp_path / f"pipeline-{skew}-{hold}.yaml"
    path.write_text(
        "\n".join(
            [
                f'topic_prefix: "{prefix}"',
                "partitions: 4",
                f"event_time_skew_s: {'.inf' if math.isinf(skew) else skew}",
                *([f"event_time_hold_bytes: {hold}"] if hold is not None else []),
                "stages:",
                "  smooth:",
                "    input: perf.raw",
                "    outputs: [perf.smoothed]",
                "    operators:",
                "      - type: sliding_mean",
                "        window: 1",
            ]
        )
        + "\n"
    )
    cfg = load_pipeline(path)
    # one output partition: the topic's order is the order the stage emitted in
    ensure_topics(AdminClient(dict(kafka.items())), [cfg.topic("perf.smoothed")], 1, 1, cfg.retention_ms, [])
    create_pipeline_topics(cfg, kafka)
    assert publish_samples(kafka, cfg.topic("perf.raw"), samples()) == NODES * STEPS  # the backlog
    runner = StageRunner(cfg.stages["smooth"], cfg, kafka, embedded=True)
    thread = run_in_thread(runner)
    try:
        assert wait_until(lambda: runner.stats.records_in >= NODES * STEPS, 30, 0.05)
    finally:
        runner.stop()
        thread.join(20)
    assert runner.stats.records_in == NODES * STEPS
    return [orjson.loads(v) for v in read_topic_to_end(kafka, cfg.topic("perf.smoothed"))], runner.stats


def test_backlog_output_skew_is_bounded_with_alignment_and_the_trace_without(
    tmp_path: Path, kafka: dict[str, str]
) -> None:
    """By default (``event_time_hold_bytes`` 32 MiB, more than this backlog) the partitions ahead
    are held without a pause; with 0 they are paused as soon as they run ahead: the same bound."""
    aligned, held = run_stage(tmp_path, kafka, SKEW)
    paused, paced = run_stage(tmp_path, kafka, SKEW, hold=0)
    free, _ = run_stage(tmp_path, kafka, math.inf)
    assert len(aligned) == len(paused) == len(free) == NODES * STEPS
    every = sorted((r["node"], r["ts"]) for r in free)
    assert sorted((r["node"], r["ts"]) for r in aligned) == sorted((r["node"], r["ts"]) for r in paused) == every
    a, p, f = output_skew(aligned), output_skew(paused), output_skew(free)
    print(
        f"output skew: aligned {a:.0f} s holding ({held.paused} pauses), {p:.0f} s pausing ({paced.paused} pauses) "
        f"(bound {SKEW:.0f} s), not aligned {f:.0f} s, trace {(STEPS - 1) * EVERY:.0f} s"
    )
    # the bound, plus one sample of the others (their newest is a sample behind their head)
    assert a <= SKEW + EVERY and p <= SKEW + EVERY
    assert held.paused == held.resumed == 0 and paced.paused > 0 and paced.resumed > 0
    assert f >= (STEPS - 1) * EVERY * 0.9  # partition after partition: about the trace's length
