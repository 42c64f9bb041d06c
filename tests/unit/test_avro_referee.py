"""Apache Avro (the official ``avro`` package, avro-python3's successor) as the referee of perfsift's
Avro: for every schema in ``schemas/*.avsc`` it reads what perfsift writes with ``encoding: avro``
(single-object encoding: its 10-byte header checked against the schema's CRC-64-AVRO fingerprint,
computed here from avro's own canonical form) and with ``encoding: confluent-avro`` (the 5-byte
Schema Registry header stripped), and perfsift reads what it writes.

The records come from two sources: what perfsift's operators really emit (cleaned and smoothed
samples, forecasts, reduced samples, selections and control records), and records drawn at random
from each schema, so every field, union branch, enum symbol and nested record is exercised.
"""

from __future__ import annotations

import io
import json
import math
import random
import uuid
from importlib import resources
from typing import Any

import numpy as np
import pytest
from perfsift.operators import Batch
from perfsift.operators.clean.clean import Clean
from perfsift.operators.forecast.forecast import ForecastBank
from perfsift.operators.forecast.records import forecast_records
from perfsift.operators.reduce import Reduce
from perfsift.operators.smooth import SlidingMean
from perfsift.schemas import batch_to_samples, decode_samples, encode_batch, encode_records
from perfsift.schemas.codecs import AvroCodec, codec_for
from perfsift.schemas.forecast_wire import complete_forecast, forecast_on_wire
from perfsift.schemas.records import SCHEMA_NAMES, RecordError, validate_sample
from perfsift.schemas.registry import HEADER_BYTES, SchemaRegistry, use_registry

avro_schema = pytest.importorskip("avro.schema", reason="the test extra installs avro")
avro_io = pytest.importorskip("avro.io", reason="the test extra installs avro")

#: every schema file shipped, not only the ones SCHEMA_NAMES lists (a new .avsc must be refereed too)
AVSC = sorted(p.name[:-5] for p in resources.files("perfsift.schemas").iterdir() if p.name.endswith(".avsc"))


def test_every_schema_file_is_a_known_record_kind() -> None:
    assert sorted(SCHEMA_NAMES) == AVSC


def official(kind: str) -> Any:
    return avro_schema.parse(resources.files("perfsift.schemas").joinpath(f"{kind}.avsc").read_text())


# -- CRC-64-AVRO, from the Avro specification (not from fastavro, which perfsift uses) ------------
_EMPTY = 0xC15D213AA4D7A795
_TABLE = []
for _i in range(256):
    _fp = _i
    for _ in range(8):
        _fp = (_fp >> 1) ^ (_EMPTY & -(_fp & 1))
    _TABLE.append(_fp)


def crc64_avro(data: bytes) -> int:
    fp = _EMPTY
    for b in data:
        fp = (fp >> 8) ^ _TABLE[(fp ^ b) & 0xFF]
    return fp


def single_object_header(kind: str) -> bytes:
    """C3 01 and the little-endian CRC-64-AVRO of avro's parsing canonical form of the schema."""
    canonical = official(kind).canonical_form
    return b"\xc3\x01" + crc64_avro(canonical.encode()).to_bytes(8, "little")


def avro_read(kind: str, body: bytes) -> Any:
    schema = official(kind)
    buf = io.BytesIO(body)
    rec = avro_io.DatumReader(schema, schema).read(avro_io.BinaryDecoder(buf))
    assert buf.read() == b"", "avro left bytes unread: perfsift wrote more than the record"
    return rec


def avro_write(kind: str, record: dict[str, Any]) -> bytes:
    buf = io.BytesIO()
    avro_io.DatumWriter(official(kind)).write(record, avro_io.BinaryEncoder(buf))
    return buf.getvalue()


# -- random records of a schema ---------------------------------------------------------------------
def random_datum(schema: Any, rng: random.Random, names: dict[str, Any], depth: int = 0) -> Any:
    """A random value of an Avro schema (JSON form); finite doubles only (NaN is written as null)."""
    if isinstance(schema, list):  # a union: any branch, null only sometimes
        return random_datum(rng.choice(schema), rng, names, depth)
    if isinstance(schema, str):
        if schema in names:
            return random_datum(names[schema], rng, names, depth)
        return {
            "null": lambda: None,
            "boolean": lambda: rng.random() < 0.5,
            "int": lambda: rng.randint(-(2**31), 2**31 - 1),
            "long": lambda: rng.randint(-(2**63), 2**63 - 1),
            "double": lambda: rng.choice([0.0, -1.5, 1e300, -2.5e-300, rng.uniform(-1e6, 1e6)]),
            "float": lambda: float(np.float32(rng.uniform(-1e3, 1e3))),
            "string": lambda: rng.choice(["", "n07", "cpu_user", "ünï/cödé ✓", "a" * 40]),
            "bytes": lambda: bytes(rng.randrange(256) for _ in range(rng.randrange(6))),
        }[schema]()
    kind = schema["type"]
    if kind == "record":
        names[schema["name"]] = schema
        return {f["name"]: random_datum(f["type"], rng, names, depth + 1) for f in schema["fields"]}
    if kind == "enum":
        names[schema["name"]] = schema
        return rng.choice(schema["symbols"])
    n = rng.randrange(4) if depth < 4 else 0
    if kind == "array":
        return [random_datum(schema["items"], rng, names, depth + 1) for _ in range(n)]
    if kind == "map":
        return {f"k{i}é": random_datum(schema["values"], rng, names, depth + 1) for i in range(n)}
    return random_datum(kind, rng, names, depth)


