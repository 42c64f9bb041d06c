"""Shared fixtures: the real embedded Kafka-protocol broker and helpers to read topics."""

from __future__ import annotations

import os

# One BLAS thread per process: the suite runs two xdist workers per core, and small solves in
# OpenBLAS's threads on a loaded 2-core machine ran 10-25x slower than on one. The same for numba's
# threads: the forecast kernel (parallel=True) fed one timestamp at a time (ModelPredictor) took
# 10 ms a call on a loaded 2-core machine with two threads, 1 ms with one (the conformance checks
# of ``predict``: 17 s -> 6 s per 1000 rows). Set before numpy and numba are first imported
# (below, through perfsift); the CLI subprocesses the tests start inherit it.
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS"):
    os.environ.setdefault(_var, "1")
import subprocess
import sys
import tempfile

# Bytecode for the suite's own processes (the xdist workers, the CLI and stage subprocesses, the
# warm-up): where the environment forbids writing it (PYTHONDONTWRITEBYTECODE, set on the CI
# machines), each of the suite's ~150 Python processes compiled perfsift's and its libraries'
# sources again (about 0.4 CPU-s for ``perfsift --help``, 7 of a worker's 17-18 CPU-s of collection).
# Kept outside the clone, in a folder of the suite's own; processes started from here inherit it.
if os.environ.get("PYTHONDONTWRITEBYTECODE"):
    del os.environ["PYTHONDONTWRITEBYTECODE"]
    os.environ.setdefault("PYTHONPYCACHEPREFIX", os.path.join(tempfile.gettempdir(), "perfsift-test-pycache"))
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from perfsift.schemas.detect import decode_any
from perfsift.streams.broker import EmbeddedBroker
from perfsift.streams.clients import consumer_settings

from tests.kafka_cluster import kafka_cluster  # noqa: F401 - the session's Apache Kafka cluster, on demand
from tests.schema_registry import schema_registry  # noqa: F401 - the session's Schema Registry, on demand

#: numba's kernels in two groups, compiled side by side into the cache by two processes before the
#: workers start. Compile times of each warm-up into an empty cache (CPU seconds, one process): the
#: forecast bank's ``step`` kernel 58-66 (190 while numba inlined the window primitives into it, see
#: ``operators/forecast/_nws_windows.py``; 23-25 without ``parallel=True``, but its code on one thread
#: then ran 1.2x slower by bench/ab_forecast.py, noalias or not: kept), the pursuit 37 (51-54 while
#: its kernels assigned array slices, each compiling numba's shape-error text), the JSON
#: decoder 38, the cleaner 10 (one signature for all five modes), OTLP 6, dtw 1 (load 3-8). So the
#: forecast bank, the pursuit and OTLP compile in one process (about 100) and the rest (about 49)
#: beside them, followed there by mypy's cache (77 cold): about two minutes of two cores on a fresh
#: clone.
WARM_GROUPS = (
    """from perfsift.formats.otlp.otlp_fast import warm_up
from perfsift.formats.settings import IngestMap, IngestSettings
from perfsift.operators.forecast.forecast import ForecastBank
from perfsift.operators.pursuit.pursuit import ProjectionPursuit
ForecastBank().warm_up()
ProjectionPursuit().warm_up()
warm_up(IngestSettings("otlp_proto", IngestMap()))""",
    """from perfsift.analysis.quality import dtw
from perfsift.operators.clean.clean import MODES, Clean
from perfsift.schemas.batches import warm_up_decoder
for mode in MODES:
    Clean(mode=mode).warm_up()
warm_up_decoder()
dtw([1.0, 2.0], [1.0, 3.0])""",
)


_QUIET: dict[str, Any] = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}


