"""Bytes on the wire: what a stage reads and writes per topic, as payload and compressed, and the
pipeline's totals as a ratio to the raw stream.

*Payload* is the sum of the message values. *Compressed* is what the broker stores for them with
the producers' default ``compression.type=zstd``: each topic's messages of one micro-batch joined
and compressed with zstd at librdkafka's default level (3), as a producer compresses one record
batch (a larger batch is estimated from its first :data:`SAMPLE_BYTES`). Kafka's record-batch
framing (61 bytes per batch, a few bytes, the key and headers per record) is left out on both
sides of a ratio. Both figures are deterministic for a given input
and micro-batching (bytes, not times), so a test can assert them.
"""

from __future__ import annotations

import bisect
import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import zstandard

#: zstd level of librdkafka's default ``compression.level`` (-1) for zstd
ZSTD_LEVEL = 3
#: a micro-batch of a topic larger than this is estimated from its first SAMPLE_BYTES (compressing
#: every raw byte again cost a fifth of the node stage's time; a producer's record batches are at
#: most ``batch.size`` = 1 MB anyway), compressed with the parameters zstd picks for the whole
#: micro-batch's size: on the bench's perf.raw (micro-batches of 520 kB) the estimate is 3.4 % low,
#: at 40 % of the CPU that 256 kB with the sample's own parameters took (5.5 % high)
SAMPLE_BYTES = 128 * 1024
#: zstd's parameter tables change at these source sizes (bytes); above the last, one set
_SIZE_CLASSES = (16 * 1024, 128 * 1024, 256 * 1024)


_local = threading.local()


def _compressor(payload: int | None = None) -> zstandard.ZstdCompressor:
    """This thread's zstd compressor at :data:`ZSTD_LEVEL`: the plain one, or for a source of
    ``payload`` bytes one with the parameters zstd picks for that size class (made at the first
    source of the class)."""
    made: dict[int | None, zstandard.ZstdCompressor] | None = getattr(_local, "zstd", None)
    if made is None:
        made = _local.zstd = {}
    size_class = None if payload is None else bisect.bisect_left(_SIZE_CLASSES, payload)
    z = made.get(size_class)
    if z is None:
        if payload is None:
            z = zstandard.ZstdCompressor(level=ZSTD_LEVEL)
        else:
            params = zstandard.ZstdCompressionParameters.from_level(ZSTD_LEVEL, source_size=payload)
            z = zstandard.ZstdCompressor(compression_params=params)
        made[size_class] = z
    return z


def compressed_size(blob: bytes) -> int:
    """Bytes of ``blob`` compressed with zstd at :data:`ZSTD_LEVEL` (a compressor per thread)."""
    return len(_compressor().compress(blob))


def estimated_size(values: Sequence[bytes], payload: int) -> int:
    """:func:`compressed_size` of ``values`` joined (``payload`` bytes in all), estimated from the
    first :data:`SAMPLE_BYTES` when larger: compressed with the parameters of the whole's size (a
    smaller input gets other parameter tables, which moved the estimate by 7 %), their ratio
    applied to the whole. Only the values that hold the sample are joined."""
    if payload <= SAMPLE_BYTES:
        return compressed_size(b"".join(values))
    head, n = [], 0
    for v in values:
        head.append(v)
        n += len(v)
        if n >= SAMPLE_BYTES:
            break
    z = _compressor(payload)
    return round(len(z.compress(b"".join(head)[:SAMPLE_BYTES])) * payload / SAMPLE_BYTES)


@dataclass
class TopicBytes:
    """Messages, payload bytes and zstd-compressed bytes per topic (logical names)."""

    messages: dict[str, int] = field(default_factory=dict)
    payload: dict[str, int] = field(default_factory=dict)
    compressed: dict[str, int] = field(default_factory=dict)

    def add(self, topic: str, values: Sequence[bytes | None]) -> int:
        """One micro-batch's messages of ``topic`` (their values); returns their payload bytes."""
        if not values:
            return 0
        try:
            payload = sum(map(len, values))  # type: ignore[arg-type]
            present: Sequence[bytes] = values  # type: ignore[assignment]
        except TypeError:  # tombstones (None) among them
            present = [v for v in values if v is not None]
            payload = sum(map(len, present))
        self.messages[topic] = self.messages.get(topic, 0) + len(values)
        self.payload[topic] = self.payload.get(topic, 0) + payload
        self.compressed[topic] = self.compressed.get(topic, 0) + estimated_size(present, payload)
        return payload

    def merge(self, other: TopicBytes) -> None:
        for mine, theirs in (
            (self.messages, other.messages),
            (self.payload, other.payload),
            (self.compressed, other.compressed),
        ):
            for t, n in theirs.items():
                mine[t] = mine.get(t, 0) + n

    def as_dict(self) -> dict[str, dict[str, int]]:
        return {
            t: {"messages": self.messages[t], "payload": self.payload[t], "compressed": self.compressed[t]}
            for t in sorted(self.payload)
        }


def _ratio(a: int, b: int) -> float | None:
    return round(a / b, 4) if b else None


def written_bytes(raw: Mapping[str, int], written: Iterable[Mapping[str, dict[str, int]]]) -> dict[str, Any]:
    """The pipeline's bytes: ``raw`` (``payload`` and ``compressed`` of perf.raw as read once),
    ``written`` the per-topic tables (:meth:`TopicBytes.as_dict`) of every stage. Per topic and in
    total: payload, compressed and each as a ratio to raw's."""
    topics: dict[str, dict[str, int]] = {}
    for table in written:
        for t, row in table.items():
            mine = topics.setdefault(t, {"messages": 0, "payload": 0, "compressed": 0})
            for k in mine:
                mine[k] += row.get(k, 0)
    raw_p, raw_c = raw.get("payload", 0), raw.get("compressed", 0)
    total_p = sum(r["payload"] for r in topics.values())
    total_c = sum(r["compressed"] for r in topics.values())
    return {
        "raw": {"payload": raw_p, "compressed": raw_c},
        "written": {"payload": total_p, "compressed": total_c},
        "bytes_written_ratio": _ratio(total_p, raw_p),
        "bytes_written_compressed_ratio": _ratio(total_c, raw_c),
        "topics": {
            t: {**r, "ratio": _ratio(r["payload"], raw_p), "compressed_ratio": _ratio(r["compressed"], raw_c)}
            for t, r in sorted(topics.items())
        },
    }


def bytes_table(volume: Mapping[str, Any]) -> list[tuple[str, str, str, str, str]]:
    """Rows (topic, payload MB, × raw, compressed MB, × raw compressed) of :func:`written_bytes`'
    result, the total last: the table ``perfsift run``, the report and ``analyze`` print."""

    def row(name: str, p: int, c: int, rp: float | None, rc: float | None) -> tuple[str, str, str, str, str]:
        return (
            name,
            f"{p / 1e6:.3f}",
            "-" if rp is None else f"{rp:.3f}",
            f"{c / 1e6:.3f}",
            "-" if rc is None else f"{rc:.3f}",
        )

    raw = volume["raw"]
    rows = [row("perf.raw (read)", raw["payload"], raw["compressed"], 1.0, 1.0)]
    rows += [
        row(t, r["payload"], r["compressed"], r["ratio"], r["compressed_ratio"]) for t, r in volume["topics"].items()
    ]
    w = volume["written"]
    rows.append(
        row(
            "written",
            w["payload"],
            w["compressed"],
            volume["bytes_written_ratio"],
            volume["bytes_written_compressed_ratio"],
        )
    )
    return rows
