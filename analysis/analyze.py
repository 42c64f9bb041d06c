"""``perfsift analyze TRACE --out DIR``: the pipeline's operator chain in one process, no broker.

Every stage of the pipeline file runs in topological order on chunks of the trace, through the
stage step of the Kafka runner (:func:`~perfsift.streams.stage.step_records`: decode, the
pipeline's ``limits:``, the chain, its outputs); between stages the records are encoded and decoded
as on Kafka, so the outputs are the same records a streaming run writes to the topics, and the
records a run would park on perf.deadletter are parked here (counted in the summary's
``dead_letters`` by reason) — the test suite checks both (tests/unit/test_stage_step.py).
Writes ``DIR/selection.jsonl``, ``DIR/reduced.jsonl`` (or ``reduced.sddf`` with ``--sddf``),
``DIR/contract.jsonl``, ``DIR/forecast.jsonl``, ``DIR/control.jsonl``, ``DIR/prediction.jsonl``
(those the pipeline produces), ``DIR/clean-flags.jsonl`` (the changed values) and ``DIR/summary.json``.
"""

from __future__ import annotations

import itertools
import time
from collections import Counter
from functools import partial
from pathlib import Path
from typing import IO, Any

import orjson
from perfsift.operators import Batch, Operator
from perfsift.producers import number_samples
from perfsift.producers.traces import TraceWriter, iter_samples
from perfsift.schemas import KINDS, RecordError, batch_to_samples, encoding_for
from perfsift.streams.clients import dead_letter_record
from perfsift.streams.config import PipelineConfig, StageConfig
from perfsift.streams.limits import Guard
from perfsift.streams.stage import Chain, Emitted, StageStats, merge_summaries, sample_decoder, step_records
from perfsift.streams.volume import written_bytes

#: topic -> output file name (topics not listed are not written): each kind's default topic and
#: report file, from the kinds' table (schemas/kinds.py)
FILES = {k.topic: k.file for k in KINDS.values() if k.file}


