"""One decoder for a message of any encoding perfsift reads or writes, told apart by its first
bytes (what ``perfsift tail`` prints with):

============================  ==================================================  ============
encoding                      how it starts                                       name
============================  ==================================================  ============
Avro single-object            ``C3 01`` + the schema's CRC-64-AVRO fingerprint     ``avro``
Schema Registry Avro          ``00`` + 4-byte schema id (asked of the registry)    ``confluent-avro``
JSON                          ``{`` or ``[`` (after white space)                   ``json``
OTLP protobuf metrics         field 1 of ``ExportMetricsServiceRequest`` (``0A``)  ``otlp_proto``
column frame (many samples)   ``PSF`` + version byte (:mod:`.frames`)              ``columns``
============================  ==================================================  ============

A column frame decodes to the list of its samples; every other encoding to one record.

Anything else is returned as text (``text``) or, when it is not UTF-8, as hex (``bytes``).
Other framings plug in with :func:`register_decoder`; they are tried first, in the order they
were registered.
"""

from __future__ import annotations

import io
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from typing import Any

import fastavro
import orjson
from perfsift.schemas.codecs import single_object_header
from perfsift.schemas.forecast_wire import complete_forecast, is_forecast
from perfsift.schemas.frames import decode_frame, is_frame
from perfsift.schemas.records import SCHEMA_NAMES, RecordError, load_schema
from perfsift.schemas.registry import HEADER_BYTES, MAGIC, SchemaRegistry, current_registry, schema_id_of

_AVRO_MARKER = b"\xc3\x01"


@dataclass
class Decoded:
    """A decoded message: the record (a dict or list for structured encodings, a str otherwise)
    and the name of the encoding it was found in."""

    record: Any
    encoding: str


#: framings plugged in by :func:`register_decoder`: (name, matches(data), decode(data))
_PLUGINS: list[tuple[str, Callable[[bytes], bool], Callable[[bytes], Any]]] = []


def register_decoder(name: str, matches: Callable[[bytes], bool], decode: Callable[[bytes], Any]) -> None:
    """Let :func:`decode_any` read another framing: ``matches(data)`` says (cheaply, by its first
    bytes) whether a message is in it, ``decode(data)`` returns its record or raises
    :class:`~perfsift.schemas.records.RecordError`."""
    _PLUGINS[:] = [p for p in _PLUGINS if p[0] != name]
    _PLUGINS.append((name, matches, decode))


@cache
def _single_object_kinds() -> dict[bytes, str]:
    """The 10-byte single-object header of each schema in ``schemas/`` -> its kind."""
    return {single_object_header(load_schema(kind)): kind for kind in SCHEMA_NAMES}


def _avro(data: bytes) -> Any:
    kind = _single_object_kinds().get(data[:10])
    if kind is None:
        raise RecordError(f"Avro single-object record of an unknown schema (fingerprint {data[2:10].hex()})")
    try:
        rec = fastavro.schemaless_reader(io.BytesIO(data[10:]), load_schema(kind), None)
    except (ValueError, EOFError, IndexError, UnicodeDecodeError, TypeError) as exc:
        raise RecordError(f"truncated or corrupt Avro record: {exc!r}") from None
    return rec


def _registry_avro(data: bytes, registry: SchemaRegistry | None) -> Any:
    try:
        reg = registry or current_registry()
    except ValueError:
        raise RecordError("Schema Registry Avro, but no registry is configured (PERFSIFT_SR_URL)") from None
    writer, _ = reg.writer(schema_id_of(data) or 0)
    try:
        return fastavro.schemaless_reader(io.BytesIO(data[HEADER_BYTES:]), writer, None)
    except (ValueError, EOFError, IndexError, UnicodeDecodeError, TypeError) as exc:
        raise RecordError(f"truncated or corrupt Avro record: {exc!r}") from None


def _otlp(data: bytes) -> Any:
    from google.protobuf.json_format import MessageToDict
    from google.protobuf.message import DecodeError
    from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest

    try:
        msg = ExportMetricsServiceRequest.FromString(data)
    except DecodeError as exc:
        raise RecordError(f"not an OTLP ExportMetricsServiceRequest: {exc}") from None
    if not msg.resource_metrics or msg.ByteSize() != len(data):
        raise RecordError("not an OTLP ExportMetricsServiceRequest")
    return MessageToDict(msg)


def decode_any(data: bytes | None, registry: SchemaRegistry | None = None) -> Decoded:
    """The record in ``data``, whatever its encoding (see the module docstring). A message that
    looks like one encoding but does not decode raises :class:`RecordError`; ``registry`` is the
    Schema Registry to ask for ids (default: the process's, :func:`current_registry`)."""
    if data is None:
        return Decoded(None, "null")
    for name, matches, decode in _PLUGINS:
        if matches(data):
            return Decoded(decode(data), name)
    decoded = _decode_builtin(data, registry)
    if is_forecast(decoded.record):  # its bounds are not on the wire (schemas/forecast_wire.py)
        complete_forecast(decoded.record)
    return decoded


def _decode_builtin(data: bytes, registry: SchemaRegistry | None) -> Decoded:
    if is_frame(data):
        from perfsift.schemas.batches import batch_to_samples

        return Decoded(batch_to_samples(decode_frame(data)), "columns")
    if data.startswith(_AVRO_MARKER) and len(data) >= 10:
        return Decoded(_avro(data), "avro")
    if len(data) >= HEADER_BYTES and data[0] == MAGIC:
        return Decoded(_registry_avro(data, registry), "confluent-avro")
    head = data.lstrip()[:1]
    if head in (b"{", b"["):
        try:
            return Decoded(orjson.loads(data), "json")
        except orjson.JSONDecodeError as exc:
            raise RecordError(f"not valid JSON: {exc}") from None
    if data[:1] == b"\x0a":
        try:
            return Decoded(_otlp(data), "otlp_proto")
        except RecordError:
            pass  # text that happens to start with a newline, ...
    try:
        return Decoded(data.decode("utf-8"), "text")
    except UnicodeDecodeError:
        return Decoded(data.hex(), "bytes")
