"""``perfsift tail`` without the command line: where to start reading (kcat's ``-o``), which
partitions and keys, and each message rendered with a kcat-style ``-f`` template.

By default no consumer group is joined: the partitions are assigned and nothing is committed, so
tailing never disturbs a stage's group nor leaves a group behind (``group=...`` subscribes as a
member of that group instead, as kcat's ``-G``).
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Generator
from dataclasses import dataclass

import orjson
from confluent_kafka import OFFSET_BEGINNING, OFFSET_END, Consumer, KafkaError, Message, TopicPartition
from perfsift.schemas import RecordError
from perfsift.schemas.detect import Decoded, decode_any
from perfsift.streams.clients import consumer_settings

OFFSET_HELP = "beginning | end | N (absolute) | -N (N before the end, per partition) | s@MS (first at/after a time)"
_OFFSET = re.compile(r"^(beginning|end|-?\d+|s@\d+)$")


@dataclass(frozen=True)
class StartAt:
    """Where to start in each partition: ``kind`` is beginning, end, absolute, relative (from the
    end) or time (ms since the epoch)."""

    kind: str
    value: int = 0


def parse_offset(text: str) -> StartAt:
    """kcat's ``-o``: ``beginning``, ``end``, ``N``, ``-N`` or ``s@TIMESTAMP_MS`` (ValueError else)."""
    text = text.strip()
    if not _OFFSET.match(text):
        raise ValueError(f"offset {text!r}: expected {OFFSET_HELP}")
    if text in ("beginning", "end"):
        return StartAt(text)
    if text.startswith("s@"):
        return StartAt("time", int(text[2:]))
    n = int(text)
    return StartAt("relative", -n) if text.startswith("-") else StartAt("absolute", n)


def start_offsets(consumer: Consumer, topic: str, partitions: list[int], at: StartAt) -> list[TopicPartition]:
    """The offset to start at in each partition. ``relative`` uses the high watermark, which the
    embedded broker (Tansu) can report short by the last batch: there, ``-N`` starts up to that
    batch earlier than N before the true end."""
    if at.kind == "beginning":
        return [TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions]
    if at.kind == "end":
        return [TopicPartition(topic, p, OFFSET_END) for p in partitions]
    if at.kind in ("absolute", "relative"):  # an offset past the end waits there (auto.offset.reset, read())
        out = []
        for p in partitions:
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
            out.append(TopicPartition(topic, p, max(low, at.value if at.kind == "absolute" else high - at.value)))
        return out
    # the broker's answer; read() also skips what comes before the time (the embedded broker
    # answers every time lookup with the partition's first offset)
    found = consumer.offsets_for_times([TopicPartition(topic, p, at.value) for p in partitions], timeout=10)
    # -1: no message at or after the time in that partition, so start at its end
    return [TopicPartition(topic, tp.partition, tp.offset if tp.offset >= 0 else OFFSET_END) for tp in found]


def read(
    props: dict[str, str],
    topic: str,
    partitions: list[int] | None = None,
    at: StartAt = StartAt("beginning"),
    key: bytes | None = None,
    group: str | None = None,
    exit_at_end: bool = False,
    idle: float | None = None,
    stop: threading.Event | None = None,
) -> Generator[Message, None, None]:
    """The messages of ``topic`` (of ``key`` only, if given) from ``at`` on, until ``stop``, ``idle``
    seconds without a message, or (``exit_at_end``) the end of every partition read."""
    reset = "latest" if at.kind in ("end", "absolute") else "earliest"
    settings = consumer_settings(props, group or f"perfsift.tail.{time.time_ns()}")
    c = Consumer({**settings, "auto.offset.reset": reset, "enable.partition.eof": exit_at_end})
    try:
        if group is not None:
            if at.kind not in ("beginning", "end"):
                raise ValueError("with a consumer group the offset is the group's (or -o beginning / end)")
            c.subscribe([topic])
            pending: set[int] | None = None  # the group decides; exit_at_end then waits for any EOF seen
        else:
            known = sorted(c.list_topics(topic, timeout=10).topics[topic].partitions)
            chosen = known if partitions is None else partitions
            missing = sorted(set(chosen) - set(known))
            if missing:
                raise ValueError(f"{topic} has partitions {known}, not {missing}")
            c.assign(start_offsets(c, topic, chosen, at))
            pending = set(chosen)
        #: partitions still before the start time (s@MS): their records before it are skipped
        before = set(pending or ()) if at.kind == "time" else set()
        last = time.monotonic()
        while stop is None or not stop.is_set():
            m = c.poll(0.2)
            if m is None:
                if idle is not None and time.monotonic() - last > idle:
                    return
                continue
            err = m.error()
            if err is not None:
                if err.code() == KafkaError._PARTITION_EOF:
                    if pending is None:
                        pending = set(p.partition for p in c.assignment())
                    pending.discard(m.partition())
                    if exit_at_end and not pending:
                        return
                continue
            last = time.monotonic()
            part = m.partition() or 0
            if pending is not None and exit_at_end:
                pending.add(part)
            if part in before:
                if m.timestamp()[1] < at.value:
                    continue
                before.discard(part)
            if key is None or m.key() == key:
                yield m
    finally:
        c.close()


_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "\\": "\\"}
_TOKEN = re.compile(r"%[stpokKSTE%]|\\[ntr\\]")


def decode_message(m: Message) -> tuple[Decoded | None, str | None]:
    """The decoded value of ``m`` (None and the reason when it does not decode)."""
    try:
        return decode_any(m.value()), None
    except RecordError as exc:
        return None, exc.reason


def value_text(decoded: Decoded | None, raw: bytes | None) -> str:
    """One line for a value: structured records as compact JSON, text as it is; an undecodable
    value as its bytes (UTF-8, replaced where invalid)."""
    if decoded is None:
        return (raw or b"").decode("utf-8", "replace")
    rec = decoded.record
    if rec is None:
        return ""
    if isinstance(rec, dict | list):
        return orjson.dumps(rec, option=orjson.OPT_SERIALIZE_NUMPY, default=str).decode()
    return str(rec)


def render(template: str, m: Message, decoded: Decoded | None) -> str:
    """kcat's ``-f``: %s value (decoded), %k key, %t topic, %p partition, %o offset, %T timestamp
    (ms), %S value bytes, %K key bytes, %E encoding, %% a percent sign; \\n \\t \\r \\\\ escapes.
    Like kcat, no newline is added."""
    key, value = m.key(), m.value()

    def one(match: re.Match[str]) -> str:
        tok = match.group(0)
        if tok[0] == "\\":
            return _ESCAPES[tok[1]]
        c = tok[1]
        if c == "s":
            return value_text(decoded, value)
        if c == "k":
            return (key or b"").decode("utf-8", "replace")
        if c == "t":
            return str(m.topic())
        if c == "p":
            return str(m.partition())
        if c == "o":
            return str(m.offset())
        if c == "T":
            return str(m.timestamp()[1])
        if c == "S":
            return str(len(value) if value is not None else -1)
        if c == "K":
            return str(len(key) if key is not None else -1)
        if c == "E":
            return decoded.encoding if decoded is not None else "undecodable"
        return "%"

    return _TOKEN.sub(one, template)
