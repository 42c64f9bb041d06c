"""Records, Avro schemas and serde (JSON via orjson, Avro via fastavro), and column batches.

Every record type on every topic has a schema in this folder (``*.avsc``).
"""

from perfsift.schemas.serde import (
    AvroCodec,
    JsonCodec,
    RecordError,
    batch_to_samples,
    codec_for,
    decode_samples,
    encode_batch,
    encode_records,
    load_schema,
    samples_to_batch,
    validate_sample,
)

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
