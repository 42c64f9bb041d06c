"""Stages of ``perfsift run`` in child processes, one interpreter (and interpreter lock) each.

In one process the stages' Python work - decoding and encoding every record at each hop, the
per-message Kafka calls, the operators' bookkeeping - takes turns on one lock, so several stages on a
2-core machine use little more than one core. A :class:`StageProcess` runs a
:class:`~perfsift.streams.runner.StageRunner` in a spawned child, as ``perfsift worker`` would in a
Kubernetes pod, and shows the parent the same face the live view and the summary read: ``stage``,
``stats``, ``guarantee``, ``assigned()``, ``job_summaries()`` and ``stop()``.
"""

from __future__ import annotations

import copy
import logging
import multiprocessing
import os
import signal
import time
from multiprocessing.connection import Connection
from typing import Any

from perfsift.streams.config import PipelineConfig, StageConfig
from perfsift.streams.ingest_stage import stage_runner
from perfsift.streams.logs import LogFormat, LogLevel, current_logging, enable_stack_dumps, setup_logging
from perfsift.streams.runner import run_in_thread
from perfsift.streams.stage import StageStats

REPORT_S = 0.1  # how often a child sends its counters


def _child(
    name: str,
    cfg: PipelineConfig,
    props: dict[str, str],
    embedded: bool | None,
    stop: Any,
    send: Connection,
    logs: tuple[LogLevel, LogFormat],
    parent: int,
) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the parent, which tells us to stop
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    enable_stack_dumps()  # kill -USR1: every thread's stack to stderr, as in the parent
    setup_logging(*logs)  # a spawned interpreter starts with none: log as the parent does
    failures: list[BaseException] = []
    runner = stage_runner(cfg.stage(name), cfg, props, embedded=embedded)
    thread = run_in_thread(runner, on_error=failures.append)

    def report() -> None:
        # the counters are copied before the summaries are read, so a parent that sees every record
        # counted also gets summaries that include them
        stats = copy.copy(runner.stats)
        send.send(("state", stats, runner.job_summaries(), bool(runner.assigned()), runner.guarantee))

    try:
        while thread.is_alive():
            if os.getppid() != parent:  # the parent is gone (killed): drain, commit and exit, not orphaned
                stop.set()
            if stop.wait(REPORT_S):
                break
            report()
        runner.stop()
        thread.join(60)  # the parent kills us when its grace period is over
        report()
        if failures:
            send.send(("error", f"{type(failures[0]).__name__}: {failures[0]}"))
        send.close()
    except OSError:  # BrokenPipeError: nobody is listening any more (the parent is gone)
        runner.stop()
        thread.join(60)
    # The runner closed its clients. Exit here rather than in the interpreter's teardown, where a
    # runner still stuck (closing clients of a broker that went away with a killed parent) or
    # librdkafka's destructors could hang, orphaned (seen: stage processes left for 35 minutes).
    logging.shutdown()
    os._exit(1 if thread.is_alive() else 0)


class StageProcess:
    """A stage running in a child process; see the module docstring."""

    def __init__(
        self, stage: StageConfig, cfg: PipelineConfig, props: dict[str, str], embedded: bool | None = None
    ) -> None:
        ctx = multiprocessing.get_context("spawn")  # never fork a process that runs librdkafka threads
        self.stage = stage
        self._stats = StageStats(stage.name)
        self.guarantee: str | None = cfg.guarantee
        self.error: str | None = None
        self._jobs: dict[str, dict[str, Any]] = {}
        self._assigned = False
        self._stop = ctx.Event()
        self._recv, send = ctx.Pipe(duplex=False)
        self.proc = ctx.Process(
            target=_child,
            args=(stage.name, cfg, props, embedded, self._stop, send, current_logging(), os.getpid()),
            name=f"stage-{stage.name}",
        )
        self.proc.daemon = True
        self.proc.start()
        send.close()  # the child holds the sending end; EOF here means it is gone

    def _drain(self) -> None:
        try:
            while self._recv.poll():
                msg = self._recv.recv()
                if msg[0] == "state":
                    _, self._stats, self._jobs, self._assigned, self.guarantee = msg
                elif msg[0] == "error":
                    self.error = msg[1]
        except (EOFError, OSError):
            pass
        if self.error is None and not self.proc.is_alive() and self.proc.exitcode not in (0, None):
            self.error = f"stage process {self.stage.name} exited with code {self.proc.exitcode}"

    @property
    def stats(self) -> StageStats:
        """The child's counters as last reported (at most REPORT_S old)."""
        self._drain()
        return self._stats

    def assigned(self) -> bool:
        self._drain()
        return self._assigned

    def job_summaries(self) -> dict[str, dict[str, Any]]:
        self._drain()
        return self._jobs

    def stop(self) -> None:
        self._stop.set()

    def join(self, timeout: float = 60.0) -> None:
        """Wait for the child to drain, commit and exit, reading its last counters meanwhile; after
        ``timeout`` seconds it is killed (what it did not commit is processed again on restart)."""
        deadline = time.monotonic() + timeout
        while self.proc.is_alive() and time.monotonic() < deadline:
            self._drain()
            self.proc.join(0.05)
        if self.proc.is_alive():
            self.proc.kill()
            self.proc.join(5)
        self._drain()
