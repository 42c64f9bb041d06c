"""The broker-free core of a stage: its operator chain, and the encoded records it publishes.

A :class:`Chain` is one stage's operators for one input partition (the Kafka runner keeps one per
partition it owns; ``perfsift analyze`` one per stage). ``process(batch)`` runs the operators and
returns what the stage publishes, encoded, per topic (logical names): what the last operator
returned, as its role says (``operators/base.py``), plus the intermediate batches that operators
with ``publish`` tap off. The runner and the offline analysis share this code, so a streaming run
and an analysis write the same bytes.
"""

from __future__ import annotations

import bisect
import logging
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from perfsift.operators import Batch, Decider, Operator, Output, Router
from perfsift.operators.base import BatchRecords
from perfsift.schemas import KINDS, Encoding, RecordError, encoding_for
from perfsift.schemas.frames import encode_frames
from perfsift.streams.config import StageConfig
from perfsift.streams.limits import LIMIT_REASONS, Guard
from perfsift.streams.topics import STATE_TOPIC, framed, key_of
from perfsift.streams.volume import TopicBytes

log = logging.getLogger("perfsift.stage")

#: per topic (logical name): encoded records and their message keys
Encoded = dict[str, tuple[list[bytes], list[bytes]]]
#: sample batches, each for some topics (a stage's outputs, or taps)
Taps = list[tuple[tuple[str, ...], Batch]]


class StageError(RuntimeError):
    """A failure the stage cannot continue after (e.g. outputs not acknowledged); nothing is committed."""


#: upper bounds (seconds) of the batch-duration histogram's buckets
BATCH_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
#: why a record went to the dead-letter topic: the bounded set of the ``reason`` label
DEAD_LETTER_REASONS = ("malformed", "operator_failed", *LIMIT_REASONS, "unmapped", "late", "collision")


