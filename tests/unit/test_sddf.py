"""Pablo SDDF reader/writer (spec/SDDF.md): the shared examples, round trips, a property test,
malformed input with exact positions, and a fuzz run."""

from __future__ import annotations

import io
import random
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from perfsift.producers.sddf import (
    Attributes,
    Chars,
    Descriptor,
    Field,
    Record,
    SddfError,
    SddfWriter,
    read_sddf,
)
from perfsift.producers.traces import SddfMapping, iter_samples, sddf_samples
from perfsift.schemas import RecordError

EXAMPLES = Path(__file__).resolve().parents[1] / "data" / "sddf"  # copies of spec/sddf-examples
NODE = EXAMPLES / "node_metrics.ascii.sddf"
INTERVAL = EXAMPLES / "interval_events.ascii.sddf"
INTERVAL_BIN = EXAMPLES / "interval_events.binary.sddf"


def parse(data: bytes, name: str = "t.sddf") -> list:
    return list(read_sddf(io.BytesIO(data), name))


def write(packets: list, binary: bool) -> bytes:
    buf = io.BytesIO()
    w = SddfWriter(buf, binary=binary)
    for p in packets:
        w.write(p)
    return buf.getvalue()


# -- the shared examples ----------------------------------------------------------------------------


def test_node_metrics_example_parses_into_descriptors_and_records() -> None:
    packets = list(read_sddf(NODE))
    attrs, names_desc, sample_desc, _app_desc, names, *rest, app = packets
    samples = [r for r in rest if isinstance(r, Record)]
    assert isinstance(names_desc, Descriptor) and isinstance(sample_desc, Descriptor) and len(samples) == len(rest)
    assert isinstance(names, Record) and isinstance(app, Record)
    assert isinstance(attrs, Attributes) and dict(attrs.pairs)["converted by"] == "example only"
    assert [f.name for f in sample_desc.fields] == ["timestamp", "node", "values"]
    assert sample_desc.fields[0].attrs == (("timestamp", "Unix time of the sample"), ("units", "sec"))
    assert names_desc.fields[0] == Field("names", "char", 2, (("description", names_desc.fields[0].attrs[0][1]),))
    assert names.values[0].dims == (6, 24) and names.values[0].strings[3] == "MEM_memfree"
    assert [r["node"] for r in samples] == [5, 6, 7, 8]
    np.testing.assert_array_equal(samples[1]["values"], [52.8, 8.4, 0.1, 620415.0, 5.2, 34.0])
    assert app.descriptor.name == "batch completed" and app.values == (1700000000.0, 910, 0, 475000)


def test_node_metrics_example_maps_to_samples() -> None:
    samples = list(iter_samples(NODE))
    assert [s["node"] for s in samples] == ["5", "6", "7", "8", "app"]
    assert samples[1]["metrics"]["CPU_ALL_User%"] == 52.8 and len(samples[1]["metrics"]) == 6
    assert samples[-1]["metrics"] == {"processing delay": 910.0, "scheduling delay": 0.0, "records": 475000.0}
    only = list(iter_samples(NODE, mapping=SddfMapping(record="node sample")))
    assert len(only) == 4


def test_ascii_binary_ascii_round_trips_byte_for_byte() -> None:
    original = NODE.read_bytes()
    binary = write(list(read_sddf(NODE)), binary=True)
    assert write(parse(binary), binary=False) == original
    # the interval example: its ASCII becomes exactly the shared binary file, and back
    interval = list(read_sddf(INTERVAL))
    assert write(interval, binary=True) == INTERVAL_BIN.read_bytes()
    assert parse(INTERVAL_BIN.read_bytes()) == interval
    canonical = write(interval, binary=False)  # numbers in shortest round-trip form (0.00125, not 0.001250)
    assert write(parse(write(parse(canonical), binary=True)), binary=False) == canonical


def test_big_endian_binary_reads_the_same() -> None:
    packets = list(read_sddf(NODE))
    buf = io.BytesIO()
    w = SddfWriter(buf, binary=True, byteorder="big")
    for p in packets:
        w.write(p)
    assert buf.getvalue()[6] == 0 and parse(buf.getvalue()) == packets


# -- property test ------------------------------------------------------------------------------------

names = st.text(alphabet=st.characters(min_codepoint=32, max_codepoint=126, exclude_characters='"'), max_size=12)
ftypes = st.sampled_from(["int", "double", "float", "char"])


@st.composite
def stream(draw: st.DrawFn) -> list:
    packets: list = [Attributes(tuple(draw(st.dictionaries(names, names, max_size=3)).items()))]
    descs = []
    for tag in range(1, draw(st.integers(1, 3)) + 1):
        fields = []
        for i in range(draw(st.integers(1, 5))):
            t = draw(ftypes)
            dim = draw(st.integers(1, 2)) if t == "char" else draw(st.integers(0, 2))
            fields.append(
                Field(f"f{i}" + draw(names), t, dim, tuple(draw(st.dictionaries(names, names, max_size=2)).items()))
            )
        d = Descriptor(
            tag,
            f"rec{tag}" + draw(names),
            tuple(fields),
            tuple(draw(st.dictionaries(names, names, max_size=2)).items()),
        )
        descs.append(d)
        packets.append(d)
    for _ in range(draw(st.integers(0, 6))):
        d = draw(st.sampled_from(descs))
        packets.append(Record(d, tuple(draw(value(f)) for f in d.fields)))
    return packets


