"""Column frames (schemas/frames.py): bit-exact round trips, one frame per key in row order, frames
and JSON records mixed in one micro-batch, corrupt frames refused, and every framing readable by
``perfsift tail``'s decoder."""

from __future__ import annotations

import numpy as np
import orjson
import pytest
from perfsift.operators import Batch
from perfsift.schemas import RecordError, batch_to_samples, decode_samples, encode_batch
from perfsift.schemas.codecs import codec_for
from perfsift.schemas.detect import decode_any
from perfsift.schemas.frames import FRAME_MAGIC, decode_frame, encode_frames


def batch(k: int = 40, seed: int = 0) -> Batch:
    rng = np.random.default_rng(seed)
    values = rng.normal(size=(k, 3)) * 10.0 ** rng.integers(-5, 12, size=(k, 3))
    values[rng.random((k, 3)) < 0.1] = np.nan
    return Batch(
        ts=np.arange(k, dtype=np.float64) * 0.5 + 1.7e9,
        node_idx=rng.integers(0, 4, k),
        values=values,
        metrics=("a", "b", "c"),
        nodes=("n0", "n1", "n2", "n3"),
        job_idx=rng.integers(0, 2, k),
        jobs=("j0", "j1"),
        seq=np.arange(k, dtype=np.int64) * 7 - 3,
        extra={"warm": rng.random(k) < 0.5},
    )


@pytest.mark.parametrize("key", ["job", "node"])
def test_frames_hold_every_row_bit_exact_one_key_each_in_row_order(key: str) -> None:
    b = batch()
    frames, keys = encode_frames(b, key)
    names, idx = (b.jobs, b.job_idx) if key == "job" else (b.nodes, b.node_idx)
    first_seen = list(dict.fromkeys(names[i] for i in idx.tolist()))
    assert [k.decode() for k in keys] == first_seen  # one frame per key, in first-seen order
    back = [decode_frame(f) for f in frames]
    for k, got in zip(keys, back, strict=True):
        rows = np.flatnonzero(np.array([names[i] for i in idx.tolist()]) == k.decode())
        want = b.take(rows)
        assert {getattr(got, f"{key}s")[i] for i in getattr(got, f"{key}_idx").tolist()} == {k.decode()}
        assert np.array_equal(got.values, want.values, equal_nan=True)  # bit-exact, NaN kept
        assert got.ts.tolist() == want.ts.tolist() and got.seq.tolist() == want.seq.tolist()
        assert got.extra["warm"].tolist() == want.extra["warm"].tolist()
        assert batch_to_samples(got) == batch_to_samples(want)  # the same records as JSON would carry


def test_a_frame_is_far_smaller_than_the_json_records() -> None:
    b = batch(500)
    frames, _ = encode_frames(b, "job")
    assert sum(map(len, frames)) < 0.6 * sum(map(len, encode_batch(b)))


def test_big_batches_split_into_frames_under_the_size_cap() -> None:
    rng = np.random.default_rng(1)
    b = Batch.from_columns(ts=np.arange(3000.0), nodes=["n"] * 3000, metrics=[f"m{i}" for i in range(100)],
                           values=rng.normal(size=(3000, 100)))  # fmt: skip
    frames, keys = encode_frames(b, "node")
    assert len(frames) > 1 and max(map(len, frames)) <= 600_000 and set(keys) == {b"n"}
    assert np.array_equal(Batch.concat([decode_frame(f) for f in frames]).values, b.values)


def test_decode_samples_mixes_frames_and_records_in_input_order() -> None:
    b = batch(30)
    frames, _ = encode_frames(b.take(np.arange(10, 30)), "job")
    head = encode_batch(b.take(np.arange(10)))
    values = [*head[:5], *frames, *head[5:], b"not json"]
    got, kept, errors = decode_samples(values)
    assert len(errors) == 1 and errors[0].index == len(values) - 1
    assert len(got) == 30 and len(kept) == 30
    # every row points at the message it came from
    assert kept[:5] == [0, 1, 2, 3, 4] and set(kept[5 : 5 + 20]) == set(range(5, 5 + len(frames)))
    rows = sorted(batch_to_samples(got), key=lambda r: r["seq"])
    want = sorted(({k: v for k, v in r.items() if k != "warm"} for r in batch_to_samples(b)), key=lambda r: r["seq"])
    assert rows == want  # extra columns are not passed on, as from JSON


@pytest.mark.parametrize("cut", [3, 9, 30, -1])
def test_truncated_or_corrupt_frames_are_refused_with_a_reason(cut: int) -> None:
    frame = encode_frames(batch(8), "job")[0][0]
    with pytest.raises(RecordError, match="frame"):
        decode_frame(frame[:cut])
    _, kept, errors = decode_samples([frame[:cut]], lambda i: f"perf.smoothed.byjob:0:{i}")
    assert kept == [] and errors[0].where == "perf.smoothed.byjob:0:0"


def test_tail_decodes_every_framing() -> None:
    b = batch(6)
    frames, _ = encode_frames(b, "job")
    assert {decode_any(f).encoding for f in frames} == {"columns"}
    samples = [s for f in frames for s in decode_any(f).record]
    assert sorted(s["seq"] for s in samples) == b.seq.tolist()
    record = batch_to_samples(b)[0]
    assert decode_any(orjson.dumps(record)).record == orjson.loads(orjson.dumps(record))
    avro = codec_for("avro", "sample").encode(record)
    assert decode_any(avro).record["seq"] == record["seq"]
    assert decode_any(b"plain text").record == "plain text"
    assert FRAME_MAGIC[:1] not in (b"{", b"\xc3")  # a frame can never be taken for JSON or Avro
