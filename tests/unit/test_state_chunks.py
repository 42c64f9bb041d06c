"""A snapshot record larger than one state message (streams/state_chunks.py): compressed chunks in
one of two slots and a manifest; a reader joins the newest complete one and falls back to the
previous complete record when the newest's chunks do not add up."""

from __future__ import annotations

import math

import numpy as np
import pytest
from perfsift.producers.synth import spmd
from perfsift.schemas import samples_to_batch
from perfsift.streams.checkpoint import Checkpoints, parse_record
from perfsift.streams.config import ConfigError, load_pipeline, parse_settings
from perfsift.streams.stage import Chain
from perfsift.streams.state_chunks import is_manifest, join, manifest_of, split_chunk_key

CHUNK = 4096


def _chain_and_rest() -> tuple[Chain, Checkpoints, object]:
    stage = load_pipeline().stage("select")
    samples, _ = spmd("sweep3d", nodes=40, duration=90, seed=5)
    batch = samples_to_batch(samples)
    cut = len(batch) // 2
    chain = Chain(stage, "json", "columns")
    chain.process(batch.take(np.arange(cut)))
    cp = Checkpoints({}, "g", "perf.state", 4, "select", chunk_bytes=CHUNK)
    return chain, cp, batch.take(np.arange(cut, len(batch)))


def _by_slot(msgs: list[tuple[bytes, bytes]]) -> dict[tuple[int, int], bytes]:
    out = {}
    for key, value in msgs:
        ck = split_chunk_key(key)
        if ck is not None:
            out[ck[1:]] = value
    return out


def test_a_large_record_goes_out_in_chunks_and_a_restored_chain_continues_exactly() -> None:
    chain, cp, rest = _chain_and_rest()
    record = cp.record("perf.smoothed.byjob", 1, 777, chain, chain.fingerprint())
    assert len(record) > 10 * CHUNK  # several chunks, not a record that fits
    msgs, size = cp.messages("perf.smoothed.byjob", 1, record, slot=1)
    key = cp.key("perf.smoothed.byjob", 1)
    *chunks, (last_key, manifest) = msgs
    assert last_key == key and is_manifest(manifest)  # the manifest last, at the partition's key
    assert all(len(v) <= CHUNK for _, v in msgs)
    man = manifest_of(manifest)
    assert man["slot"] == 1 and man["chunks"] == len(chunks) == math.ceil(man["bytes"] / (CHUNK - 24))
    assert [split_chunk_key(k) for k, _ in chunks] == [(key, 1, i) for i in range(len(chunks))]
    assert size == sum(len(v) for _, v in msgs) < len(record)  # compressed
    joined = join(man, _by_slot(msgs))
    assert joined == record
    want = chain.process(rest).topics  # type: ignore[arg-type]
    fresh = chain.fresh()
    assert cp.restore(fresh, parse_record(joined), chain.fingerprint(), "x") == 777
    assert fresh.process(rest).topics == want  # type: ignore[arg-type]
    # a record that fits goes out alone, as before
    small = cp.record("perf.smoothed.byjob", 1, 5, chain, chain.fingerprint(), fresh=True)
    assert cp.messages("perf.smoothed.byjob", 1, small, slot=0) == ([(key, small)], len(small))


def test_the_reader_takes_the_newest_complete_snapshot_and_falls_back_past_a_broken_one() -> None:
    chain, cp, rest = _chain_and_rest()
    topic = "perf.smoothed.byjob"
    old = cp.record(topic, 1, 100, chain, chain.fingerprint())
    chain.process(rest)  # type: ignore[arg-type]
    new = cp.record(topic, 1, 200, chain, chain.fingerprint())
    old_msgs, _ = cp.messages(topic, 1, old, slot=0)
    new_msgs, new_size = cp.messages(topic, 1, new, slot=1)
    chunks = _by_slot(old_msgs) | _by_slot(new_msgs)
    values = [old_msgs[-1][1], new_msgs[-1][1]]
    rec = cp._resolve(values, chunks, "x")
    assert rec is not None and rec["next_offset"] == 200 and rec["slot"] == 1 and rec["size"] == new_size
    # the newest's write was cut short: one chunk missing -> the previous one, whole in the other slot
    broken = dict(chunks)
    broken.pop((1, 2))
    rec = cp._resolve(values, broken, "x")
    assert rec is not None and rec["next_offset"] == 100 and rec["slot"] == 0
    # a chunk of another snapshot in the slot (overwritten by a later, unfinished write) does not count
    other, _ = cp.messages(topic, 1, new, slot=1)
    mixed = dict(chunks)
    mixed[(1, 0)] = _by_slot(other)[(1, 0)]
    rec = cp._resolve(values, mixed, "x")
    assert rec is not None and rec["next_offset"] == 100
    # nothing complete: no snapshot; a tombstone at the key: no snapshot either
    assert cp._resolve([new_msgs[-1][1]], broken, "x") is None
    assert cp._resolve([values[1], b"null"], chunks, "x") is None


@pytest.mark.parametrize("text", [".inf", "inf", ".Inf", "+.inf"])
def test_snapshot_share_takes_the_yaml_spelling_of_infinity(text: str) -> None:
    cfg = load_pipeline(overrides=parse_settings([f"snapshot_share={text}"]))
    assert math.isinf(cfg.snapshot_share) and cfg.snapshot_share > 0
    assert math.isinf(load_pipeline(env={"PERFSIFT_SNAPSHOT_SHARE": text}).snapshot_share)


def test_a_negative_share_and_a_tiny_chunk_are_refused() -> None:
    with pytest.raises(ConfigError, match="snapshot_share"):
        load_pipeline(overrides=parse_settings(["snapshot_share=-.inf"]))
    with pytest.raises(ConfigError, match="snapshot_chunk_bytes"):
        load_pipeline(overrides=parse_settings(["snapshot_chunk_bytes=100"]))
