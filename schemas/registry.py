"""Schema Registry Avro (``encoding: confluent-avro``): the framing every Confluent-compatible tool
reads (ksqlDB, Flink, Kafka Connect's AvroConverter, Kafka UIs, kcat ``-s avro``).

A message is the magic byte ``0``, the writer schema's id (4 bytes, big-endian) and the Avro
binary body. The writer registers (or, with ``auto.register.schemas: false``, looks up) the record
kind's schema (``schemas/*.avsc``) under the subject ``<topic>-value`` once per topic (Confluent's
TopicNameStrategy); a kind written before any topic was named is registered under its record's
full name (RecordNameStrategy, e.g. ``perfsift.Sample``). Readers fetch the writer schema by the id
in the message, once per id, and resolve it to perfsift's schema of the kind (so records written by
another producer with a compatible schema read too). The body is written and read with fastavro's
schemaless writer and reader, the same path as ``encoding: avro``.

The client is confluent-kafka's ``SchemaRegistryClient`` (``mock://...`` URLs give its in-memory
registry). :func:`registry_for` shares one client per configuration in a process, so every stage
and reader of a process sees the same ids (and, for ``mock://``, the same registry).
"""

from __future__ import annotations

import io
import json
import os
import threading
from collections.abc import Mapping
from functools import cache
from importlib import resources
from typing import Any

import fastavro
from fastavro.read import SchemaResolutionError
from perfsift.schemas.forecast_wire import complete_forecast, forecast_on_wire
from perfsift.schemas.records import SCHEMA_NAMES, RecordError, load_schema, validate_sample

MAGIC = 0
HEADER_BYTES = 5
ENCODING = "confluent-avro"
#: environment variables ``PERFSIFT_SR_<KEY>`` give ``schema_registry`` settings (``_`` -> ``.``,
#: lower case): PERFSIFT_SR_URL, PERFSIFT_SR_BASIC_AUTH_USER_INFO, PERFSIFT_SR_SSL_CA_LOCATION, ...
ENV_PREFIX = "PERFSIFT_SR_"
#: settings perfsift reads itself; the others go to ``SchemaRegistryClient``
OWN_SETTINGS = ("auto.register.schemas",)
#: client settings that are numbers (the file and the environment give text)
_NUMBERS = (
    "timeout",
    "cache.capacity",
    "cache.latest.ttl.sec",
    "max.retries",
    "retries.wait.ms",
    "retries.max.wait.ms",
)


def registry_settings(section: Mapping[str, Any] | None = None, env: Mapping[str, str] | None = None) -> dict[str, str]:
    """The registry settings: the pipeline file's ``schema_registry:`` section below
    ``PERFSIFT_SR_*`` environment variables."""
    out = {str(k): str(v).lower() if isinstance(v, bool) else str(v) for k, v in (section or {}).items()}
    for key, value in (os.environ if env is None else env).items():
        if key.startswith(ENV_PREFIX) and len(key) > len(ENV_PREFIX):
            out[key[len(ENV_PREFIX) :].lower().replace("_", ".")] = value
    return out


class RegistryError(RuntimeError):
    """The registry cannot be reached or refuses a schema: the stage cannot go on (not a bad record)."""


@cache
def _schema_text(kind: str) -> str:
    # stripped, as AvroSerializer sends a schema (the mock registry compares the text)
    return resources.files("perfsift.schemas").joinpath(f"{kind}.avsc").read_text().strip()


@cache
def _canonical(kind: str) -> str:
    return str(fastavro.schema.to_parsing_canonical_form(load_schema(kind)))


