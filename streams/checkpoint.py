"""State snapshots of a stage on the compacted state topic: write, find, restore.

A stage writes, per input partition it owns, records keyed ``group/topic/partition``: the
operators' snapshots with the next input offset they cover and the chain's fingerprint. It writes
one of the fresh chain before the partition's first record, and then, at a commit, once the input
read since the last snapshot is large enough that snapshots cost at most ``snapshot_share`` of
the input bytes (:class:`Cadence`). On assignment it reads the latest record of each partition
back, restores the chain from it and resumes at that offset; the records from there up to the
group's committed offset were processed (and their outputs written) before, so the runner replays
them through the chain for its state without emitting anything. The consumer group owns the
state, as it owns the offsets: another group starts afresh. A record larger than the chunk size
(``snapshot_chunk_bytes``) goes out as compressed chunks and a manifest
(:mod:`~perfsift.streams.state_chunks`), so a 10,000-node job's state checkpoints too.
"""

from __future__ import annotations

import base64
import logging
import math
import struct
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import orjson
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Message, Producer, TopicPartition
from perfsift.operators import SnapshotError
from perfsift.streams.clients import consumer_settings, where
from perfsift.streams.limits import Guard
from perfsift.streams.logs import kafka_logger
from perfsift.streams.stage import Chain, StageError
from perfsift.streams.state_chunks import DEFAULT_CHUNK_BYTES, is_manifest, join, manifest_of, split, split_chunk_key

log = logging.getLogger("perfsift.runner")
_STATE_MAGIC = b"PSS\x01"
_LEN = struct.Struct("<I")


def parse_record(value: bytes) -> dict[str, Any]:
    """A snapshot record as a dict whose ``operators`` are the snapshots' bytes (the binary
    record), or their base64 text (the JSON records of earlier versions)."""
    if not value.startswith(_STATE_MAGIC):
        return orjson.loads(value)
    (n,) = _LEN.unpack_from(value, 4)
    rec: dict[str, Any] = orjson.loads(value[8 : 8 + n])
    pos, snaps = 8 + n, []
    while pos < len(value):
        (k,) = _LEN.unpack_from(value, pos)
        snaps.append(value[pos + 4 : pos + 4 + k])
        pos += 4 + k
    rec["operators"] = snaps
    return rec


@dataclass
class Cadence:
    """When an input partition's next snapshot is due.

    A snapshot of ``size`` bytes fits once ``since`` (input payload bytes read since the last one)
    times ``share`` reaches ``size``: snapshots then cost at most ``share`` of the input bytes
    however large the state, and a restart replays at most ``size / share`` input bytes. The
    runner asks :meth:`fits` first with the last snapshot's size (``size``, -1 before the first),
    which costs nothing, and only then serialises the state to ask again with its true size.
    ``share`` infinite: every commit.
    """

    share: float
    since: int = 0
    size: int = -1

    def fits(self, size: int | None = None) -> bool:
        """Whether a snapshot of ``size`` bytes (default: the last one's) is within the share now."""
        return math.isinf(self.share) or self.since * self.share >= (self.size if size is None else size)

    def wrote(self, size: int) -> None:
        self.size, self.since = size, 0


@dataclass
class Partition:
    """What a stage keeps per input partition it owns."""

    chain: Chain
    guard: Guard
    cadence: Cadence
    next_offset: int | None = None
    dirty: bool = False
    #: records below this offset were processed before a restart: replayed without emitting
    replay_until: int = -1
    #: the chunk slot (0 or 1) the next chunked snapshot writes: not the one the last manifest names
    slot: int = 0

    def wrote(self, size: int, chunked: bool) -> None:
        """A snapshot of ``size`` bytes went out; a chunked one used up its slot."""
        self.cadence.wrote(size)
        self.slot ^= chunked