def value(f: Field) -> st.SearchStrategy:
    floats = st.floats(allow_nan=True, allow_infinity=True, width=32 if f.type == "float" else 64)
    scalar = st.integers(-(2**31), 2**31 - 1) if f.type == "int" else floats
    if f.type == "char":
        if f.dim == 1:
            return names.map(Chars.of)
        return st.lists(names, max_size=4).map(Chars.rows)
    if f.dim == 0:
        return scalar
    shape = st.lists(st.integers(0, 3), min_size=f.dim, max_size=f.dim)
    dtype = np.int64 if f.type == "int" else np.float64
    return shape.flatmap(lambda s: st.lists(scalar, min_size=int(np.prod(s)), max_size=int(np.prod(s))).map(
        lambda cells: np.array(cells, dtype=dtype).reshape(s)))  # fmt: skip


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(stream())
def test_random_streams_read_back_equal_in_both_variants(packets: list) -> None:
    for binary in (False, True):
        back = parse(write(packets, binary))
        assert back == packets
    assert write(parse(write(packets, True)), False) == write(packets, False)


# -- malformed input -------------------------------------------------------------------------------

GOOD = b'SDDFA\n#1:\n"r" {\n\tdouble\t"t";\n\tint\t"n";\n\tdouble\t"v"[];\n};;\n\n"r" { 1.0, 2, [2] { 3.0, 4.0 } };;\n'


@pytest.mark.parametrize(
    "data,where,message",
    [
        (GOOD[:-4], "t.sddf:9:1", "truncated packet"),
        (GOOD + b'"q" { 1 };;\n', "t.sddf:10:1", "unknown descriptor 'q'"),
        (GOOD.replace(b"2, [2]", b"2x, [2]"), "t.sddf:9:12", "bad number '2x' for int field 'n'"),
        (GOOD.replace(b"1.0, 2", b"1.0.0, 2"), "t.sddf:9:7", "bad number '1.0.0'"),
        (GOOD.replace(b"[2] { 3.0, 4.0 }", b"[3] { 3.0, 4.0 }"), "t.sddf:9:", "wrong array length"),
        (GOOD.replace(b"[2] { 3.0, 4.0 }", b"[2][2] { 3.0, 4.0 }"), "t.sddf:9:", "dimension"),
        (GOOD.replace(b'double\t"t"', b'decimal\t"t"'), "t.sddf:4:2", "unknown field type 'decimal'"),
        (GOOD.replace(b'"r" { 1.0', b'"r" { "1.0'), "t.sddf:9:7", "unterminated string"),
        (GOOD.replace(b"#1:", b"#one:"), "t.sddf:2:2", "bad tag 'one'"),
        (GOOD + b'#1:\n"s" { int "x"; };;\n', "t.sddf:10:1", "duplicate descriptor"),
    ],
)
def test_malformed_ascii_names_line_and_column(data: bytes, where: str, message: str) -> None:
    with pytest.raises(SddfError) as exc:
        parse(data)
    assert exc.value.where.startswith(where), exc.value.where
    assert message in exc.value.reason


def test_malformed_binary_names_the_byte_offset() -> None:
    good = INTERVAL_BIN.read_bytes()
    with pytest.raises(SddfError, match="runs past the end of the file") as exc:
        parse(good[:-3], "b.sddf")
    assert exc.value.where == "b.sddf@590"  # the last data packet starts at byte 590
    bad_len = bytearray(good)
    bad_len[0x13:0x17] = (10_000).to_bytes(4, "little")  # the first packet claims 10,000 bytes
    with pytest.raises(SddfError, match="runs past the end") as exc:
        parse(bytes(bad_len), "b.sddf")
    assert exc.value.where == "b.sddf@19"
    unknown = bytearray(good)
    unknown[0x1DF + 8 : 0x1DF + 12] = (99).to_bytes(4, "little")  # a data packet with tag 99
    with pytest.raises(SddfError, match="unknown descriptor tag 99"):
        parse(bytes(unknown))
    with pytest.raises(SddfError, match="header"):
        parse(good[:10])


def mutate(data: bytes, rng: random.Random) -> bytes:
    b = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        op = rng.random()
        i = rng.randrange(len(b)) if b else 0
        if op < 0.4 and b:
            b[i] = rng.randrange(256)
        elif op < 0.6:
            del b[i : i + rng.randint(1, 8)]
        elif op < 0.8:
            b[i:i] = rng.choice([b";;", b"{", b"}", b"[", b"]", b",", b'"', b"-", b"9" * 12, b"\xff", b"\0\0\0\x7f"])
        else:
            b = b[: rng.randrange(len(b) + 1)]
    return bytes(b)


def test_fuzzed_inputs_only_ever_raise_sddf_errors() -> None:
    """5,000 mutated inputs here; ``python -m tests.fuzz.fuzz_sddf`` runs 100,000+ (docs/benchmarks.md)."""
    seeds = [NODE.read_bytes(), INTERVAL.read_bytes(), INTERVAL_BIN.read_bytes()]
    rng = random.Random(0)
    outcomes = {"ok": 0, "error": 0}
    for _ in range(5000):
        data = mutate(rng.choice(seeds), rng)
        try:
            list(sddf_samples(read_sddf(io.BytesIO(data), "fuzz")))
            outcomes["ok"] += 1
        except RecordError as exc:
            assert exc.where.startswith("fuzz") or exc.where == ""
            outcomes["error"] += 1
    assert outcomes["ok"] > 100 and outcomes["error"] > 1000
