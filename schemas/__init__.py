"""Records, Avro schemas and serde (JSON via orjson, Avro via fastavro), and column batches.

Every record type on every topic has a schema in this folder (``*.avsc``). ``records``: the
schemas, the rules for samples and :class:`RecordError`; ``codecs``: single records in JSON or
Avro; ``batches``: samples to and from column batches; ``encode``: many records at once.
"""

from perfsift.schemas.batches import batch_to_samples, decode_samples, samples_to_batch
from perfsift.schemas.codecs import AvroCodec, JsonCodec, codec_for
from perfsift.schemas.encode import encode_batch, encode_records
from perfsift.schemas.records import RecordError, load_schema, validate_sample

__all__ = [
    "AvroCodec",
    "JsonCodec",
    "RecordError",
    "batch_to_samples",
    "codec_for",
    "decode_samples",
    "encode_batch",
    "encode_records",
    "load_schema",
    "samples_to_batch",
    "validate_sample",
]