class Checkpoints:
    """The snapshots of one stage's consumer group on ``topic`` (the state topic, with prefix),
    which has ``partitions`` partitions; a record over ``chunk_bytes`` goes out in chunks."""

    def __init__(
        self,
        kafka: dict[str, str],
        group_id: str,
        topic: str,
        partitions: int,
        stage: str,
        chunk_bytes: int = DEFAULT_CHUNK_BYTES,
        snapshots: bool = True,
    ) -> None:
        self.kafka = kafka
        self.snapshots = snapshots
        self.group_id = group_id
        self.topic = topic
        self.partitions = partitions
        self.stage = stage
        self.chunk_bytes = chunk_bytes

    def key(self, topic: str, partition: int) -> bytes:
        return f"{self.group_id}/{topic}/{partition}".encode()

    def partition(self, partition: int) -> int:
        """The state partition that holds an input partition's snapshots."""
        return partition % self.partitions

    def record(
        self, topic: str, partition: int, next_offset: int, chain: Chain, fingerprint: str, fresh: bool = False
    ) -> bytes:
        """The snapshot record: ``PSS\x01``, a u32 length and a JSON header (stage, topic,
        partition, next_offset, fingerprint), then each operator's snapshot as a u32 length and its
        bytes (binary, not base64 in JSON: a third smaller, and zstd compresses it better). A
        ``fresh`` chain (nothing processed yet) is the header alone with ``"fresh": true``: its
        operators' snapshots are empty arrays whose headers alone take some 9 kB."""
        head = orjson.dumps(
            {
                "stage": self.stage,
                "topic": topic,
                "partition": partition,
                "next_offset": next_offset,
                "fingerprint": fingerprint,
                **({"fresh": True} if fresh else self.header_extra(chain)),
            }
        )
        parts = [_STATE_MAGIC, _LEN.pack(len(head)), head]
        for op in () if fresh else chain.operators:
            snap = op.snapshot()
            parts += [_LEN.pack(len(snap)), snap]
        return b"".join(parts)

    def messages(self, topic: str, partition: int, record: bytes, slot: int) -> tuple[list[tuple[bytes, bytes]], int]:
        """The ``(key, value)`` messages that write ``record`` (itself, or its chunks in ``slot``
        and a manifest: :func:`~perfsift.streams.state_chunks.split`) and their bytes in all."""
        msgs = split(self.key(topic, partition), record, slot, self.chunk_bytes)
        return msgs, sum(len(value) for _, value in msgs)

    def header_extra(self, chain: Chain) -> dict[str, Any]:
        """More fields for the record's JSON header (a subclass's state beside the operators')."""
        return {}

    def restore(self, chain: Chain, snap: dict[str, Any], fingerprint: str, where_: str) -> int | None:
        """Load a snapshot record into ``chain``; the offset to resume from, or None (with a log
        line) when it was made by another configuration or cannot be read (the chain starts fresh)."""
        if snap["fingerprint"] != fingerprint:
            log.warning("stage %s: state of %s was made by another configuration; starting fresh", self.stage, where_)
            return None
        if snap.get("fresh"):  # the chain as it starts: nothing to load into it
            chain.reset()
            return int(snap["next_offset"])
        try:
            for op, blob in zip(chain.operators, snap["operators"], strict=True):
                op.restore(blob if isinstance(blob, bytes) else base64.b64decode(blob))
        except (SnapshotError, ValueError) as exc:
            log.warning("stage %s: cannot restore %s (%s); starting fresh", self.stage, where_, exc)
            chain.reset()
            return None
        return int(snap["next_offset"])

    def resume(
        self,
        consumer: Consumer,
        partitions: list[TopicPartition],
        fresh: Callable[[], Partition],
        fingerprint: str,
        read_committed: bool,
    ) -> tuple[dict[tuple[str, int], Partition], dict[int, tuple[int, int]]]:
        """The state of newly assigned ``partitions``: each restored from its latest snapshot where
        one fits (its offset then set on ``tp``, for the consumer to start there), else ``fresh()``;
        and, per restored partition number, ``(snapshot offset, replay until)``: the records from
        the snapshot up to the group's committed offset are to be replayed without emitting."""
        snapshots = self.load(partitions[0].topic, [tp.partition for tp in partitions], read_committed)
        parts, restored = {}, {}
        for tp in partitions:
            part = parts[(tp.topic, tp.partition)] = fresh()
            snap = snapshots.get(tp.partition)
            offset = None if snap is None else self.restore(part.chain, snap, fingerprint, f"{tp.topic}:{tp.partition}")
            if snap is not None and offset is not None:
                tp.offset = part.next_offset = offset
                part.cadence.size = int(snap.get("size", 0))
                part.slot = 1 - int(snap.get("slot", 1))  # the slot its manifest does not name
                restored[tp.partition] = (offset, offset)
        if restored:
            topic = partitions[0].topic
            for c in consumer.committed([TopicPartition(topic, p) for p in restored], 30):
                part = parts[(topic, c.partition)]
                if part.next_offset is not None and c.offset > part.next_offset:
                    part.replay_until = c.offset
                    restored[c.partition] = (part.next_offset, c.offset)
        return parts, restored

    def load(self, topic: str, partitions: list[int], read_committed: bool) -> dict[int, dict[str, Any]]:
        """Latest snapshot record per input partition of ``topic``, read from the state topic.

        The end of a state partition is found by writing a marker and reading up to it: the
        marker's acknowledged offset is exact, whereas the embedded broker's high watermark can be
        short by the last batch.
        """
        wanted = {self.key(topic, p): p for p in partitions}
        state_parts = sorted({self.partition(p) for p in partitions})
        marker_producer = Producer({**self.kafka, "logger": kafka_logger()})
        ends: dict[int, int] = {}

        def on_marker(err: KafkaError | None, msg: Message) -> None:
            if err is None:
                _, partition, offset = where(msg)
                ends[partition] = offset

        for sp in state_parts:
            marker_producer.produce(
                self.topic, b"{}", f"marker/{uuid.uuid4().hex}".encode(), partition=sp, on_delivery=on_marker
            )
        marker_producer.flush(30)
        if len(ends) != len(state_parts):
            raise StageError(f"stage {self.stage}: cannot write to the state topic {self.topic}")
        isolation = "read_committed" if read_committed else "read_uncommitted"
        reader = Consumer(consumer_settings(self.kafka, f"{self.group_id}.restore", isolation))
        keyed: dict[int, list[bytes]] = {}  # the last two values at each partition's key
        chunks: dict[int, dict[tuple[int, int], bytes]] = {}  # the latest chunk values by (slot, index)
        try:
            reader.assign([TopicPartition(self.topic, sp, OFFSET_BEGINNING) for sp in state_parts])
            pending = dict(ends)
            deadline = time.monotonic() + 60
            while pending and time.monotonic() < deadline:
                for m in reader.consume(1000, 0.5):
                    if m.error() is not None:
                        continue
                    _, sp, offset = where(m)
                    key, value = m.key() or b"", m.value()
                    p = wanted.get(key)
                    if p is not None:
                        seen = keyed.setdefault(p, [])
                        seen.append(value or b"null")
                        del seen[:-2]
                    elif b"/chunk/" in key and (ck := split_chunk_key(key)) is not None and ck[0] in wanted:
                        mine = chunks.setdefault(wanted[ck[0]], {})
                        if value is None:  # a tombstone
                            mine.pop(ck[1:], None)
                        else:
                            mine[ck[1:]] = value
                    if offset >= pending.get(sp, 1 << 62):
                        pending.pop(sp, None)
            if pending:
                raise StageError(f"stage {self.stage}: timed out reading the state topic {self.topic}")
        finally:
            reader.close()
        found: dict[int, dict[str, Any]] = {}
        for p, values in keyed.items():
            rec = self._resolve(values, chunks.get(p, {}), f"{topic}:{p}")
            if rec is not None:
                found[p] = rec
        return found

    def _resolve(self, values: list[bytes], chunks: dict[tuple[int, int], bytes], where_: str) -> dict[str, Any] | None:
        """The newest complete snapshot among the last ``values`` at a partition's key (a record,
        or a manifest whose ``chunks`` add up), with its ``size`` in bytes and chunk ``slot``."""
        for value in reversed(values):
            if not is_manifest(value):
                rec = parse_record(value)
                if isinstance(rec, dict):
                    rec["size"] = len(value)
                    return rec
                return None  # a tombstone: no state
            man = manifest_of(value)
            record = join(man, chunks)
            if record is None:
                log.warning(
                    "stage %s: the chunked snapshot %s of %s is incomplete; trying an older one",
                    self.stage,
                    man.get("id"),
                    where_,
                )
                continue
            rec = parse_record(record)
            slot = int(man["slot"])
            rec["size"] = len(value) + sum(len(chunks[(slot, i)]) for i in range(int(man["chunks"])))
            rec["slot"] = slot
            return rec
        return None

    def rewind(
        self,
        consumer: Consumer,
        owned: dict[tuple[str, int], Partition],
        fresh: Callable[[], Partition],
        fingerprint: str,
    ) -> None:
        """After an aborted transaction: every ``owned`` partition's state (replaced in place) as of
        the last commit (its latest committed snapshot, or fresh), with the consumer seeked back
        there, as if each were newly assigned. The aborted outputs, snapshots and offsets are gone, so the
        records since then are processed again and their outputs written once."""
        tps = [TopicPartition(t, p) for t, p in owned]
        if not tps:
            return
        if self.snapshots:
            parts, _ = self.resume(consumer, tps, fresh, fingerprint, read_committed=True)
        else:
            parts = {(tp.topic, tp.partition): fresh() for tp in tps}
        committed = {c.partition: c.offset for c in consumer.committed([TopicPartition(t, p) for t, p in owned], 30)}
        for tp in tps:
            if tp.offset < 0:  # no snapshot: from the committed offset (the topic's start if none)
                tp.offset = committed[tp.partition] if committed.get(tp.partition, -1) >= 0 else OFFSET_BEGINNING
            consumer.seek(tp)
        owned.update(parts)