class Analysis:
    """Runs a pipeline's stages in process; feed it raw samples, then :meth:`finish`."""

    def __init__(self, cfg: PipelineConfig, out_dir: Path, sddf: bool = False) -> None:
        self.cfg = cfg
        self.out_dir = out_dir
        out_dir.mkdir(parents=True, exist_ok=True)
        self.order = self._topological(cfg)
        # JSON between the stages whatever the pipeline's wire encoding: the outputs are JSON-lines files
        json = encoding_for("json")
        self.chains = {st.name: Chain(st, json, cfg.framing) for st in self.order}
        self.stats = {st.name: StageStats(st.name) for st in self.order}
        self.files: dict[str, IO[bytes]] = {}
        self.sddf: TraceWriter | None = TraceWriter(out_dir / "reduced.sddf") if sddf else None
        self.flags = (out_dir / "clean-flags.jsonl").open("wb")
        self.topic_counts: dict[str, int] = {}
        self.topic_bytes: dict[str, int] = {}
        #: the records the stages parked, as (reason, dead-letter record) (perf.deadletter on Kafka)
        self.dead_letters: list[tuple[str, bytes]] = []
        self.guards = {st.name: Guard(cfg.limits) for st in self.order}
        self.decode = sample_decoder(json)

    @staticmethod
    def _topological(cfg: PipelineConfig) -> list[StageConfig]:
        done: list[StageConfig] = []
        available = {"perf.raw"}
        pending = list(cfg.stages.values())
        while pending:
            ready = [s for s in pending if s.input in available]
            if not ready:
                names = ", ".join(f"{s.name} (reads {s.input})" for s in pending)
                raise ValueError(f"stages whose input no stage produces: {names}")
            for s in ready:
                done.append(s)
                pending.remove(s)
                available.update(s.written)
        return done

    # -- running --------------------------------------------------------------------------------
    def feed(self, samples: list[dict[str, Any]]) -> None:
        """One chunk of raw samples through every stage."""
        self.feed_records([orjson.dumps(s) for s in samples])

    def feed_records(self, values: list[bytes]) -> None:
        """One chunk of perf.raw records (JSON samples, as published) through every stage."""
        self._run({"perf.raw": values}, final=False)

    def finish(self) -> dict[str, Any]:
        self._run({}, final=True)
        for fh in self.files.values():
            fh.close()
        self.flags.close()
        if self.sddf is not None:
            self.sddf.close()
        return self.summary()

    def _run(self, wire: dict[str, list[bytes]], final: bool) -> None:
        for st in self.order:
            stats = self.stats[st.name]
            chain = self.chains[st.name]
            values = wire.get(st.input, [])
            if values:
                stats.records_in += len(values)
                stats.count_in(st.input, values)  # type: ignore[arg-type]

                def place(i: int, topic: str = st.input) -> str:
                    return f"{topic}[{i}]"

                def park(i: int, kind: str, detail: str, stage: str = st.name, v: list[bytes] = values) -> None:
                    self._dead_letter(stage, v[i], kind, detail)

                publish = partial(self._send, wire, stats)
                at = f"stage {st.name}"
                step_records(
                    chain, self.guards[st.name], values, self.decode, place, publish, park, at, self._timer(stats)
                )
            if final:
                self._send(wire, stats, chain.flush())

    def _dead_letter(self, stage: str, value: bytes, kind: str, detail: str) -> None:
        """A record the stage parks: counted, and kept as on perf.deadletter (no partition or offset)."""
        self.stats[stage].dead_letter(kind)
        record = dead_letter_record(stage, self.cfg.stage(stage).input, -1, -1, None, value, detail)
        self.dead_letters.append((kind, record))

    def _send(self, wire: dict[str, list[bytes]], stats: StageStats, emitted: Emitted) -> None:
        """Records a stage publishes: on to the stages that read the topic, and to their files."""
        stats.records_out += emitted.records
        stats.count_out(emitted.topics)
        if self.sddf is not None and isinstance(emitted.output, dict):  # a router's reduced samples
            for part in emitted.output.get("reduced", []):
                for s in batch_to_samples(part):
                    self.sddf.write(s)
        for topic, (encoded, _) in emitted.topics.items():
            wire.setdefault(topic, []).extend(encoded)
            self._write(topic, encoded)

    def _timer(self, stats: StageStats) -> Any:
        def after(op: Operator, out: Any, dt: float) -> None:
            name = type(op).__name__
            stats.by_operator[name] = stats.by_operator.get(name, 0.0) + dt
            stats.busy_s += dt
            if isinstance(out, Batch) and "flags" in out.extra:  # the cleaner's report (perf.clean only)
                self._write_flags(out)

        return after

    def _write_flags(self, batch: Batch) -> None:
        nodes = batch.node_names()
        for i, f in enumerate(batch.extra["flags"].tolist()):
            if f:
                rec = {"ts": float(batch.ts[i]), "node": nodes[i], "seq": int(batch.seq[i]), "flags": f}
                self.flags.write(orjson.dumps(rec) + b"\n")

    def _write(self, topic: str, encoded: list[bytes]) -> None:
        self.topic_counts[topic] = self.topic_counts.get(topic, 0) + len(encoded)
        self.topic_bytes[topic] = self.topic_bytes.get(topic, 0) + sum(map(len, encoded))
        name = FILES.get(topic)
        if name is None or not encoded:
            return
        fh = self.files.get(topic)
        if fh is None:
            fh = self.files[topic] = (self.out_dir / name).open("wb")
        for e in encoded:
            fh.write(e + b"\n")

    # -- summary ----------------------------------------------------------------------------------
    def summary(self) -> dict[str, Any]:
        raw = self.stats[self.order[0].name].bytes_in if self.order else 0
        reduced = self.topic_bytes.get("perf.reduced", 0)
        per_job = merge_summaries(chain.summary() for chain in self.chains.values())
        first = self.stats[self.order[0].name] if self.order else None
        raw_bytes = first.wire_in.as_dict().get("perf.raw", {}) if first is not None else {}
        volume = written_bytes(raw_bytes, [s.wire_out.as_dict() for s in self.stats.values()])
        return {
            "bytes_written_ratio": volume["bytes_written_ratio"],
            "bytes_written_compressed_ratio": volume["bytes_written_compressed_ratio"],
            "bytes": volume,
            "stages": {
                name: {
                    "records_in": s.records_in,
                    "records_out": s.records_out,
                    "bytes_in": s.bytes_in,
                    "bytes_out": s.bytes_out,
                    "dead_letters": s.dead_letters,
                    "dead_by_reason": dict(s.dead_by_reason),
                    "seconds": round(s.busy_s, 4),
                    "operators_seconds": {k: round(v, 4) for k, v in s.by_operator.items()},
                }
                for name, s in self.stats.items()
            },
            "topics": {t: {"records": n, "bytes": self.topic_bytes.get(t, 0)} for t, n in self.topic_counts.items()},
            "bytes_raw": raw,
            "bytes_reduced": reduced,
            # metric values the reduced stream carries / values in (framing-independent)
            "reduction_ratio": values_ratio(per_job),
            "reduction_ratio_vs_raw": reduced / raw if raw else None,
            "jobs": per_job,
            # records parked (perf.deadletter on Kafka): malformed, over a limit, or an operator failed
            "rejected": len(self.dead_letters),
            "dead_letters": dict(Counter(kind for kind, _ in self.dead_letters)),
        }


def values_ratio(jobs: dict[str, dict[str, Any]]) -> float | None:
    """Metric values sent on the reduced stream / values in, over every job (None without a
    reduce stage)."""
    v_in = sum(j.get("values_in", 0) for j in jobs.values())
    return sum(j.get("values_out", 0) for j in jobs.values()) / v_in if v_in else None


def analyze(
    trace: Path, cfg: PipelineConfig, out_dir: Path, sddf: bool = False, chunk: int = 5000, on_chunk: Any = None
) -> dict[str, Any]:
    """Run the pipeline over a trace in process; returns the summary (also in ``summary.json``)."""
    run = Analysis(cfg, out_dir, sddf)
    errors: list[RecordError] = []
    samples = number_samples(iter_samples(trace, on_error=errors.append))
    t0 = time.perf_counter()
    n = 0
    while part := list(itertools.islice(samples, chunk)):
        run.feed(part)
        n += len(part)
        if on_chunk is not None:
            on_chunk(n)
    summary = run.finish()
    summary.update(samples=n, rejected_lines=len(errors), elapsed_s=round(time.perf_counter() - t0, 3))
    (out_dir / "summary.json").write_bytes(orjson.dumps(summary, option=orjson.OPT_INDENT_2))
    return summary
