"""Publishing samples to a topic with a progress bar."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import orjson
from confluent_kafka import KafkaError, Message, Producer
from perfsift.streams.logs import kafka_logger
from perfsift.streams.runner import producer_settings
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn


class PublishError(RuntimeError):
    """Samples were not acknowledged by the broker."""


def publish_samples(
    props: dict[str, str],
    topic: str,
    samples: Iterable[dict[str, Any]],
    console: Console | None = None,
    label: str = "publishing",
) -> int:
    """Publish samples keyed by node (JSON); return how many were acknowledged."""
    failed: list[str] = []

    def on_delivery(err: KafkaError | None, msg: Message) -> None:
        if err is not None:
            failed.append(str(err))

    settings = producer_settings(props) | {"on_delivery": on_delivery, "logger": kafka_logger()}
    producer = Producer(settings)
    n = 0
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
            value = orjson.dumps(s)
            while True:
                try:
                    producer.produce(topic, value, s["node"].encode())
                    break
                except BufferError:
                    producer.poll(0.05)
            n += 1
            if n % 2000 == 0:
                producer.poll(0)
                progress.update(task, completed=n)
        remaining = producer.flush(60)
        progress.update(task, completed=n, total=n)
    if remaining or failed:
        raise PublishError(
            f"{remaining + len(failed)} of {n} samples not acknowledged" + (f" (e.g. {failed[0]})" if failed else "")
        )
    return n
