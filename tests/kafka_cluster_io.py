"""Helpers of the Apache Kafka cluster tests (tests/integration/test_kafka_cluster.py and
test_kafka_cluster_faults.py): the pipeline they run, ``perfsift worker`` processes, a paced
publisher, a read_committed reader, and the side-by-side run of an uninterrupted and a disturbed
pipeline."""

from __future__ import annotations

import itertools  # noqa: F401
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from perfsift.producers.synth import spmd
from perfsift.schemas.detect import decode_any
from perfsift.streams.clients import assign_from_start, consumer_settings, create_pipeline_topics, where
from perfsift.streams.config import PipelineConfig, load_pipeline

from tests.kafka_cluster import KafkaCluster

JOBS = ("alpha", "beta")
DURATION = 120  # s of trace: 1,440 samples, 48 s at RATE
RATE = 30  # samples/s published
#: what is compared per output topic: the whole record (the node stage's outputs, per node and
#: deterministic), or only its key (the select stage's: a reduce operator's periods and selections
#: depend on the order in which the node stage's means of different nodes reach a job's partition,
#: which differs between two live runs, so its values are no oracle; its keys are: each once)
OUTPUTS: dict[str, tuple[str, ...] | None] = {
    "perf.forecast": None,
    "perf.smoothed.byjob": None,
    "perf.reduced": ("job", "node", "seq"),
    "perf.selection": ("job", "period_start"),
}


def write_pipeline(tmp_path: Path, prefix: str, extra: str = "") -> PipelineConfig:
    """node (sliding mean, forecast) -> select (reduce). A period of the select stage closes once
    every node has passed its end, except a job's first, which closes only when a node is ``slack``
    rows past its end (pursuit). Each node sends the select stage 24 rows (one per 5 s of trace), 4
    a period: slack 12 closes the first period at 80 s of trace, and is more than the lead one node
    can take over another while a restarted node stage catches up partition by partition (a
    period closed by slack would then hold other rows than in the uninterrupted run)."""
    text = f"""
topic_prefix: "{prefix}"
partitions: 6
replication: 3
commit_interval_s: 0.5
batch_size: 500
snapshot_share: 0.05
stages:
  node:
    input: perf.raw
    outputs: [perf.forecast]
    operators:
      - type: sliding_mean
        window: 5
        emit_every: 5
        publish: [perf.smoothed.byjob]
      - type: forecast
        metrics: [cpu_user, pkts_in]
  select:
    input: perf.smoothed.byjob
    outputs: [perf.reduced, perf.selection, perf.control]
    operators:
      - type: reduce
        pursuit: {{period: 20, window: 1, restarts: 3, slack: 12}}
        full_every: 4
{extra}"""
    path = tmp_path / f"{prefix.strip('.')}.yaml"
    path.write_text(text)
    return load_pipeline(path)


def trace(duration: int = 150, nodes: int = 6) -> list[dict]:
    """Two jobs, interleaved in time as live producers would send them."""
    rows: list[dict] = []
    for j, job in enumerate(JOBS):
        rows += spmd("sweep3d", nodes=nodes, duration=duration, seed=20 + j, job=job)[0]
    rows.sort(key=lambda r: (r["ts"], r["job"], r["node"]))
    return rows


class Worker:
    """``perfsift worker STAGE`` in a child process (what a Kubernetes pod runs)."""

    def __init__(self, stage: str, cfg: PipelineConfig, bootstrap: str, log: Path, env: dict[str, str] | None = None):
        self.args = [
            sys.executable,
            "-m",
            "perfsift",
            "worker",
            stage,
            "--config",
            str(cfg.source),
            "--bootstrap",
            bootstrap,
            "--http-port",
            "0",
        ]
        # one name per worker that a restart keeps, as a pod's (a container restarted in its pod)
        name = {"PERFSIFT_INSTANCE": f"{stage}-{uuid.uuid4().hex[:6]}", "PERFSIFT_LOG_LEVEL": "info"}
        self.log, self.env = log, {**os.environ, "PYTHONUNBUFFERED": "1", **name, **(env or {})}
        self.proc = self._start()

    def _start(self) -> subprocess.Popen[bytes]:
        return subprocess.Popen(self.args, stdout=self.log.open("ab"), stderr=subprocess.STDOUT, env=self.env)

    def kill9_and_restart(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)
        self.proc = self._start()

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(60)
        except subprocess.TimeoutExpired:  # stuck: every thread's stack into its log (the failure shows it)
            self.proc.send_signal(signal.SIGUSR1)
            time.sleep(2)
            self.proc.kill()
            return -9


