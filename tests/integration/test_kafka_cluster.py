"""perfsift on a three-node Apache Kafka 4.x cluster (tests/kafka_cluster.py; replication factor 3,
``min.insync.replicas`` 2): exactly-once under kill -9, broker loss, cooperative-sticky scaling.

The kill -9 and broker-loss tests compare a disturbed run with an uninterrupted one of the same
pipeline and input, streamed at the same time under another topic prefix (tests/kafka_cluster_io.py):
a read_committed reader must see in the disturbed run the node stage's records of the uninterrupted
one, each once, with the same values, and the select stage's keys, each once (OUTPUTS says why).
The scaling, KIP-848 and abort tests check each smoothed sample once against a direct computation
of the sliding mean. All share one cluster (session fixture), and this one file keeps them on one
xdist worker (--dist loadfile).
"""

from __future__ import annotations

import itertools
import threading
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

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
    prefix_of,
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


def test_broker_loss_mid_stream_loses_nothing_and_duplicates_nothing(
    kafka_cluster: KafkaCluster, tmp_path: Path
) -> None:
    """kill -9 the broker leading most of perf.raw's partitions mid-stream, bring it back: the
    stages keep going after a stall (measured: the longest time the node stage's output stood
    still), and the read_committed output equals the uninterrupted run's, each record once."""
    total = len(JOBS) * 6 * DURATION
    measured: dict[str, float] = {}

    def disturb(workers: list[Worker], progress: list[int]) -> None:
        prefix = prefix_of(workers[0])
        raw = f"{prefix}perf.raw"
        leaders = Counter(kafka_cluster.leaders(raw).values())
        victim = leaders.most_common(1)[0][0]
        probe = output_offsets(kafka_cluster.bootstrap, f"{prefix}perf.forecast")
        wait_progress(progress, int(0.3 * total))
        seen: list[tuple[float, int]] = []
        kafka_cluster.kill(victim)
        killed = time.monotonic()
        while time.monotonic() - killed < 40:
            v = probe()
            if v is not None:
                seen.append((time.monotonic(), v))
            time.sleep(0.2)
        grew = [t1 for (_, v0), (t1, v1) in itertools.pairwise(seen) if v1 > v0]
        assert grew, "the node stage never resumed after the broker loss"
        # the longest time the output stood still, from the kill on
        measured["stall_s"] = round(max(b - a for a, b in itertools.pairwise([killed, *grew])), 2)
        measured["victim_partitions"] = leaders[victim]
        kafka_cluster.start(victim)  # back on its old data
        measured["restart_s"] = time.monotonic() - killed

    got, logs = run_pair(kafka_cluster, tmp_path, disturb)
    print(f"broker loss: {measured}")
    for topic, (want, seen) in got.items():
        assert sum(want.values()) > 0, topic
        assert max(want.values()) == 1, f"{topic}: the uninterrupted run has duplicates"
        assert seen == want, f"{topic}: {diff(want, seen)}\n{logs}"
    assert measured["victim_partitions"] >= 2


