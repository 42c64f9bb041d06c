"""Any message perfsift writes, as records for a reader such as ``perfsift tail``."""

from __future__ import annotations

from typing import Any

import orjson
from perfsift.schemas.batches import batch_to_samples
from perfsift.schemas.codecs import codec_for
from perfsift.schemas.frames import decode_frame, is_frame
from perfsift.schemas.records import SCHEMA_NAMES, RecordError

_AVRO_MARKER = b"\xc3\x01"


def decode_message(value: bytes) -> Any:
    """A column frame as its list of samples, an Avro single-object record by its schema's
    fingerprint, JSON as parsed; other bytes as text.

    >>> decode_message(b'{"ts": 1.0}')
    {'ts': 1.0}
    """
    if is_frame(value):
        return batch_to_samples(decode_frame(value))
    if value[:2] == _AVRO_MARKER:
        for schema in SCHEMA_NAMES:
            try:
                return codec_for("avro", schema).decode(value)
            except RecordError:  # another schema's fingerprint
                continue
    try:
        return orjson.loads(value)
    except orjson.JSONDecodeError:
        return value.decode("utf-8", "replace")
