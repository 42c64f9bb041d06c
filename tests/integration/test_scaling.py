"""Scaling one stage 1 -> 2 -> 3 -> 2 workers with cooperative-sticky on the embedded broker: no
sample lost, only the partitions that move are revoked, and the state that moves with them gives
the same values as one uninterrupted worker."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from perfsift.producers.publish import publish_samples
from perfsift.streams.clients import create_pipeline_topics
from perfsift.streams.config import load_pipeline
from perfsift.streams.runner import StageRunner, run_in_thread

from tests.conftest import read_topic, wait_until
from tests.integration.test_stage import assert_close, expected_means, make_samples, write_pipeline

pytestmark = pytest.mark.integration

PARTITIONS = 6
#: short timeouts: with them Tansu 0.6.0 finishes a cooperative step in seconds (docs/deploy.md)
COOPERATIVE = """kafka:
  partition.assignment.strategy: cooperative-sticky
  session.timeout.ms: 3000
  heartbeat.interval.ms: 200
  max.poll.interval.ms: 5000
"""


def owned(runners: list[StageRunner]) -> list[set[int]]:
    return [{p for _, p in r.assigned()} for r in runners]


def settled(runners: list[StageRunner]) -> bool:
    """Every partition owned by exactly one runner and every runner owning some."""
    sets = owned(runners)
    return all(sets) and sum(map(len, sets)) == PARTITIONS and set().union(*sets) == set(range(PARTITIONS))


def has_distinct(n: int) -> Callable[[list[Any]], bool]:
    """Whether the records read so far hold ``n`` distinct samples (re-emitted ones count once)."""
    return lambda records: len({(x["node"], x["seq"]) for x in records}) >= n


def test_scaling_1_2_3_2_moves_only_the_partitions_that_change_owner(kafka: dict, prefix: str, tmp_path: Path) -> None:
    path = write_pipeline(tmp_path, prefix, commit_interval_s=0.2)
    path.write_text(path.read_text().replace("partitions: 3", f"partitions: {PARTITIONS}") + COOPERATIVE)
    cfg = load_pipeline(path)
    props = {**kafka, **cfg.kafka}
    create_pipeline_topics(cfg, props)
    samples = make_samples(n_nodes=12, steps=120)
    phases = [[s for s in samples if k * 30 <= s["seq"] < (k + 1) * 30] for k in range(4)]
    runners: list[StageRunner] = []
    everyone: list[StageRunner] = []
    threads: list[threading.Thread] = []
    failures: list[BaseException] = []
    moved = 0  # partitions that changed owner, summed over the steps

    def step(change: str) -> None:
        nonlocal moved
        before = owned(runners)
        if change == "add":
            runners.append(StageRunner(cfg.stage("smooth"), cfg, props, embedded=True))
            everyone.append(runners[-1])
            threads.append(run_in_thread(runners[-1], on_error=failures.append))
            before.append(set())
            assert wait_until(lambda: settled(runners) or bool(failures), 60), owned(runners)
            after = owned(runners)
        else:
            runners[-1].stop()
            threads[-1].join(30)
            gone = runners.pop()
            threads.pop()
            assert wait_until(lambda: settled(runners) or bool(failures), 60), owned(runners)
            after = [*owned(runners), set()]
            assert gone.stats.revoked_partitions == len(before[-1])  # all of the leaving one's
        assert not failures, failures
        moved += sum(len(b - a) for b, a in zip(before, after, strict=True))

    try:
        for k, change in enumerate(["add", "add", "add", "remove"]):
            step(change)
            publish_samples(kafka, cfg.topic("perf.raw"), phases[k])
            read_topic(kafka, cfg.topic("perf.smoothed"), has_distinct(sum(map(len, phases[: k + 1]))))
        out = read_topic(kafka, cfg.topic("perf.smoothed"), has_distinct(len(samples)))
        revoked = [r.stats.revoked_partitions for r in everyone]  # before the final stops revoke the rest
        cooperative = [r.cooperative for r in everyone]
    finally:
        for r in runners:
            r.stop()
        for t in threads:
            t.join(30)
    assert not failures, failures
    # no sample lost, none invented; a re-emitted one (at-least-once) carries the same values
    by_key: dict[tuple[str, int], list[dict]] = {}
    for rec in out:
        by_key.setdefault((rec["node"], rec["seq"]), []).append(rec["metrics"])
    assert set(by_key) == {(s["node"], s["seq"]) for s in samples}
    want = expected_means(samples)  # one uninterrupted sliding mean per node
    for key, copies in by_key.items():
        for got in copies:
            assert_close(got, want[key])
    # only the partitions that moved were revoked (eager revokes every member's partitions at
    # each step: 6 + 6 + 6 here); the ones that stayed were never revoked
    assert all(cooperative)
    assert sum(revoked) == moved < 3 * PARTITIONS, (revoked, moved)
