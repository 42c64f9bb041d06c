"""Publishing samples to a topic: delivery accounting, bounded memory, a progress bar."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import KafkaError, Message, Producer
from perfsift.schemas import RecordError, encoding_for
from perfsift.streams.clients import producer_settings
from perfsift.streams.config import PipelineConfig
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn


def sample_encoder(pipeline: PipelineConfig | None, topic: str) -> Callable[[dict[str, Any]], bytes]:
    """How samples for ``topic`` are encoded: JSON without a pipeline, else in its ``encoding``
    (``confluent-avro``: the ``<topic>-value`` subject is registered first)."""
    encoding = pipeline.codec if pipeline is not None else encoding_for("json")
    encoding.prepare({f"{topic}-value": "sample"})
    return encoding.encoder("sample")


class PublishError(RuntimeError):
    """Samples were not acknowledged by the broker."""


@dataclass
class PublishStats:
    published: int = 0
    rejected: int = 0
    bytes_sent: int = 0
    bytes_full: int = 0  # what full samples would have cost (adaptive mode)
    reduced: int = 0  # samples sent with only the selected metrics
    elapsed_s: float = 0.0
    errors: list[RecordError] = field(default_factory=list)

    @property
    def rate(self) -> float:
        return self.published / self.elapsed_s if self.elapsed_s > 0 else 0.0

    @property
    def bytes_saved(self) -> int:
        return self.bytes_full - self.bytes_sent

    def as_dict(self) -> dict[str, Any]:
        return {
            "published": self.published,
            "rejected": self.rejected,
            "elapsed_s": round(self.elapsed_s, 3),
            "samples_per_s": round(self.rate, 1),
            "bytes_sent": self.bytes_sent,
            "bytes_full": self.bytes_full,
            "bytes_saved": self.bytes_saved,
            "reduced_samples": self.reduced,
        }


class SamplePublisher:
    """A producer for samples (keyed by node; JSON, or the pipeline's ``encoding``) with delivery
    accounting and back-pressure."""

    def __init__(
        self, props: dict[str, str], topic: str, adaptive: Any = None, pipeline: PipelineConfig | None = None
    ) -> None:
        self.failed: list[str] = []
        self.encode = sample_encoder(pipeline, topic)

        def on_delivery(err: KafkaError | None, msg: Message) -> None:
            if err is not None:
                self.failed.append(str(err))

        settings = producer_settings(props, negotiate=True) | {
            "on_delivery": on_delivery,
            # bounded local queue: memory stays flat whatever the trace size (BufferError = wait)
            "queue.buffering.max.messages": 200000,
        }
        self.producer = Producer(settings)
        self.topic = topic
        self.adaptive = adaptive  # an AdaptiveControl (perfsift.producers.replay) or None
        self.stats = PublishStats()

    def send(self, sample: dict[str, Any]) -> None:
        full = self.encode(sample)
        value = full
        stats = self.stats
        if self.adaptive is not None:
            sent, reduced = self.adaptive.apply(sample)
            if reduced:
                value = self.encode(sent)
                stats.reduced += 1
        try:
            self.producer.produce(self.topic, value, sample["node"].encode())
        except BufferError:  # the bounded local queue is full: wait for deliveries, then retry
            while True:
                self.producer.poll(0.05)
                try:
                    self.producer.produce(self.topic, value, sample["node"].encode())
                    break
                except BufferError:
                    continue
        stats.published += 1
        stats.bytes_sent += len(value)
        stats.bytes_full += len(full)
        if not stats.published % 5000:
            self.producer.poll(0)

    def flush(self, timeout: float = 60.0) -> None:
        remaining = self.producer.flush(timeout)
        if remaining or self.failed:
            raise PublishError(
                f"{remaining + len(self.failed)} of {self.stats.published} samples not acknowledged"
                + (f" (e.g. {self.failed[0]})" if self.failed else "")
            )


def publish_samples(
    props: dict[str, str],
    topic: str,
    samples: Iterable[dict[str, Any]],
    console: Console | None = None,
    label: str = "publishing",
    pipeline: PipelineConfig | None = None,
) -> int:
    """Publish samples keyed by node (JSON, or ``pipeline``'s encoding); return how many were acknowledged."""
    pub = SamplePublisher(props, topic, pipeline=pipeline)
    progress = Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        transient=False,
        disable=console is None,
    )
    with progress:
        task = progress.add_task(label, total=None)
        for s in samples:
            pub.send(s)
            if pub.stats.published % 2000 == 0:
                progress.update(task, completed=pub.stats.published)
        pub.flush()
        progress.update(task, completed=pub.stats.published, total=pub.stats.published)
    return pub.stats.published