class SchemaRegistry:
    """One registry: ids per (subject, kind) registered by this process and writer schemas by id,
    each asked for once (thread-safe: stages of a process share it)."""

    def __init__(self, settings: Mapping[str, str]) -> None:
        from confluent_kafka.schema_registry import SchemaRegistryClient

        conf: dict[str, Any] = {k: v for k, v in settings.items() if k not in OWN_SETTINGS}
        for key in set(_NUMBERS) & set(conf):
            try:
                conf[key] = float(conf[key]) if "." in str(conf[key]) else int(conf[key])
            except ValueError:
                raise ValueError(f"schema_registry.{key} must be a number, got {conf[key]!r}") from None
        if not conf.get("url"):
            raise ValueError("encoding confluent-avro needs schema_registry.url (pipeline file or PERFSIFT_SR_URL)")
        self.auto_register = settings.get("auto.register.schemas", "true").lower() in ("1", "true", "yes")
        self.url = conf["url"]
        self.client = SchemaRegistryClient.new_client(conf)
        self._lock = threading.Lock()
        self._subject_ids: dict[tuple[str, str], int] = {}
        #: the id a kind is written with (the first subject it was registered under)
        self._kind_ids: dict[str, int] = {}
        #: writer schema by id: (parsed schema, the kind whose own schema it is, or None)
        self._writers: dict[int, tuple[Any, str | None]] = {}

    def register(self, subject: str, kind: str) -> int:
        """The id of ``kind``'s schema under ``subject``: registered, or looked up when
        ``auto.register.schemas`` is false; asked once per (subject, kind)."""
        with self._lock:
            known = self._subject_ids.get((subject, kind))
            if known is not None:
                return known
            from confluent_kafka.schema_registry import Schema
            from confluent_kafka.schema_registry.error import SchemaRegistryError

            schema = Schema(_schema_text(kind), "AVRO")
            try:
                if self.auto_register:
                    schema_id = int(self.client.register_schema(subject, schema))
                else:
                    schema_id = int(self.client.lookup_schema(subject, schema).schema_id)  # type: ignore[arg-type]
            except SchemaRegistryError as exc:
                why = f"{kind} schema under subject {subject!r}: {exc}"
                raise RegistryError(f"schema registry {self.url}: {why}") from None
            except Exception as exc:  # the transport's (httpx) errors: the registry is not there
                raise RegistryError(f"schema registry {self.url} cannot be reached: {exc}") from None
            self._subject_ids[(subject, kind)] = schema_id
            self._kind_ids.setdefault(kind, schema_id)
            self._writers[schema_id] = (load_schema(kind), kind)
            return schema_id

    def writer_id(self, kind: str) -> int:
        """The id ``kind`` is written with (registered under its record name if no topic was)."""
        schema_id = self._kind_ids.get(kind)
        if schema_id is None:
            schema_id = self.register(str(load_schema(kind)["name"]), kind)
        return schema_id

    def writer(self, schema_id: int, where: str = "") -> tuple[Any, str | None]:
        """The writer schema of ``schema_id`` (fetched once) and the kind it is identical to, if any."""
        found = self._writers.get(schema_id)
        if found is not None:
            return found
        from confluent_kafka.schema_registry.error import SchemaRegistryError

        try:
            schema = self.client.get_schema(schema_id)
        except SchemaRegistryError as exc:
            if exc.http_status_code == 404:  # a record naming an id nobody registered
                raise RecordError(f"schema registry has no schema id {schema_id}: {exc}", where) from None
            raise RegistryError(f"schema registry {self.url}: schema id {schema_id}: {exc}") from None
        except Exception as exc:
            raise RegistryError(f"schema registry {self.url} cannot be reached: {exc}") from None
        if (schema.schema_type or "AVRO") != "AVRO" or schema.schema_str is None:
            raise RecordError(f"schema id {schema_id} is {schema.schema_type}, not Avro", where)
        parsed = fastavro.parse_schema(json.loads(schema.schema_str))
        canonical = str(fastavro.schema.to_parsing_canonical_form(parsed))
        same = next((k for k in SCHEMA_NAMES if _canonical(k) == canonical), None)
        with self._lock:
            self._writers[schema_id] = (parsed, same)
        return parsed, same


_REGISTRIES: dict[tuple[tuple[str, str], ...], SchemaRegistry] = {}
_REGISTRIES_LOCK = threading.Lock()


def registry_for(settings: Mapping[str, str]) -> SchemaRegistry:
    """The process's registry for these settings (one client per distinct configuration)."""
    key = tuple(sorted((str(k), str(v)) for k, v in settings.items()))
    with _REGISTRIES_LOCK:
        reg = _REGISTRIES.get(key)
        if reg is None:
            reg = _REGISTRIES[key] = SchemaRegistry(settings)
        return reg