def test_cooperative_scaling_1_2_3_2_keeps_unmoved_partitions_going(
    kafka_cluster: KafkaCluster, tmp_path: Path
) -> None:
    """Scale the smooth stage 1 -> 2 -> 3 -> 2 workers (cooperative-sticky, the default on a real
    cluster) under a steady stream: only the partitions that change owner are revoked, the others
    keep being processed (the longest gap between two advances of such a partition is measured),
    and every smoothed sample arrives once, with the values of one uninterrupted sliding mean."""
    from tests.integration.test_stage import assert_close, expected_means, make_samples
    from tests.integration.test_stage import write_pipeline as smooth_pipeline

    path = smooth_pipeline(tmp_path, f"s{uuid.uuid4().hex[:6]}.", commit_interval_s=0.2)
    path.write_text(path.read_text().replace("partitions: 3", "partitions: 6\nreplication: 3"))
    cfg = load_pipeline(path)
    props = {"bootstrap.servers": kafka_cluster.bootstrap}
    create_pipeline_topics(cfg, props)
    samples = make_samples(n_nodes=12, steps=3000)
    stop = threading.Event()
    sent = [0]

    def publish() -> None:  # 12 samples (one per node) every 0.1 s until stopped
        p = Producer({**props, "linger.ms": 5, "enable.idempotence": True})
        for i in range(0, len(samples), 12):
            if stop.is_set():
                break
            for s in samples[i : i + 12]:
                p.produce(cfg.topic("perf.raw"), orjson.dumps(s), s["node"].encode())
            sent[0] = i + 12
            p.poll(0)
            time.sleep(0.1)
        assert p.flush(60) == 0

    runners: list[StageRunner] = []
    threads: list[threading.Thread] = []
    failures: list[BaseException] = []
    advanced: dict[int, list[float]] = {p: [] for p in range(6)}  # when each partition's offset moved

    def watch() -> None:
        last: dict[int, int | None] = {}
        while not stop.is_set():
            now = time.monotonic()
            for r in list(runners):
                for (_, p), part in list(r._parts.items()):
                    if part.next_offset is not None and part.next_offset != last.get(p):
                        last[p] = part.next_offset
                        advanced[p].append(now)
            time.sleep(0.05)

    def owners() -> dict[int, int]:
        return {p: id(r) for r in runners for _, p in r.assigned()}

    def settled() -> bool:
        o = owners()
        return len(o) == 6 and sum(len(r.assigned()) for r in runners) == 6 and all(r.assigned() for r in runners)

    pub = threading.Thread(target=publish, daemon=True)
    watcher = threading.Thread(target=watch, daemon=True)
    gaps: list[float] = []  # per step, the longest gap of a partition that kept its owner
    moved = 0
    everyone: list[StageRunner] = []
    try:
        for k, change in enumerate(["add", "add", "add", "remove"]):
            before = owners()
            start = time.monotonic()
            if change == "add":
                runners.append(StageRunner(cfg.stage("smooth"), cfg, props))
                everyone.append(runners[-1])
                threads.append(run_in_thread(runners[-1], on_error=failures.append))
            else:
                runners[-1].stop()
                threads[-1].join(30)
                runners.pop()
                threads.pop()
            assert wait_until(lambda: settled() or bool(failures), 90), owners()
            assert not failures, failures
            if k == 0:
                pub.start()
                watcher.start()
                time.sleep(3)
                continue
            time.sleep(3)  # keep watching after the step
            end = time.monotonic()
            after = owners()
            moved += sum(1 for p in before if before[p] != after[p])
            kept = [p for p in before if before[p] == after[p]]
            assert kept, (before, after)
            gaps.append(
                max(
                    max(
                        b - a
                        for a, b in itertools.pairwise([start, *[t for t in advanced[p] if start <= t <= end], end])
                    )
                    for p in kept
                )
            )
        revoked = [r.stats.revoked_partitions for r in everyone]
        cooperative = [r.cooperative for r in everyone]
        guarantees = {r.guarantee for r in everyone}
        stop.set()
        pub.join(60)
        published = samples[: sent[0]]
        wanted = {(s["node"], s["seq"]) for s in published}
        smoothed = cfg.topic("perf.smoothed")

        # the two runners left take in the end of the stream before they stop
        def complete() -> bool:
            return {(r["node"], r["seq"]) for r in read_committed(kafka_cluster.bootstrap, smoothed)} >= wanted

        wait_until(complete, 90, interval=2)
    finally:
        stop.set()
        for r in runners:
            r.stop()
        for t in threads:
            t.join(30)
        pub.join(60)
    assert not failures, failures
    print(f"cooperative scaling: longest gap of an unmoved partition per step {[round(g, 2) for g in gaps]} s")
    out = read_committed(kafka_cluster.bootstrap, smoothed)
    keys = Counter((r["node"], r["seq"]) for r in out)
    assert set(keys) == wanted
    assert max(keys.values()) == 1  # exactly once
    want = expected_means(published)
    for r in out:
        assert_close(r["metrics"], want[(r["node"], r["seq"])])
    assert all(cooperative)
    assert guarantees == {"exactly_once"}
    assert sum(revoked) == moved < 3 * 6, (revoked, moved)  # eager would revoke all 6 at each step
    # no stop-the-world: the unmoved partitions were never revoked (above) and kept going; their gaps
    # (0.3-6.3 s seen on a loaded 2-core machine) include the new runner's warm-up in this process
    # (same interpreter lock) and the aborted transaction a generation change forces
    assert max(gaps) < 10.0, gaps


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