@dataclass
class StageStats:
    """Counters of one stage (one runner instance, or one stage of an analysis); read by the live
    view, the summaries and ``/metrics``."""

    stage: str
    records_in: int = 0
    records_out: int = 0
    dead_letters: int = 0
    batches: int = 0
    bytes_in: int = 0
    bytes_out: int = 0
    commits: int = 0
    restored_partitions: int = 0
    #: records replayed after a restart, from a snapshot up to the committed offset (not in records_in)
    replayed: int = 0
    #: exactly-once producers replaced after a failed transaction (fenced, timed out; streams/transactions.py)
    producers_replaced: int = 0
    #: rebalance events by kind (assigned, revoked, lost) and input partitions each concerned
    rebalances: dict[str, int] = field(default_factory=dict)
    revoked_partitions: int = 0
    lag: dict[int, int] = field(default_factory=dict)
    busy_s: float = 0.0
    started: float = field(default_factory=time.monotonic)
    last_batch_ms: float = 0.0
    #: monotonic time of the first fetched batch (None before), for throughput figures
    first_batch_at: float | None = None
    #: records produced per output topic (logical name), taps included
    by_topic: dict[str, int] = field(default_factory=dict)
    #: seconds spent in each operator (by class name), where the caller times them
    by_operator: dict[str, float] = field(default_factory=dict)
    #: batches per duration bucket (:data:`BATCH_BUCKETS`, then the overflow) and their total seconds
    batch_buckets: list[int] = field(default_factory=lambda: [0] * (len(BATCH_BUCKETS) + 1))
    #: dead letters per reason (:data:`DEAD_LETTER_REASONS`)
    dead_by_reason: dict[str, int] = field(default_factory=dict)
    #: the chosen librdkafka statistics of the stage's clients, by (client, statistic)
    kafka: dict[tuple[str, str], float] = field(default_factory=dict)
    #: messages, payload and compressed bytes read (the input topic) and written, per topic
    #: (:mod:`~perfsift.streams.volume`); written includes the state snapshots
    wire_in: TopicBytes = field(default_factory=TopicBytes)
    wire_out: TopicBytes = field(default_factory=TopicBytes)
    #: metric values an ingest stage left out of samples over ``max_metrics_per_sample``
    series_dropped: int = 0
    #: metrics an operator's configuration names that its input never carried (:func:`note_missing`)
    missing_metrics: set[str] = field(default_factory=set)
    #: input partitions paused and resumed by event-time alignment (streams/align.py), each time
    paused: int = 0
    resumed: int = 0

    def observe_batch(self, seconds: float) -> None:
        """One processed batch of ``seconds`` into the duration histogram."""
        self.batch_buckets[bisect.bisect_left(BATCH_BUCKETS, seconds)] += 1
        self.busy_s += seconds
        self.last_batch_ms = seconds * 1000

    def dead_letter(self, reason: str) -> None:
        if reason not in DEAD_LETTER_REASONS:
            raise ValueError(f"unknown dead-letter reason {reason!r}; known: {DEAD_LETTER_REASONS}")
        self.dead_letters += 1
        self.dead_by_reason[reason] = self.dead_by_reason.get(reason, 0) + 1

    def count_out(self, encoded: Encoded) -> None:
        """Bytes and records per topic of what the stage published."""
        for name, (values, _) in encoded.items():
            self.bytes_out += self.wire_out.add(name, values)
            self.by_topic[name] = self.by_topic.get(name, 0) + len(values)

    def count_in(self, topic: str, values: list[bytes | None]) -> int:
        """Bytes of one micro-batch read from ``topic`` (logical name), counted and returned."""
        n = self.wire_in.add(topic, values)
        self.bytes_in += n
        return n

    def count_state(self, value: bytes) -> bytes:
        """``value``, counted as a state snapshot written to perf.state; for inline use."""
        self.wire_out.add(STATE_TOPIC, [value])
        return value

    def as_dict(self) -> dict[str, Any]:
        return {
            "stage": self.stage,
            "records_in": self.records_in,
            "records_out": self.records_out,
            "dead_letters": self.dead_letters,
            "batches": self.batches,
            "bytes_in": self.bytes_in,
            "bytes_out": self.bytes_out,
            "commits": self.commits,
            "restored_partitions": self.restored_partitions,
            "replayed": self.replayed,
            "producers_replaced": self.producers_replaced,
            "lag": sum(self.lag.values()),
            "busy_s": round(self.busy_s, 3),
            "by_topic": dict(self.by_topic),
            "bytes_read": self.wire_in.as_dict(),
            "bytes_written": self.wire_out.as_dict(),
            "missing_metrics": sorted(self.missing_metrics),
            "paused": self.paused,
            "resumed": self.resumed,
        }


def note_missing(chain: Chain, stats: StageStats) -> None:
    """Metrics the chain's operators are configured for but have not met in their input after a
    while (``missing_metrics()``, e.g. a forecast of ``[cpu_user, pkts_in]`` on other data): said
    once per stage and metric in the log, and counted in ``stats.missing_metrics``."""
    for op in chain.operators:
        missing, seen = getattr(op, "missing_metrics", None), getattr(op, "seen_names", list)
        new = [m for m in missing() if m not in stats.missing_metrics] if missing is not None else []
        if new:
            stats.missing_metrics.update(new)
            log.warning(
                "stage %s: %s is configured for metrics its input never carried: %s (the input has %s)",
                stats.stage,
                type(op).__name__,
                ", ".join(new),
                ", ".join(seen()[:20]) or "none",
                extra={"stage": stats.stage, "operator": type(op).__name__, "missing_metrics": new},
            )


@dataclass
class Emitted:
    """What one call of a chain publishes."""

    #: outputs and taps, encoded, per topic (logical name)
    topics: Encoded
    #: records of the stage's outputs (taps not counted; a decider's records count once however
    #: many topics get them)
    records: int
    #: the last operator's output as it returned it (None when the chain produced nothing)
    output: Output | None = None
    #: the last operator when it is a decider: its ``records(output)`` are the records written
    decider: Decider | None = None


