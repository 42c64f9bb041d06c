"""The stage runner: one consumer group consuming micro-batches, a chain of operators, outputs.

Per micro-batch and input partition: decode the messages into a column batch (bad records go to
the dead-letter topic with topic:partition:offset and the reason), run the partition's operator
chain, encode and produce the outputs keyed by node. At most every ``commit_interval_s`` the
runner commits:

- ``at_least_once``: wait until every output is acknowledged, write the snapshots that are due
  (below) to the compacted state topic, wait for those too, then commit the input offsets. After
  a crash, records since the last commit are processed again, so they re-emit byte-identical
  outputs: duplicates are possible, losses are not.
- ``exactly_once``: outputs, snapshots and input offsets go into one Kafka transaction.

Each input partition has its own operator chain, so state moves with the partition; its snapshots cost at most
``snapshot_share`` of the input bytes (:mod:`~perfsift.streams.checkpoint`). On assignment (and after an aborted
transaction) the runner restores the latest snapshot and resumes at its offset, replaying the records up to the
committed offset silently: their outputs were written before.
"""

from __future__ import annotations

import contextlib
import logging
import math
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, Producer, TopicPartition
from perfsift.streams.access import AccessError, refused
from perfsift.streams.align import forget, in_order, pace, restart, stage_aligner, timed, with_end_events
from perfsift.streams.broker import is_embedded_cluster
from perfsift.streams.checkpoint import Cadence, Checkpoints, Partition
from perfsift.streams.clients import (
    dead_letter_record,
    redacted,
    statistics_callback,
    where,
)
from perfsift.streams.config import PipelineConfig, StageConfig
from perfsift.streams.group import JOIN_TIMEOUT_S, client_settings, is_cooperative, log_partitions, protocol_error
from perfsift.streams.group import wait_assigned as wait_assigned  # re-exported: where callers found it
from perfsift.streams.limits import Guard
from perfsift.streams.outputs import StageOutputs
from perfsift.streams.stage import (
    Chain,
    Emitted,
    StageError,
    StageStats,
    merge_summaries,
    note_missing,
    sample_decoder,
    step_records,
)
from perfsift.streams.threads import run_in_thread as run_in_thread  # re-exported: where callers found it
from perfsift.streams.topics import DEADLETTER_TOPIC, STATE_TOPIC
from perfsift.streams.transactions import MAX_REPLACEMENTS, commit_or_abort, describe, new_producer, replace

log = logging.getLogger("perfsift.runner")


