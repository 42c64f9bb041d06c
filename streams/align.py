"""Event-time alignment of a stage's input partitions (``event_time_skew_s``).

A consumer returns a backlog partition after partition (a fetch brings up to
``max.partition.fetch.bytes`` of one partition at a time), so without care a stage emits all of one
partition's hours before the first row of the next. Like Kafka Streams' task idling and Flink's
watermark alignment, the :class:`Aligner` holds back the partitions that run ahead:

- Each partition's *head* is the event time (sample ``ts``) of its next record: that of the first
  message it holds back, else the newest it let through. The *floor* is the lowest head of the
  partitions that still have data: a partition at its end (``PARTITION_EOF``) does not count until
  new data comes, nor one that delivered nothing for ``idle_s`` since it was assigned, resumed or
  last delivered (a partition reports its data or its end at once, also when resumed at its end:
  the idle time is a safety net should an end event be lost), so an empty or quiet partition
  never stalls a stage.
- Messages of a partition are let through while their event time (running maximum) is at most
  ``floor + skew``; the rest is held. Pausing a partition (``consumer.pause``: librdkafka stops
  fetching it) drops what librdkafka prefetched for it, which is fetched again on resume, so a
  partition ahead goes on fetching while the aligner holds at most ``hold`` (a stage's
  ``event_time_hold_bytes`` of payload); beyond it, the partitions that hold messages or whose
  newest event time is beyond the bound are paused until what is held is down to half of
  ``hold``. Held messages are after the committed offset (only what went through is committed).
- Work is per consume batch and partition: a batch whose last message (its time alone: the probe)
  is within the bound goes straight through (a stage that keeps up); otherwise the event times of
  its messages come from ``times`` (:func:`event_times`: a JSON sample's leading ``ts`` read as a
  number, a column frame decoded - its columns are views of the message - anything else decoded
  once, vectorised) before the slices let through are decoded to be processed.

What it guarantees: a bound on the event-time skew across a stage's input partitions, not exact
order: records within a partition stay in offset order, and the last message of a batch stands
for the batch on the direct path (a partition whose nodes' clocks disagree by more than the bound
can overshoot it by that disagreement).
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Generic, TypeVar

import numpy as np
import numpy.typing as npt
from confluent_kafka import Consumer, KafkaException, Message, TopicPartition
from perfsift.operators.batch import Batch

if TYPE_CHECKING:
    from perfsift.schemas.encodings import Encoding
    from perfsift.streams.stage import StageStats

T = TypeVar("T")
TP = tuple[str, int]  # (topic, partition)
#: a sample decoder: (values, place) -> (batch, input position per row, errors)
Decoder = Callable[[Sequence[bytes | None], Callable[[int], str]], tuple[Batch, list[int], Any]]

#: how long a partition that delivers neither data nor its end (newly assigned, resumed) holds the others
IDLE_S = 1.0


class Aligner(Generic[T]):
    """Which messages of which partitions to process now, and which partitions to pause.

    ``times(messages)`` gives each message's event time (``-inf`` when it has none, e.g. a record
    that does not decode: it goes through with its neighbours). ``skew`` is the bound in seconds;
    ``inf`` turns alignment off (every message goes through at once, nothing is paused).
    ``hold``: how much the aligner holds (in ``size(messages)``'s units, each message's; default
    one per message) before it pauses the partitions that hold; once they are paused it resumes
    them when what it holds is down to half of that. 0: a partition is paused as soon as it holds
    a message or runs ahead, and resumed once it holds nothing and is within the bound.
    """

    def __init__(
        self,
        skew: float,
        times: Callable[[Sequence[T]], npt.NDArray[np.float64]],
        idle_s: float = IDLE_S,
        hold: float = 0.0,
        size: Callable[[Sequence[T]], npt.NDArray[np.int64]] | None = None,
    ) -> None:
        self.skew = skew
        self.enabled = not math.isinf(skew)
        self.idle_s = idle_s
        self.hold = hold
        self._size = size if size is not None else (lambda ms: np.ones(len(ms), dtype=np.int64))
        self._sizes: dict[TP, list[npt.NDArray[np.int64]]] = {}  # the held messages' sizes, per route
        self.held = 0  # the held messages' total size
        self._throttled = False  # over ``hold`` since it was last down to half of it
        self._times = times
        self._time: dict[TP, float] = {}  # newest event time let through
        self._owned: set[TP] = set()
        self._heard: dict[TP, float] = {}  # when last assigned, resumed or delivering
        self._eof: set[TP] = set()
        self._held: dict[TP, list[T]] = {}
        self._held_ts: dict[TP, npt.NDArray[np.float64]] = {}  # running max of the held messages' times
        self.paused: set[TP] = set()
        self.limit = -math.inf
        self._moved = False  # the last release let messages through

    # -- assignment --------------------------------------------------------------------------------
    def assign(self, tps: Sequence[TP], now: float) -> None:
        for tp in tps:
            self._forget(tp)
            self._owned.add(tp)
            self._heard[tp] = now

    def revoke(self, tps: Sequence[TP]) -> list[TP]:
        """Forget ``tps`` (their held messages too: the next owner reads them from the committed
        offset); returns those of them this aligner paused, for the caller to resume."""
        was = [tp for tp in tps if tp in self.paused]
        for tp in tps:
            self._forget(tp)
        return was

    def _forget(self, tp: TP) -> None:
        self._owned.discard(tp)
        self.held -= sum(int(s.sum()) for s in self._sizes.pop(tp, []))
        for d in (self._time, self._heard, self._held, self._held_ts):
            d.pop(tp, None)
        self._eof.discard(tp)
        self.paused.discard(tp)

    def assigned(self) -> set[TP]:
        return set(self._owned)

    # -- per consume batch -------------------------------------------------------------------------
    def at_end(self, tp: TP) -> None:
        """``tp`` reached the end of its log (PARTITION_EOF; call it after :meth:`route` has taken
        the same consume batch's messages, which come before the event). While it holds messages
        their head counts; once they are through it holds nothing back until new data comes."""
        if tp in self._owned:
            self._eof.add(tp)

    def route(self, tp: TP, msgs: list[T], now: float) -> list[T]:
        """New messages of ``tp``: those to process now; the others are held."""
        self._eof.discard(tp)
        self._heard[tp] = now
        if not self.enabled:
            return msgs
        known = self._time.get(tp)
        direct = tp not in self._held and known is not None and known <= self.limit
        if direct and float(np.max(self._times(msgs[-1:]), initial=-math.inf)) <= self.limit:  # the probe
            return msgs
        self._held.setdefault(tp, []).extend(msgs)
        sizes = np.asarray(self._size(msgs), dtype=np.int64)
        self._sizes.setdefault(tp, []).append(sizes)
        self.held += int(sizes.sum())
        return []

    def seen(self, tp: TP, newest: float) -> None:
        """``tp`` let through messages whose newest event time is ``newest``."""
        if newest > self._time.get(tp, -math.inf):
            self._time[tp] = newest

    @property
    def pending(self) -> bool:
        """Whether messages are held (the loop must come round even when no message arrives)."""
        return bool(self._held)

    @property
    def busy(self) -> bool:
        """Whether held messages were let through last time and more are held: the loop should
        come round again without waiting for new messages."""
        return self._moved and bool(self._held)

    def release(self, now: float) -> list[tuple[TP, list[T]]]:
        """The held messages that are within the bound now, per partition, in offset order."""
        for tp, held in self._held.items():
            ts = self._held_ts.get(tp)
            n = 0 if ts is None else len(ts)
            if n < len(held):  # event times of the messages held since the last call
                new = np.maximum.accumulate(np.asarray(self._times(held[n:]), dtype=np.float64))
                self._held_ts[tp] = new if ts is None or not n else np.concatenate([ts, np.maximum(new, ts[-1])])
        limit = self._limits(now)
        out: list[tuple[TP, list[T]]] = []
        for tp in list(self._held):
            ts, held = self._held_ts[tp], self._held[tp]
            k = int(np.searchsorted(ts, limit(tp), side="right"))
            if not k:
                continue
            out.append((tp, held[:k]))
            sizes = np.concatenate(self._sizes[tp])
            self.held -= int(sizes[:k].sum())
            if k == len(held):
                del self._held[tp], self._held_ts[tp], self._sizes[tp]
            else:
                self._held[tp], self._held_ts[tp], self._sizes[tp] = held[k:], ts[k:], [sizes[k:]]
        self._moved = bool(out)
        return out

    def _limits(self, now: float) -> Callable[[TP], float]:
        """The newest event time each partition may let through now: the lowest head of the
        *other* partitions that have data plus the skew (``self.limit``: that of any partition
        but the lowest; the lowest one itself always moves on)."""
        heads: list[tuple[float, str, TP]] = []
        for tp in self._owned:
            if tp in self._held:
                heads.append((float(self._held_ts[tp][0]), str(tp), tp))
            elif tp in self._eof or now - self._heard.get(tp, -math.inf) >= self.idle_s:
                continue  # at its end, or quiet (no end reported) for idle_s
            else:  # a new partition that has delivered nothing yet: wait for it a moment
                heads.append((self._time.get(tp, -math.inf), str(tp), tp))
        low = sorted(heads)[:2] + [(math.inf, "", ("", -1))] * 2
        (first, _, lowest), (second, _, _) = low[0], low[1]
        self.limit = first + self.skew
        other = second + self.skew
        return lambda tp: other if tp == lowest else self.limit

    def changes(self, now: float) -> tuple[list[TP], list[TP]]:
        """After a batch: the partitions to pause and those to resume; the aligner counts them as
        done. While it holds more than ``hold`` (and until it is down to half of that), the
        partitions that hold messages or let through beyond the bound are paused, otherwise none:
        under the bound a partition ahead goes on fetching and what it delivers is held, since a
        paused partition's prefetched data is dropped by librdkafka and fetched again on resume.
        The partition with the lowest head is never paused for being ahead, so the stage always
        makes progress."""
        if not self.enabled:
            return [], []
        if self.held > self.hold:
            self._throttled = True
        elif self.held <= self.hold / 2:
            self._throttled = False
        limit = self._limits(now)
        ahead = {tp for tp, t in self._time.items() if t > limit(tp) and tp not in self._eof}
        want = set(self._held) | ahead if self._throttled or not self.hold else set()
        pause, resume = sorted(want - self.paused, key=str), sorted(self.paused - want, key=str)
        self.paused = want
        for tp in resume:
            self._heard[tp] = now  # from now on it may take idle_s to deliver again
        return pause, resume


def event_times(values: Sequence[bytes | None], encoding: str | Encoding) -> npt.NDArray[np.float64]:
    """Each sample message's newest event time in ``encoding`` (:meth:`Encoding.event_times
    <perfsift.schemas.encodings.Encoding.event_times>`: a JSON sample's leading ``ts`` read as a
    number, a column frame's newest row, anything else decoded), for :class:`Aligner`."""
    from perfsift.schemas.encodings import encoding_for  # keeps this module light

    return encoding_for(encoding).event_times(values)


# -- the runner's side: its consumer and its decoder -----------------------------------------------
def pace(consumer: Consumer | None, aligner: Aligner[Any], now: float, stats: StageStats | None = None) -> None:
    """Pause the input partitions that run ahead in event time, resume those caught up (counted
    in ``stats.paused`` and ``stats.resumed``)."""
    pause, resume = aligner.changes(now)
    if consumer is not None and (pause or resume):
        consumer.pause([TopicPartition(t, p) for t, p in pause])
        consumer.resume([TopicPartition(t, p) for t, p in resume])
    if stats is not None:
        stats.paused += len(pause)
        stats.resumed += len(resume)


def forget(consumer: Consumer | None, aligner: Aligner[Any], partitions: Sequence[TopicPartition]) -> None:
    """Partitions going away (revoked, lost, rewound): their held messages go (they are after the
    committed offset), and those the aligner paused are resumed."""
    paused = aligner.revoke([(tp.topic, tp.partition) for tp in partitions])
    if consumer is not None and paused:
        with contextlib.suppress(KafkaException):
            consumer.resume([TopicPartition(t, p) for t, p in paused])


def timed(decode: Decoder, aligner: Aligner[Any], tp: TP) -> Decoder:
    """``decode`` telling ``aligner`` the newest event time of each batch of ``tp`` it decodes."""
    if not aligner.enabled:
        return decode

    def decode_timed(values: Sequence[bytes | None], place: Callable[[int], str]) -> tuple[Batch, list[int], Any]:
        batch, kept, errors = decode(values, place)
        if len(batch):
            aligner.seen(tp, float(batch.ts.max()))
        return batch, kept, errors

    return decode_timed


def with_end_events(settings: tuple[dict[str, Any], dict[str, Any]], aligner: Aligner[Any]) -> tuple[dict, dict]:
    """The (consumer, producer) settings with PARTITION_EOF events when ``aligner`` is on (a
    partition at its end must not hold the others back)."""
    if aligner.enabled:
        settings[0]["enable.partition.eof"] = True
    return settings


def in_order(aligner: Aligner[T], by_part: dict[TP, list[T]], ends: list[TP], now: float) -> list[tuple[TP, list[T]]]:
    """One consume batch's messages per partition (and its PARTITION_EOF events): what to process
    now, partition by partition; the partitions ahead in event time are held."""
    routed = [(tp, aligner.route(tp, ms, now)) for tp, ms in by_part.items()]
    for tp in ends:
        aligner.at_end(tp)
    return [(tp, ms) for tp, ms in [*routed, *aligner.release(now)] if ms]


def restart(consumer: Consumer | None, aligner: Aligner[Any], tps: Sequence[TP]) -> None:
    """The partitions go back to their last commit (an aborted transaction): what ``aligner`` held
    goes and it starts afresh."""
    forget(consumer, aligner, [TopicPartition(t, p) for t, p in tps])
    aligner.assign(tps, time.monotonic())


def message_sizes(ms: Sequence[Message]) -> npt.NDArray[np.int64]:
    """Each message's payload bytes (0 for a message without value)."""
    return np.fromiter((len(m.value() or b"") for m in ms), dtype=np.int64, count=len(ms))


def stage_aligner(skew: float, encoding: str | Encoding, hold_bytes: float = 0.0) -> Aligner[Message]:
    """The aligner of a stage whose input messages are samples in ``encoding`` (or column frames),
    holding up to ``hold_bytes`` of their payload before it pauses partitions."""
    return Aligner(skew, lambda ms: event_times([m.value() for m in ms], encoding), hold=hold_bytes, size=message_sizes)
