"""The numba scanner of raw samples (``schemas/_json_scan.py``) against the orjson path as oracle:
every batch it accepts decodes bit for bit as orjson decodes it, and every batch with something
unusual in it falls back whole, with the orjson path's errors."""

from __future__ import annotations

import decimal
import json
import math
from collections.abc import Iterator, Sequence

import numpy as np
import orjson
import pytest
from perfsift.operators import Batch
from perfsift.schemas import batches as batches_mod
from perfsift.schemas import decode_samples
from perfsift.schemas.batches import _decode_scanned


def oracle(raw: Sequence[bytes | None]) -> tuple[Batch, list[int], list[tuple[int, str]]]:
    """decode_samples with the scanner switched off: orjson's path."""

    def off(values: Sequence[bytes | None]) -> Batch | None:
        return None

    original, batches_mod._decode_scanned = batches_mod._decode_scanned, off
    try:
        batch, kept, errors = decode_samples(raw)
    finally:
        batches_mod._decode_scanned = original
    return batch, kept, [(e.index, e.reason) for e in errors]


def assert_same(raw: Sequence[bytes | None], scanned: bool) -> Batch:
    """decode_samples equals the oracle bit for bit; the scanner took the batch iff ``scanned``."""
    assert (_decode_scanned(raw) is not None) == scanned
    a, kept_a, err_a = decode_samples(raw)
    b, kept_b, err_b = oracle(raw)
    assert kept_a == kept_b
    assert [(e.index, e.reason) for e in err_a] == err_b
    assert (a.metrics, a.nodes, a.jobs) == (b.metrics, b.nodes, b.jobs)
    for col in ("ts", "node_idx", "job_idx", "seq", "values"):
        x, y = getattr(a, col), getattr(b, col)
        assert x.dtype == y.dtype and x.shape == y.shape and x.tobytes() == y.tobytes(), col
    return a


def sample(ts: object, node: str, job: str, seq: object, metrics: str) -> bytes:
    """A message with the numbers as given text (``metrics`` is the inside of its object)."""
    return f'{{"ts":{ts},"node":"{node}","job":"{job}","seq":{seq},"metrics":{{{metrics}}}}}'.encode()


def test_random_doubles_decode_bit_for_bit() -> None:
    rng = np.random.default_rng(7)
    k, names = 400, [f"m{j}" for j in range(12)]
    scale = 10.0 ** rng.integers(-300, 300, size=(k, 12))
    vals = rng.normal(size=(k, 12)) * scale
    raw = [
        orjson.dumps({"ts": 1.7e9 + i * 0.1, "node": f"n{i % 7}", "job": f"j{i % 3}", "seq": i,
                      "metrics": dict(zip(names, vals[i].tolist(), strict=True))})
        for i in range(k)
    ]  # fmt: skip
    b = assert_same(raw, scanned=True)
    assert np.array_equal(b.values, vals) and b.nodes[:3] == ("n0", "n1", "n2") and b.jobs == ("j0", "j1", "j2")


def decimal_strings(rng: np.random.Generator, k: int) -> Iterator[str]:
    """Decimal numbers of 1-19 significant digits, exponents that keep them normal doubles, and
    the decimal expansions of midpoints between neighbouring doubles cut to 17-19 digits (the
    cases a naive conversion rounds wrongly)."""
    ctx = decimal.Context(prec=19)
    for _ in range(k):
        digits = int(rng.integers(1, 20))
        mant = "".join(map(str, rng.integers(0, 10, size=digits)))
        mant = str(int(rng.integers(1, 10))) + mant[1:]
        point = int(rng.integers(0, digits + 1))
        exp = int(rng.integers(-290, 290))
        sign = "-" if rng.random() < 0.3 else ""
        frac = f"{mant[:point] or '0'}.{mant[point:]}" if point < digits else mant
        yield f"{sign}{frac}e{exp}" if rng.random() < 0.7 else f"{sign}{frac}"
        x = float(rng.normal() * 10.0 ** int(rng.integers(-200, 200)))
        mid = (decimal.Decimal(x) + decimal.Decimal(math.nextafter(x, math.inf))) / 2
        yield format(ctx.create_decimal(mid).normalize(decimal.Context(prec=int(rng.integers(17, 20)))), "e")


def test_decimal_strings_round_as_orjson_and_float_do() -> None:
    rng = np.random.default_rng(11)
    texts = list(decimal_strings(rng, 3000))
    names = [f"v{j}" for j in range(10)]
    rows = [texts[i : i + 10] for i in range(0, len(texts) - 9, 10)]
    raw = [sample(1.0, "n", "j", i, ",".join(f'"{m}":{t}' for m, t in zip(names, row, strict=True)))
           for i, row in enumerate(rows)]  # fmt: skip
    b = assert_same(raw, scanned=True)
    expect = np.array([[float(t) for t in row] for row in rows])
    assert b.values.tobytes() == expect.tobytes()


