"""``perfsift run --bootstrap`` beside a ``perfsift worker`` of the same stage, on the embedded
broker, as an operator would start them: they join one consumer group (one assignment strategy,
chosen by the broker, not by the command) and share the input's partitions; SIGTERM ends ``run``
and every stage process it started within ``--grace``, with the offsets of what was processed
committed; a member that names another strategy stops with a clear error."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import orjson
import psutil
from confluent_kafka import Consumer, TopicPartition
from perfsift.producers.synth import spmd
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import wait_until

GRACE = 20.0


def _cli(*args: str, log: Path) -> subprocess.Popen[bytes]:
    fh = log.open("wb")
    return subprocess.Popen([sys.executable, "-m", "perfsift", *args], stdout=fh, stderr=subprocess.STDOUT)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()
    except OSError:
        return 0, ""


def _metric(port: int, name: str, **labels: str) -> float | None:
    status, text = _get(f"http://127.0.0.1:{port}/metrics")
    if status != 200:
        return None
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()):
                return float(s.value)
    return None


def _committed(kafka: dict[str, str], group: str, topic: str, partitions: int) -> int:
    c = Consumer({**kafka, "group.id": group, "enable.auto.commit": False})
    try:
        got = c.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=10)
    finally:
        c.close()
    return sum(max(tp.offset, 0) for tp in got)


def test_run_and_a_worker_share_a_group_and_sigterm_stops_run_cleanly(
    kafka: dict[str, str], prefix: str, tmp_path: Path
) -> None:
    bs = kafka["bootstrap.servers"]
    samples, _ = spmd("sweep3d", nodes=8, duration=120, seed=5, job="j1")
    trace = tmp_path / "t.jsonl"
    trace.write_bytes(b"".join(orjson.dumps(s) + b"\n" for s in samples))
    common = ["--bootstrap", bs, "--set", f"topic_prefix={prefix}"]
    port = _free_port()
    worker = _cli(
        "worker", "node", *common, "--http-port", str(port), "--http-host", "127.0.0.1", log=tmp_path / "worker.log"
    )
    run = None
    try:
        assert wait_until(lambda: _get(f"http://127.0.0.1:{port}/readyz")[0] == 200, 120), (
            tmp_path / "worker.log"
        ).read_text()[-3000:]
        summary = tmp_path / "summary.json"
        run = _cli(
            "run",
            *common,
            "--trace",
            str(trace),
            "--follow",
            "--no-report",
            "--grace",
            str(GRACE),
            "--summary-json",
            str(summary),
            log=tmp_path / "run.log",
        )
        group, raw = f"{prefix}perfsift.node", f"{prefix}perf.raw"
        # every published sample processed and committed by the group's two members
        assert wait_until(lambda: _committed(kafka, group, raw, 4) >= len(samples), 180, 1.0), (
            tmp_path / "run.log"
        ).read_text()[-3000:]
        # both members own partitions: the worker read some of the samples, the run's node stage the
        # rest (librdkafka's group_assigned_partitions statistic lags by its interval)
        worker_in = _metric(port, "perfsift_records_in_total", stage="node")
        assert worker_in is not None and 0 < worker_in < len(samples)
        log = (tmp_path / "run.log").read_text() + (tmp_path / "worker.log").read_text()
        assert "Inconsistent group protocol" not in log

        children = psutil.Process(run.pid).children(recursive=True)
        stage_procs = [c for c in children if "spawn_main" in " ".join(c.cmdline())]
        assert len(stage_procs) == 2  # node and select (besides multiprocessing's resource tracker)
        t0 = time.monotonic()
        run.send_signal(signal.SIGTERM)
        run.wait(GRACE + 15)
        took = time.monotonic() - t0
        assert run.returncode == 0, (tmp_path / "run.log").read_text()[-3000:]
        assert took < GRACE + 10
        # the stage processes were joined before run exited; the resource tracker follows on its
        # pipe's end: nothing orphaned
        assert [c for c in stage_procs if c.is_running() and c.status() != psutil.STATUS_ZOMBIE] == []
        _, alive = psutil.wait_procs(children, timeout=5)
        assert [c.cmdline() for c in alive if c.status() != psutil.STATUS_ZOMBIE] == []
        stages = {s["stage"]: s for s in json.loads(summary.read_text())["stages"]}
        # what each member read is what the group committed: nothing processed and left uncommitted
        assert stages["node"]["records_in"] + worker_in == _committed(kafka, group, raw, 4) == len(samples)
        assert stages["node"]["records_in"] > 0
    finally:
        for p in (run, worker):
            if p is not None and p.poll() is None:
                p.send_signal(signal.SIGTERM)
                try:
                    p.wait(GRACE + 10)
                except subprocess.TimeoutExpired:
                    p.kill()
    assert worker.returncode == 0


def test_a_member_with_another_assignment_strategy_stops_with_a_clear_error(
    kafka: dict[str, str], prefix: str, tmp_path: Path
) -> None:
    bs = kafka["bootstrap.servers"]
    common = ["--bootstrap", bs, "--set", f"topic_prefix={prefix}", "--http-host", "127.0.0.1"]
    port = _free_port()
    first = _cli("worker", "node", *common, "--http-port", str(port), log=tmp_path / "first.log")
    try:
        assert wait_until(lambda: _get(f"http://127.0.0.1:{port}/readyz")[0] == 200, 120), (
            tmp_path / "first.log"
        ).read_text()[-3000:]
        strategy = "partition.assignment.strategy=cooperative-sticky"
        other = _cli("worker", "node", *common, "--http-port", "0", "-X", strategy, log=tmp_path / "other.log")
        other.wait(300)
        text = (tmp_path / "other.log").read_text()
        assert other.returncode == 1, text[-3000:]
        assert "another partition assignment strategy" in text and f"{prefix}perfsift.node" in text
    finally:
        if first.poll() is None:
            os.kill(first.pid, signal.SIGTERM)
            first.wait(40)