def publisher(
    bootstrap: str, topics: list[str], samples: list[dict], rate: float
) -> tuple[threading.Thread, list[int]]:
    """Publish ``samples`` keyed by node to every topic in ``topics`` at ``rate`` samples/s, in a
    thread (acks=all, idempotent: the producer itself adds no duplicate). ``progress[0]`` counts."""
    progress = [0]

    def run() -> None:
        p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "enable.idempotence": True, "log_level": 0})
        step = max(1, int(rate / 10))
        for i in range(0, len(samples), step):
            for s in samples[i : i + step]:
                body = orjson.dumps(s)
                for t in topics:
                    p.produce(t, body, s["node"].encode())
            p.poll(0)
            progress[0] = i + step
            time.sleep(0.1)
        assert p.flush(120) == 0

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, progress


def read_committed(bootstrap: str, topic: str) -> list[Any]:
    """Every committed record of ``topic`` up to the end of each partition (read_committed, no group)."""
    props = {"bootstrap.servers": bootstrap}
    c = Consumer(
        consumer_settings(props, f"check-{uuid.uuid4().hex[:8]}", "read_committed") | {"enable.partition.eof": True}
    )
    out: list[Any] = []
    try:
        parts = assign_from_start(c, topic)
        done: set[int] = set()
        deadline = time.monotonic() + 60
        while len(done) < len(parts) and time.monotonic() < deadline:
            for m in c.consume(5000, 0.5):
                err = m.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        done.add(m.partition())  # type: ignore[arg-type]
                    continue
                rec = decode_any(m.value()).record
                out.extend(rec) if isinstance(rec, list) else out.append(rec)
    finally:
        c.close()
    return out


def canonical(records: list[Any], key: tuple[str, ...] | None = None) -> Counter[bytes]:
    """The records (or their ``key`` fields) as a multiset of canonical JSON."""
    picked = records if key is None else [[r[k] for k in key] for r in records]
    return Counter(orjson.dumps(r, option=orjson.OPT_SORT_KEYS) for r in picked)


def settle(bootstrap: str, cfgs: list[PipelineConfig], timeout: float = 150.0) -> dict[str, list[Counter[bytes]]]:
    """Read the output topics of every run until they agree in size and stop growing (3 s)."""
    deadline = time.monotonic() + timeout
    last: dict[str, list[Counter[bytes]]] = {}
    stable_since = time.monotonic()
    while time.monotonic() < deadline:
        now = {t: [canonical(read_committed(bootstrap, c.topic(t)), k) for c in cfgs] for t, k in OUTPUTS.items()}
        sizes = {t: [sum(x.values()) for x in v] for t, v in now.items()}
        if sizes != {t: [sum(x.values()) for x in v] for t, v in last.items()}:
            stable_since = time.monotonic()
        last = now
        same = all(len(set(s)) == 1 for s in sizes.values())
        if same and time.monotonic() - stable_since > 3:
            break
        time.sleep(1)
    return last


def diff(a: Counter[bytes], b: Counter[bytes]) -> str:
    missing, extra = a - b, b - a
    return f"{sum(missing.values())} missing, {sum(extra.values())} extra; e.g. {list(missing)[:1]} {list(extra)[:1]}"


