"""The wire encoding a pipeline runs with (``encoding:``), as one object chosen once: JSON (the
default), Avro single-object encoding, or Avro in Schema Registry framing (``confluent-avro``).

Everything that depends on the encoding is a method of :class:`Encoding`, so the runtime asks its
encoding object instead of comparing names: encode a batch's samples or records of any kind,
decode a micro-batch of samples (column frames in any encoding), warm the decoder up, get ready to
write (the Schema Registry's subjects), read what was written back as JSON lines. A new wire
encoding is a subclass here and its name in :data:`ENCODINGS` (with its record codec in
:data:`~perfsift.schemas.codecs.CODECS`).

>>> from perfsift.schemas import samples_to_batch
>>> json = encoding_for("json")
>>> wire = json.encode_batch(samples_to_batch([{"ts": 1.0, "node": "a", "metrics": {"x": 2.0}}]))
>>> wire
[b'{"ts":1.0,"node":"a","job":"default","seq":-1,"metrics":{"x":2.0}}']
>>> avro = encoding_for("avro")
>>> batch, kept, errors = avro.decode_samples(avro.encode_batch(json.decode_samples(wire)[0]))
>>> batch.nodes, batch.values.tolist(), kept, errors
(('a',), [[2.0]], [0], [])
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, ClassVar

import numpy as np
import numpy.typing as npt
import orjson
from perfsift.operators.batch import Batch
from perfsift.schemas.batches import batch_to_samples, decode_samples_by, json_fast, warm_up_decoder
from perfsift.schemas.codecs import CODECS, RecordCodec
from perfsift.schemas.detect import decode_any
from perfsift.schemas.encode import encode_batch_json
from perfsift.schemas.forecast_json import forecasts_json
from perfsift.schemas.forecast_wire import forecast_on_wire
from perfsift.schemas.records import RecordError
from perfsift.schemas.registry import ConfluentAvroCodec, SchemaRegistry, current_registry, registry_for, use_registry

#: decoded samples: the batch, the input position of each row, the records that did not decode
Decoded = tuple[Batch, list[int], list[RecordError]]
#: the event time of a JSON sample of the producers' shape, read without decoding the sample: a
#: JSON number right after ``{"ts":`` (what ``orjson.dumps`` writes for a sample dict)
_LEADING_TS = re.compile(rb'\{"ts":(-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?)[,}]')


class Encoding:
    """A wire encoding: records one at a time through the record codec of :attr:`name`
    (:data:`~perfsift.schemas.codecs.CODECS`), one codec per kind of record, made on first use.
    ``registry_settings`` concern only the encodings that need a Schema Registry."""

    #: the encoding's name in a pipeline file (``encoding:``)
    name: ClassVar[str]
    #: whether records built column-wise in JSON (a kind's ``columnar_json``) are this encoding's
    columnar: ClassVar[bool] = False
    #: whether it needs a Schema Registry (``schema_registry.url``)
    needs_registry: ClassVar[bool] = False

    def __init__(self, registry_settings: Mapping[str, str] | None = None) -> None:
        self._codecs: dict[str, RecordCodec] = {}

    def __repr__(self) -> str:
        return f"<encoding {self.name}>"

    def codec(self, schema: str = "sample") -> RecordCodec:
        """The record codec of ``schema`` in this encoding."""
        codec = self._codecs.get(schema)
        if codec is None:
            codec = self._codecs[schema] = self._new_codec(schema)
        return codec

    def _new_codec(self, schema: str) -> RecordCodec:
        return CODECS[self.name](schema)

    def encoder(self, schema: str = "sample") -> Callable[[dict[str, Any]], bytes]:
        """The function that encodes one record of ``schema``."""
        return self.codec(schema).encode

    def encode_records(self, records: Iterable[dict[str, Any]], schema: str = "sample") -> list[bytes]:
        """Records of ``schema``, each encoded (forecasts without what readers derive:
        :mod:`~perfsift.schemas.forecast_wire`)."""
        encode = self.encoder(schema)
        return [encode(r) for r in records]

    def encode_batch(self, batch: Batch, schema: str = "sample") -> list[bytes]:
        """One encoded record of ``schema`` per batch row (see :func:`batch_to_samples`)."""
        return self.encode_records(batch_to_samples(batch), schema)

    def decode(self, data: bytes, schema: str = "sample", where: str = "") -> dict[str, Any]:
        """One record of ``schema`` (:class:`RecordError` when it is not one)."""
        return self.codec(schema).decode(data, where)

    def decode_samples(self, values: Sequence[bytes | None], where: Callable[[int], str] | None = None) -> Decoded:
        """A micro-batch of messages as one column batch (:func:`decode_samples_by`)."""
        return decode_samples_by(values, where, self.codec("sample").decode)

    def event_times(self, values: Sequence[bytes | None]) -> npt.NDArray[np.float64]:
        """Each sample message's newest event time (a column frame's newest row; ``-inf`` for one
        that does not decode), for event-time alignment (:mod:`~perfsift.streams.align`): here the
        messages decoded, vectorised per batch."""
        out = np.full(len(values), -math.inf)
        if len(values):
            batch, kept, _ = self.decode_samples(values, None)
            if len(batch):
                np.maximum.at(out, np.asarray(kept, dtype=np.intp), batch.ts)
        return out

    def warm_up(self) -> None:
        """Load what decoding the first micro-batch would otherwise wait for (nothing here)."""

    def prepare(self, subjects: Mapping[str, str] | None = None) -> None:
        """Get this process ready to write: the Schema Registry subjects (``subject -> kind``) of
        the topics it writes (nothing to do here)."""

    def json_lines(self, values: Iterable[bytes]) -> Iterable[bytes]:
        """Messages as written, as JSON text (a report folder's lines)."""
        return (orjson.dumps(decode_any(v).record) for v in values)


class Json(Encoding):
    """orjson; a batch's samples and forecasts built column-wise, samples decoded by the numba
    scanner or in one pass when they have one shape (:func:`json_fast`)."""

    name = "json"
    columnar = True

    def encoder(self, schema: str = "sample") -> Callable[[dict[str, Any]], bytes]:
        if schema == "forecast":
            return lambda r: orjson.dumps(forecast_on_wire(r))
        return orjson.dumps

    def encode_records(self, records: Iterable[dict[str, Any]], schema: str = "sample") -> list[bytes]:
        if schema == "forecast":
            return forecasts_json(records)  # column-wise, the bytes of forecast_on_wire's dicts
        return [orjson.dumps(r) for r in records]

    def encode_batch(self, batch: Batch, schema: str = "sample") -> list[bytes]:
        return encode_batch_json(batch)

    def decode_samples(self, values: Sequence[bytes | None], where: Callable[[int], str] | None = None) -> Decoded:
        return decode_samples_by(values, where, orjson.loads, json_fast)

    def event_times(self, values: Sequence[bytes | None]) -> npt.NDArray[np.float64]:
        """A sample that starts with its ``ts`` (the producers' shape) gives that number (``float``
        of its text: correctly rounded, as the decoders' numbers are) without being decoded, since
        the stage decodes it again when it is let through; the others are decoded."""
        match = _LEADING_TS.match
        found = [match(v) if v is not None else None for v in values]
        out = np.array([float(m[1]) if m is not None else math.nan for m in found], dtype=np.float64)
        bad = np.flatnonzero(~np.isfinite(out)).tolist()  # another shape, or a time the decoder may refuse
        if bad:
            out[bad] = super().event_times([values[i] for i in bad])
        return out

    def warm_up(self) -> None:
        warm_up_decoder()

    def json_lines(self, values: Iterable[bytes]) -> Iterable[bytes]:
        return values


class Avro(Encoding):
    """fastavro in Avro's single-object encoding (:class:`~perfsift.schemas.codecs.AvroCodec`)."""

    name = "avro"


class ConfluentAvro(Encoding):
    """Avro in Schema Registry framing (:mod:`~perfsift.schemas.registry`) with the registry of
    ``registry_settings`` (the pipeline's ``schema_registry:``), or the process's current one."""

    name = "confluent-avro"
    needs_registry = True

    def __init__(self, registry_settings: Mapping[str, str] | None = None) -> None:
        super().__init__(registry_settings)
        self.registry_settings = registry_settings
        self.registry: SchemaRegistry = (
            registry_for(registry_settings) if registry_settings is not None else current_registry()
        )

    def _new_codec(self, schema: str) -> RecordCodec:
        return ConfluentAvroCodec(schema, self.registry)

    def prepare(self, subjects: Mapping[str, str] | None = None) -> None:
        """Make this registry the process's (the one ``tail`` and ``export`` decode with) and
        register ``subjects``."""
        if self.registry_settings is not None:
            self.registry = use_registry(self.registry_settings)
        for subject, kind in (subjects or {}).items():
            self.registry.register(subject, kind)


#: every wire encoding, by its name in a pipeline file
ENCODINGS: dict[str, type[Encoding]] = {e.name: e for e in (Json, Avro, ConfluentAvro)}


def encoding_for(encoding: str | Encoding, registry_settings: Mapping[str, str] | None = None) -> Encoding:
    """The encoding object of a name (one of :data:`ENCODINGS`; ``registry_settings`` for
    ``confluent-avro``, else the process's current registry); an encoding object as it is."""
    if isinstance(encoding, Encoding):
        return encoding
    kind = ENCODINGS.get(encoding)
    if kind is None:
        raise ValueError(f"unknown encoding {encoding!r}: use 'json', 'avro' or 'confluent-avro'")
    return kind(registry_settings)


def encode_batch(batch: Batch, codec: str | Encoding = "json", schema: str = "sample") -> list[bytes]:
    """One encoded record per batch row, in the encoding ``codec`` (:meth:`Encoding.encode_batch`).

    >>> from perfsift.schemas import samples_to_batch
    >>> b = samples_to_batch([{"ts": 1.5, "node": "a", "seq": 3, "metrics": {"x": None, "y": 2.0}}])
    >>> encode_batch(b)[0]
    b'{"ts":1.5,"node":"a","job":"default","seq":3,"metrics":{"x":null,"y":2.0}}'
    """
    return encoding_for(codec).encode_batch(batch, schema)


def encode_records(
    records: Iterable[dict[str, Any]], codec: str | Encoding = "json", schema: str = "sample"
) -> list[bytes]:
    """Encode records of any schema (JSON: orjson, NaN as null; Avro: single-object encoding).
    Forecast records go out without what readers derive (:mod:`~perfsift.schemas.forecast_wire`)."""
    return encoding_for(codec).encode_records(records, schema)


def decode_samples(
    values: Sequence[bytes | None], where: Callable[[int], str] | None = None, codec: str | Encoding = "json"
) -> Decoded:
    """Decode many messages into one column batch (:meth:`Encoding.decode_samples`).

    Returns ``(batch, kept, errors)``: ``kept[i]`` is the input position of batch row i, and each
    error names its input position via ``where`` (e.g. ``"perf.raw:3:1042"``). Bad records are
    left out whole; the others are kept in input order. Column frames
    (:mod:`~perfsift.schemas.frames`) are recognised whatever ``codec``: each gives its rows, all
    with the frame's input position in ``kept``.
    """
    return encoding_for(codec).decode_samples(values, where)