_current: SchemaRegistry | None = None


def use_registry(settings: Mapping[str, str]) -> SchemaRegistry:
    """Make the registry of ``settings`` the one ``encoding: confluent-avro`` codecs use in this process."""
    global _current
    _current = registry_for(settings)
    return _current


def current_registry() -> SchemaRegistry:
    """The registry set by :func:`use_registry`, else the one ``PERFSIFT_SR_*`` configures."""
    if _current is not None:
        return _current
    return use_registry(registry_settings())


def schema_id_of(data: bytes) -> int | None:
    """The schema id of a Schema Registry framed message, None for anything else."""
    if len(data) < HEADER_BYTES or data[0] != MAGIC:
        return None
    return int.from_bytes(data[1:HEADER_BYTES], "big")


class ConfluentAvroCodec:
    """Avro in Schema Registry framing for one kind of record (see the module docstring)."""

    name = ENCODING

    def __init__(self, schema: str = "sample", registry: SchemaRegistry | None = None) -> None:
        self.schema = schema
        self.registry = registry or current_registry()
        self._parsed = load_schema(schema)
        self._header: bytes | None = None

    def header(self) -> bytes:
        """Magic byte and the id this kind is written with (asked once)."""
        if self._header is None:
            self._header = bytes([MAGIC]) + self.registry.writer_id(self.schema).to_bytes(4, "big")
        return self._header

    def encode(self, record: dict[str, Any]) -> bytes:
        return write_avro(self.header(), self._parsed, self.schema, record)

    def decode(self, data: bytes, where: str = "") -> dict[str, Any]:
        schema_id = schema_id_of(data)
        if schema_id is None:
            raise RecordError("not a Schema Registry Avro record (no magic byte 0 and schema id)", where)
        writer, same = self.registry.writer(schema_id, where)
        reader = None if same == self.schema else self._parsed
        try:
            rec = fastavro.schemaless_reader(io.BytesIO(data[HEADER_BYTES:]), writer, reader)
        except (ValueError, EOFError, IndexError, UnicodeDecodeError, TypeError, SchemaResolutionError) as exc:
            raise RecordError(f"truncated, corrupt or incompatible Avro record: {exc!r}", where) from None
        if not isinstance(rec, dict):
            raise RecordError("Avro record did not decode to a record", where)
        if self.schema == "sample":
            return validate_sample(rec, where)
        return complete_forecast(rec) if self.schema == "forecast" else rec


def write_avro(header: bytes, parsed: Any, schema: str, record: dict[str, Any]) -> bytes:
    """``header`` and then ``record`` in Avro binary (fastavro's schemaless writer, NaN as null):
    the body of both Avro codecs, which differ only in their header."""
    buf = io.BytesIO()
    buf.write(header)
    if schema == "forecast":  # the bounds go out as null: readers derive them (schemas/forecast_wire.py)
        record = forecast_on_wire(record)
    try:
        fastavro.schemaless_writer(buf, parsed, without_nan(record))
    except (ValueError, TypeError, KeyError) as exc:
        raise RecordError(f"does not fit the Avro schema {schema!r}: {exc}") from None
    return buf.getvalue()


def without_nan(record: Any) -> Any:
    """``record`` with every NaN as null (Avro's ``["null", "double"]``); the record itself when it
    holds none (a scan is cheaper than rebuilding it). Both Avro codecs write through this."""
    return _nan_to_none(record) if _has_nan(record) else record


def _has_nan(obj: Any) -> bool:
    """Whether a record holds a NaN anywhere (a scan: cheaper than rebuilding the record)."""
    for v in obj.values() if isinstance(obj, dict) else obj:
        if v != v or (isinstance(v, dict | list) and _has_nan(v)):
            return True
    return False


def _nan_to_none(obj: Any) -> Any:
    """NaN as null (Avro's ``["null", "double"]``), as the single-object codec writes it."""
    if isinstance(obj, float) and obj != obj:
        return None
    if isinstance(obj, dict):
        return {k: _nan_to_none(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_nan_to_none(v) for v in obj]
    return obj
