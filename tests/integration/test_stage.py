"""The smooth stage on the real embedded broker: values, dead letters, and recovery from kill -9."""

from __future__ import annotations

import base64
import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.request
import warnings
from pathlib import Path

import numpy as np
import orjson
import pytest
from perfsift.operators import OPERATORS, Batch
from perfsift.operators.smooth import SlidingMean
from perfsift.producers.publish import publish_samples
from perfsift.streams.broker import free_port
from perfsift.streams.clients import create_pipeline_topics
from perfsift.streams.config import load_pipeline
from perfsift.streams.runner import StageRunner, run_in_thread

from tests.conftest import read_topic, wait_until

pytestmark = pytest.mark.integration

WINDOW = 5


def write_pipeline(tmp_path: Path, prefix: str, **settings: object) -> Path:
    lines = [f'topic_prefix: "{prefix}"', "partitions: 3"]
    lines += [f"{k}: {v}" for k, v in settings.items()]
    lines += [
        "stages:",
        "  smooth:",
        "    input: perf.raw",
        "    outputs: [perf.smoothed]",
        "    operators:",
        "      - type: sliding_mean",
        f"        window: {WINDOW}",
    ]
    path = tmp_path / "pipeline.yaml"
    path.write_text("\n".join(lines) + "\n")
    return path


def make_samples(n_nodes: int, steps: int, seed: int = 0) -> list[dict]:
    rng = np.random.default_rng(seed)
    out = []
    for t in range(steps):
        for p in range(n_nodes):
            metrics: dict[str, float | None] = {
                f"m{j}": float(np.round(rng.normal(100 * (j + 1), 10), 6)) for j in range(12)
            }
            if rng.random() < 0.05:
                metrics["m3"] = None
            out.append({"ts": 1e9 + t, "node": f"node{p}", "job": "j1", "seq": t, "metrics": metrics})
    return out


def expected_means(samples: list[dict]) -> dict[tuple[str, int], dict[str, float | None]]:
    """Direct numpy computation of the sliding mean per node (in seq order)."""
    by_node: dict[str, list[dict]] = {}
    for s in samples:
        by_node.setdefault(s["node"], []).append(s)
    result = {}
    for node, rows in by_node.items():
        names = list(rows[0]["metrics"])
        mat = np.array([[np.nan if r["metrics"][m] is None else r["metrics"][m] for m in names] for r in rows])
        for i, r in enumerate(rows):
            win = mat[max(0, i - WINDOW + 1) : i + 1]
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)  # all-missing column -> NaN
                means = np.nanmean(win, axis=0)
            result[(node, r["seq"])] = {
                m: (None if np.isnan(v) else float(v)) for m, v in zip(names, means, strict=False)
            }
    return result


def assert_close(got: dict[str, float | None], want: dict[str, float | None]) -> None:
    assert got.keys() == want.keys()
    for k, w in want.items():
        g = got[k]
        assert (g is None) == (w is None), k
        if w is not None:
            assert g == pytest.approx(w, rel=1e-12)


def test_samples_through_the_smooth_stage_have_correct_values(kafka: dict, prefix: str, tmp_path: Path) -> None:
    cfg = load_pipeline(write_pipeline(tmp_path, prefix, commit_interval_s=0.2))
    create_pipeline_topics(cfg, kafka)
    samples = make_samples(n_nodes=8, steps=250)
    runner = StageRunner(cfg.stage("smooth"), cfg, kafka, embedded=True)
    thread = run_in_thread(runner)
    assert publish_samples(kafka, cfg.topic("perf.raw"), samples) == len(samples)
    out = read_topic(kafka, cfg.topic("perf.smoothed"), lambda r: len(r) >= len(samples))
    runner.stop()
    thread.join(20)
    assert len(out) == len(samples)
    want = expected_means(samples)
    for rec in out:
        assert_close(rec["metrics"], want[(rec["node"], rec["seq"])])
        assert rec["warm"] == (rec["seq"] >= WINDOW - 1)
    assert runner.stats.records_in == runner.stats.records_out == len(samples)
    assert runner.stats.dead_letters == 0 and runner.stats.commits >= 1


