"""The ingest stage on Kafka: :class:`IngestRunner`, the stage runner with a decoding step in front
of its operator chain.

It is :class:`~perfsift.streams.runner.StageRunner` (consumer group, checkpointed offsets and
operator state, dead letters with a reason, limits, ``/metrics``) with two things changed:

- per input partition, messages are decoded by the format's decoder into the partition's
  :class:`~perfsift.formats.assemble.Assembler` instead of being read as samples; a
  message that cannot be decoded goes to the dead-letter topic as ``malformed``, points without a
  node as ``unmapped``, points for a sample already emitted as ``late``;
- assembled samples leave on a clock, not only with data: every time the consume loop comes
  round (at least every ``batch_timeout_s``) the samples whose first point is ``max_delay`` old
  are emitted through the chain, even when no more data comes.

The assembler's pending rows and counter state are written with the chain's snapshot at every
commit and restored with it, so a committed offset never loses a point that is still waiting.
"""

from __future__ import annotations

import base64
import logging
import math
import time
from typing import Any

import orjson
from confluent_kafka import Message
from perfsift.formats import Assembler, IngestError, IngestSettings, decoder_for
from perfsift.formats.text import Decoder
from perfsift.operators import SnapshotError
from perfsift.streams.checkpoint import Checkpoints, Partition
from perfsift.streams.clients import dead_letter_record, where
from perfsift.streams.config import PipelineConfig, StageConfig
from perfsift.streams.runner import StageRunner
from perfsift.streams.stage import Chain, sized, step_batch

log = logging.getLogger("perfsift.ingest")


def assembler_of(chain: Chain, settings: IngestSettings) -> tuple[Assembler, Decoder]:
    """The assembler and decoder that travel with one partition's chain (made on first use)."""
    pair: tuple[Assembler, Decoder] | None = getattr(chain, "_ingest", None)
    if pair is None:
        asm = Assembler(settings)
        pair = (asm, decoder_for(asm))
        chain._ingest = pair  # type: ignore[attr-defined]
    return pair


class IngestCheckpoints(Checkpoints):
    """Snapshots that also carry the partition's assembler (pending samples, counters)."""

    def __init__(self, base: Checkpoints, settings: IngestSettings) -> None:
        super().__init__(base.kafka, base.group_id, base.topic, base.partitions, base.stage, base.chunk_bytes)
        self.settings = settings

    def header_extra(self, chain: Chain) -> dict[str, Any]:
        return {"ingest": base64.b64encode(assembler_of(chain, self.settings)[0].snapshot()).decode()}

    def restore(self, chain: Chain, snap: dict[str, Any], fingerprint: str, where_: str) -> int | None:
        offset = super().restore(chain, snap, fingerprint, where_)
        if offset is not None and "ingest" in snap:
            try:
                assembler_of(chain, self.settings)[0].restore(base64.b64decode(snap["ingest"]), time.monotonic())
            except (ValueError, KeyError, TypeError, SnapshotError):
                chain.reset()
                chain._ingest = None  # type: ignore[attr-defined]
                return None
        return offset