class Chain:
    """One stage's operators, fresh, for one stream of samples (see the module docstring)."""

    def __init__(self, stage: StageConfig, encoding: str | Encoding, framing: str = "records") -> None:
        self.stage = stage
        #: the pipeline's wire encoding (a name is made into its object once, here)
        self.encoding = encoding_for(encoding)
        #: ``columns``: samples to the topics only perfsift reads go out as column frames
        self.framing = framing
        self.operators = stage.build_chain()

    def fresh(self) -> Chain:
        """A new chain of the same stage, encoding and framing (fresh operators, no state)."""
        return Chain(self.stage, self.encoding, self.framing)

    def fingerprint(self) -> str:
        """The operators' fingerprints: the key the chain's state is valid for."""
        return "|".join(op.fingerprint() for op in self.operators)

    def reset(self) -> None:
        for op in self.operators:
            op.reset()

    def summary(self) -> dict[str, dict[str, Any]]:
        return merge_summaries(op.summary() for op in self.operators)

    def process(self, batch: Batch, after: Callable[[Operator, Any, float], None] | None = None) -> Emitted:
        """Run the operators on a batch of samples; ``after(op, output, seconds)`` sees each
        operator's output and time."""
        out: Any = batch
        taps: Taps = []
        for op, spec in zip(self.operators, self.stage.operators, strict=True):
            if after is None:
                out = op.update(out)
            else:
                t = time.perf_counter()
                out = op.update(out)
                after(op, out, time.perf_counter() - t)
            if spec.publish:  # only transformers publish (the pipeline file is checked for it)
                taps.append((spec.publish, out))
        emitted = self._encode(out)
        for topic, (values, keys) in encode_samples(taps, self.encoding, self.framing).items():
            have = emitted.topics.setdefault(topic, ([], []))
            have[0].extend(values)
            have[1].extend(keys)
        return emitted

    def flush(self) -> Emitted:
        """At the end of a finite input: what the last operator still holds (an open period)."""
        held = self.operators[-1].flush() if self.operators else None
        return self._encode(held) if held is not None else Emitted({}, 0)

    def _encode(self, out: Output) -> Emitted:
        last = self.operators[-1] if self.operators else None
        if isinstance(last, Router):
            return Emitted(*self._encode_routed(last, out), out)  # type: ignore[arg-type]
        if isinstance(last, Decider):
            values, keys = encode_decisions(last, out, self.encoding)  # type: ignore[arg-type]
            return Emitted({t: (values, keys) for t in self.stage.outputs}, len(values), out, last)
        if not isinstance(out, Batch):  # a transformer that broke its contract
            raise StageError(f"stage {self.stage.name}: {type(last).__name__} must return a batch of samples")
        return Emitted(encode_samples([(self.stage.outputs, out)], self.encoding, self.framing), len(out), out)

    def _encode_routed(self, router: Router, out: dict[str, list[Any]]) -> tuple[Encoded, int]:
        result: Encoded = {}
        count = 0
        for kind, topics in self.stage.routes.items():
            parts = out.get(kind, [])
            if not topics:  # an optional kind the stage sends nowhere
                continue
            if router.outputs[kind]:  # batches of samples of this kind
                values = [v for b in parts for v in self.encoding.encode_batch(b, kind)]
                count += len(values)
                for t in topics:
                    result[t] = (values, [k for b in parts for k in batch_keys(b, key_of(t, kind))])
            elif (columnar := self._columnar(kind, parts, topics)) is not None:  # values and keys from columns
                values, keys = columnar
                count += len(values)
                for t in topics:
                    result[t] = (values, keys)
            else:
                values = self.encoding.encode_records(parts, kind)
                count += len(values)
                for t in topics:
                    field_ = key_of(t, kind)
                    result[t] = (values, [str(r[field_]).encode() for r in parts])
        return result, count

    def _columnar(self, kind: str, parts: object, topics: Sequence[str]) -> tuple[list[bytes], list[bytes]] | None:
        """A router's records of ``kind`` encoded with their keys from whole columns, when they are
        output batches not yet made into dicts (:class:`~perfsift.operators.base.BatchRecords`, e.g.
        the forecast bank's), the encoding builds the kind column-wise and the topics are keyed by
        node (what the columnar form gives); else None."""
        columnar = KINDS[kind].columnar_json if self.encoding.columnar else None
        if columnar is None or not isinstance(parts, BatchRecords):
            return None
        if any(key_of(t, kind) != "node" for t in topics):
            return None
        return columnar(parts.batches)


