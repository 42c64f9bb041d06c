"""A state snapshot larger than one Kafka message: zstd-compressed chunks and a manifest.

A snapshot record (:meth:`~perfsift.streams.checkpoint.Checkpoints.record`) that fits in
``chunk_bytes`` goes out as one message at the partition's key ``group/topic/partition``, as
before. A larger one (a 10,000-node job's pursuit rings: some 44 MB) is compressed with zstd and
cut into chunks of at most ``chunk_bytes``, each a message keyed ``<key>/chunk/<slot>/<i>``, and is
followed by a *manifest* at the partition's key that names the snapshot's id, slot, chunk count,
length and SHA-256. All go to the same state partition, in order (the producer is idempotent).

Atomicity: under exactly-once the chunks and the manifest are in the commit's transaction, so a
reader (read_committed) sees all or none. Under at-least-once the snapshots alternate between two
*slots* of chunk keys: a snapshot writes the slot the last manifest does not name, and only then
its manifest, so a crash half-way leaves the previous manifest and its chunks whole. On the
compacted topic each chunk key keeps its latest value, so the topic holds at most two snapshots'
chunks per partition. A reader checks every chunk's snapshot id and the whole's digest; a manifest
whose chunks do not add up (a write cut short after the manifest, or compaction's tombstones) falls
back to the previous complete record at the key, if the reader saw one, else the chain starts
fresh with a log line.
"""

from __future__ import annotations

import hashlib
import math
import struct
import uuid
from typing import Any

import orjson
import zstandard

CHUNK_MAGIC = b"PSC\x01"
MANIFEST_MAGIC = b"PSM\x01"
#: the default largest state message: below every broker's default ``message.max.bytes`` (1 MB)
DEFAULT_CHUNK_BYTES = 524_288
_INDEX = struct.Struct("<I")
_HEAD = len(CHUNK_MAGIC) + 16 + _INDEX.size  # magic, snapshot id, chunk index


def chunk_key(key: bytes, slot: int, index: int) -> bytes:
    return key + f"/chunk/{slot}/{index}".encode()


def split_chunk_key(key: bytes) -> tuple[bytes, int, int] | None:
    """``(partition key, slot, index)`` of a chunk's key, None for any other key."""
    base, sep, rest = key.rpartition(b"/chunk/")
    slot, sep2, index = rest.partition(b"/")
    if not sep or not sep2 or not slot.isdigit() or not index.isdigit():
        return None
    return base, int(slot), int(index)


def split(key: bytes, record: bytes, slot: int, chunk_bytes: int) -> list[tuple[bytes, bytes]]:
    """The ``(key, value)`` messages of one snapshot ``record``: itself when it fits in
    ``chunk_bytes``, else its chunks in ``slot`` and then the manifest (last)."""
    if len(record) <= chunk_bytes:
        return [(key, record)]
    body = zstandard.ZstdCompressor(level=1).compress(record)
    sid = uuid.uuid4().bytes
    room = chunk_bytes - _HEAD
    n = max(math.ceil(len(body) / room), 1)
    msgs = [
        (chunk_key(key, slot, i), b"".join((CHUNK_MAGIC, sid, _INDEX.pack(i), body[i * room : (i + 1) * room])))
        for i in range(n)
    ]
    manifest = {
        "id": sid.hex(),
        "slot": slot,
        "chunks": n,
        "bytes": len(body),
        "record_bytes": len(record),
        "sha256": hashlib.sha256(body).hexdigest(),
        "codec": "zstd",
    }
    return [*msgs, (key, MANIFEST_MAGIC + orjson.dumps(manifest))]


def is_manifest(value: bytes) -> bool:
    return value.startswith(MANIFEST_MAGIC)


def manifest_of(value: bytes) -> dict[str, Any]:
    out: dict[str, Any] = orjson.loads(value[len(MANIFEST_MAGIC) :])
    return out


def join(manifest: dict[str, Any], chunks: dict[tuple[int, int], bytes]) -> bytes | None:
    """The snapshot record a manifest names, from the latest chunk values by ``(slot, index)``;
    None when a chunk is missing, belongs to another snapshot, or the digest differs."""
    sid, slot = bytes.fromhex(manifest["id"]), int(manifest["slot"])
    parts = []
    for i in range(int(manifest["chunks"])):
        value = chunks.get((slot, i))
        if value is None or value[:_HEAD] != CHUNK_MAGIC + sid + _INDEX.pack(i):
            return None
        parts.append(value[_HEAD:])
    body = b"".join(parts)
    if len(body) != manifest["bytes"] or hashlib.sha256(body).hexdigest() != manifest["sha256"]:
        return None
    record: bytes = zstandard.ZstdDecompressor().decompress(body, max_output_size=int(manifest["record_bytes"]))
    return record