@pytest.mark.parametrize(
    "text",
    [
        "0", "-0", "0.0", "-0.0", "-0e3", "0e-5", "1e5", "1E+5", "-2.5e-300", "1.7976931348623157e308",
        "2.2250738585072014e-308", "9007199254740993", "9007199254740995", "-9223372036854775807",
        "1234567890123456789", "0.30000000000000004", "123456789012345678e-30", "5e-1", "4.9406564584124654e-300",
        "0.000000000000000000000000000001234",
    ],
)  # fmt: skip
def test_edge_numbers_decode_as_orjson_does(text: str) -> None:
    """Negative zero (an integer's is +0.0, a fraction's -0.0), exponents, integers past 2**53
    (rounded half to even), the largest and smallest normal double."""
    b = assert_same([sample(text, "n", "j", 1, f'"x":{text},"y":1.5')], scanned=True)
    want = orjson.loads(text)
    assert b.values[0, 0].tobytes() == np.float64(want).tobytes() == b.ts[0].tobytes()


def test_whitespace_between_tokens_is_accepted() -> None:
    recs = [{"ts": 1.5, "node": "n1", "job": "j", "seq": 3, "metrics": {"a": 1.25, "b": -7}}] * 3
    raw = [
        json.dumps(recs[0]).encode(),
        json.dumps(recs[1], indent=2).encode(),
        b" \t\n" + orjson.dumps(recs[2]) + b"\r\n",
    ]
    b = assert_same(raw, scanned=True)
    assert b.values.tolist() == [[1.25, -7.0]] * 3


GOOD = sample(1.0, "n1", "j", 1, '"a":1.0,"b":2.0')


@pytest.mark.parametrize(
    "odd",
    [
        None,  # a null message
        b"",
        sample(1.0, "n1", "j", 1, '"a":null,"b":2.0'),  # a missing value
        sample(1.0, "n1", "j", 1, '"a":true,"b":2.0'),
        sample(1.0, "n1", "j", 1, '"a":NaN,"b":2.0'),
        sample(1.0, "n1", "j", 1, '"a":1e400,"b":2.0'),  # infinite
        sample(1.0, "n1", "j", 1, '"a":1e-320,"b":2.0'),  # subnormal
        sample(1.0, "n1", "j", 1, '"a":01,"b":2.0'),  # a leading zero: not JSON
        sample(1.0, "n1", "j", 1, '"a":1.,"b":2.0'),
        sample(1.0, "n1", "j", 1, '"a":12345678901234567890,"b":2.0'),  # 20 digits
        sample(1.0, "n1", "j", 1, '"a":0.1000000000000000055511151231257827,"b":2.0'),  # too many digits
        sample(1.0, "n1", "j", 1, '"a":100000000000000000000000e-10,"b":2.0'),
        sample(1.0, "n1", "j", 1, '"b":2.0,"a":1.0'),  # other metric order
        sample(1.0, "n1", "j", 1, '"a":1.0'),  # fewer metrics
        sample(1.0, "n1", "j", 1, '"a":1.0,"b":2.0,"c":3.0'),
        sample(1.0, "n1", "j", 1, '"a":1.0,"a":2.0'),
        sample(1.0, "n\\u0031", "j", 1, '"a":1.0,"b":2.0'),  # an escape
        sample(1.0, "nœud", "j", 1, '"a":1.0,"b":2.0'),  # unicode
        sample(1.0, "", "j", 1, '"a":1.0,"b":2.0'),  # an empty node
        sample(1.0, "n1", "j", 1.0, '"a":1.0,"b":2.0'),  # a float seq
        sample(1.0, "n1", "j", 9223372036854775808, '"a":1.0,"b":2.0'),  # seq past int64
        sample('"x"', "n1", "j", 1, '"a":1.0,"b":2.0'),
        b'{"node":"n1","ts":1.0,"job":"j","seq":1,"metrics":{"a":1.0,"b":2.0}}',  # another key order
        b'{"ts":1.0,"node":"n1","seq":1,"metrics":{"a":1.0,"b":2.0}}',  # no job
        b'{"ts":1.0,"node":"n1","job":"j","seq":1,"metrics":{"a":1.0,"b":2.0},"warm":true}',
        GOOD + b"x",  # trailing bytes
        GOOD[:-1],  # cut short
        b"[1, 2]",
    ],
)  # fmt: skip
def test_anything_unusual_falls_back_to_the_orjson_path_whole(odd: bytes | None) -> None:
    raw = [GOOD, odd, GOOD]
    assert_same(raw, scanned=False)


def test_names_and_nodes_keep_their_order_of_first_appearance() -> None:
    raw = [sample(float(i), f"n{(i * 5) % 11}", f"j{i % 2}", i, '"z":1,"a":2') for i in range(30)]
    b = assert_same(raw, scanned=True)
    assert b.metrics == ("z", "a") and b.nodes[:3] == ("n0", "n5", "n10") and b.jobs == ("j0", "j1")
    assert [b.nodes[i] for i in b.node_idx.tolist()] == [f"n{(i * 5) % 11}" for i in range(30)]
