"""Chaos with chunked state: the select stage with a snapshot at every commit and a chunk size so
small that every snapshot goes out as many chunks and a manifest (streams/state_chunks.py), as a
10,000-node job's does at the default chunk size. Its only worker is killed with SIGKILL mid-stream
(possibly half-way through a snapshot's chunks) and started again: it restores every partition from
the chunks and the reduced and selection records equal those of an uninterrupted run."""

from __future__ import annotations

import signal
import threading
import time
from pathlib import Path

import orjson
from confluent_kafka import Producer
from perfsift.streams.clients import create_pipeline_topics
from perfsift.streams.config import load_pipeline
from perfsift.streams.state_chunks import is_manifest, manifest_of, split_chunk_key
from perfsift.streams.topics import STATE_TOPIC

from tests.conftest import read_to_end, read_topic, wait_until
from tests.integration.test_chaos_select import REDUCE, reference, trace, worker

CHUNK = 2048


def pipeline(tmp_path: Path, prefix: str) -> Path:
    lines = [
        f'topic_prefix: "{prefix}"',
        "partitions: 4",
        "commit_interval_s: 0.3",
        "batch_size: 200",
        "snapshot_share: .inf",
        f"snapshot_chunk_bytes: {CHUNK}",
        "stages:",
        "  select:",
        "    input: perf.smoothed.byjob",
        "    outputs: [perf.reduced, perf.selection, perf.control]",
        "    emit: routed",
        "    operators:",
        "      - type: reduce",
        f"        pursuit: {orjson.dumps(REDUCE['pursuit']).decode()}",
        f"        full_every: {REDUCE['full_every']}",
    ]
    path = tmp_path / "pipeline.yaml"
    path.write_text("\n".join(lines) + "\n")
    return path


def chunked_manifests(kafka: dict, topic: str) -> dict[bytes, dict]:
    """The latest manifest per key on the state topic so far (all that is there now)."""
    msgs = read_to_end(kafka, topic, decode=False)
    return {m.key(): manifest_of(m.value()) for m in msgs if m.value() is not None and is_manifest(m.value())}


def test_select_worker_killed_mid_stream_restores_chunked_state_and_gives_the_uninterrupted_output(
    kafka: dict, prefix: str, tmp_path: Path
) -> None:
    config = pipeline(tmp_path, prefix)
    cfg = load_pipeline(config)
    assert cfg.snapshot_share == float("inf") and cfg.snapshot_chunk_bytes == CHUNK
    create_pipeline_topics(cfg, kafka)
    samples = trace()
    want_reduced, want_sel = reference(samples)
    # the reduced records the first half gives (480 of 5760: the pursuit's periods lag the input)
    first_half = len(reference(samples[: len(samples) // 2])[0])
    logs = [tmp_path / "a.log", tmp_path / "b.log"]
    a = worker(config, kafka["bootstrap.servers"], logs[0])
    topic = cfg.topic("perf.smoothed.byjob")

    killed = threading.Event()

    def publish() -> None:  # about 600 samples/s, keyed by job; the second half after the kill
        p = Producer({**kafka, "linger.ms": 5})
        for i, s in enumerate(samples):
            if i == len(samples) // 2:
                killed.wait(300)
            p.produce(topic, orjson.dumps(s), s["job"].encode())
            if i % 120 == 119:
                p.flush(10)
                time.sleep(0.2)
        p.flush(30)

    publisher = threading.Thread(target=publish, daemon=True)
    publisher.start()
    # killed in the first half (however long a loaded machine takes to get there): once it emitted
    # half of what the first half gives. (A fifth of the whole run's records, the condition before,
    # cannot come before the kill: the publisher waits for it after the first half, so the test
    # always waited out the 240 s.) On a quick machine the worker may have read the whole first half
    # by then; the second half is still to come, as before.
    halfway = read_topic(kafka, cfg.topic("perf.reduced"), lambda r: len(r) >= first_half // 2, timeout=240)
    assert len(halfway) >= first_half // 2, f"the worker emitted {len(halfway)} reduced records in 240 s"
    # and once a chunked snapshot is out (the first commits may come before the state fills a chunk)
    assert wait_until(lambda: bool(chunked_manifests(kafka, cfg.topic(STATE_TOPIC))), 60, interval=0.3)
    a.send_signal(signal.SIGKILL)
    a.wait(10)
    killed.set()
    before = chunked_manifests(kafka, cfg.topic(STATE_TOPIC))
    assert before, "no chunked snapshot before the kill"
    assert min(m["chunks"] for m in before.values()) >= 5  # every snapshot in many chunks
    b = worker(config, kafka["bootstrap.servers"], logs[1])
    try:
        got = read_topic(
            kafka,
            cfg.topic("perf.reduced"),
            lambda r: len({(x["job"], x["node"], x["seq"]) for x in r}) >= len(want_reduced),
            timeout=300,
        )
        sel = read_topic(
            kafka,
            cfg.topic("perf.selection"),
            lambda r: len({(x["job"], x["period_start"]) for x in r}) >= len(want_sel),
            timeout=30,
        )
    finally:
        b.send_signal(signal.SIGTERM)
        code = b.wait(60)
        publisher.join(30)
    detail = "\n".join(log.read_text()[-2000:] for log in logs)
    streamed: dict = {}
    for r in got:
        key = (r["job"], r["node"], r["seq"])
        assert streamed.setdefault(key, r) == r, f"a re-emitted record differs: {key}"
    assert set(streamed) == set(want_reduced), f"missing {len(set(want_reduced) - set(streamed))}\n{detail}"
    assert all(streamed[k] == want_reduced[k] for k in want_reduced), detail
    assert {(s["job"], s["period_start"]): s for s in sel} == want_sel
    assert code == 0
    stats = orjson.loads(logs[1].read_text().strip().splitlines()[-1])
    # the restarted worker resumed every partition that had a chunked snapshot from it
    assert stats["restored_partitions"] >= len(before), detail
    assert "incomplete" not in logs[1].read_text()  # the manifest comes after its chunks, in order
    state = read_to_end(kafka, cfg.topic(STATE_TOPIC), decode=False)
    slots = {split_chunk_key(m.key())[1] for m in state if split_chunk_key(m.key()) is not None}  # type: ignore[index]
    assert slots == {0, 1}  # the snapshots alternate between the two slots