def test_aborted_transactions_rewind_to_the_last_commit(
    kafka_cluster: KafkaCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An exactly-once commit that Kafka asks to abort (ILLEGAL_GENERATION when a cooperative
    rebalance moves the group to a new generation) is aborted and every owned partition goes back
    to its last commit; a producer fenced mid-stream (another one took its transactional id: a fatal
    error, as after a transaction the coordinator timed out) is replaced and the stage goes on: with
    every other commit aborted and one fence, a read_committed reader sees each sample once, exact.
    (On the embedded broker a read_committed reader sees the aborted records too.)"""
    from perfsift.producers.publish import publish_samples
    from perfsift.streams import runner as runner_module

    from tests.conftest import read_topic
    from tests.integration.test_stage import assert_close, expected_means, make_samples, write_pipeline

    kafka = {"bootstrap.servers": kafka_cluster.bootstrap}
    prefix = f"a{uuid.uuid4().hex[:6]}."
    real = runner_module.commit_or_abort
    calls = {"n": 0, "aborted": 0}

    def every_other(producer: Any, consumer: Any, offsets: Any) -> bool:  # Kafka asks for an abort
        calls["n"] += 1
        if calls["n"] % 2 == 0:
            producer.abort_transaction(30)
            calls["aborted"] += 1
            return False
        return real(producer, consumer, offsets)

    monkeypatch.setattr(runner_module, "commit_or_abort", every_other)
    cfg = load_pipeline(
        write_pipeline(tmp_path, prefix, commit_interval_s=0.2, guarantee="exactly_once", replication=3)
    )
    create_pipeline_topics(cfg, kafka)
    samples = make_samples(n_nodes=4, steps=200)
    runner = StageRunner(cfg.stage("smooth"), cfg, kafka)
    failures: list[BaseException] = []
    thread = run_in_thread(runner, on_error=failures.append)
    committed = {**kafka, "isolation.level": "read_committed"}
    for k in range(4):  # in four pieces, so that commits (and aborts) fall between them
        if k == 2:  # a producer with the runner's transactional id fences the runner's (a fatal error)
            zombie = Producer({**kafka, "transactional.id": f"{runner.group_id}.{runner.instance}"})
            zombie.init_transactions(30)
        publish_samples(kafka, cfg.topic("perf.raw"), samples[k * 200 : (k + 1) * 200])
        n = (k + 1) * 200

        def enough(records: list[Any], n: int = n) -> bool:
            return len(records) >= n

        read_topic(committed, cfg.topic("perf.smoothed"), enough, timeout=60)
    out = read_topic(committed, cfg.topic("perf.smoothed"), lambda r: len(r) > len(samples), timeout=5)
    runner.stop()
    thread.join(30)
    assert not failures, failures
    assert calls["aborted"] >= 1
    assert runner.stats.producers_replaced >= 1  # the fenced producer was replaced, the stage went on
    assert Counter((r["node"], r["seq"]) for r in out) == Counter((s["node"], s["seq"]) for s in samples)
    want = expected_means(samples)
    for rec in out:
        assert_close(rec["metrics"], want[(rec["node"], rec["seq"])])


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