class IngestRunner(StageRunner):
    """A stage whose input is long records of ``stage.ingest.format`` (see the module docstring)."""

    aligned = False  # its records are no samples (a source's own lateness rules order them)

    def __init__(self, stage: StageConfig, pipeline: PipelineConfig, kafka: dict[str, str], **kw: Any) -> None:
        self._ingest: IngestSettings | None = None  # the loop clock is off until set up
        super().__init__(stage, pipeline, kafka, **kw)
        settings = stage.ingest
        if settings is None:
            raise ValueError(f"stage {stage.name} has no ingest settings")
        self._fingerprint = f"{self._fingerprint}|{settings.fingerprint()}"
        if settings.format != "perfsift":  # pass-through samples: nothing pending to snapshot
            self._checkpoints = IngestCheckpoints(self._checkpoints, settings)
        self._ingest = settings
        # a snapshot at every commit: what the assembler emits follows the wall clock, so records
        # replayed after a restart would not rebuild the same pending rows
        self.snapshot_share = math.inf
        #: data points decoded (all formats but perfsift)
        self.points_in = 0

    def _warm_up(self) -> None:
        super()._warm_up()
        settings = self._ingest
        if settings is not None and settings.format == "otlp_proto":  # the wire reader's machine code
            from perfsift.formats.otlp.otlp_fast import warm_up

            warm_up(settings)

    def _tick(self, now: float) -> None:
        """The clock that emits samples whose lateness bound ran out when no message arrives."""
        if self._ingest is not None and self._producer is not None:
            self._emit_due(now)

    def _emit_due(self, now: float, everything: bool = False) -> None:
        settings = self._ingest
        assert settings is not None
        if settings.format == "perfsift":  # passed through: nothing is assembled
            return
        for part in list(self._parts.values()):
            asm = assembler_of(part.chain, settings)[0]
            samples = asm.due(now, everything)
            if samples:
                self._publish(part, asm, samples)

    def _publish(self, part: Partition, asm: Assembler, samples: list[Any]) -> None:
        asm.max_metrics = part.guard.limits.max_metrics_per_sample
        batch = asm.to_batch(samples)
        dropped = asm.take_dropped()
        if dropped:
            if not self.stats.series_dropped:
                log.warning(
                    "stage %s: samples with more than max_metrics_per_sample=%d metrics keep the first ones "
                    "(the same ones every time, in name order); %d values left out so far (counted in "
                    "perfsift_ingest_series_dropped_total)",
                    self.stage.name,
                    asm.max_metrics,
                    dropped,
                )
            self.stats.series_dropped += dropped

        def park(row: int, reason: str, detail: str) -> None:  # no message to park: the sample itself is the record
            job, node, ts, metrics = samples[row]
            value = orjson.dumps({"ts": ts, "node": node, "job": job, "metrics": metrics})
            self._park_sample(node.encode(), value, detail, reason)

        # the runner's stage step: the limits, the chain, OTLP out, an operator error parks the samples
        step_batch(
            part.chain,
            part.guard,
            batch,
            list(range(len(samples))),
            self._emit,
            park,
            f"ingest stage {self.stage.name}",
        )
        part.dirty = True  # the assembler changed: its snapshot goes with the next commit

    def _park_sample(self, key: bytes, value: bytes, detail: str, reason: str) -> None:
        """A sample (assembled here, so without an input message of its own) to the dead-letter topic."""
        if self._silent:
            return
        self.stats.dead_letter(reason)
        rec = dead_letter_record(self.stage.name, self._in_topic, -1, -1, key, value, detail)
        self._produce(self._dlq_topic, rec, key)

    def _process_partition(self, tp: tuple[str, int], part: Partition, ms: list[Message]) -> None:
        settings = self._ingest
        assert settings is not None
        if settings.format == "perfsift":  # samples already: the runner's own decoding
            super()._process_partition(tp, part, ms)
            return
        asm, decode = assembler_of(part.chain, settings)
        asm.now = now = time.monotonic()
        points = asm.points
        many = getattr(decode, "many", None)
        batch: list[Message] = []
        values = [m.value() for m in ms]

        def park(i: int, reason: str, detail: str) -> None:
            self._dead_letter(ms[i], detail, reason)

        for i in sized(values, part.guard, park):  # the stage step's size limit
            m, value = ms[i], values[i]
            if value is None:
                park(i, "malformed", "empty message (null value)")
            elif many is not None:
                batch.append(m)
            else:
                try:
                    decode(value, m.key(), m.timestamp()[1] / 1000.0)
                except IngestError as exc:
                    self._dead_letter(m, exc.reason, exc.kind)
                    continue
                if asm.late or asm.unmapped:
                    for kind, reason in asm.take_problems():
                        self._dead_letter(m, reason, kind)
        if batch:  # the whole poll at once (otlp_proto)
            assert many is not None
            for i, kind, reason in many([m.value() for m in batch]):
                self._dead_letter(batch[i], reason, kind)
        self.points_in += asm.points - points
        part.next_offset = where(ms[-1])[2] + 1
        part.dirty = True
        samples = asm.due(now)
        if samples:
            self._publish(part, asm, samples)
        self.stats.records_in += len(ms)
        part.cadence.since += self.stats.count_in(self.stage.input, values)


def http_routes(runner: StageRunner) -> dict[str, Any]:
    """The POST endpoints of a runner's HTTP server: ``/api/v1/write`` for an ingest stage of
    ``remote_write`` (Prometheus posts there; the requests go to the stage's input topic, one per
    node), none for the others."""
    if not isinstance(runner, IngestRunner) or runner._ingest is None or runner._ingest.format != "remote_write":
        return {}
    from confluent_kafka import Producer
    from perfsift.formats.remote_write import RemoteWriteReceiver
    from perfsift.streams.clients import producer_settings

    producer = Producer(producer_settings({k: v for k, v in runner.kafka.items() if not k.startswith("transaction")}))
    receiver = RemoteWriteReceiver(producer, runner._in_topic, runner._ingest.map.node)
    runner.remote_write = receiver  # type: ignore[attr-defined]
    return {"/api/v1/write": receiver.handle}


def stage_runner(stage: StageConfig, pipeline: PipelineConfig, kafka: dict[str, str], **kw: Any) -> StageRunner:
    """The runner of a stage: :class:`IngestRunner` for a stage with ``ingest:``, else the usual one."""
    if stage.ingest is not None:
        return IngestRunner(stage, pipeline, kafka, **kw)
    return StageRunner(stage, pipeline, kafka, **kw)
