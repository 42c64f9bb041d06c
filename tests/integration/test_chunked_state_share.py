"""Chunked snapshots at the default cadence (a share of the input bytes, not every commit): the
select stage's state, larger than the chunk size, is written as chunks and a manifest once it
fits its share, the bytes written stay within the share, and a new worker of the group restores
from the chunks and replays only what came after them."""

from __future__ import annotations

import time
from pathlib import Path

import orjson
from confluent_kafka import Consumer, Producer, TopicPartition
from perfsift.streams.checkpoint import Checkpoints
from perfsift.streams.clients import consumer_settings, create_pipeline_topics
from perfsift.streams.config import load_pipeline
from perfsift.streams.runner import StageRunner, run_in_thread
from perfsift.streams.state_chunks import is_manifest, manifest_of
from perfsift.streams.topics import STATE_TOPIC

from tests.conftest import read_to_end
from tests.integration.test_chaos_chunked_state import pipeline
from tests.integration.test_chaos_select import trace

SHARE = 0.5  # this small job's state (about 90 kB compressed) against its 600 kB of input


def test_chunked_snapshots_fall_due_at_their_share_and_a_new_worker_restores_from_them(
    kafka: dict, prefix: str, tmp_path: Path
) -> None:
    text = pipeline(tmp_path, prefix).read_text().replace("snapshot_share: .inf", f"snapshot_share: {SHARE}")
    (tmp_path / "pipeline.yaml").write_text(text)
    cfg = load_pipeline(tmp_path / "pipeline.yaml")
    assert cfg.snapshot_share == SHARE
    create_pipeline_topics(cfg, kafka)
    samples = trace()
    p = Producer(kafka)
    for s in samples:
        p.produce(cfg.topic("perf.smoothed.byjob"), orjson.dumps(s), s["job"].encode())
    p.flush(30)
    group = f"{prefix}perfsift.select"
    a = StageRunner(cfg.stage("select"), cfg, kafka, embedded=True, group_id=group)
    thread = run_in_thread(a)
    deadline = time.monotonic() + 240
    while a.stats.records_in < len(samples) and time.monotonic() < deadline:
        time.sleep(0.1)
    a.stop()
    thread.join(60)
    assert a.stats.records_in == len(samples)
    state = read_to_end(kafka, cfg.topic(STATE_TOPIC), decode=False)
    manifests = [manifest_of(m.value()) for m in state if m.value() is not None and is_manifest(m.value())]
    assert manifests and min(m["chunks"] for m in manifests) >= 5  # due at the share, and in chunks
    chunked = sum(len(m.value()) for m in state if m.key() is not None and b"/chunk/" in m.key())
    chunked += sum(len(m.value()) for m in state if m.value() is not None and is_manifest(m.value()))
    assert chunked <= SHARE * a.stats.wire_in.payload["perf.smoothed.byjob"]
    # what a restart starts from: the newest complete snapshot per partition, and the committed ends
    topic = cfg.topic("perf.smoothed.byjob")
    cp = Checkpoints(kafka, group, cfg.topic(STATE_TOPIC), cfg.partitions, "select", cfg.snapshot_chunk_bytes)
    snaps = cp.load(topic, list(range(cfg.partitions)), read_committed=False)
    assert any("slot" in rec for rec in snaps.values())  # at least one of them joined from chunks
    reader = Consumer(consumer_settings(kafka, group, "read_uncommitted"))
    ends = {c.partition: c.offset for c in reader.committed([TopicPartition(topic, p) for p in snaps], 30)}
    reader.close()
    to_replay = sum(ends[p] - int(rec["next_offset"]) for p, rec in snaps.items())
    assert 0 <= to_replay < len(samples)  # from the snapshots, not from the start
    b = StageRunner(cfg.stage("select"), cfg, kafka, embedded=True, group_id=group)
    thread = run_in_thread(b)
    deadline = time.monotonic() + 120
    while (b.stats.restored_partitions < len(snaps) or b.stats.replayed < to_replay) and time.monotonic() < deadline:
        time.sleep(0.1)
    time.sleep(0.5)
    b.stop()
    thread.join(60)
    assert b.stats.restored_partitions == len(snaps)
    assert b.stats.replayed == to_replay
    assert b.stats.records_in == 0 and b.stats.records_out == 0  # nothing emitted again