def random_records(kind: str, n: int = 25) -> list[dict[str, Any]]:
    raw = json.loads(resources.files("perfsift.schemas").joinpath(f"{kind}.avsc").read_text())
    rng = random.Random(f"referee-{kind}")
    return [random_datum(raw, rng, {}) for _ in range(n)]


# -- what the operators emit -------------------------------------------------------------------------
def operator_records() -> dict[str, list[dict[str, Any]]]:
    rng = np.random.default_rng(3)
    k, nodes = 240, 4
    values = rng.normal(50.0, 5.0, (k, 3))
    values[:, 1] = 2 * values[:, 0] + rng.normal(0, 0.1, k)
    values[rng.random(values.shape) < 0.05] = np.nan
    values[100, 2] = 1e4  # an outlier the cleaner flags
    batch = Batch.from_columns(
        ts=np.repeat(np.arange(k // nodes, dtype=float), nodes),
        nodes=[f"n{i % nodes}" for i in range(k)],
        metrics=["cpu", "mem", "io"],
        values=values,
        jobs=["j1"] * k,
        seq=np.arange(k) // nodes,
    )
    cleaned = Clean().update(batch)
    smoothed = SlidingMean(window=4, emit_every=2).update(cleaned)
    out: dict[str, list[dict[str, Any]]] = {
        "sample": batch_to_samples(cleaned) + batch_to_samples(smoothed),
        "forecast": forecast_records(ForecastBank().update(cleaned)),
    }
    routed = Reduce(pursuit={"period": 10.0}).update(smoothed)
    out["reduced"] = [r for b in routed["reduced"] for r in batch_to_samples(b)]
    out["selection"] = list(routed["selection"])
    out["control"] = list(routed["control"])
    assert any(r.get("flags") for r in out["sample"]), "the cleaner flagged nothing: the flags go unrefereed"
    return out


@pytest.fixture(scope="module")
def emitted() -> dict[str, list[dict[str, Any]]]:
    return operator_records()


def records_of(kind: str, emitted: dict[str, list[dict[str, Any]]]) -> list[dict[str, Any]]:
    return emitted.get(kind, []) + random_records(kind)


def fills_in(rec: dict[str, Any]) -> bool:
    """Whether a forecast record has a null that readers fill in: mae_forecast, or a bound beside a
    known error scale."""
    pairs = (("lower", "sigma"), ("upper", "sigma"), ("lower_mae", "mae"), ("upper_mae", "mae"))
    return rec.get("mae_forecast") is None or any(rec.get(b) is None and rec.get(e) is not None for b, e in pairs)


def expected(kind: str, rec: dict[str, Any], schema_fields: list[str], wire: bool = True) -> dict[str, Any]:
    """The record as Avro carries it: the schema's fields, NaN as null, absent optional fields null;
    a forecast without what its readers derive (schemas/forecast_wire.py) unless ``wire`` is False."""
    if kind == "forecast" and wire:
        rec = forecast_on_wire(rec)

    def nan_free(v: Any) -> Any:
        if isinstance(v, float) and math.isnan(v):
            return None
        if isinstance(v, dict):
            return {a: nan_free(b) for a, b in v.items()}
        if isinstance(v, list):
            return [nan_free(b) for b in v]
        return v

    return {f: nan_free(rec.get(f)) for f in schema_fields}


def fields(kind: str) -> list[str]:
    return [f.name for f in official(kind).fields]


# -- perfsift writes, Apache Avro reads ---------------------------------------------------------------
@pytest.mark.parametrize("kind", AVSC)
def test_avro_reads_perfsift_single_object_records(kind: str, emitted: dict) -> None:
    records = records_of(kind, emitted)
    header = single_object_header(kind)
    encoded = encode_records(records, "avro", kind)
    assert len(encoded) == len(records) >= 25
    for rec, data in zip(records, encoded, strict=True):
        assert data[:10] == header
        assert avro_read(kind, data[10:]) == expected(kind, rec, fields(kind))
        # what Apache Avro read, completed as perfsift's readers do: the record made, where it has no
        # null that readers fill in (schemas/forecast_wire.py; the forecast bank makes none)
        if kind == "forecast" and not fills_in(rec):
            assert complete_forecast(avro_read(kind, data[10:])) == expected(kind, rec, fields(kind), wire=False)


def test_avro_reads_the_samples_a_stage_encodes(emitted: dict) -> None:
    """encode_batch, what a stage publishes samples with (extra columns warm/flags included)."""
    rng = np.random.default_rng(0)
    batch = Clean().update(
        Batch.from_columns(
            ts=np.arange(60.0), nodes=["a", "b"] * 30, metrics=["x", "y"], values=rng.normal(0, 1, (60, 2))
        )
    )
    header = single_object_header("sample")
    for rec, data in zip(batch_to_samples(batch), encode_batch(batch, "avro"), strict=True):
        assert data[:10] == header
        assert avro_read("sample", data[10:]) == expected("sample", rec, fields("sample"))


@pytest.fixture()
def registry() -> SchemaRegistry:
    return use_registry({"url": f"mock://{uuid.uuid4().hex}"})


@pytest.mark.parametrize("kind", AVSC)
def test_avro_reads_perfsift_confluent_records(kind: str, emitted: dict, registry: SchemaRegistry) -> None:
    records = records_of(kind, emitted)
    schema_id = registry.writer_id(kind)
    for rec, data in zip(records, encode_records(records, "confluent-avro", kind), strict=True):
        assert data[0] == 0 and int.from_bytes(data[1:HEADER_BYTES], "big") == schema_id
        assert avro_read(kind, data[HEADER_BYTES:]) == expected(kind, rec, fields(kind))


# -- Apache Avro writes, perfsift reads ----------------------------------------------------------------
def check_perfsift_reads(kind: str, codec: Any, data: bytes, body: bytes) -> bool:
    """perfsift's decoder returns what Apache Avro reads from the same body (Avro's writer picks a
    union branch by its own rules, e.g. ``double`` for a bool in ``diagnostics``: the referee's
    reading is the truth), samples validated and normalised by schemas/records.py's rules; a
    sample those rules refuse (an empty node) raises RecordError. True when it was accepted."""
    theirs = avro_read(kind, body)
    if kind == "forecast":  # perfsift's readers fill in what a forecast leaves off the wire
        assert codec.decode(data) == complete_forecast(theirs)
        return True
    if kind != "sample":
        assert codec.decode(data) == theirs
        return True
    try:
        want = validate_sample(theirs)
    except RecordError:
        with pytest.raises(RecordError):
            codec.decode(data)
        return False
    assert codec.decode(data) == want
    return True


@pytest.mark.parametrize("kind", AVSC)
def test_perfsift_reads_avro_single_object_records(kind: str, emitted: dict) -> None:
    records = records_of(kind, emitted)
    codec = AvroCodec(kind)
    accepted = 0
    for rec in records:
        body = avro_write(kind, expected(kind, rec, fields(kind)))
        accepted += check_perfsift_reads(kind, codec, single_object_header(kind) + body, body)
    assert accepted >= 20


@pytest.mark.parametrize("kind", AVSC)
def test_perfsift_reads_avro_confluent_records(kind: str, emitted: dict, registry: SchemaRegistry) -> None:
    records = records_of(kind, emitted)
    header = b"\x00" + registry.writer_id(kind).to_bytes(4, "big")
    codec = codec_for("confluent-avro", kind)
    accepted = 0
    for rec in records:
        body = avro_write(kind, expected(kind, rec, fields(kind)))
        accepted += check_perfsift_reads(kind, codec, header + body, body)
    assert accepted >= 20


@pytest.mark.parametrize("encoding", ["avro", "confluent-avro"])
def test_a_stage_decodes_samples_avro_wrote(encoding: str, emitted: dict, registry: SchemaRegistry) -> None:
    """decode_samples, a stage's input path, on samples Apache Avro wrote: the same columns."""
    records = [expected("sample", r, fields("sample")) for r in emitted["sample"]]
    if encoding == "avro":
        header = single_object_header("sample")
    else:
        header = b"\x00" + registry.writer_id("sample").to_bytes(4, "big")
    batch, kept, errors = decode_samples([header + avro_write("sample", r) for r in records], codec=encoding)
    assert errors == []
    assert kept == list(range(len(records)))
    again = batch_to_samples(batch)
    for mine, theirs in zip(again, records, strict=True):
        want = validate_sample(theirs)
        head = ("ts", "node", "job", "seq")
        assert [mine[f] for f in head] == [want[f] for f in head]
        assert {m: v for m, v in mine["metrics"].items() if m in want["metrics"]} == want["metrics"]
