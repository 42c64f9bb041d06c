"""The stage runner: one consumer group consuming micro-batches, a chain of operators, outputs.

Per micro-batch and input partition: decode the messages into a column batch (bad records go to
the dead-letter topic with topic:partition:offset and the reason), run the partition's operator
chain, encode and produce the outputs keyed by node. At most every ``commit_interval_s`` the
runner commits:

- ``at_least_once``: wait until every output is acknowledged, write each partition's operator
  state with the next input offset to the compacted state topic, wait for that too, then commit
  the input offsets. After a crash, records since the last commit are processed again from the
  restored state, so they re-emit byte-identical outputs: duplicates are possible, losses are not.
- ``exactly_once``: outputs, snapshots and input offsets go into one Kafka transaction.

Each input partition has its own operator chain, so state moves with the partition: on
assignment the runner restores the latest snapshot of that partition and resumes from the offset
stored with it.
"""

from __future__ import annotations

import base64
import contextlib
import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, cast

import orjson
from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    Producer,
    TopicPartition,
)
from perfsift.operators import Batch, Operator, Output, SnapshotError
from perfsift.schemas import decode_samples, encode_batch, encode_records
from perfsift.streams.config import EMITTERS, JSON_ENCODERS, PipelineConfig, StageConfig
from perfsift.streams.logs import kafka_logger
from perfsift.streams.topics import TOPICS

log = logging.getLogger("perfsift.runner")

STATE_TOPIC = "perf.state"
DEADLETTER_TOPIC = "perf.deadletter"


class StageError(RuntimeError):
    """A failure the stage cannot continue after (e.g. outputs not acknowledged); nothing is committed."""


@dataclass
class StageStats:
    """Counters of one stage instance; read by the CLI's live view and summary."""

    stage: str
    records_in: int = 0
    records_out: int = 0
    dead_letters: int = 0
    batches: int = 0
    bytes_in: int = 0
    bytes_out: int = 0
    commits: int = 0
    restored_partitions: int = 0
    lag: dict[int, int] = field(default_factory=dict)
    busy_s: float = 0.0
    started: float = field(default_factory=time.monotonic)
    last_batch_ms: float = 0.0
    #: monotonic time of the first fetched batch (None before), for throughput figures
    first_batch_at: float | None = None
    #: records produced per output topic (logical name), taps included
    by_topic: dict[str, int] = field(default_factory=dict)

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
            "lag": sum(self.lag.values()),
            "busy_s": round(self.busy_s, 3),
            "by_topic": dict(self.by_topic),
        }


@dataclass
class _Partition:
    chain: list[Operator]
    next_offset: int | None = None
    dirty: bool = False


def _where(m: Message) -> tuple[str, int, int]:
    """(topic, partition, offset) of a fetched message (never None for a message without error)."""
    return cast(str, m.topic()), cast(int, m.partition()), cast(int, m.offset())


def consumer_settings(props: dict[str, str], group: str, isolation: str = "read_uncommitted") -> dict[str, Any]:
    return {
        **props,
        "group.id": group,
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
        # fast group joins (the defaults take ~23 s on the embedded broker); classic protocol
        "session.timeout.ms": 6000,
        "heartbeat.interval.ms": 500,
        "isolation.level": isolation,
        "fetch.max.bytes": 52428800,
        "max.partition.fetch.bytes": 10485760,
        "logger": kafka_logger(),
    }


def producer_settings(props: dict[str, str], transactional_id: str | None = None) -> dict[str, Any]:
    s: dict[str, Any] = {
        **props,
        "linger.ms": 5,
        "batch.size": 1000000,
        "queue.buffering.max.messages": 2000000,
        "message.max.bytes": 16777216,
        # same key -> same partition as Java clients, so outputs co-partition with other producers
        "partitioner": "murmur2_random",
        "enable.idempotence": True,
        "delivery.report.only.error": True,
        "logger": kafka_logger(),
    }
    if transactional_id:
        s["transactional.id"] = transactional_id
        # a zombie's open transaction blocks read_committed readers until it times out: keep it short
        s["transaction.timeout.ms"] = 10000
    return s


