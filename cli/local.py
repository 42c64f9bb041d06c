"""``perfsift run`` on one machine, without the command line: every stage of the pipeline started
(as child processes or as threads of this one), a trace replayed into perf.raw, how many records
each stage has to see before the run is done, and the run's report folder (the outputs read back
from their topics, a summary and the HTML report).

The command (:mod:`perfsift.cli.pipeline`) adds the live view and the summary on the
terminal; the benchmarks start the stages with :func:`start_stages`, as the command does.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
from perfsift.analysis.analyze import FILES, values_ratio
from perfsift.analysis.report import build_report, write_atomic
from perfsift.producers import number_samples
from perfsift.producers.adaptive import replay_adaptive
from perfsift.producers.publish import PublishStats, publish_samples
from perfsift.producers.replay import replay
from perfsift.producers.traces import iter_samples
from perfsift.schemas import RecordError
from perfsift.streams.clients import read_topic_to_end
from perfsift.streams.config import PipelineConfig
from perfsift.streams.ingest_stage import stage_runner
from perfsift.streams.procs import StageProcess
from perfsift.streams.runner import StageRunner, run_in_thread, wait_assigned
from perfsift.streams.stage import merge_summaries
from perfsift.streams.volume import written_bytes
from rich.console import Console

#: where ``perfsift run`` on the embedded broker writes its report unless told otherwise
DEFAULT_REPORT = Path("perfsift-report")


def start_stages(
    cfg: PipelineConfig,
    props: dict[str, str],
    embedded: bool | None,
    processes: bool,
    failures: list[BaseException],
    grace: float = 60.0,
) -> tuple[list[Any], Callable[[], None]]:
    """Every stage of the pipeline started, as child processes (:class:`StageProcess`) or as threads
    of this process; returns them and a function that waits for them after ``stop()``: the
    processes together at most ``grace`` seconds (then they are killed). ``embedded`` None: each
    runner asks the broker."""
    if processes:
        procs = [StageProcess(st, cfg, props, embedded) for st in cfg.stages.values()]

        def join_procs() -> None:
            deadline = time.monotonic() + grace
            for p in procs:
                p.join(max(deadline - time.monotonic(), 0.0))

        return procs, join_procs
    runners = [stage_runner(st, cfg, props, embedded=embedded) for st in cfg.stages.values()]
    threads = [run_in_thread(r, on_error=failures.append) for r in runners]

    def join_threads() -> None:
        for th in threads:
            th.join(30)

    return runners, join_threads


def failed(runner: Any) -> str | None:
    """What stopped a stage process (a thread's exception goes to the failures list instead)."""
    return getattr(runner, "error", None)


def expected_inputs(cfg: PipelineConfig, runners: list[StageRunner], published: int) -> Callable[[Any], int]:
    """How many records each stage should see: the replayed count for stages reading perf.raw,
    and the upstream stage's outputs for the others."""
    producers = {o: r for r in runners for o in r.stage.written}

    def expected(r: StageRunner) -> int:
        if r.stage.input == "perf.raw":
            return published
        up = producers.get(r.stage.input)
        return up.stats.by_topic.get(r.stage.input, 0) if up is not None else 0

    return expected


class LocalRun:
    """Every stage of ``cfg`` running on this machine (:func:`start_stages`), and the records
    published to them.

    ``failures`` collects what stopped a stage; :meth:`publish` starts the clock and sets
    ``published`` and ``errors`` (the trace's rejected records).
    """

    def __init__(
        self, cfg: PipelineConfig, props: dict[str, str], embedded: bool | None, processes: bool, grace: float = 60.0
    ) -> None:
        self.cfg = cfg
        self.props = props
        self.failures: list[BaseException] = []
        self.runners, self._join = start_stages(cfg, props, embedded, processes, self.failures, grace)
        self.published = 0
        self.publish_stats: PublishStats | None = None  # set by an adaptive replay
        self.host_stats: PublishStats | None = None  # and by its host sampler
        self.errors: list[RecordError] = []
        self.started = time.monotonic()
        self._expected = expected_inputs(cfg, self.runners, 0)
        self._stopped = False

    def wait_assigned(self, stop: threading.Event | None = None) -> None:
        """Until every stage owns its partitions, or one failed, or ``stop`` is set. Publish only
        then: otherwise the first stages would meet a backlog and later ones see nodes in bursts,
        partition by partition."""

        def abort() -> bool:
            return (stop is not None and stop.is_set()) or bool(self.failures) or any(failed(r) for r in self.runners)

        wait_assigned(self.runners, abort=abort)

    def publish(
        self,
        trace: Path | None,
        speed: float | None,
        stop: threading.Event,
        console: Console,
        adaptive: bool = False,
        sample_host: float | None = None,
    ) -> None:
        """Start the clock and replay ``trace`` into perf.raw: paced at ``speed`` trace seconds per
        second, or as fast as possible; with no trace nothing is published (live input). With
        ``adaptive``, paced and following perf.control, and with ``sample_host`` this machine
        sampled alongside (:func:`~perfsift.producers.adaptive.replay_adaptive`)."""
        self.started = time.monotonic()
        raw = self.cfg.topic("perf.raw")
        if trace is not None and adaptive:
            control = self.cfg.topic("perf.control")
            self.publish_stats, self.host_stats = replay_adaptive(
                self.props, raw, control, trace, speed, stop, console, sample_host, self.cfg
            )
            self.published, self.errors = self.publish_stats.published, self.publish_stats.errors
            self.published += self.host_stats.published if self.host_stats is not None else 0
        elif trace is not None and speed:  # paced: event time advances evenly over the nodes, as from live producers
            rstats = replay(self.props, raw, trace, speed=speed, console=console, stop=stop, pipeline=self.cfg)
            self.published, self.errors = rstats.published, rstats.errors
        elif trace is not None:
            samples = number_samples(iter_samples(trace, on_error=self.errors.append))
            self.published = publish_samples(
                self.props, raw, samples, console=console, label=f"replaying {trace.name}", pipeline=self.cfg
            )
        self._expected = expected_inputs(self.cfg, self.runners, self.published)

    def elapsed(self) -> float:
        """Seconds since the first record was published."""
        return time.monotonic() - self.started

    def expected(self, runner: Any) -> int:
        """How many records ``runner``'s stage should see (:func:`expected_inputs`)."""
        return self._expected(runner)

    def caught_up(self) -> bool:
        """Every stage has seen every record meant for it."""
        return all(r.stats.records_in >= self._expected(r) for r in self.runners)

    def collect_failures(self) -> list[BaseException]:
        """The failures so far, with the errors the stage processes reported since the last call."""
        self.failures += [RuntimeError(e) for r in self.runners if (e := failed(r))]
        return self.failures

    def jobs(self) -> dict[str, dict[str, Any]]:
        """Per job, what the stages say about it (kept metrics, contract states, ...)."""
        return merge_summaries(r.job_summaries() for r in self.runners)

    def stop(self) -> None:
        """Stop every stage (they drain and commit) and wait for them (once; again is a no-op)."""
        if self._stopped:
            return
        self._stopped = True
        for r in self.runners:
            r.stop()
        self._join()

    def volume(self) -> dict[str, Any]:
        """Bytes read from perf.raw and written to every topic (state snapshots included), payload
        and compressed, and as ratios to the raw bytes (:func:`written_bytes`)."""
        first = next((r for r in self.runners if r.stage.input == "perf.raw"), None)
        raw: dict[str, int] = first.stats.wire_in.as_dict().get("perf.raw", {}) if first is not None else {}
        return written_bytes(raw, [r.stats.wire_out.as_dict() for r in self.runners])

    def summary(self, elapsed: float, jobs: dict[str, dict[str, Any]]) -> dict[str, Any]:
        """The run as ``--summary-json`` writes it."""
        volume = self.volume()
        return {
            "bytes_written_ratio": volume["bytes_written_ratio"],
            "bytes_written_compressed_ratio": volume["bytes_written_compressed_ratio"],
            "bytes": volume,
            "published": self.published,
            "rejected_lines": len(self.errors),
            "elapsed_s": round(elapsed, 3),
            "guarantee": self.runners[0].guarantee if self.runners else None,
            "stages": [r.stats.as_dict() for r in self.runners],
            "jobs": jobs,
            **({"adaptive": self.publish_stats.as_dict()} if self.publish_stats else {}),
            **({"host_sampler": self.host_stats.as_dict()} if self.host_stats else {}),
        }

    def write_outputs(self, folder: Path) -> None:
        """The run's outputs read back from their topics into ``folder`` (the layout of
        ``perfsift analyze``)."""
        folder.mkdir(parents=True, exist_ok=True)
        produced = {o for r in self.runners for o in r.stage.written}
        for topic, name in FILES.items():
            if topic not in produced:
                continue
            values = read_topic_to_end(self.props, self.cfg.topic(topic))
            seen = dict.fromkeys(values)  # at-least-once duplicates are identical: keep one of each
            lines = self.cfg.codec.json_lines(seen)
            write_atomic(folder / name, b"".join(v + b"\n" for v in lines))

    def write_report(self, folder: Path, live: bool = False) -> Path:
        """The stages' counts and the reduction ratio in ``folder/summary.json``, and the HTML report
        on the outputs there (``live``: a page that reloads itself); returns the page's path."""
        stages = {r.stage.name: r.stats.as_dict() for r in self.runners}
        volume = self.volume()
        summary: dict[str, Any] = {
            "bytes_written_ratio": volume["bytes_written_ratio"],
            "bytes_written_compressed_ratio": volume["bytes_written_compressed_ratio"],
            "bytes": volume,
            "stages": stages,
        }
        summary["reduction_ratio"] = values_ratio(self.jobs())  # metric values out / in
        smoothed = sum(s["bytes_in"] for n, s in stages.items() if self.cfg.stage(n).input == "perf.smoothed.byjob")
        reduced = sum(s["bytes_out"] for n, s in stages.items() if "perf.reduced" in self.cfg.stage(n).outputs)
        raw = sum(s["bytes_in"] for n, s in stages.items() if self.cfg.stage(n).input == "perf.raw")
        summary.update(bytes_raw=raw, bytes_smoothed=smoothed, bytes_reduced=reduced)  # as perfsift analyze
        write_atomic(folder / "summary.json", orjson.dumps(summary, option=orjson.OPT_INDENT_2))
        return build_report(folder, live=live)
