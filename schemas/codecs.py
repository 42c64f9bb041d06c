"""Codecs for single records of any schema: JSON (orjson, the default encoding) and Avro
(fastavro). Avro uses the schemas beside this module and Avro's single-object encoding (2 marker
bytes + the schema's CRC-64-AVRO fingerprint + body), so a reader can tell which schema wrote a
message without a schema registry."""

from __future__ import annotations

import io
from typing import Any

import fastavro
import orjson
from perfsift.schemas.forecast_wire import complete_forecast, forecast_on_wire
from perfsift.schemas.records import RecordError, load_schema, validate_sample
from perfsift.schemas.registry import ConfluentAvroCodec, write_avro

_AVRO_MARKER = b"\xc3\x01"


class JsonCodec:
    """orjson codec for any record type. NaN and infinities are written as null."""

    name = "json"

    def __init__(self, schema: str = "sample") -> None:
        self.schema = schema

    def encode(self, record: dict[str, Any]) -> bytes:
        return orjson.dumps(forecast_on_wire(record) if self.schema == "forecast" else record)

    def decode(self, data: bytes, where: str = "") -> dict[str, Any]:
        try:
            obj = orjson.loads(data)
        except orjson.JSONDecodeError as exc:
            raise RecordError(f"not valid JSON: {exc}", where) from None
        if self.schema == "sample":
            return validate_sample(obj, where)
        if type(obj) is not dict:
            raise RecordError(f"a {self.schema} record must be a JSON object", where)
        return complete_forecast(obj) if self.schema == "forecast" else obj


def single_object_header(parsed: Any) -> bytes:
    """Avro single-object encoding's 10-byte header of a parsed schema: the marker ``C3 01`` and
    the schema's CRC-64-AVRO fingerprint, little-endian. fastavro's hex string already lists the
    bytes little-endian (``"null"`` gives ``8a8f25cce724dd63`` for 0x63dd24e7cc258f8a), so it is
    taken as it is; reversing it (as before #30) wrote a big-endian fingerprint that Apache Avro's
    readers do not recognise (tests/unit/test_avro_referee.py)."""
    fp = fastavro.schema.fingerprint(fastavro.schema.to_parsing_canonical_form(parsed), "CRC-64-AVRO")
    return _AVRO_MARKER + bytes.fromhex(fp)


class AvroCodec:
    """fastavro codec in Avro single-object encoding for one of the schemas in this folder."""

    name = "avro"

    def __init__(self, schema: str = "sample") -> None:
        self.schema = schema
        self._parsed = load_schema(schema)
        self._header = single_object_header(self._parsed)

    def encode(self, record: dict[str, Any]) -> bytes:
        return write_avro(self._header, self._parsed, self.schema, record)

    def decode(self, data: bytes, where: str = "") -> dict[str, Any]:
        if not data.startswith(self._header):
            raise RecordError(
                f"not an Avro single-object record of schema {self.schema!r} (wrong marker or fingerprint)",
                where,
            )
        try:
            rec = fastavro.schemaless_reader(io.BytesIO(data[len(self._header) :]), self._parsed, None)
        except (ValueError, EOFError, IndexError, UnicodeDecodeError, TypeError) as exc:
            raise RecordError(f"truncated or corrupt Avro record: {exc!r}", where) from None
        if not isinstance(rec, dict):
            raise RecordError("Avro record did not decode to a record", where)
        if self.schema == "sample":
            return validate_sample(rec, where)
        return complete_forecast(rec) if self.schema == "forecast" else rec


#: a record codec of any of the three wire encodings
RecordCodec = JsonCodec | AvroCodec | ConfluentAvroCodec
#: the record codec of each wire encoding, by its name
CODECS: dict[str, type[RecordCodec]] = {"json": JsonCodec, "avro": AvroCodec, "confluent-avro": ConfluentAvroCodec}


def codec_for(name: str, schema: str = "sample") -> RecordCodec:
    """The codec called ``name`` ("json", "avro" or "confluent-avro": Schema Registry framing,
    :mod:`~perfsift.schemas.registry`) for records of ``schema``."""
    codec = CODECS.get(name)
    if codec is None:
        raise ValueError(f"unknown encoding {name!r}: use 'json', 'avro' or 'confluent-avro'")
    return codec(schema)