#: decodes one micro-batch's messages into samples: ``(values, place) -> (batch, kept, errors)``,
#: the pipeline's :meth:`~perfsift.schemas.encodings.Encoding.decode_samples`
SampleDecoder = Callable[[Sequence[bytes | None], Callable[[int], str]], tuple[Batch, list[int], list[RecordError]]]
#: parks one input record: ``(input position, dead-letter reason, detail)``
Park = Callable[[int, str, str], None]


def sample_decoder(encoding: str | Encoding) -> SampleDecoder:
    """The decoder of samples in ``encoding`` (column frames are recognised in any)."""
    return encoding_for(encoding).decode_samples


def sized(values: Sequence[bytes | None], guard: Guard, park: Park) -> Sequence[int]:
    """The input positions of the records within ``max_record_bytes``; the others go to ``park`` as
    ``record_too_large``."""
    big = guard.oversized(values)  # type: ignore[arg-type]
    for i in big:
        park(i, "record_too_large", f"{len(values[i] or b'')} bytes, more than {guard.limits.max_record_bytes}")
    if not big:
        return range(len(values))
    skip = set(big)
    return [i for i in range(len(values)) if i not in skip]


def decoded(
    values: Sequence[bytes | None], guard: Guard, decode: SampleDecoder, place: Callable[[int], str], park: Park
) -> tuple[Batch, list[int]]:
    """The records of one micro-batch within ``max_record_bytes`` (:func:`sized`), decoded: the
    batch and, per row, its input position; a record that does not decode goes to ``park`` as
    ``malformed``."""
    pos = sized(values, guard, park)
    whole = len(pos) == len(values)
    batch, kept, errors = decode(values if whole else [values[i] for i in pos], lambda i: place(pos[i]))
    for e in errors:
        park(pos[e.index], "malformed", e.reason)
    return batch, kept if whole else [pos[k] for k in kept]


def guarded(batch: Batch, rows: list[int], guard: Guard, park: Park) -> tuple[Batch, list[int]]:
    """The rows of ``batch`` within the partition's other limits (``Guard.check``) and, per row,
    its input position (``rows``: the input position of each row of ``batch``); the samples over a
    limit go to ``park`` with the limit's reason."""
    batch, refused = guard.check(batch)
    for row, reason, detail in refused:
        park(rows[row], reason, detail)
    if refused:
        gone = {row for row, _, _ in refused}
        rows = [p for row, p in enumerate(rows) if row not in gone]
    return batch, rows


def step(
    chain: Chain,
    batch: Batch,
    publish: Callable[[Emitted], None],
    park: Callable[[str], None],
    at: str,
    after: Callable[[Operator, Any, float], None] | None = None,
) -> bool:
    """The stage step, one for every runner (the ingest stage's too, issue #29): ``batch`` through
    the partition's chain and what it emits to ``publish`` (the runner's ``_emit``: the stage's
    outputs such as ``otlp_out`` added, produced, counted). An operator error does not stop the
    worker: it is logged and ``park(reason)`` dead-letters the batch's records. True when the chain ran."""
    try:
        emitted = chain.process(batch, after)
    except Exception as exc:  # an operator failed on this batch: park its records, go on
        logging.getLogger("perfsift.stage").exception("operator failed on %s", at)
        park(f"processing failed: {type(exc).__name__}: {exc}"[:1000])
        return False
    publish(emitted)
    return True


