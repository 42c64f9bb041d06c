"""State snapshots at a share of the input bytes (``snapshot_share``), and the silent replay that
rebuilds the state after a restart from an older snapshot: outputs across the restart are exact
and not repeated, and the snapshots cost at most the share of the input bytes."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from perfsift.producers.publish import publish_samples
from perfsift.streams.checkpoint import Cadence, parse_record
from perfsift.streams.clients import create_pipeline_topics
from perfsift.streams.config import ConfigError, load_pipeline
from perfsift.streams.http import _RunnerCollector
from perfsift.streams.runner import StageRunner, run_in_thread
from perfsift.streams.topics import STATE_TOPIC
from prometheus_client import CollectorRegistry, generate_latest

from tests.conftest import read_topic
from tests.integration.test_stage import assert_close, expected_means, make_samples, write_pipeline


def _collector(runner: StageRunner) -> CollectorRegistry:
    registry = CollectorRegistry()
    registry.register(_RunnerCollector(runner))
    return registry


def run_halves(kafka: dict, prefix: str, tmp_path: Path, share: str) -> tuple[list[dict], list[StageRunner], list]:
    """The smooth stage over the first half of a trace, stopped, and a new runner over the second."""
    cfg = load_pipeline(write_pipeline(tmp_path, prefix, commit_interval_s=0.2, snapshot_share=share))
    create_pipeline_topics(cfg, kafka)
    samples = make_samples(n_nodes=6, steps=120, seed=3)
    first, second = samples[: len(samples) // 2], samples[len(samples) // 2 :]
    runners = []
    for half, upto in ((first, len(first)), (second, len(samples))):
        runner = StageRunner(cfg.stage("smooth"), cfg, kafka, embedded=True)
        thread = run_in_thread(runner)
        publish_samples(kafka, cfg.topic("perf.raw"), half)
        out = read_topic(kafka, cfg.topic("perf.smoothed"), lambda r, n=upto: len(r) >= n)  # type: ignore[misc]
        runner.stop()
        thread.join(30)
        runners.append(runner)
    return samples, runners, out


def test_a_restart_replays_from_the_first_snapshot_without_emitting(kafka: dict, prefix: str, tmp_path: Path) -> None:
    samples, (a, b), out = run_halves(kafka, prefix, tmp_path, "1e-9")  # no snapshot after the first
    assert len(out) == len(samples)  # the replayed half emitted nothing again
    want = expected_means(samples)
    for rec in out:  # windows across the restart: right only if the replay rebuilt them
        assert_close(rec["metrics"], want[(rec["node"], rec["seq"])])
    assert b.stats.restored_partitions == 3
    assert b.stats.replayed == len(samples) // 2 == a.stats.records_in
    assert b.stats.records_in == len(samples) // 2
    scraped = generate_latest(_collector(b)).decode()  # what /metrics says of the catch-up
    assert f'perfsift_replayed_records_total{{stage="smooth"}} {len(samples) // 2}.0' in scraped

    def snapshots(msgs: list) -> list:  # the state topic also holds the restore's end markers
        return [m for m in msgs if not m.key().startswith(b"marker/")]

    state = read_topic(kafka, f"{prefix}{STATE_TOPIC}", lambda r: len(snapshots(r)) >= 3, timeout=10, decode=False)
    records = [parse_record(m.value()) for m in snapshots(state)]
    assert len(records) == 3 and {r["next_offset"] for r in records} == {0}  # the fresh chains only
    assert all(r["fresh"] and not r["operators"] for r in records)  # a header: nothing to load
    assert a.stats.wire_out.messages[STATE_TOPIC] == 3 and a.stats.wire_out.payload[STATE_TOPIC] < 3 * 300


def test_a_snapshot_at_every_commit_leaves_nothing_to_replay(kafka: dict, prefix: str, tmp_path: Path) -> None:
    samples, (a, b), out = run_halves(kafka, prefix, tmp_path, ".inf")
    assert len(out) == len(samples)
    want = expected_means(samples)
    for rec in out:
        assert_close(rec["metrics"], want[(rec["node"], rec["seq"])])
    assert b.stats.restored_partitions == 3 and b.stats.replayed == 0
    assert a.stats.wire_out.messages[STATE_TOPIC] >= 6  # the fresh chains, then at each commit


def test_snapshots_cost_at_most_their_share_of_the_input() -> None:
    """The cadence's promise, on a state that grows fast and then saturates (as a new job's nodes
    arrive): the snapshots written after the first cost at most ``share`` of the input bytes."""
    for share in (0.5, 0.05, 0.005):
        cad, written, read = Cadence(share), [], 0
        cad.wrote(100)  # the fresh chain
        for i in range(20_000):
            n = 1000 + (i * 7919) % 3000  # a micro-batch's bytes
            cad.since += n
            read += n
            size = min(100 + 50 * i, 40_000)  # the state's size now
            if cad.fits() and cad.fits(size):  # as the runner asks: free check, then true size
                cad.wrote(size)
                written.append(size)
            elif cad.fits():
                cad.size = size
        assert written, share
        assert sum(written) <= share * read
        assert sum(written) >= share * read / 3  # and not far below it: snapshots keep coming
    assert Cadence(math.inf, since=1, size=10**9).fits()


def test_snapshot_share_must_be_positive(tmp_path: Path) -> None:
    for bad in ("0", "-1", ".nan"):
        with pytest.raises(ConfigError, match="snapshot_share must be > 0"):
            load_pipeline(write_pipeline(tmp_path, "x.", snapshot_share=bad))
    assert math.isinf(load_pipeline(write_pipeline(tmp_path, "x.", snapshot_share=".inf")).snapshot_share)
