"""decode_any: every encoding told apart by its first bytes, and a framing plugged in."""

from __future__ import annotations

import orjson
import pytest
from perfsift.schemas import AvroCodec, RecordError
from perfsift.schemas.detect import decode_any, register_decoder
from perfsift.streams.tail import StartAt, parse_offset

REC = {"ts": 1.0, "node": "n", "job": "j", "seq": 2, "metrics": {"x": 1.5, "y": None}}


def test_each_encoding_is_recognised() -> None:
    assert decode_any(orjson.dumps(REC)).record == REC and decode_any(orjson.dumps(REC)).encoding == "json"
    got = decode_any(AvroCodec("sample").encode(REC))
    assert got.encoding == "avro" and got.record["metrics"] == REC["metrics"] and got.record["seq"] == 2
    assert decode_any(b"plain words").record == "plain words"
    assert decode_any(b"\xff\xfe\x01").encoding == "bytes"
    assert decode_any(None).record is None


def test_a_broken_record_of_a_known_encoding_is_an_error() -> None:
    with pytest.raises(RecordError, match="not valid JSON"):
        decode_any(b'{"ts": ')
    with pytest.raises(RecordError, match="truncated"):
        decode_any(AvroCodec("sample").encode(REC)[:-4])
    with pytest.raises(RecordError, match="unknown schema"):
        decode_any(b"\xc3\x01" + bytes(8) + b"\x00")


def test_a_plugged_in_framing_is_tried_first() -> None:
    register_decoder("test-frame", lambda d: d.startswith(b"PF"), lambda d: orjson.loads(d[2:]))
    got = decode_any(b"PF" + orjson.dumps(REC))
    assert got.encoding == "test-frame" and got.record == REC
    assert decode_any(orjson.dumps(REC)).encoding == "json"  # others unchanged


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ("beginning", StartAt("beginning")),
        ("end", StartAt("end")),
        ("42", StartAt("absolute", 42)),
        ("-5", StartAt("relative", 5)),
        ("s@1700000000000", StartAt("time", 1700000000000)),
    ],
)
def test_offsets_parse_as_kcat_writes_them(text: str, want: StartAt) -> None:
    assert parse_offset(text) == want


@pytest.mark.parametrize("text", ["stored", "s@", "e@5", "1.5", ""])
def test_other_offsets_are_refused(text: str) -> None:
    with pytest.raises(ValueError, match="expected beginning"):
        parse_offset(text)
