"""Shared fixtures: the real embedded Kafka-protocol broker and helpers to read topics."""

from __future__ import annotations

import os

# One BLAS thread per process: the suite runs one xdist worker per core, and small solves in
# OpenBLAS's threads on a loaded 2-core machine ran 10-25x slower than on one. Set before numpy is
# first imported (below, through perfsift); the CLI subprocesses the tests start inherit it.
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from perfsift.schemas.detect import decode_any
from perfsift.streams.broker import EmbeddedBroker
from perfsift.streams.clients import consumer_settings

from tests.kafka_cluster import kafka_cluster  # noqa: F401 - the session's Apache Kafka cluster, on demand


def pytest_configure(config: pytest.Config) -> None:
    """Fill numba's cache once, in the controller, before the xdist workers start: otherwise every
    worker (and every CLI subprocess a test starts before the cache is written) compiles the same
    kernels at once, ~30 s each on a loaded 2-core machine."""
    if hasattr(config, "workerinput"):  # an xdist worker: the controller did it
        return
    from perfsift.operators.warm import warm
    from perfsift.schemas.batches import warm_up_decoder

    warm()
    warm_up_decoder()


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """``-n auto``: one worker per core, at most four. Each worker starts its own broker (about
    0.7 GB resident), and more workers would not shorten a suite led by a few long streaming tests."""
    return max(1, min(4, os.cpu_count() or 1))


@pytest.fixture(scope="session")
def broker() -> Iterator[EmbeddedBroker]:
    """One Tansu broker on 127.0.0.1 per test worker for the whole session (tests use unique topic
    prefixes)."""
    with EmbeddedBroker() as b:
        yield b


@pytest.fixture()
def kafka(broker: EmbeddedBroker) -> dict[str, str]:
    return {"bootstrap.servers": broker.bootstrap}


@pytest.fixture()
def prefix() -> str:
    """A topic prefix of its own for each test, so tests never see each other's records."""
    return f"t{uuid.uuid4().hex[:8]}."


def wait_until(done: Callable[[], bool], timeout: float, interval: float = 0.1) -> bool:
    """Ask ``done()`` every ``interval`` seconds until it says True (returns True) or ``timeout``
    seconds pass (returns False); ``done`` may raise to stop early (e.g. a worker that died)."""
    deadline = time.monotonic() + timeout
    while not done():
        if time.monotonic() > deadline:
            return False
        time.sleep(interval)
    return True


def smoothed_means(samples: list[dict], window: int = 10) -> set[tuple[str, float]]:
    """(node, x) of each non-overlapping ``window``-sample mean of every node (emit_every = window)."""
    by_node: dict[str, list[float]] = {}
    for s in samples:
        by_node.setdefault(s["node"], []).append(s["metrics"]["x"])
    starts = {n: range(0, len(xs) - window + 1, window) for n, xs in by_node.items()}
    return {(n, sum(by_node[n][i : i + window]) / window) for n, rs in starts.items() for i in rs}


def read_topic(
    props: dict[str, str], topic: str, until: Callable[[list[Any]], bool], timeout: float = 60.0, decode: bool = True
) -> list[Any]:
    """Read ``topic`` from the beginning (all partitions) until ``until(records)`` or timeout:
    the decoded records (a column frame's samples one by one), or with ``decode=False`` the messages."""
    from confluent_kafka import Consumer

    isolation = props.get("isolation.level", "read_uncommitted")  # the runner's settings, this reader's group
    c = Consumer(consumer_settings(props, f"reader-{uuid.uuid4().hex}", isolation))
    c.subscribe([topic])
    records: list[Any] = []
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline and not until(records):
            for m in c.consume(5000, 0.2):
                if m.error() is None and decode:
                    rec = decode_any(m.value()).record  # any encoding; a column frame gives its samples
                    records.extend(rec) if isinstance(rec, list) else records.append(rec)
                elif m.error() is None:
                    records.append(m)
    finally:
        c.close()
    return records