def step_batch(
    chain: Chain,
    guard: Guard,
    batch: Batch,
    rows: list[int],
    publish: Callable[[Emitted], None],
    park: Park,
    at: str,
    after: Callable[[Operator, Any, float], None] | None = None,
) -> bool:
    """A batch of samples through the rest of the stage: the limits (:func:`guarded`), the chain and
    its outputs to ``publish`` (:func:`step`). ``rows`` is the input position of each row; a sample
    over a limit goes to ``park`` with its position and reason, and when an operator fails every
    record of the batch does (a column frame's once), as ``operator_failed``. The ingest stage's
    assembled samples come in here; records, through :func:`step_records`. True when the chain ran."""
    batch, kept = guarded(batch, rows, guard, park)
    if not len(batch):
        return False

    def failed(why: str) -> None:
        for i in dict.fromkeys(kept):
            park(i, "operator_failed", why)

    return step(chain, batch, publish, failed, at, after)


def step_records(
    chain: Chain,
    guard: Guard,
    values: Sequence[bytes | None],
    decode: SampleDecoder,
    place: Callable[[int], str],
    publish: Callable[[Emitted], None],
    park: Park,
    at: str,
    after: Callable[[Operator, Any, float], None] | None = None,
) -> bool:
    """One micro-batch of records through the whole stage: decoded (:func:`decoded`: the size limit,
    the decoder), then :func:`step_batch` (the other limits, the chain, its outputs to
    ``publish``). Every record that does not make it goes to ``park`` with its input position and
    reason. The Kafka runner and ``perfsift analyze`` both run their records through here. True
    when the chain ran."""
    return step_batch(chain, guard, *decoded(values, guard, decode, place, park), publish, park, at, after)


def encode_decisions(
    op: Decider, out: Batch | list[dict[str, Any]], encoding: Encoding
) -> tuple[list[bytes], list[bytes]]:
    """A decider's output as (encoded records, message keys), keyed by its kind's key field; built
    column-wise where the kind has a columnar form in the encoding (``Kind.columnar_json``)."""
    columnar = KINDS[op.output].columnar_json if encoding.columnar else None
    if columnar is not None and isinstance(out, Batch):
        return columnar(out)
    records = op.records(out)
    field_ = key_of("", op.output)
    return encoding.encode_records(records, op.output), [str(r[field_]).encode() for r in records]


def batch_keys(batch: Batch, key: str) -> list[bytes]:
    """Message key of every row: its job (``key == "job"``) or its node."""
    names, idx = (batch.jobs, batch.job_idx) if key == "job" else (batch.nodes, batch.node_idx)
    encoded = [n.encode() for n in names]
    return [encoded[i] for i in idx.tolist()]


def encode_samples(taps: Taps, encoding: Encoding, framing: str = "records") -> Encoded:
    """Sample batches, each for some topics, as (encoded messages, message keys) per topic: one
    record per sample, each batch encoded once and keyed per topic by the topic's key (node, or job
    for ``perf.smoothed.byjob``); with ``framing="columns"``, column frames (one per key and batch,
    :func:`~perfsift.schemas.frames.encode_frames`) on the topics that only perfsift reads."""
    result: Encoded = {}
    for topics, batch in taps:
        encoded: list[bytes] | None = None
        for t in topics:
            enc, keys = result.setdefault(t, ([], []))
            if framing == "columns" and framed(t):
                frames, frame_keys = encode_frames(batch, key_of(t))
                enc += frames
                keys += frame_keys
                continue
            if encoded is None:
                encoded = encoding.encode_batch(batch)
            enc += encoded
            keys += batch_keys(batch, key_of(t))
    return result


def merge_summaries(summaries: Iterable[dict[str, dict[str, Any]]]) -> dict[str, dict[str, Any]]:
    """Per-job summaries of several operators (or partitions, or stages) as one: the fields of a
    job are joined; a field that is a mapping in both (e.g. ``contract_nodes`` of a job whose nodes
    are spread over partitions) is the union of the two."""
    out: dict[str, dict[str, Any]] = {}
    for summary in summaries:
        for job, fields in summary.items():
            mine = out.setdefault(job, {})
            for key, value in fields.items():
                if isinstance(value, dict) and isinstance(mine.get(key), dict):
                    mine[key] = {**mine[key], **value}
                else:
                    mine[key] = value
    return out
