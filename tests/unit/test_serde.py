"""Records: JSON and Avro round trips, missing values, unicode, strict errors, column batches."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from perfsift.operators import Batch
from perfsift.schemas import (
    AvroCodec,
    JsonCodec,
    RecordError,
    batch_to_samples,
    decode_samples,
    encode_batch,
    load_schema,
    samples_to_batch,
)
from perfsift.schemas.records import SCHEMA_NAMES

SAMPLE = {
    "ts": 1700000000.25,
    "node": "nœud-07 🖥",
    "job": "cactus-42",
    "seq": 123,
    "metrics": {"cpu_user": 93.1, "pswitch": 1200.0, "bwrite": None, "débit_µs": -1.5e-300},
}

names = st.text(min_size=1, max_size=12)
values = st.one_of(st.none(), st.floats(allow_nan=False, allow_infinity=False))
samples = st.fixed_dictionaries(
    {
        "ts": st.floats(min_value=-1e12, max_value=1e12, allow_nan=False),
        "node": names,
        "job": names,
        "seq": st.integers(min_value=-1, max_value=2**62),
        "metrics": st.dictionaries(names, values, max_size=8),
    }
)


@pytest.mark.parametrize("codec", [JsonCodec(), AvroCodec()])
def test_round_trip_keeps_missing_values_and_unicode(codec: JsonCodec | AvroCodec) -> None:
    assert codec.decode(codec.encode(SAMPLE)) == SAMPLE


@settings(max_examples=200, deadline=None)
@given(samples)
def test_round_trip_property(sample: dict) -> None:
    for codec in (JsonCodec(), AvroCodec()):
        assert codec.decode(codec.encode(sample)) == sample


@settings(max_examples=100, deadline=None)
@given(st.lists(samples, min_size=1, max_size=20))
def test_batch_round_trip_property(rows: list[dict]) -> None:
    """samples -> batch -> samples loses nothing but metric-name order (union of columns)."""
    batch = samples_to_batch(rows)
    back = batch_to_samples(batch)
    for a, b in zip(rows, back, strict=True):
        assert (a["ts"], a["node"], a["job"], a["seq"]) == (b["ts"], b["node"], b["job"], b["seq"])
        present = {k: v for k, v in b["metrics"].items() if k in a["metrics"]}
        assert present == a["metrics"]
        assert all(v is None for k, v in b["metrics"].items() if k not in a["metrics"])


def test_decode_samples_builds_columns_in_input_order() -> None:
    raw = [
        orjson.dumps({"ts": float(i), "node": f"n{i % 3}", "seq": i, "metrics": {"a": i, "b": None}}) for i in range(7)
    ]
    raw.insert(3, orjson.dumps({"ts": 9.0, "node": "n9", "metrics": {"b": 2.5, "c": 1}}))
    batch, kept, errors = decode_samples(raw)
    assert errors == [] and kept == list(range(8))
    assert batch.metrics == ("a", "b", "c")
    assert batch.values[3].tolist()[1:] == [2.5, 1.0] and math.isnan(batch.values[3, 0])
    assert batch.values[:3, 0].tolist() == [0.0, 1.0, 2.0]
    assert batch.node_names()[:4] == ["n0", "n1", "n2", "n9"]
    assert batch.seq.tolist() == [0, 1, 2, -1, 3, 4, 5, 6]


BAD = [
    (b"{not json", "cannot decode"),
    (b"[1, 2]", "must be a JSON object"),
    (b'{"ts": "1", "node": "a", "metrics": {}}', "'ts' must be a finite number"),
    (b'{"ts": true, "node": "a", "metrics": {}}', "'ts' must be a finite number"),
    (b'{"ts": 1, "node": "", "metrics": {}}', "'node' must be a non-empty string"),
    (b'{"ts": 1, "node": "a", "seq": 1.5, "metrics": {}}', "'seq' must be a 64-bit signed integer"),
    (b'{"ts": 1, "node": "a", "seq": 18446744073709551615, "metrics": {}}', "'seq' must be a 64-bit signed integer"),
    (b'{"ts": 1, "node": "a", "metrics": [1]}', "'metrics' must be an object"),
    (b'{"ts": 1, "node": "a", "metrics": {"x": "1.5"}}', "metric 'x' must be a finite number"),
    (b'{"ts": 1, "node": "a", "metrics": {"x": true}}', "metric 'x' must be a finite number"),
    (b'{"ts": 1, "node": "a", "metrics": {"y": 1.5, "x": true}}', "metric 'x' must be a finite number"),
    (b'{"ts": 1, "node": "a", "metrics": {"x": {"y": 1}}}', "metric 'x' must be a finite number"),
    (b'{"ts": 1e999, "node": "a", "metrics": {}}', ""),
    (None, "empty message"),
]


def test_malformed_records_are_reported_with_place_and_never_half_decoded() -> None:
    good = orjson.dumps({"ts": 1.0, "node": "ok", "metrics": {"x": 1.0}})
    raw = [good, *(b for b, _ in BAD), good]
    batch, kept, errors = decode_samples(raw, where=lambda i: f"perf.raw:0:{100 + i}")
    assert kept == [0, len(raw) - 1]
    assert len(batch) == 2 and batch.values[:, 0].tolist() == [1.0, 1.0]
    assert [e.index for e in errors] == list(range(1, len(raw) - 1))
    for err, (_, expected) in zip(errors, BAD, strict=True):
        assert err.where == f"perf.raw:0:{100 + err.index}"
        assert expected in err.reason
        assert str(err).startswith(err.where)


def test_single_record_codecs_raise_record_error() -> None:
    with pytest.raises(RecordError, match="not valid JSON"):
        JsonCodec().decode(b"{", "f.jsonl:3")
    avro = AvroCodec()
    enc = avro.encode(SAMPLE)
    with pytest.raises(RecordError, match="truncated or corrupt"):
        avro.decode(enc[:-3])
    with pytest.raises(RecordError, match="single-object"):
        AvroCodec("control").decode(enc)  # another schema's fingerprint
    with pytest.raises(RecordError, match="does not fit"):
        avro.encode({"ts": "x"})


def test_every_topic_record_type_has_a_loadable_schema() -> None:
    for name in SCHEMA_NAMES:
        schema = load_schema(name)
        assert schema["type"] == "record"


def test_encode_batch_writes_nan_as_null_and_extra_columns() -> None:
    batch = samples_to_batch([{"ts": 1.0, "node": "a", "metrics": {"x": None, "y": 2.0}}])
    batch = batch.with_values(batch.values, warm=np.array([True]))
    rec = orjson.loads(encode_batch(batch)[0])
    assert rec == {"ts": 1.0, "node": "a", "job": "default", "seq": -1, "metrics": {"x": None, "y": 2.0}, "warm": True}
    avro = encode_batch(batch, codec="avro")[0]
    assert AvroCodec().decode(avro)["metrics"] == {"x": None, "y": 2.0}


@settings(max_examples=100, deadline=None)
@given(st.lists(samples, min_size=1, max_size=15))
def test_column_wise_json_equals_per_record_json(rows: list[dict]) -> None:
    """encode_batch's template path writes exactly what orjson writes for each record."""
    batch = samples_to_batch(rows)
    batch = batch.with_values(batch.values, warm=np.arange(len(batch)) % 2 == 0)
    fast = [orjson.loads(x) for x in encode_batch(batch)]
    slow = [orjson.loads(orjson.dumps(r)) for r in batch_to_samples(batch)]
    assert fast == slow