def run_pair(
    cluster: KafkaCluster,
    tmp_path: Path,
    disturb: Callable[[list[Worker], list[int]], None],
    duration: int = DURATION,
    rate: float = RATE,
) -> tuple[dict[str, list[Counter[bytes]]], str]:
    """The uninterrupted run (prefix ``u.``) and the disturbed one side by side; ``disturb`` gets
    the disturbed run's workers (node, select) and the publisher's progress."""
    tag = uuid.uuid4().hex[:6]
    cfgs = [write_pipeline(tmp_path, f"u{tag}."), write_pipeline(tmp_path, f"d{tag}.")]
    for c in cfgs:
        create_pipeline_topics(c, {"bootstrap.servers": cluster.bootstrap})
    workers = [
        [Worker(s, c, cluster.bootstrap, tmp_path / f"{c.topic_prefix}{s}.log") for s in ("node", "select")]
        for c in cfgs
    ]
    try:
        time.sleep(8)  # the groups join before data flows
        samples = trace(duration)
        thread, progress = publisher(cluster.bootstrap, [c.topic("perf.raw") for c in cfgs], samples, rate=rate)
        disturb(workers[1], progress)
        thread.join(300)
        got = settle(cluster.bootstrap, cfgs)
    finally:
        codes = [w.stop() for ws in workers for w in ws]
    logs = "\n".join(f.read_text()[-6000:] for f in tmp_path.glob("*.log"))  # with a stuck worker's stacks
    assert codes == [0, 0, 0, 0], logs
    return got, logs


def wait_progress(progress: list[int], n: int, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while progress[0] < n and time.monotonic() < deadline:
        time.sleep(0.1)


def prefix_of(w: Worker) -> str:
    return Path(w.args[w.args.index("--config") + 1]).stem + "."


def wait_growth(probe: Callable[[], int | None], timeout: float) -> None:
    """Until the probed offsets grow (the stage wrote and committed something)."""
    start = time.monotonic()
    first = now = probe()
    while time.monotonic() - start < timeout:
        now = probe()
        if first is None:
            first = now
        elif now is not None and now > first:
            return
        time.sleep(0.2)
    raise AssertionError(
        f"the stage wrote nothing from {time.strftime('%H:%M:%S')} - {timeout:.0f} s on "
        f"(its output's offsets: {first} then {now})"
    )


def output_offsets(bootstrap: str, topic: str) -> Callable[[], int | None]:
    """A probe of the sum of ``topic``'s high watermarks (None while a partition cannot be asked)."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"probe-{uuid.uuid4().hex[:6]}", "log_level": 0})
    parts = assign_from_start(c, topic)

    def probe() -> int | None:
        try:
            return sum(c.get_watermark_offsets(TopicPartition(topic, p), timeout=1)[1] for p in parts)
        except KafkaException:
            return None

    return probe


def committed_offsets(bootstrap: str, worker: Worker) -> Callable[[], int | None]:
    """A probe of the sum of the offsets ``worker``'s stage group committed on its input (None
    while they cannot be asked): a stage's progress. Its outputs are no measure of it: the select
    stage writes perf.reduced in bursts, at the start of a job (its first full periods)."""
    prefix, args = prefix_of(worker), worker.args
    stage = args[args.index("worker") + 1]
    topic = prefix + {"node": "perf.raw", "select": "perf.smoothed.byjob"}[stage]
    group = f"{prefix}perfsift.{stage}"
    c = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": group, "isolation.level": "read_uncommitted", "log_level": 0}
    )
    parts = [TopicPartition(topic, p) for p in range(6)]

    def probe() -> int | None:
        try:
            return sum(max(tp.offset, 0) for tp in c.committed(parts, timeout=5))
        except KafkaException:
            return None

    return probe


def payload_bytes(bootstrap: str, topic: str, until: dict[int, int] | None, isolation: str, parts: int = 3) -> int:
    """Bytes of the values of ``topic`` (``parts`` partitions) below ``until`` per partition (None: up to the end)."""
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"check-{uuid.uuid4().hex[:6]}",
            "isolation.level": isolation,
            "enable.partition.eof": True,
            "auto.offset.reset": "earliest",
        }
    )
    c.assign([TopicPartition(topic, p, 0) for p in range(parts)])
    total, done, deadline = 0, set[int](), time.monotonic() + 60
    while len(done) < parts and time.monotonic() < deadline:
        for m in c.consume(1000, 0.5):
            if m.error() is not None:
                done.add(m.partition() or 0)  # the end of a partition (EOF)
                continue
            _, p, offset = where(m)
            if until is None or offset < until[p]:
                total += len(m.value() or b"")
            if until is not None and offset >= until[p] - 1:
                done.add(p)
    c.close()
    assert len(done) == parts, f"{topic}: not read to the end in 60 s"
    return total
