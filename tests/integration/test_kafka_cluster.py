"""perfsift on a three-node Apache Kafka 4.x cluster (tests/kafka_cluster.py; replication factor 3,
``min.insync.replicas`` 2): exactly-once under kill -9, KIP-848, lag and /metrics, SASL_SSL with ACLs.
The faults that need the cluster's brokers themselves (broker loss, cooperative scaling, an aborted
transaction) are in test_kafka_cluster_faults.py: with ``--dist loadfile`` each file goes to one
xdist worker with a cluster of its own (session fixture), so the two halves run side by side.

The kill -9 test compares a disturbed run with an uninterrupted one of the same pipeline and input,
streamed at the same time under another topic prefix (tests/kafka_cluster_io.py): a read_committed
reader must see in the disturbed run the node stage's records of the uninterrupted one, each once,
with the same values, and the select stage's keys, each once (OUTPUTS says why). The KIP-848 test
checks each smoothed sample once against a direct computation of the sliding mean.
"""

from __future__ import annotations

import time
import uuid
from collections import Counter
from pathlib import Path

import orjson
import pytest
from confluent_kafka import Producer
from perfsift.streams.clients import create_pipeline_topics
from perfsift.streams.config import load_pipeline
from perfsift.streams.runner import StageRunner, run_in_thread

from tests.conftest import wait_until
from tests.kafka_cluster import KafkaCluster
from tests.kafka_cluster_io import (
    DURATION,
    JOBS,
    Worker,
    committed_offsets,
    diff,
    output_offsets,
    payload_bytes,
    read_committed,
    run_pair,
    wait_growth,
    wait_progress,
)

pytestmark = pytest.mark.kafka_cluster


def test_exactly_once_by_default_through_two_kill9s(kafka_cluster: KafkaCluster, tmp_path: Path) -> None:
    """guarantee auto -> exactly_once on Apache Kafka; the node stage killed twice and the select
    stage once, mid-stream: every record once, as in the uninterrupted run (OUTPUTS)."""
    total = len(JOBS) * 6 * DURATION

    kills: list[bool] = []
    waits: list[float] = []  # s until the worker about to be killed (restarted, but for the first) committed

    def disturb(workers: list[Worker], progress: list[int]) -> None:
        node, select = workers
        probes = {w: committed_offsets(kafka_cluster.bootstrap, w) for w in workers}
        for share, w in ((0.15, node), (0.35, select), (0.55, node)):
            wait_progress(progress, int(share * total))
            t = time.monotonic()
            wait_growth(probes[w], 60)  # the (restarted) worker commits before it is killed
            waits.append(round(time.monotonic() - t, 1))
            kills.append(progress[0] < total)
            w.kill9_and_restart()

    # 20 samples/s (72 s of stream): three kills, each after the worker committed (a restarted one
    # commits 8-23 s after its kill on a loaded 2-core machine: process start, group join, replay)
    got, logs = run_pair(kafka_cluster, tmp_path, disturb, rate=20)
    print(f"kill -9: s until the next worker to kill committed {waits}")
    assert all("(exactly_once, group" in f.read_text() for f in tmp_path.glob("*.log")), logs
    for topic, (want, seen) in got.items():
        assert sum(want.values()) > 0, topic
        assert max(want.values()) == 1, f"{topic}: the uninterrupted run has duplicates"
        assert seen == want, f"{topic}: {diff(want, seen)}\n{logs}"
    assert kills == [True, True, True], "a kill came after the end of the stream"