def _kernels_cached() -> bool:
    """Whether numba's cache holds this code's forecast kernel (the longest to compile)."""
    import numba
    from perfsift.operators import _numba  # noqa: F401  (names the cache folder after this code's kernels)

    folder = Path(numba.config.CACHE_DIR) / "perfsift.operators.forecast"  # type: ignore[attr-defined]
    return any(folder.glob("_nws_kernel.step-*.nbi"))


def pytest_configure(config: pytest.Config) -> None:
    """Fill numba's cache once, in the controller, before the xdist workers start: otherwise every
    worker (and every CLI subprocess a test starts before the cache is written) compiles the same
    kernels at once, ~30 s each on a loaded 2-core machine. On a fresh clone the compilation is
    minutes of one core, so two processes share it (:data:`WARM_GROUPS`), and with xdist workers
    (a whole run, not ``-n 0`` on a few files) mypy fills its own cache beside them while they
    compile; then the controller warms everything itself, which loads from the cache and compiles
    whatever the groups missed."""
    if hasattr(config, "workerinput"):  # an xdist worker: the controller did it
        return
    workers = config.getoption("numprocesses", None)

    def start_mypy() -> subprocess.Popen[bytes]:
        return subprocess.Popen([sys.executable, "-m", "tests.typecheck"], cwd=config.rootpath, **_QUIET)

    longer, shorter = (subprocess.Popen([sys.executable, "-c", code]) for code in WARM_GROUPS)
    # mypy's cache (77 CPU-s cold, 1 warm) while the kernels compile, so that test_mypy then checks
    # only the modules changed since: from the start beside both groups when numba's cache lacks the
    # kernels (three processes on two cores leave no core idle: the groups took about 100 and 50
    # CPU-s, mypy after the shorter one ended 26 s after the longer); with the kernels cached (any
    # clone of this code compiled them: operators/_numba.py) both groups only load and are done in
    # seconds, and mypy, there alone, would leave a core idle for a minute: then test_mypy fills the
    # cache on a worker, beside the other tests. A cache that misses some kernels: mypy starts if the
    # longer group is still busy 15 s after the shorter one is done.
    mypy = start_mypy() if workers and not _kernels_cached() else None
    shorter.wait()
    if workers and mypy is None:
        try:  # loading the kernels from the cache takes seconds, compiling them minutes
            longer.wait(timeout=15)
        except subprocess.TimeoutExpired:
            mypy = start_mypy()
    longer.wait()
    if mypy:
        mypy.wait()
    from perfsift.operators.warm import warm
    from perfsift.schemas.batches import warm_up_decoder

    warm()
    warm_up_decoder()


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """``-n auto``: two workers per core, at most four. Many tests wait on a stream, a broker or a
    subprocess, so one worker per core left a core idle a fifth of the time: on two cores the whole
    suite took 19-20 min with two workers and 14:43 with four (172 % CPU). Each worker starts its own
    broker (about 0.7 GB resident)."""
    return max(1, min(4, 2 * (os.cpu_count() or 1)))


#: About how many seconds the longest test files take on two loaded cores (issue #29's measures:
#: the cluster files, each with a cluster of its own, 3-4 min; the conformance checks 350 s with
#: -n 0 at load 5, most of it data_reduction's and predict's streams; the chaos, scaling and e2e
#: runs 25-48 s a test; faust's 47 s since its app's short session timeout; the e2e files' numbers
#: are their tests' count times that). ``--dist loadfile`` hands whole files to the workers in collection order
#: (``--no-loadscope-reorder`` in pyproject.toml; xdist's own order puts the files with the most
#: tests first, which left these single long tests to the end), so these go first, longest first:
#: the two three-node cluster files start on two workers at once and the conformance file on a
#: third, then the rest share them. Only their order matters; a file not listed keeps its place
#: after them.
LONGEST_FILES: dict[str, float] = {
    "tests/integration/test_kafka_cluster.py": 220,
    "tests/integration/test_kafka_cluster_faults.py": 210,
    "tests/unit/test_conformance.py": 200,
    "tests/e2e/test_report.py": 120,
    "tests/e2e/test_cli.py": 90,
    "tests/integration/test_adapters_faust.py": 50,
    "tests/unit/test_forecast_precision.py": 50,
    "tests/integration/test_chaos_select.py": 45,
    "tests/integration/test_scaling.py": 40,
    "tests/e2e/test_live_report.py": 35,
    "tests/integration/test_chaos_chunked_state.py": 30,
    "tests/e2e/test_encodings_cli.py": 30,
}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The longest files first (:data:`LONGEST_FILES`), every file's tests kept together and in order."""
    here = config.rootpath

    def weight(item: pytest.Item) -> float:
        return -LONGEST_FILES.get(item.path.relative_to(here).as_posix(), 0.0)

    items.sort(key=weight)  # stable: the other files and each file's tests keep their order


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