class StageRunner:
    """Runs one stage of a pipeline on Kafka until stopped.

    It reads its input partitions in event-time order (``event_time_skew_s``, :mod:`~perfsift.streams.align`).

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
        # the pipeline file's kafka: section under what the caller resolved (env, -X)
        self.kafka = {**pipeline.kafka, **kafka}
        self.group_id = group_id or f"{pipeline.topic_prefix}perfsift.{stage.name}"
        self.instance = instance or uuid.uuid4().hex[:8]
        self.embedded = embedded
        self.guarantee = pipeline.guarantee  # "auto" is resolved when run() meets the broker
        self.stats = StageStats(stage.name)
        self.stop_event = threading.Event()
        self.ready = threading.Event()
        #: monotonic time the loop last came round (liveness)
        self.last_loop = time.monotonic()
        self._parts: dict[tuple[str, int], Partition] = {}
        self._delivery_errors: list[str] = []
        self._last_commit = time.monotonic()
        self._in_topic = pipeline.topic(stage.input)
        self._dlq_topic = pipeline.topic(DEADLETTER_TOPIC)
        state = pipeline.topic(STATE_TOPIC), pipeline.partitions, stage.name, pipeline.snapshot_chunk_bytes
        self._checkpoints = Checkpoints(kafka, self.group_id, *state)
        self._checkpoints.snapshots = pipeline.snapshots
        codec = pipeline.codec  # the wire encoding's object, one for the runner's chains, decoder and outputs
        self._template = Chain(stage, codec, pipeline.framing)
        self._decode = sample_decoder(codec)
        self._outputs = StageOutputs(pipeline, stage, codec)  # registry subjects, OTLP out
        self._fingerprint = self._template.fingerprint()  # the template also serves the warm-up
        self._consumer: Consumer | None = None
        self._producer: Producer | None = None
        self._producer_settings: dict[str, Any] = {}
        self._replacements = 0  # producers replaced since the last commit
        self._in_txn = False
        self._silent = False  # replaying: no output, no dead letter, no count
        #: share of the input bytes state snapshots may cost (inf: a snapshot at every commit)
        self.snapshot_share = pipeline.snapshot_share
        #: the assignment strategy and whether it rebalances incrementally, known once run() built the consumer
        self.strategy = ""
        self.cooperative = False
        self.loop_started: float | None = None  # monotonic time the consume loop began (readiness)
        self.join_timeout_s = JOIN_TIMEOUT_S
        skew = pipeline.event_time_skew_s if self.aligned else math.inf
        self._align = stage_aligner(skew, codec, pipeline.event_time_hold_bytes)

    aligned = True  #: whether the input partitions are read in event-time order (False: their records are no samples)

    def assigned(self) -> list[tuple[str, int]]:
        """Input partitions this instance owns now."""
        return list(self._parts)

    def job_summaries(self) -> dict[str, dict[str, Any]]:
        """Per job, what the operators that report one (``summary()``, e.g. reduce) say now: kept
        metrics, selection version, values in and out. Read from the processing thread's state
        without locking: a live view, not an exact snapshot."""
        return merge_summaries(part.chain.summary() for part in list(self._parts.values()))

    # -- life cycle --------------------------------------------------------------------------------
    def stop(self) -> None:
        """Ask the loop to drain, commit and exit (safe from a signal handler or another thread)."""
        self.stop_event.set()

    @property
    def exactly_once(self) -> bool:
        return self.guarantee == "exactly_once"

    def is_embedded(self) -> bool:
        """Whether the broker is the embedded one (asked once, by its cluster id, unless given)."""
        if self.embedded is None:
            self.embedded = is_embedded_cluster(self.kafka)
        return self.embedded

    def resolve_guarantee(self) -> str:
        """Turn ``auto`` into exactly_once on a real cluster and at_least_once on the embedded broker
        (a transaction left open by a killed producer can stay open there and stall readers)."""
        if self.guarantee == "auto":
            self.guarantee = "at_least_once" if self.is_embedded() else "exactly_once"
        return self.guarantee

    def client_settings(self) -> tuple[dict[str, Any], dict[str, Any]]:
        """The consumer's and the producer's configuration (:func:`~perfsift.streams.group.client_settings`)."""
        self.resolve_guarantee()
        txn_id = f"{self.group_id}.{self.instance}" if self.exactly_once else None
        return with_end_events(client_settings(self.kafka, self.group_id, txn_id, self.is_embedded), self._align)

    def _statistics(self, client: str) -> Callable[[str], None]:
        return statistics_callback(self.stats.kafka, client, f"stage {self.stage.name}")

    def run(self, idle_timeout_s: float | None = None) -> StageStats:
        """Consume until :meth:`stop` (or, if given, until no message came for ``idle_timeout_s``)."""
        consumer, producer = self.client_settings()
        # cooperative when every listed strategy is (cooperative-sticky), or under KIP-848 (none listed)
        self.strategy = str(consumer.get("partition.assignment.strategy", "cooperative-sticky"))
        self.cooperative = is_cooperative(self.strategy)
        shown = {"consumer": redacted(consumer), "producer": redacted(producer)}
        self._log(logging.INFO, "kafka consumer %s; producer %s", *shown.values(), **shown)
        self._consumer = Consumer(consumer | {"stats_cb": self._statistics("consumer")})
        self._producer_settings = {**producer, "on_delivery": self._on_delivery}
        self._producer_settings["stats_cb"] = self._statistics("producer")
        self._producer = new_producer(self._producer_settings)
        try:
            self._consumer.subscribe(
                [self._in_topic], on_assign=self._on_assign, on_revoke=self._on_revoke, on_lost=self._on_lost
            )
            group = {"topic": self._in_topic, "group": self.group_id, "guarantee": self.guarantee}
            self._log(logging.INFO, "consuming %s as group %s (%s)", *group.values(), **group)
            self._warm_up()  # while the group join runs in librdkafka's threads
            self.loop_started = time.monotonic()
            last_msg = time.monotonic()
            while not self.stop_event.is_set():
                wait = 0 if self._align.busy else self.pipeline.batch_timeout_s  # held messages to go
                msgs = self._consumer.consume(self.pipeline.batch_size, wait)
                self.last_loop = time.monotonic()
                try:
                    self._tick(self.last_loop)
                    self.ready.set()
                    if msgs or self._align.pending:
                        last_msg = time.monotonic()
                        self._process(msgs)
                    elif idle_timeout_s is not None and time.monotonic() - last_msg > idle_timeout_s:
                        break
                    else:  # idle: still serve the producer's delivery reports and statistics
                        self._producer.poll(0)
                        pace(self._consumer, self._align, self.last_loop, self.stats)  # an idle time may be over
                    if time.monotonic() - self._last_commit >= self.pipeline.commit_interval_s:
                        self._commit()
                except KafkaException as exc:
                    while (again := self._recover(exc)) is not None:  # the recovery failed too (cluster still down)
                        exc = again
            self._commit()
        finally:
            self._close()
        counts = self.stats.records_in, self.stats.records_out, self.stats.dead_letters
        message = "stopped after %d records in, %d out, %d dead letters"
        self._log(logging.INFO, message, *counts, stats=self.stats.as_dict())
        return self.stats

    def _tick(self, now: float) -> None:
        """Each time the loop comes round, messages or not (a subclass's timers, e.g. ingest's lateness)."""

    def _warm_up(self) -> None:
        t = time.monotonic()
        for warm in [*(op.warm_up for op in self._template.operators), self._template.encoding.warm_up]:
            try:
                warm()
            except Exception:  # only a head start: the first batch will load what this did not
                log.warning("stage %s: warming up %s failed", self.stage.name, warm.__qualname__, exc_info=True)
        log.debug("stage %s: operators warmed up in %.2f s", self.stage.name, time.monotonic() - t)

    def _recover(self, exc: KafkaException) -> KafkaException | None:
        """Under exactly-once, a Kafka error while processing or committing costs only the open
        transaction (:mod:`~perfsift.streams.transactions`); otherwise, or after
        :data:`MAX_REPLACEMENTS` in a row without a commit, it ends the stage. Returns the error
        the recovery itself met (to be recovered from in turn), or None."""
        if (line := refused(exc, self.kafka, "running")) is not None:  # ACLs, credentials: no use trying again
            raise AccessError(line) from None
        if not self.exactly_once or self._replacements >= MAX_REPLACEMENTS or self._consumer is None:
            raise exc
        self._replacements += 1
        why, name = describe(exc), self.stage.name
        log.warning("stage %s: transaction failed: %s; new producer, partitions back to their last commit", name, why)
        try:
            self._producer = replace(self._producer, self._in_txn, self._producer_settings)
            self._in_txn = False
            self._delivery_errors.clear()
            self.stats.producers_replaced += 1
            restart(self._consumer, self._align, list(self._parts))
            self._checkpoints.rewind(self._consumer, self._parts, self._fresh, self._fingerprint)
        except KafkaException as again:
            return again
        return None

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
        ends: list[tuple[str, int]] = []
        for m in msgs:
            err = m.error()
            if err is not None:
                if (refused := protocol_error(err, self.stage.name, self.group_id, self.strategy)) is not None:
                    raise refused
                if err.code() != KafkaError._PARTITION_EOF:
                    log.warning("consume error on %s: %s", self.stage.name, err)
                else:
                    ends.append(where(m)[:2])
                continue
            topic, partition, _ = where(m)
            by_part.setdefault((topic, partition), []).append(m)
        now = time.monotonic()
        for tp, ms in in_order(self._align, by_part, ends, now):  # the partitions ahead are held (align.py)
            part = self._parts.get(tp)
            if part is None:  # revoked between fetch and processing
                continue
            self._process_partition(tp, part, ms)
        pace(self._consumer, self._align, now, self.stats)
        assert self._producer is not None
        self._producer.poll(0)
        self.stats.batches += 1
        self.stats.observe_batch(time.perf_counter() - t0)

    def _process_partition(self, tp: tuple[str, int], part: Partition, ms: list[Message]) -> None:
        if part.replay_until > where(ms[0])[2] and not self._silent:  # processed before a restart: state only
            k = next((i for i, m in enumerate(ms) if where(m)[2] >= part.replay_until), len(ms))
            self._silent = True  # (an exception here ends the loop, so no finally)
            self._process_partition(tp, part, ms[:k])
            self._silent = False
            if not (ms := ms[k:]):
                return
        if self.pipeline.snapshots and part.cadence.size < 0:  # the state the partition starts from
            self._snapshot(tp, part, where(ms[0])[2], fresh=True)
        topic, partition = tp
        values = [m.value() for m in ms]

        def place(i: int) -> str:
            return f"{topic}:{partition}:{ms[i].offset()}"

        def park(i: int, kind: str, detail: str) -> None:
            self._dead_letter(ms[i], detail, kind)

        at = f"stage {self.stage.name}, {topic}:{partition}"
        decode = timed(self._decode, self._align, tp)  # tells the aligner the batch's event time
        if step_records(part.chain, part.guard, values, decode, place, self._emit, park, at):
            note_missing(part.chain, self.stats)
        part.next_offset = where(ms[-1])[2] + 1
        if self._silent:
            part.cadence.since += sum(len(v) for v in values if v is not None)
            self.stats.replayed += len(ms)
            return
        part.dirty = True
        # counted once the batch is through the chain: a reader that sees every record counted
        # (perfsift run's end-of-input check) then also sees the operators' state after them
        self.stats.records_in += len(ms)
        part.cadence.since += self.stats.count_in(self.stage.input, values)

    def _emit(self, emitted: Emitted) -> None:
        """Publish what the chain emitted, with the stage's own outputs (OTLP requests: ``otlp_out``)."""
        if self._silent:
            return
        emitted = self._outputs.extend(emitted)
        self.stats.records_out += emitted.records
        self._ensure_transaction()
        assert self._producer is not None
        produce = self._producer.produce  # the hot loop: one C call per record, no Python wrapper
        for name, (encoded, keys) in emitted.topics.items():
            topic = self.pipeline.topic(name)
            for value, key in zip(encoded, keys, strict=True):
                try:
                    produce(topic, value, key)
                except BufferError:  # local queue full: the slow path waits and retries
                    self._produce(topic, value, key)
        self.stats.count_out(emitted.topics)

    def _dead_letter(self, msg: Message, reason: str, kind: str) -> None:
        """Park ``msg`` on the dead-letter topic with ``reason`` (the record's text) counted under
        ``kind`` (one of :data:`DEAD_LETTER_REASONS`, the metric's label)."""
        if self._silent:
            return
        self.stats.dead_letter(kind)
        rec = dead_letter_record(self.stage.name, *where(msg), msg.key(), msg.value(), reason)
        self._produce(self._dlq_topic, rec, msg.key())

    # -- commits and state -------------------------------------------------------------------------
    def _commit(self) -> None:
        self._last_commit = time.monotonic()
        dirty = [(tp, p) for tp, p in self._parts.items() if p.dirty and p.next_offset is not None]
        if not dirty or self._producer is None or self._consumer is None:
            return  # nothing to commit, or the loop already failed and closed its clients
        offsets = [TopicPartition(t, p, part.next_offset) for (t, p), part in dirty]  # type: ignore[arg-type]
        if not self.exactly_once:
            self._flush_outputs()
        if self.pipeline.snapshots:
            for tp, part in dirty:
                if part.cadence.fits():
                    self._snapshot(tp, part, part.next_offset)  # type: ignore[arg-type]
        if self.exactly_once:
            self._ensure_transaction()
            self._in_txn = False  # committed, or aborted and every owned partition back at its last commit:
            if not commit_or_abort(self._producer, self._consumer, offsets):
                restart(self._consumer, self._align, list(self._parts))
                return self._checkpoints.rewind(self._consumer, self._parts, self._fresh, self._fingerprint)
        else:
            self._flush_outputs()
            self._consumer.commit(offsets=offsets, asynchronous=False)
        for _, part in dirty:
            part.dirty = False
        self.stats.commits += 1
        self._replacements = 0
        self._update_lag()

    def _snapshot(self, tp: tuple[str, int], part: Partition, next_offset: int, fresh: bool = False) -> None:
        """Write ``part``'s chain as the state before ``next_offset`` (sent with the next commit)
        if ``fresh`` (always) or its size fits the partition's share of the input; else remember the size."""
        cp, (t, p) = self._checkpoints, tp
        msgs, size = cp.messages(t, p, cp.record(t, p, next_offset, part.chain, self._fingerprint, fresh), part.slot)
        if fresh or part.cadence.fits(size):
            for key, value in msgs:
                self._produce(cp.topic, self.stats.count_state(value), key, partition=cp.partition(p))
            part.wrote(size, chunked=len(msgs) > 1)
        else:
            part.cadence.size = size

    def _flush_outputs(self) -> None:
        assert self._producer is not None
        remaining = self._producer.flush(60)
        if remaining:
            raise StageError(f"stage {self.stage.name}: {remaining} outputs not acknowledged in 60 s; not committing")
        if self._delivery_errors:
            errs, self._delivery_errors = self._delivery_errors, []
            raise StageError(f"stage {self.stage.name}: {len(errs)} outputs failed, e.g. {errs[0]}; not committing")

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
        restored: dict[int, tuple[int, int]] = {}
        if not self.pipeline.snapshots or not partitions:  # a cooperative round may assign nothing new
            self._parts.update({(tp.topic, tp.partition): self._fresh() for tp in partitions})
        else:
            parts, restored = self._checkpoints.resume(
                consumer, partitions, self._fresh, self._fingerprint, self.exactly_once
            )
            self._parts.update(parts)
            self.stats.restored_partitions += len(restored)
        self._align.assign([(tp.topic, tp.partition) for tp in partitions], time.monotonic())
        if self.cooperative:  # only the partitions that moved here; the others keep running
            consumer.incremental_assign(partitions)
        else:
            consumer.assign(partitions)
        log_partitions(
            self,
            "assigned",
            partitions,
            logging.INFO,
            restored=sorted(restored),
            replay={p: r for p, r in restored.items() if r[1] > r[0]},
        )

    def _fresh(self) -> Partition:
        return Partition(self._template.fresh(), Guard(self.pipeline.limits), Cadence(self.snapshot_share))

    def _on_revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        # cooperative: only the partitions that move away; eager: all of them
        with contextlib.suppress(KafkaException, StageError):
            self._commit()
        for tp in partitions:
            self._parts.pop((tp.topic, tp.partition), None)
        forget(consumer, self._align, partitions)
        self.stats.revoked_partitions += len(partitions)
        if self.cooperative and partitions:
            consumer.incremental_unassign(partitions)
        log_partitions(self, "revoked", partitions, logging.INFO)

    def _on_lost(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        for tp in partitions:  # lost: another member may own them already; do not commit
            self._parts.pop((tp.topic, tp.partition), None)
        forget(consumer, self._align, partitions)
        if self.cooperative and partitions:
            consumer.incremental_unassign(partitions)
        log_partitions(self, "lost", partitions, logging.WARNING)

    def _log(self, level: int, message: str, *args: Any, **fields: Any) -> None:
        """``message`` % ``args`` in the log after the stage's name, with the stage, the instance
        and ``fields`` as structured fields."""
        extra = {"stage": self.stage.name, "instance": self.instance, **fields}
        log.log(level, f"stage %s: {message}", self.stage.name, *args, extra=extra)
