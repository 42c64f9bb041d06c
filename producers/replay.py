"""Publishing samples the way live producers do: trace replay with the trace's own timing, and the
adaptive-instrumentation filter that follows ``perf.control``.

``replay`` streams a trace file (any format of :mod:`perfsift.producers.traces`) to ``perf.raw``
in constant memory: samples keyed by node, ``seq`` numbered per (job, node) in replay order, sent
when their (scaled) trace time comes, or as fast as the broker takes them. Event time stays the
trace's; with ``loop`` > 1 each pass is shifted by the trace's span so event time keeps growing.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, KafkaError
from perfsift.producers.publish import PublishStats, SamplePublisher
from perfsift.producers.traces import SddfMapping, iter_samples
from perfsift.schemas import RecordError
from perfsift.schemas.detect import decode_any
from perfsift.streams.clients import assign_from_start, consumer_settings
from perfsift.streams.config import PipelineConfig
from rich.console import Console
from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn


class AdaptiveControl:
    """Follows ``perf.control`` (compacted, key = job) in a background thread; :meth:`apply` keeps
    only the metrics the latest control record of the sample's job names, except that every
    ``full_every``-th sample of each (job, node) goes out whole so the selection can be
    re-evaluated. Jobs without a control record are not touched."""

    def __init__(self, props: dict[str, str], topic: str = "perf.control") -> None:
        # No consumer group: every producer reads the whole (compacted) topic from the start, with
        # partition-EOF events telling when it has caught up.
        settings = consumer_settings(props, f"perfsift-producer-{uuid.uuid4().hex[:8]}")
        settings.update({"enable.auto.commit": False, "enable.partition.eof": True})
        self.consumer = Consumer(settings)
        self.topic = topic
        self.rules: dict[str, tuple[frozenset[str], int, int]] = {}  # job -> (keep, full_every, version)
        self.counters: dict[tuple[str, str], int] = {}
        self.lock = threading.Lock()
        self.stop_event = threading.Event()
        self.ready = threading.Event()
        self.thread = threading.Thread(target=self._run, name="perfsift-control", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        parts = assign_from_start(self.consumer, self.topic)
        if not parts:
            self.ready.set()  # no control topic: nothing to follow
            return
        at_end: set[int] = set()
        while not self.stop_event.is_set():
            for m in self.consumer.consume(100, 0.2):
                err = m.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        at_end.add(m.partition())  # type: ignore[arg-type]
                        if len(at_end) == len(parts):
                            self.ready.set()
                    continue
                if m.value() is None:
                    continue
                try:  # in whatever encoding the pipeline writes (decode_any tells them apart)
                    rec = decode_any(m.value()).record
                    rule = (frozenset(map(str, rec["keep"])), max(int(rec["full_every"]), 1), int(rec["version"]))
                    job = str(rec["job"])
                except (RecordError, KeyError, TypeError, ValueError):
                    continue  # not a control record: ignore it, producers must keep running
                with self.lock:
                    if job not in self.rules or rule[2] >= self.rules[job][2]:
                        self.rules[job] = rule

    def wait_ready(self, timeout: float = 15.0) -> bool:
        """Wait until the control topic is assigned and read to its end (rules already published
        are then in force before the first sample goes out)."""
        return self.ready.wait(timeout)

    def apply(self, sample: dict[str, Any]) -> tuple[dict[str, Any], bool]:
        """(the sample to send, whether it was reduced)."""
        with self.lock:
            rule = self.rules.get(sample["job"])
        if rule is None:
            return sample, False
        keep, every, _ = rule
        key = (sample["job"], sample["node"])
        n = self.counters.get(key, 0)
        self.counters[key] = n + 1
        if n % every == 0:
            return sample, False
        return {**sample, "metrics": {k: v for k, v in sample["metrics"].items() if k in keep}}, True

    def close(self) -> None:
        self.stop_event.set()
        self.thread.join(5)
        self.consumer.close()


def replay_samples(
    path: Path,
    fmt: str | None = None,
    mapping: SddfMapping | None = None,
    job: str | None = None,
    loop: int = 1,
    on_error: Callable[[RecordError], None] | None = None,
) -> Iterator[dict[str, Any]]:
    """The samples of a trace as replay sends them: job overridden when given, ``seq`` numbered per
    (job, node) from 0 in replay order, each loop shifted by the trace's span."""
    counters: dict[tuple[str, str], int] = {}
    shift = 0.0
    for k in range(loop):
        first = last = None
        step = 0.0
        looping = k + 1 < loop  # the span is needed only to shift a next pass
        for s in iter_samples(path, fmt, on_error, mapping):
            if job is not None:
                s["job"] = job
            key = (s["job"], s["node"])
            n = counters.get(key, 0)
            counters[key] = n + 1
            s["seq"] = n
            if looping or shift:
                ts = s["ts"]
                if first is None:
                    first = ts
                elif last is not None and ts > last and (step == 0.0 or ts - last < step):
                    step = ts - last  # the smallest positive gap: the sampling interval
                last = ts if last is None else max(last, ts)
                s["ts"] = ts + shift
            yield s
        if not looping:
            return
        if first is None or last is None:
            return
        shift += last - first + (step or 1.0)


def replay(
    props: dict[str, str],
    topic: str,
    path: Path,
    speed: float | None = 1.0,
    fmt: str | None = None,
    mapping: SddfMapping | None = None,
    job: str | None = None,
    loop: int = 1,
    adaptive: AdaptiveControl | None = None,
    console: Console | None = None,
    stop: threading.Event | None = None,
    pipeline: PipelineConfig | None = None,
) -> PublishStats:
    """Publish a trace; ``speed`` None = as fast as possible, else trace seconds per wall second
    (2.0 = twice as fast as recorded). Bad records are counted and skipped; samples are JSON, or in
    ``pipeline``'s encoding."""
    pub = SamplePublisher(props, topic, adaptive, pipeline)
    stats = pub.stats
    t0 = time.monotonic()
    first_ts: float | None = None
    progress = Progress(
        SpinnerColumn(),
        TextColumn("{task.description}"),
        TextColumn("{task.completed:,} samples"),
        TextColumn("{task.fields[rate]}"),
        TimeElapsedColumn(),
        console=console,
        transient=True,
        disable=console is None,
    )
    with progress:
        task = progress.add_task(f"replaying {path.name}", total=None, rate="")
        for s in replay_samples(path, fmt, mapping, job, loop, stats.errors.append):
            if stop is not None and stop.is_set():
                break
            if speed is not None:
                if first_ts is None:
                    first_ts = s["ts"]
                due = t0 + (s["ts"] - first_ts) / speed
                wait = due - time.monotonic()
                if wait > 0.002:
                    pub.producer.poll(0)
                    time.sleep(wait)
            pub.send(s)
            if stats.published % 20000 == 0:
                el = time.monotonic() - t0
                progress.update(task, completed=stats.published, rate=f"{stats.published / max(el, 1e-9):,.0f}/s")
        progress.update(task, completed=stats.published)
        pub.flush()
    stats.elapsed_s = time.monotonic() - t0
    stats.rejected = len(stats.errors)
    return stats