uniform_values = st.one_of(st.floats(allow_nan=False, allow_infinity=False), st.integers(-(2**53), 2**53))


@settings(max_examples=150, deadline=None)
@given(
    st.lists(names, min_size=0, max_size=6, unique=True),
    st.lists(
        st.tuples(st.floats(-1e12, 1e12), st.sampled_from(["a", "b", "nœud"]), st.integers(-1, 99)),
        min_size=1,
        max_size=30,
    ),
    st.data(),
)
def test_uniform_batches_decode_as_record_by_record(metric_names: list, rows: list, data: st.DataObject) -> None:
    """The fast path for batches whose records share their metric names gives the same batch as
    the record-by-record path; a batch with one odd record falls back to it whole."""
    import perfsift.schemas.batches as batches

    raw = [
        orjson.dumps({"ts": t, "node": node, "seq": q, "metrics": {m: data.draw(uniform_values) for m in metric_names}})
        for t, node, q in rows
    ]
    if data.draw(st.booleans()):
        raw.append(orjson.dumps({"ts": 1.0, "node": "z", "metrics": {"odd": True}}))
    fast = decode_samples(raw)

    def no_fast_path(values: Sequence[bytes | None]) -> Batch | None:
        return None  # what the fast path says when a batch is not uniform: the record-by-record path runs

    original, batches._decode_uniform = batches._decode_uniform, no_fast_path
    try:
        slow = decode_samples(raw)
    finally:
        batches._decode_uniform = original
    (a, kept_a, err_a), (b, kept_b, err_b) = fast, slow
    assert kept_a == kept_b and [(e.index, e.reason) for e in err_a] == [(e.index, e.reason) for e in err_b]
    assert (a.metrics, a.nodes, a.jobs) == (b.metrics, b.nodes, b.jobs)
    for col in ("ts", "node_idx", "job_idx", "seq", "values"):
        assert np.array_equal(getattr(a, col), getattr(b, col)), col


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**64 - 1) | st.floats() | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3),
    max_leaves=8,
)
odd_samples = st.fixed_dictionaries(
    {},
    optional={"ts": json_values, "node": json_values, "job": json_values, "seq": json_values, "metrics": json_values},
)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(odd_samples, json_values, samples), min_size=1, max_size=6))
def test_decoding_never_raises_and_accounts_for_every_record(records: list) -> None:
    """Whatever JSON arrives, each record is either kept or reported, never both, never lost."""
    raw = [orjson.dumps(r) for r in records]  # JSON integers: what a parser gives (up to 2**64 - 1)
    batch, kept, errors = decode_samples(raw)
    assert sorted(kept + [e.index for e in errors]) == list(range(len(raw)))
    assert len(batch) == len(kept)