def test_malformed_records_go_to_the_dead_letter_topic(kafka: dict, prefix: str, tmp_path: Path) -> None:
    from confluent_kafka import Producer

    cfg = load_pipeline(write_pipeline(tmp_path, prefix, commit_interval_s=0.2))
    create_pipeline_topics(cfg, kafka)
    good = make_samples(n_nodes=4, steps=50)
    bad = [
        b"not json at all",
        b'{"ts": "yesterday", "node": "n", "metrics": {}}',
        b'{"ts": 1, "node": "n", "metrics": {"cpu": "NaN"}}',
        b"[]",
        b'{"ts": 1, "metrics": {}}',
    ]
    runner = StageRunner(cfg.stage("smooth"), cfg, kafka, embedded=True)
    thread = run_in_thread(runner)
    p = Producer(kafka)
    for i, s in enumerate(good):
        p.produce(cfg.topic("perf.raw"), orjson.dumps(s), s["node"].encode())
        if i % 40 == 0:
            p.produce(cfg.topic("perf.raw"), bad[(i // 40) % len(bad)], s["node"].encode())
    p.flush(30)
    n_bad = len(range(0, len(good), 40))
    out = read_topic(kafka, cfg.topic("perf.smoothed"), lambda r: len(r) >= len(good))
    dead = read_topic(kafka, cfg.topic("perf.deadletter"), lambda r: len(r) >= n_bad)
    runner.stop()
    thread.join(20)
    assert len(out) == len(good) and len(dead) == n_bad
    assert runner.stats.records_in == runner.stats.records_out + runner.stats.dead_letters
    assert {(r["node"], r["seq"]) for r in out} == {(s["node"], s["seq"]) for s in good}
    for d in dead:
        assert d["stage"] == "smooth" and d["topic"] == cfg.topic("perf.raw")
        assert base64.b64decode(d["value"]) in bad
        assert d["reason"]
    # the smoothing ignored the bad records: values are exactly those of the good stream
    want = expected_means(good)
    for rec in out:
        assert_close(rec["metrics"], want[(rec["node"], rec["seq"])])


class _Gated(SlidingMean):
    """A sliding mean whose first update waits until the test opens the gate."""

    entered = threading.Event()
    gate = threading.Event()

    def update(self, batch: Batch) -> Batch:
        type(self).entered.set()
        assert type(self).gate.wait(60), "the test never opened the gate"
        return super().update(batch)


def test_records_count_as_in_only_once_their_outputs_are_sent(
    kafka: dict, prefix: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`perfsift run` ends, and reads the operators' summaries, when every stage has counted every
    record in: so a record under way through the chain must not be counted yet (a race once let the
    contract summary miss the last batch)."""
    monkeypatch.setitem(OPERATORS, "gated_mean", _Gated)
    path = write_pipeline(tmp_path, prefix)
    path.write_text(path.read_text().replace("type: sliding_mean", "type: gated_mean"))
    cfg = load_pipeline(path)
    create_pipeline_topics(cfg, kafka)
    samples = make_samples(n_nodes=3, steps=40)
    runner = StageRunner(cfg.stage("smooth"), cfg, kafka, embedded=True)
    thread = run_in_thread(runner)
    try:
        publish_samples(kafka, cfg.topic("perf.raw"), samples)
        assert _Gated.entered.wait(60)
        time.sleep(0.5)  # the loop is held inside the chain: nothing may count as processed
        assert runner.stats.records_in == runner.stats.records_out == runner.stats.bytes_in == 0
        _Gated.gate.set()
        out = read_topic(kafka, cfg.topic("perf.smoothed"), lambda r: len(r) >= len(samples))
        wait_until(lambda: runner.stats.records_in >= len(samples), 10, 0.05)
    finally:
        _Gated.gate.set()
        runner.stop()
        thread.join(30)
    assert len(out) == runner.stats.records_in == runner.stats.records_out == len(samples)


def start_worker(config: Path, bootstrap: str, log: Path, http_port: int = 0) -> subprocess.Popen[bytes]:
    cmd = [sys.executable, "-m", "perfsift", "worker", "smooth", "--config", str(config), "--bootstrap", bootstrap,
           "--http-host", "127.0.0.1", "--http-port", str(http_port)]  # fmt: skip
    return subprocess.Popen(
        cmd, stdout=log.open("ab"), stderr=subprocess.STDOUT, env={**os.environ, "PYTHONUNBUFFERED": "1"}
    )


def wait_for_partitions(port: int, worker: subprocess.Popen[bytes], log: Path, timeout: float = 60) -> None:
    """Until the worker's /metrics reports assigned input partitions (it has joined its group)."""

    def assigned() -> bool:
        assert worker.poll() is None, log.read_text()[-3000:]
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as r:
                text = r.read().decode()
        except OSError:
            return False
        return re.search(r"^perfsift_assigned_partitions\{[^}]*\} [1-9]", text, re.M) is not None

    assert wait_until(assigned, timeout, 0.2), (
        f"no partitions assigned within {timeout} s; log:\n{log.read_text()[-3000:]}"
    )


def publish_paced(kafka: dict, topic: str, samples: list[dict], rate: float) -> threading.Thread:
    """Publish in the background at about ``rate`` samples/s, so a kill lands mid-stream."""

    def run() -> None:
        step = max(1, int(rate / 20))
        for i in range(0, len(samples), step):
            publish_samples(kafka, topic, samples[i : i + step])
            time.sleep(step / rate)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


def test_worker_killed_with_sigkill_loses_no_sample(kafka: dict, prefix: str, tmp_path: Path) -> None:
    """kill -9 mid-stream, restart: every (node, seq) arrives, and - because the restarted worker
    resumes from its state snapshot - every output, duplicates included, has the exact value."""
    config = write_pipeline(tmp_path, prefix, commit_interval_s=0.2, batch_size=300)
    cfg = load_pipeline(config)
    create_pipeline_topics(cfg, kafka)
    samples = make_samples(n_nodes=6, steps=1000, seed=5)
    log = tmp_path / "worker.log"
    port = free_port()
    worker = start_worker(config, kafka["bootstrap.servers"], log, port)
    wait_for_partitions(port, worker, log)  # so the kill below lands while the publisher still runs
    publisher = publish_paced(kafka, cfg.topic("perf.raw"), samples, rate=2000)
    read_topic(kafka, cfg.topic("perf.smoothed"), lambda r: len(r) >= len(samples) // 4, timeout=60)
    worker.send_signal(signal.SIGKILL)
    worker.wait(10)
    assert publisher.is_alive(), "the stream ended before the kill; publish more slowly"
    worker = start_worker(config, kafka["bootstrap.servers"], log)
    want = expected_means(samples)
    try:
        out = read_topic(
            kafka, cfg.topic("perf.smoothed"), lambda r: {(x["node"], x["seq"]) for x in r} >= want.keys(), timeout=120
        )
    finally:
        worker.send_signal(signal.SIGTERM)
        code = worker.wait(30)
        publisher.join(30)
    seen = {(r["node"], r["seq"]) for r in out}
    assert seen == set(want), f"missing {len(set(want) - seen)} samples; log:\n{log.read_text()[-3000:]}"
    for rec in out:
        assert_close(rec["metrics"], want[(rec["node"], rec["seq"])])
    assert len(out) - len(seen) < len(samples)  # duplicates: only records after the last commit
    assert code == 0  # SIGTERM drains, commits and exits cleanly
    stats = orjson.loads(log.read_text().strip().splitlines()[-1].replace("\n", ""))
    assert stats["restored_partitions"] >= 1


def test_exactly_once_mode_commits_outputs_state_and_offsets_in_transactions(
    kafka: dict, prefix: str, tmp_path: Path
) -> None:
    """guarantee: exactly_once on the embedded broker: outputs are visible to read_committed readers
    only after a commit, and a restarted worker resumes from the snapshot in the same transaction."""
    cfg = load_pipeline(write_pipeline(tmp_path, prefix, commit_interval_s=0.2, guarantee="exactly_once"))
    create_pipeline_topics(cfg, kafka)
    samples = make_samples(n_nodes=4, steps=200)
    first, second = samples[: len(samples) // 2], samples[len(samples) // 2 :]
    committed = {**kafka, "isolation.level": "read_committed"}
    runner = StageRunner(cfg.stage("smooth"), cfg, kafka, embedded=True)
    assert runner.exactly_once
    thread = run_in_thread(runner)
    publish_samples(kafka, cfg.topic("perf.raw"), first)
    read_topic(committed, cfg.topic("perf.smoothed"), lambda r: len(r) >= len(first))
    runner.stop()
    thread.join(30)
    runner = StageRunner(cfg.stage("smooth"), cfg, kafka, embedded=True)
    thread = run_in_thread(runner)
    publish_samples(kafka, cfg.topic("perf.raw"), second)
    out = read_topic(committed, cfg.topic("perf.smoothed"), lambda r: len(r) >= len(samples))
    runner.stop()
    thread.join(30)
    assert len(out) == len(samples)  # no duplicates
    assert runner.stats.restored_partitions >= 1
    want = expected_means(samples)
    for rec in out:
        assert_close(rec["metrics"], want[(rec["node"], rec["seq"])])
