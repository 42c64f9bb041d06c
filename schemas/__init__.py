"""Records, Avro schemas and serde (JSON via orjson, Avro via fastavro), and column batches.

Every record type on every topic has a schema in this folder (``*.avsc``). ``records``: the
schemas, the rules for samples and :class:`RecordError`; ``codecs``: single records in JSON or
Avro; ``encodings``: the wire encoding a pipeline runs with, as one object; ``kinds``: the
table of record kinds; ``batches``: samples to and from column batches; ``encode``: column-wise
JSON.
"""

from perfsift.schemas.batches import batch_to_samples, samples_to_batch
from perfsift.schemas.codecs import AvroCodec, JsonCodec, codec_for
from perfsift.schemas.encodings import Encoding, decode_samples, encode_batch, encode_records, encoding_for
from perfsift.schemas.kinds import KINDS, Kind
from perfsift.schemas.records import RecordError, load_schema, validate_sample

__all__ = [
    "KINDS",
    "AvroCodec",
    "Encoding",
    "JsonCodec",
    "Kind",
    "RecordError",
    "batch_to_samples",
    "codec_for",
    "decode_samples",
    "encode_batch",
    "encode_records",
    "encoding_for",
    "load_schema",
    "samples_to_batch",
    "validate_sample",
]