def test_kip848_consumer_group_protocol_runs_a_stage(kafka_cluster: KafkaCluster, tmp_path: Path) -> None:
    """``group.protocol: consumer`` (KIP-848, broker-side assignment): two runners share the six
    partitions and every smoothed sample arrives once with the uninterrupted values."""
    from tests.integration.test_stage import assert_close, expected_means, make_samples
    from tests.integration.test_stage import write_pipeline as smooth_pipeline

    path = smooth_pipeline(tmp_path, f"k{uuid.uuid4().hex[:6]}.", commit_interval_s=0.2)
    text = path.read_text().replace("partitions: 3", "partitions: 6\nreplication: 3")
    path.write_text(text + "kafka:\n  group.protocol: consumer\n")
    cfg = load_pipeline(path)
    props = {"bootstrap.servers": kafka_cluster.bootstrap}
    create_pipeline_topics(cfg, props)
    failures: list[BaseException] = []
    runners = [StageRunner(cfg.stage("smooth"), cfg, props) for _ in range(2)]
    threads = [run_in_thread(r, on_error=failures.append) for r in runners]
    try:

        def shared() -> bool:  # all six owned, by both runners
            return sum(len(r.assigned()) for r in runners) == 6 and all(r.assigned() for r in runners)

        split = wait_until(lambda: shared() or bool(failures), 60)
        assert not failures, failures
        assert split, [r.assigned() for r in runners]
        samples = make_samples(n_nodes=12, steps=60)
        p = Producer({**props, "enable.idempotence": True})
        for s in samples:
            p.produce(cfg.topic("perf.raw"), orjson.dumps(s), s["node"].encode())
        assert p.flush(30) == 0
        assert wait_until(lambda: sum(r.stats.records_in for r in runners) >= len(samples) or bool(failures), 60)
        assert all(r.cooperative for r in runners)
    finally:
        for r in runners:
            r.stop()
        for t in threads:
            t.join(30)
    assert not failures, failures
    out = read_committed(kafka_cluster.bootstrap, cfg.topic("perf.smoothed"))
    assert Counter((r["node"], r["seq"]) for r in out) == Counter((s["node"], s["seq"]) for s in samples)
    want = expected_means(samples)
    for r in out:
        assert_close(r["metrics"], want[(r["node"], r["seq"])])


def test_lag_and_metrics_read_true_values_on_the_cluster(kafka_cluster: KafkaCluster, tmp_path: Path) -> None:
    """A stage's /metrics, scraped after it was stopped mid-stream, against the broker's own
    offsets: ``perfsift_consumer_lag`` per partition is the high watermark minus the group's
    committed offset, ``perfsift_records_in_total`` the committed offsets' sum (a fresh group),
    ``perfsift_topic_bytes_read_total`` the bytes of the input records below them and
    ``perfsift_topic_bytes_written_total`` of the output the bytes a read_committed reader gets."""
    import urllib.request

    from confluent_kafka import Consumer, TopicPartition
    from perfsift.producers.publish import publish_samples
    from perfsift.streams.http import HealthServer
    from prometheus_client.parser import text_string_to_metric_families

    from tests.integration.test_stage import make_samples, write_pipeline

    kafka = {"bootstrap.servers": kafka_cluster.bootstrap}
    cfg = load_pipeline(
        write_pipeline(tmp_path, f"m{uuid.uuid4().hex[:6]}.", commit_interval_s=0.2, batch_size=100, replication=3)
    )
    create_pipeline_topics(cfg, kafka)
    raw, smoothed = cfg.topic("perf.raw"), cfg.topic("perf.smoothed")
    publish_samples(kafka, raw, make_samples(n_nodes=12, steps=1000))
    runner = StageRunner(cfg.stage("smooth"), cfg, kafka)
    health = HealthServer(runner, 0, "127.0.0.1")
    health.start()
    failures: list[BaseException] = []
    thread = run_in_thread(runner, on_error=failures.append)
    try:
        # a partition has a lag once the stage read it (librdkafka hands out a fetched partition whole
        # before the next): stop as soon as all three have one, mid-way through the last
        assert wait_until(lambda: len(runner.stats.lag) == 3 or bool(failures), 120)
        runner.stop()
        thread.join(60)
        assert not failures, failures
        with urllib.request.urlopen(f"http://127.0.0.1:{health.port}/metrics", timeout=10) as r:
            text = r.read().decode()
    finally:
        runner.stop()
        health.stop()
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for f in text_string_to_metric_families(text)
        for s in f.samples
    }

    def metric(name: str, **labels: str) -> float:
        key = (name, tuple(sorted({"stage": "smooth", **labels}.items())))
        assert key in samples, (key, [k for k in samples if k[0] == name], runner.stats.lag, runner.stats.commits)
        return samples[key]

    probe = Consumer({**kafka, "group.id": runner.group_id, "enable.auto.commit": False})
    committed = {c.partition: c.offset for c in probe.committed([TopicPartition(raw, p) for p in range(3)], 30)}
    high = {p: probe.get_watermark_offsets(TopicPartition(raw, p), timeout=10)[1] for p in range(3)}
    probe.close()
    lag = {p: metric("perfsift_consumer_lag", partition=str(p)) for p in range(3)}
    assert lag == {p: high[p] - committed[p] for p in range(3)}, (lag, high, committed)
    assert sum(lag.values()) > 0, "the stage was stopped after it had read everything: no lag to check"
    assert metric("perfsift_records_in_total") == sum(committed.values())

    read = metric("perfsift_topic_bytes_read_total", topic="perf.raw", kind="payload")
    assert read == payload_bytes(kafka_cluster.bootstrap, raw, committed, "read_uncommitted")
    written = metric("perfsift_topic_bytes_written_total", topic="perf.smoothed", kind="payload")
    assert written == payload_bytes(kafka_cluster.bootstrap, smoothed, None, "read_committed") > 0