def dead_letter_record(
    stage: str, msg_topic: str, partition: int, offset: int, key: bytes | None, value: bytes | None, reason: str
) -> bytes:
    """A dead-letter record (schemas/deadletter.avsc); key and value are base64 in JSON."""
    return orjson.dumps(
        {
            "stage": stage,
            "topic": msg_topic,
            "partition": partition,
            "offset": offset,
            "key": base64.b64encode(key).decode() if key is not None else None,
            "value": base64.b64encode(value).decode() if value is not None else None,
            "reason": reason,
            "ts": time.time(),
        }
    )


class StageRunner:
    """Runs one stage of a pipeline on Kafka until stopped.

    Parameters
    ----------
    stage : StageConfig
        Input topic, operator chain and output topics.
    pipeline : PipelineConfig
        Shared settings (encoding, guarantee, batch size, topic prefix, snapshots).
    kafka : dict
        librdkafka properties (bootstrap, security).
    embedded : bool or None
        True when the broker is the embedded one; ``guarantee: auto`` then means at-least-once.
        None (default) asks the broker: the embedded broker reports the cluster id
        ``perfsift-embedded`` (a bare Tansu broker ``tansu_cluster``).
    """

    def __init__(
        self,
        stage: StageConfig,
        pipeline: PipelineConfig,
        kafka: dict[str, str],
        embedded: bool | None = None,
        group_id: str | None = None,
        instance: str | None = None,
    ) -> None:
        self.stage = stage
        self.pipeline = pipeline
        self.kafka = kafka
        self.group_id = group_id or f"{pipeline.topic_prefix}perfsift.{stage.name}"
        self.instance = instance or uuid.uuid4().hex[:8]
        self.embedded = embedded
        self.guarantee = pipeline.guarantee  # "auto" is resolved when run() meets the broker
        self.stats = StageStats(stage.name)
        self.stop_event = threading.Event()
        self.ready = threading.Event()
        #: monotonic time the loop last came round (liveness)
        self.last_loop = time.monotonic()
        self._parts: dict[tuple[str, int], _Partition] = {}
        self._delivery_errors: list[str] = []
        self._last_commit = time.monotonic()
        self._in_topic = pipeline.topic(stage.input)
        self._dlq_topic = pipeline.topic(DEADLETTER_TOPIC)
        self._state_topic = pipeline.topic(STATE_TOPIC)
        self._fingerprint = "|".join(op.fingerprint() for op in stage.build_chain())
        self._consumer: Consumer | None = None
        self._producer: Producer | None = None
        self._in_txn = False

    def assigned(self) -> list[tuple[str, int]]:
        """Input partitions this instance owns now."""
        return list(self._parts)

    def job_summaries(self) -> dict[str, dict[str, Any]]:
        """Per job, what the operators that report one (``summary()``, e.g. reduce) say now: kept
        metrics, selection version, values in and out. Read from the processing thread's state
        without locking: a live view, not an exact snapshot."""
        return merge_summaries(op.summary() for part in list(self._parts.values()) for op in part.chain)

    # -- life cycle --------------------------------------------------------------------------------
    def stop(self) -> None:
        """Ask the loop to drain, commit and exit (safe from a signal handler or another thread)."""
        self.stop_event.set()

    @property
    def exactly_once(self) -> bool:
        return self.guarantee == "exactly_once"

    def resolve_guarantee(self) -> str:
        """Turn ``auto`` into exactly_once on a real cluster and at_least_once on the embedded broker
        (a transaction left open by a killed producer can stay open there and stall readers)."""
        if self.guarantee == "auto":
            embedded = self.embedded
            if embedded is None:
                from confluent_kafka.admin import AdminClient
                from perfsift.streams.broker import EMBEDDED_CLUSTER_IDS

                admin = AdminClient({**self.kafka, "logger": kafka_logger()})
                embedded = admin.list_topics(timeout=15).cluster_id in EMBEDDED_CLUSTER_IDS
            self.guarantee = "at_least_once" if embedded else "exactly_once"
        return self.guarantee

    def run(self, idle_timeout_s: float | None = None) -> StageStats:
        """Consume until :meth:`stop` (or, if given, until no message came for ``idle_timeout_s``)."""
        self.resolve_guarantee()
        isolation = "read_committed" if self.exactly_once else "read_uncommitted"
        self._consumer = Consumer(consumer_settings(self.kafka, self.group_id, isolation))
        txn_id = f"{self.group_id}.{self.instance}" if self.exactly_once else None
        self._producer = Producer(producer_settings(self.kafka, txn_id) | {"on_delivery": self._on_delivery})
        if self.exactly_once:
            self._producer.init_transactions(30)
        try:
            self._consumer.subscribe(
                [self._in_topic], on_assign=self._on_assign, on_revoke=self._on_revoke, on_lost=self._on_lost
            )
            log.info(
                "stage %s: consuming %s as group %s (%s)",
                self.stage.name,
                self._in_topic,
                self.group_id,
                self.guarantee,
                extra={"stage": self.stage.name, "topic": self._in_topic, "group": self.group_id,
                       "instance": self.instance, "guarantee": self.guarantee},
            )  # fmt: skip
            self._warm_up()  # while the group join runs in librdkafka's threads
            last_msg = time.monotonic()
            while not self.stop_event.is_set():
                msgs = self._consumer.consume(self.pipeline.batch_size, self.pipeline.batch_timeout_s)
                self.last_loop = time.monotonic()
                self.ready.set()
                if msgs:
                    last_msg = time.monotonic()
                    self._process(msgs)
                elif idle_timeout_s is not None and time.monotonic() - last_msg > idle_timeout_s:
                    break
                if time.monotonic() - self._last_commit >= self.pipeline.commit_interval_s:
                    self._commit()
            self._commit()
        finally:
            self._close()
        log.info(
            "stage %s: stopped after %d records in, %d out, %d dead letters",
            self.stage.name,
            self.stats.records_in,
            self.stats.records_out,
            self.stats.dead_letters,
            extra={"stage": self.stage.name, "instance": self.instance, "stats": self.stats.as_dict()},
        )
        return self.stats

    def _warm_up(self) -> None:
        t = time.monotonic()
        for op in self.stage.build_chain():
            try:
                op.warm_up()
            except Exception:  # only a head start: the first batch will load what this did not
                log.warning("stage %s: warming up %s failed", self.stage.name, type(op).__name__, exc_info=True)
        log.debug("stage %s: operators warmed up in %.2f s", self.stage.name, time.monotonic() - t)

    def _close(self) -> None:
        consumer, producer = self._consumer, self._producer
        self._consumer = self._producer = None
        if producer is not None:
            if self._in_txn:
                with contextlib.suppress(KafkaException):
                    producer.abort_transaction(10)
            producer.flush(10)
        if consumer is not None:
            with contextlib.suppress(KafkaException, RuntimeError):
                consumer.close()

    # -- processing --------------------------------------------------------------------------------
    def _on_delivery(self, err: KafkaError | None, msg: Message) -> None:
        if err is not None:
            self._delivery_errors.append(f"{msg.topic()}: {err}")

    def _ensure_transaction(self) -> None:
        if self.exactly_once and not self._in_txn:
            assert self._producer is not None
            self._producer.begin_transaction()
            self._in_txn = True

    def _produce(self, topic: str, value: bytes, key: bytes | None, partition: int = -1) -> None:
        assert self._producer is not None
        self._ensure_transaction()
        while True:
            try:
                if partition >= 0:
                    self._producer.produce(topic, value, key, partition=partition)
                else:
                    self._producer.produce(topic, value, key)
                return
            except BufferError:  # local queue full: let librdkafka send, then retry
                self._producer.poll(0.05)

    def _process(self, msgs: list[Message]) -> None:
        t0 = time.perf_counter()
        if self.stats.first_batch_at is None:
            self.stats.first_batch_at = time.monotonic()
        by_part: dict[tuple[str, int], list[Message]] = {}
        for m in msgs:
            err = m.error()
            if err is not None:
                if err.code() != KafkaError._PARTITION_EOF:
                    log.warning("consume error on %s: %s", self.stage.name, err)
                continue
            topic, partition, _ = _where(m)
            by_part.setdefault((topic, partition), []).append(m)
        for tp, ms in by_part.items():
            part = self._parts.get(tp)
            if part is None:  # revoked between fetch and processing
                continue
            self._process_partition(tp, part, ms)
        assert self._producer is not None
        self._producer.poll(0)
        self.stats.batches += 1
        dt = time.perf_counter() - t0
        self.stats.busy_s += dt
        self.stats.last_batch_ms = dt * 1000

    def _process_partition(self, tp: tuple[str, int], part: _Partition, ms: list[Message]) -> None:
        topic, partition = tp
        values = [m.value() for m in ms]

        def where(i: int) -> str:
            return f"{topic}:{partition}:{ms[i].offset()}"

        batch, kept, errors = decode_samples(values, where, self.pipeline.encoding)
        for e in errors:
            self._dead_letter(ms[e.index], e.reason)
        if len(batch):
            try:
                out, taps = run_chain(self.stage, part.chain, batch)
            except Exception as exc:  # an operator failed on this batch: park its records, go on
                log.exception("stage %s: operator failed on %s:%s", self.stage.name, topic, partition)
                for i in kept:
                    self._dead_letter(ms[i], f"processing failed: {type(exc).__name__}: {exc}"[:1000])
            else:
                self._emit(out, taps)
        part.next_offset = _where(ms[-1])[2] + 1
        part.dirty = True
        # counted once the batch is through the chain: a reader that sees every record counted
        # (perfsift run's end-of-input check) then also sees the operators' state after them
        self.stats.records_in += len(ms)
        self.stats.bytes_in += sum(len(v) for v in values if v is not None)

    def _emit(self, out: Output, taps: Taps | None = None) -> None:
        outputs = encode_outputs(self.stage, out, self.pipeline.encoding)
        counts = [len(encoded) for encoded, _ in outputs.values()]
        # a routed stage sends different records to each topic; the others send the same ones to all
        self.stats.records_out += sum(counts) if self.stage.emit == "routed" else max(counts, default=0)
        tapped = encode_samples(taps, self.pipeline.encoding) if taps else {}
        self._ensure_transaction()
        assert self._producer is not None
        produce = self._producer.produce  # the hot loop: one C call per record, no Python wrapper
        for name, (encoded, keys) in [*outputs.items(), *tapped.items()]:
            topic = self.pipeline.topic(name)
            for value, key in zip(encoded, keys, strict=True):
                try:
                    produce(topic, value, key)
                except BufferError:  # local queue full: the slow path waits and retries
                    self._produce(topic, value, key)
            self.stats.bytes_out += sum(map(len, encoded))
            self.stats.by_topic[name] = self.stats.by_topic.get(name, 0) + len(encoded)

    def _dead_letter(self, msg: Message, reason: str) -> None:
        self.stats.dead_letters += 1
        rec = dead_letter_record(self.stage.name, *_where(msg), msg.key(), msg.value(), reason)
        self._produce(self._dlq_topic, rec, msg.key())

    # -- commits and state -------------------------------------------------------------------------
    def _state_key(self, topic: str, partition: int) -> bytes:
        # the consumer group owns the state, as it owns the offsets: another group starts afresh
        return f"{self.group_id}/{topic}/{partition}".encode()

    def _commit(self) -> None:
        self._last_commit = time.monotonic()
        dirty = [(tp, p) for tp, p in self._parts.items() if p.dirty and p.next_offset is not None]
        if not dirty or self._producer is None or self._consumer is None:
            return  # nothing to commit, or the loop already failed and closed its clients
        offsets = [TopicPartition(t, p, part.next_offset) for (t, p), part in dirty]  # type: ignore[arg-type]
        if not self.exactly_once:
            self._flush_outputs()
        if self.pipeline.snapshots:
            for (t, p), part in dirty:
                self._produce(
                    self._state_topic,
                    self._snapshot_record(t, p, part),
                    self._state_key(t, p),
                    partition=self._state_partition(p),
                )
        if self.exactly_once:
            self._ensure_transaction()
            self._producer.send_offsets_to_transaction(offsets, self._consumer.consumer_group_metadata(), 30)
            self._producer.commit_transaction(30)
            self._in_txn = False
        else:
            self._flush_outputs()
            self._consumer.commit(offsets=offsets, asynchronous=False)
        for _, part in dirty:
            part.dirty = False
        self.stats.commits += 1
        self._update_lag()

    def _flush_outputs(self) -> None:
        assert self._producer is not None
        remaining = self._producer.flush(60)
        if remaining:
            raise StageError(f"stage {self.stage.name}: {remaining} outputs not acknowledged in 60 s; not committing")
        if self._delivery_errors:
            errs, self._delivery_errors = self._delivery_errors, []
            raise StageError(f"stage {self.stage.name}: {len(errs)} outputs failed, e.g. {errs[0]}; not committing")

    def _state_partition(self, partition: int) -> int:
        return partition % self.pipeline.partitions

    def _snapshot_record(self, topic: str, partition: int, part: _Partition) -> bytes:
        snaps = [base64.b64encode(op.snapshot()).decode() for op in part.chain]
        return orjson.dumps(
            {
                "stage": self.stage.name,
                "topic": topic,
                "partition": partition,
                "next_offset": part.next_offset,
                "fingerprint": self._fingerprint,
                "operators": snaps,
            }
        )

    def _update_lag(self) -> None:
        # Approximate: the embedded broker's high watermark can be short by the last batch.
        assert self._consumer is not None
        for (t, p), part in self._parts.items():
            if part.next_offset is None:
                continue
            with contextlib.suppress(KafkaException):
                _, high = self._consumer.get_watermark_offsets(TopicPartition(t, p), cached=True)
                if high >= 0:
                    self.stats.lag[p] = max(high - part.next_offset, 0)

    # -- rebalancing -------------------------------------------------------------------------------
    def _on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        snapshots = self._load_snapshots([p.partition for p in partitions]) if self.pipeline.snapshots else {}
        restored: list[int] = []
        for tp in partitions:
            chain = self.stage.build_chain()
            for op in chain:
                op.reset()
            part = _Partition(chain)
            snap = snapshots.get(tp.partition)
            if snap is not None:
                if snap["fingerprint"] != self._fingerprint:
                    log.warning(
                        "stage %s: state of %s:%d was made by another configuration; starting fresh",
                        self.stage.name,
                        tp.topic,
                        tp.partition,
                    )
                else:
                    try:
                        for op, blob in zip(chain, snap["operators"], strict=True):
                            op.restore(base64.b64decode(blob))
                    except (SnapshotError, ValueError) as exc:
                        log.warning(
                            "stage %s: cannot restore %s:%d (%s); starting fresh",
                            self.stage.name,
                            tp.topic,
                            tp.partition,
                            exc,
                        )
                        for op in chain:
                            op.reset()
                    else:
                        tp.offset = part.next_offset = int(snap["next_offset"])
                        self.stats.restored_partitions += 1
                        restored.append(tp.partition)
            self._parts[(tp.topic, tp.partition)] = part
        consumer.assign(partitions)
        self._log_partitions("assigned", partitions, logging.INFO, restored=sorted(restored))

    def _on_revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        with contextlib.suppress(KafkaException, StageError):
            self._commit()
        for tp in partitions:
            self._parts.pop((tp.topic, tp.partition), None)
        self._log_partitions("revoked", partitions, logging.INFO)

    def _on_lost(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        for tp in partitions:  # lost: another member may own them already; do not commit
            self._parts.pop((tp.topic, tp.partition), None)
        self._log_partitions("lost", partitions, logging.WARNING)

    def _log_partitions(self, event: str, partitions: list[TopicPartition], level: int, **fields: Any) -> None:
        """One log record per rebalance event (assigned, revoked, lost), with the partition numbers
        and ``fields`` as structured fields (``restored``: those resumed from a snapshot)."""
        numbers = sorted(tp.partition for tp in partitions)
        detail = "".join(f", {k} {v}" for k, v in fields.items())
        log.log(
            level,
            "stage %s: partitions %s of %s %s%s",
            self.stage.name,
            numbers,
            self._in_topic,
            event,
            detail,
            extra={"stage": self.stage.name, "instance": self.instance, "event": event, "partitions": numbers,
                   **fields},
        )  # fmt: skip

    def _load_snapshots(self, partitions: list[int]) -> dict[int, dict[str, Any]]:
        """Latest snapshot of this stage per input partition, read from the state topic.

        The end of a state partition is found by writing a marker and reading up to it: the
        marker's acknowledged offset is exact, whereas the embedded broker's high watermark can be
        short by the last batch.
        """
        wanted = {self._state_key(self._in_topic, p): p for p in partitions}
        state_parts = sorted({self._state_partition(p) for p in partitions})
        marker_producer = Producer({**self.kafka, "logger": kafka_logger()})
        ends: dict[int, int] = {}

        def on_marker(err: KafkaError | None, msg: Message) -> None:
            if err is None:
                _, partition, offset = _where(msg)
                ends[partition] = offset

        for sp in state_parts:
            marker_producer.produce(
                self._state_topic, b"{}", f"marker/{uuid.uuid4().hex}".encode(), partition=sp, on_delivery=on_marker
            )
        marker_producer.flush(30)
        if len(ends) != len(state_parts):
            raise StageError(f"stage {self.stage.name}: cannot write to the state topic {self._state_topic}")
        isolation = "read_committed" if self.exactly_once else "read_uncommitted"
        reader = Consumer(consumer_settings(self.kafka, f"{self.group_id}.restore", isolation))
        found: dict[int, dict[str, Any]] = {}
        try:
            reader.assign([TopicPartition(self._state_topic, sp, OFFSET_BEGINNING) for sp in state_parts])
            pending = dict(ends)
            deadline = time.monotonic() + 60
            while pending and time.monotonic() < deadline:
                for m in reader.consume(1000, 0.5):
                    if m.error() is not None:
                        continue
                    _, sp, offset = _where(m)
                    p = wanted.get(m.key() or b"")
                    if p is not None:
                        found[p] = orjson.loads(m.value() or b"null")
                    if offset >= pending.get(sp, 1 << 62):
                        pending.pop(sp, None)
            if pending:
                raise StageError(f"stage {self.stage.name}: timed out reading the state topic {self._state_topic}")
        finally:
            reader.close()
        return found


def _batch_keys(batch: Batch, kind: str) -> list[bytes]:
    """Message key of every row: its job (``kind == "job"``) or its node."""
    names, idx = (batch.jobs, batch.job_idx) if kind == "job" else (batch.nodes, batch.node_idx)
    encoded = [n.encode() for n in names]
    return [encoded[i] for i in idx.tolist()]


def encode_outputs(stage: StageConfig, out: Output, encoding: str) -> dict[str, tuple[list[bytes], list[bytes]]]:
    """A chain's output as (encoded records, message keys) per output topic (logical names).

    ``emit: samples`` encodes the batch once and keys it per topic by the topic's key (node, or job
    for ``perf.smoothed.byjob``); record emitters key by their field; ``emit: routed`` takes a dict
    topic -> batches and/or records, each encoded with its topic's schema and key (TOPICS)."""
    if stage.emit == "routed":
        if not isinstance(out, dict):
            raise StageError(f"stage {stage.name}: emit routed needs a dict topic -> records")
        result: dict[str, tuple[list[bytes], list[bytes]]] = {}
        for name, payload in out.items():
            if name not in stage.outputs:
                raise StageError(f"stage {stage.name}: an operator routed records to {name!r}, not in its outputs")
            spec = TOPICS[name]
            parts = payload if isinstance(payload, list) else [payload]
            encoded: list[bytes] = []
            keys: list[bytes] = []
            for b in (p for p in parts if isinstance(p, Batch)):
                encoded += encode_batch(b, encoding, spec.schema)
                keys += _batch_keys(b, spec.key)
            records = [p for p in parts if isinstance(p, dict)]
            if records:
                encoded += encode_records(records, encoding, spec.schema)
                keys += [str(r[spec.key]).encode() for r in records]
            result[name] = (encoded, keys)
        return result
    schema, to_records, key_field = EMITTERS[stage.emit]
    fast = JSON_ENCODERS.get(stage.emit) if encoding == "json" else None
    if fast is not None:
        encoded, keys = fast(out)
        return {t: (encoded, keys) for t in stage.outputs}
    if to_records is None:
        if not isinstance(out, Batch):
            raise StageError(f"stage {stage.name}: emit samples needs a batch")
        return encode_samples([(stage.outputs, out)], encoding)
    records = to_records(out)
    encoded = encode_records(records, encoding, schema)
    keys = [str(r[key_field]).encode() for r in records]
    return {t: (encoded, keys) for t in stage.outputs}


Taps = list[tuple[tuple[str, ...], Batch]]


def run_chain(
    stage: StageConfig, chain: list[Operator], batch: Batch, after: Callable[[Operator, Any, float], None] | None = None
) -> tuple[Output, Taps]:
    """The chain's output, and the intermediate batches that operators with ``publish`` tap off
    (topics, batch). ``after(op, output, seconds)`` sees each operator's output and time."""
    out: Output = batch
    taps: Taps = []
    for op, spec in zip(chain, stage.operators, strict=True):
        if not isinstance(out, Batch):
            raise StageError(f"stage {stage.name}: only the last operator of a chain may emit records")
        if after is None:
            out = op.update(out)
        else:
            t = time.perf_counter()
            out = op.update(out)
            after(op, out, time.perf_counter() - t)
        if spec.publish:
            if not isinstance(out, Batch):
                raise StageError(f"stage {stage.name}: {spec.type} emits records; only sample batches can be published")
            taps.append((spec.publish, out))
    return out, taps


def encode_samples(taps: Taps, encoding: str) -> dict[str, tuple[list[bytes], list[bytes]]]:
    """Sample batches, each for some topics (a stage's outputs, or taps), as (encoded samples,
    message keys) per topic (logical names): each batch is encoded once and keyed per topic by the
    topic's key (node, or job for ``perf.smoothed.byjob``)."""
    result: dict[str, tuple[list[bytes], list[bytes]]] = {}
    for topics, batch in taps:
        encoded = encode_batch(batch, encoding)
        for t in topics:
            enc, keys = result.setdefault(t, ([], []))
            enc += encoded
            keys += _batch_keys(batch, TOPICS[t].key if t in TOPICS else "node")
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


def wait_assigned(runners: list[StageRunner], timeout: float = 60.0, abort: Callable[[], bool] | None = None) -> bool:
    """Wait until every runner owns input partitions (its group join is done), at most ``timeout``
    seconds, or until ``abort()``; True when all are assigned."""
    deadline = time.monotonic() + timeout
    while not all(r.assigned() for r in runners):
        if time.monotonic() > deadline or (abort is not None and abort()):
            return False
        time.sleep(0.1)
    return True


def run_in_thread(
    runner: StageRunner, idle_timeout_s: float | None = None, on_error: Callable[[BaseException], None] | None = None
) -> threading.Thread:
    """Start ``runner.run`` in a daemon thread; exceptions go to ``on_error`` (default: logged)."""

    def target() -> None:
        try:
            runner.run(idle_timeout_s)
        except BaseException as exc:
            (on_error or (lambda e: log.exception("stage %s failed", runner.stage.name, exc_info=e)))(exc)

    t = threading.Thread(target=target, name=f"stage-{runner.stage.name}", daemon=True)
    t.start()
    return t
