"""``perfsift analyze TRACE --out DIR``: the pipeline's operator chain in one process, no broker.

Every stage of the pipeline file runs in topological order on chunks of the trace; between stages
the records are encoded and decoded exactly as on Kafka (JSON or Avro, per the pipeline), so the
outputs are the same records a streaming run writes to the topics — the test suite checks it.
Writes ``DIR/selection.jsonl``, ``DIR/reduced.jsonl`` (or ``reduced.sddf`` with ``--sddf``),
``DIR/contract.jsonl``, ``DIR/forecast.jsonl``, ``DIR/control.jsonl`` (those the pipeline
produces), ``DIR/clean-flags.jsonl`` (the changed values) and ``DIR/summary.json``.
"""

from __future__ import annotations

import itertools
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import orjson
from perfsift.operators import Batch, Operator
from perfsift.producers import number_samples
from perfsift.producers.traces import TraceWriter, iter_samples
from perfsift.schemas import RecordError, batch_to_samples, decode_samples
from perfsift.streams.config import PipelineConfig, StageConfig
from perfsift.streams.runner import Taps, encode_outputs, encode_samples, run_chain

#: topic -> output file name (topics not listed are not written)
FILES = {
    "perf.selection": "selection.jsonl",
    "perf.reduced": "reduced.jsonl",
    "perf.contract": "contract.jsonl",
    "perf.forecast": "forecast.jsonl",
    "perf.control": "control.jsonl",
}


@dataclass
class StageStats:
    records_in: int = 0
    records_out: int = 0
    bytes_in: int = 0
    bytes_out: int = 0
    seconds: float = 0.0
    dead_letters: int = 0
    by_operator: dict[str, float] = field(default_factory=dict)


class Analysis:
    """Runs a pipeline's stages in process; feed it raw samples, then :meth:`finish`."""

    def __init__(self, cfg: PipelineConfig, out_dir: Path, sddf: bool = False) -> None:
        self.cfg = cfg
        self.out_dir = out_dir
        out_dir.mkdir(parents=True, exist_ok=True)
        self.order = self._topological(cfg)
        self.chains: dict[str, list[Operator]] = {}
        for st in self.order:
            chain = st.build_chain()
            for op in chain:
                op.reset()
            self.chains[st.name] = chain
        self.stats = {st.name: StageStats() for st in self.order}
        self.files: dict[str, IO[bytes]] = {}
        self.sddf: TraceWriter | None = TraceWriter(out_dir / "reduced.sddf") if sddf else None
        self.flags = (out_dir / "clean-flags.jsonl").open("wb")
        self.topic_counts: dict[str, int] = {}
        self.topic_bytes: dict[str, int] = {}
        self.errors: list[RecordError] = []

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
        wire = {"perf.raw": [orjson.dumps(s) for s in samples]}
        self._run(wire, final=False)

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
            values = wire.get(st.input, [])
            outputs: list[Any] = []
            if values:
                stats.records_in += len(values)
                stats.bytes_in += sum(map(len, values))

                def where(i: int, topic: str = st.input) -> str:
                    return f"{topic}[{i}]"

                batch, _, errors = decode_samples(values, where, self.cfg.encoding)
                stats.dead_letters += len(errors)
                self.errors += errors
                if len(batch):
                    out, taps = self._chain(st, batch)
                    outputs.append(out)
                    for topic, (encoded, _) in encode_samples(taps, self.cfg.encoding).items():
                        self._send(wire, stats, topic, encoded)
            if final:
                for op in self.chains[st.name]:
                    if (held := op.flush()) is not None:
                        outputs.append(held)
            for out in outputs:
                for topic, encoded in self._encode(st, out).items():
                    stats.records_out += len(encoded)
                    self._send(wire, stats, topic, encoded)

    def _send(self, wire: dict[str, list[bytes]], stats: StageStats, topic: str, encoded: list[bytes]) -> None:
        """Records a stage publishes: on to the stages that read the topic, and to its file."""
        wire.setdefault(topic, []).extend(encoded)
        stats.bytes_out += sum(map(len, encoded))
        self._write(topic, encoded)

    def _chain(self, st: StageConfig, batch: Batch) -> tuple[Any, Taps]:
        stats = self.stats[st.name]

        def after(op: Operator, out: Any, dt: float) -> None:
            name = type(op).__name__
            stats.by_operator[name] = stats.by_operator.get(name, 0.0) + dt
            stats.seconds += dt
            if isinstance(out, Batch) and "flags" in out.extra:  # the cleaner's report (perf.clean only)
                self._write_flags(out)

        return run_chain(st, self.chains[st.name], batch, after)

    def _write_flags(self, batch: Batch) -> None:
        nodes = batch.node_names()
        for i, f in enumerate(batch.extra["flags"].tolist()):
            if f:
                rec = {"ts": float(batch.ts[i]), "node": nodes[i], "seq": int(batch.seq[i]), "flags": f}
                self.flags.write(orjson.dumps(rec) + b"\n")

    def _encode(self, st: StageConfig, out: Any) -> dict[str, list[bytes]]:
        """The records the stage would publish, per topic (the runner's own encoding)."""
        if st.emit != "routed" and isinstance(out, dict):  # a flush that returned routed records
            return {}
        if self.sddf is not None and isinstance(out, dict):
            for part in out.get("perf.reduced", []):
                if isinstance(part, Batch):
                    for s in batch_to_samples(part):
                        self.sddf.write(s)
        return {topic: encoded for topic, (encoded, _) in encode_outputs(st, out, self.cfg.encoding).items()}

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
        smoothed = self.topic_bytes.get("perf.smoothed", 0)
        per_job = {}
        for chain in self.chains.values():
            for op in chain:
                per_job.update(op.summary())
        return {
            "stages": {
                name: {
                    "records_in": s.records_in,
                    "records_out": s.records_out,
                    "bytes_in": s.bytes_in,
                    "bytes_out": s.bytes_out,
                    "dead_letters": s.dead_letters,
                    "seconds": round(s.seconds, 4),
                    "operators_seconds": {k: round(v, 4) for k, v in s.by_operator.items()},
                }
                for name, s in self.stats.items()
            },
            "topics": {t: {"records": n, "bytes": self.topic_bytes.get(t, 0)} for t, n in self.topic_counts.items()},
            "bytes_raw": raw,
            "bytes_reduced": reduced,
            "reduction_ratio": reduced / smoothed if smoothed else None,
            "reduction_ratio_vs_raw": reduced / raw if raw else None,
            "jobs": per_job,
            "rejected": len(self.errors),
        }


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


def with_options(cfg: PipelineConfig, perf_metric: str | None = None, contract: Path | None = None) -> PipelineConfig:
    """The pipeline with statistical data reduction on ``perf_metric`` joined to every reduce
    operator, and a contract stage (perf.smoothed -> perf.contract) for ``contract``."""
    from dataclasses import replace

    from perfsift.streams.config import OperatorSpec

    stages = dict(cfg.stages)
    if perf_metric:
        for name, st in stages.items():
            ops = tuple(
                OperatorSpec(
                    op.type,
                    {**op.params, "reduction": {**(op.params.get("reduction") or {}), "perf_metric": perf_metric}},
                )
                if op.type == "reduce"
                else op
                for op in st.operators
            )
            stages[name] = replace(st, operators=ops)
    if contract is not None:
        stages["contract"] = StageConfig(
            "contract",
            "perf.smoothed",
            ("perf.contract",),
            (OperatorSpec("contract", {"contract": str(contract)}),),
            "contract",
        )
    return replace(cfg, stages=stages)