def test_sasl_ssl_listener_with_the_prod_overlays_acls(kafka_cluster: KafkaCluster, tmp_path: Path) -> None:
    """The cluster's SASL_SSL listener (SCRAM-SHA-512, the fixture's CA, StandardAuthorizer) with the
    prod overlay's KafkaUser ACLs (tests/kafka_cluster_security.py): ``perfsift worker`` configured
    by PERFSIFT_KAFKA_* runs the stage exactly once; without credentials, with a wrong password, or
    as a user whose ACLs lack the output topics it stops with one line (exit 1) and writes nothing."""
    import os
    import subprocess
    import sys

    from confluent_kafka.admin import AdminClient
    from perfsift.producers.publish import publish_samples

    from tests.integration.test_stage import make_samples, write_pipeline
    from tests.kafka_cluster_security import add_user, client_properties, grant_overlay_acls

    prefix = f"s{uuid.uuid4().hex[:6]}."
    path = write_pipeline(tmp_path, prefix, commit_interval_s=0.2, replication=3)
    cfg = load_pipeline(path)
    plain = {"bootstrap.servers": kafka_cluster.bootstrap}
    create_pipeline_topics(cfg, plain)
    admin = AdminClient({**plain})
    for user in ("perfsift", "narrow"):
        add_user(admin, user, "s3cret")
    grant_overlay_acls(admin, "perfsift", prefix)
    grant_overlay_acls(admin, "narrow", prefix, topic_prefix="perf.raw")  # reads its input, writes nothing
    samples = make_samples(n_nodes=4, steps=50)
    publish_samples(plain, cfg.topic("perf.raw"), samples)

    def worker(user: str | None, password: str | None) -> tuple[int, list[str]]:
        props = client_properties(kafka_cluster.secure_bootstrap, kafka_cluster.ca, user, password)
        env = {f"PERFSIFT_KAFKA_{k.upper().replace('.', '_')}": v for k, v in props.items() if k != "bootstrap.servers"}
        args = ["worker", "smooth", "--config", str(path), "--http-port", "0", "--idle-exit", "4"]
        r = subprocess.run(
            [sys.executable, "-m", "perfsift", *args, "--bootstrap", kafka_cluster.secure_bootstrap],
            env={**os.environ, **env},
            capture_output=True,
            text=True,
            timeout=120,
        )
        return r.returncode, [line for line in (r.stdout + r.stderr).splitlines() if line.strip()]

    refused: dict[tuple[str | None, str | None], str] = {
        (None, None): "cannot talk to Kafka",
        ("perfsift", "wrong"): "Kafka refused the credentials (user 'perfsift' over SASL_SSL)",
        ("narrow", "s3cret"): "Kafka's ACLs refuse user 'narrow' over SASL_SSL a topic",
    }
    for (name, password), want in refused.items():
        code, lines = worker(name, password)
        assert code == 1 and len(lines) == 1 and lines[0].startswith(f"error: {want}"), (name, password, lines)
    outputs = [cfg.topic(t) for t in ("perf.smoothed", "perf.state", "perf.deadletter")]
    probe = admin.list_topics(timeout=10)
    assert all(t in probe.topics for t in outputs)
    assert [output_offsets(kafka_cluster.bootstrap, t)() for t in outputs] == [0, 0, 0], "a refused worker wrote"
    code, lines = worker("perfsift", "s3cret")
    assert code == 0, lines
    assert any("(exactly_once, group" in line for line in lines), lines
    out = read_committed(kafka_cluster.bootstrap, cfg.topic("perf.smoothed"))
    assert Counter((r["node"], r["seq"]) for r in out) == Counter((s["node"], s["seq"]) for s in samples)