def _assign_from_the_beginning(c: Any, topic: str, deadline: float) -> int:
    """Assign every partition of ``topic`` to ``c`` from offset 0 (waiting for the topic to exist
    until ``deadline``): no consumer group to join, which costs about 3 s on the embedded broker
    (its initial rebalance delay) and is no part of what the tests read. The partitions assigned."""
    from confluent_kafka import OFFSET_BEGINNING, TopicPartition

    while True:
        md = c.list_topics(topic, timeout=10).topics.get(topic)
        if md is not None and md.error is None and md.partitions:
            c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in sorted(md.partitions)])
            return len(md.partitions)
        if time.monotonic() > deadline:
            return 0
        time.sleep(0.1)


def _collect(m: Any, records: list[Any], decode: bool) -> None:
    if decode:
        rec = decode_any(m.value()).record  # any encoding; a column frame gives its samples
        records.extend(rec) if isinstance(rec, list) else records.append(rec)
    else:
        records.append(m)


def read_topic(
    props: dict[str, str], topic: str, until: Callable[[list[Any]], bool], timeout: float = 60.0, decode: bool = True
) -> list[Any]:
    """Read ``topic`` from the beginning (all partitions) until ``until(records)`` or timeout:
    the decoded records (a column frame's samples one by one), or with ``decode=False`` the messages."""
    from confluent_kafka import Consumer

    isolation = props.get("isolation.level", "read_uncommitted")  # the runner's settings, this reader's group
    c = Consumer(consumer_settings(props, f"reader-{uuid.uuid4().hex}", isolation))
    records: list[Any] = []
    deadline = time.monotonic() + timeout
    try:
        _assign_from_the_beginning(c, topic, deadline)
        while time.monotonic() < deadline and not until(records):
            for m in c.consume(5000, 0.2):
                if m.error() is None:
                    _collect(m, records, decode)
    finally:
        c.close()
    return records


def read_to_end(props: dict[str, str], topic: str, timeout: float = 60.0, decode: bool = True) -> list[Any]:
    """Everything on ``topic`` now: every partition read from the beginning to its end (the end the
    broker reports when each is reached), as :func:`read_topic` gives it. Fails after ``timeout``."""
    from confluent_kafka import Consumer, KafkaError

    isolation = props.get("isolation.level", "read_uncommitted")
    c = Consumer(consumer_settings(props, f"reader-{uuid.uuid4().hex}", isolation) | {"enable.partition.eof": True})
    records: list[Any] = []
    deadline = time.monotonic() + timeout
    try:
        ended: set[int] = set()
        partitions = _assign_from_the_beginning(c, topic, deadline)
        assert partitions, f"no topic {topic}"
        while len(ended) < partitions:
            assert time.monotonic() < deadline, f"{topic}: only partitions {sorted(ended)} read to their end"
            for m in c.consume(5000, 0.2):
                if (err := m.error()) is None:
                    _collect(m, records, decode)
                elif err.code() == KafkaError._PARTITION_EOF and (partition := m.partition()) is not None:
                    ended.add(partition)
    finally:
        c.close()
    return records
