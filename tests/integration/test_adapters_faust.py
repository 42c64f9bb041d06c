"""perfsift's sliding mean in a faust agent (perfsift.adapters.faust_agent, app tests/faust_app.py)
run as a real faust worker on the embedded broker (faust's aiokafka talks to Tansu): its outputs
equal the perfsift operator's on the same input, and a worker stopped and started again continues
with the state it left in its faust Table (no output lost, none doubled, means as if uninterrupted)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import numpy as np
import orjson
import pytest

if not os.environ.get("CI"):  # CI installs the test extra, faust included: a missing faust fails there
    pytest.importorskip("faust", reason="pip install 'perfsift[faust]'")

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from perfsift.operators.smooth import SlidingMean
from perfsift.schemas import batch_to_samples, samples_to_batch
from perfsift.streams.broker import free_port

from tests.conftest import read_topic

pytestmark = pytest.mark.integration
ROOT = Path(__file__).parents[2]
FAUST = str(Path(sys.executable).with_name("faust"))


def make_samples(start: int, n: int, nodes: int = 4) -> list[dict]:
    rng = np.random.default_rng(start)
    return [
        {
            "ts": float(start + i) // nodes,
            "node": f"n{i % nodes}",
            "job": "j",
            "seq": (start + i) // nodes,
            "metrics": {"cpu": float(rng.normal(50, 10)), "io": float(rng.normal(5, 1))},
        }
        for i in range(n)
    ]


def produce(bootstrap: str, topic: str, samples: list[dict]) -> None:
    """Every sample delivered, in order (a delivery error is a failure here, not a sample the agent
    lost; idempotent, so a retried batch cannot land after a later one: two runs failed with the
    inputs of one second in another order than sent, which the order-exact comparison took for the
    agent's fault)."""
    p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    errors: list[object] = []

    def delivered(err: object, _msg: object) -> None:
        if err is not None:
            errors.append(err)

    for s in samples:
        p.produce(topic, orjson.dumps(s), key=s["node"].encode(), on_delivery=delivered)
    assert p.flush(30) == 0
    assert errors == []


def start_worker(bootstrap: str, app: str, topic_in: str, topic_out: str, log: Path) -> subprocess.Popen:
    env = dict(
        os.environ,
        PERFSIFT_FAUST_DATADIR=str(log.parent / "faust-data"),  # not in the checkout
        PERFSIFT_FAUST_BROKER=bootstrap,
        PERFSIFT_FAUST_APP=app,
        PERFSIFT_FAUST_IN=topic_in,
        PERFSIFT_FAUST_OUT=topic_out,
    )
    with log.open("ab") as out:
        return subprocess.Popen(
            # loopback only, on a free port: faust binds its web port (0.0.0.0:6066 by default) even
            # with the web server off, and a leftover worker would make the next one fail
            [FAUST, "-A", "tests.faust_app", "worker", "-l", "info", "--without-web", "--web-bind", "127.0.0.1",
             "--web-port", str(free_port())],
            cwd=ROOT, env=env, stdout=out, stderr=out,
        )  # fmt: skip


def read_json(props: dict, topic: str, n: int, timeout: float) -> list[dict]:
    msgs = read_topic(props, topic, lambda r: len(r) >= n, timeout=timeout, decode=False)
    return [orjson.loads(m.value()) for m in msgs]


def stop(worker: subprocess.Popen) -> None:
    worker.terminate()
    try:
        worker.wait(60)
    except subprocess.TimeoutExpired:
        worker.kill()
        worker.wait()


def test_faust_agent_equals_the_operator_and_a_restarted_agent_continues(broker, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    tag = uuid.uuid4().hex[:8]
    topic_in, topic_out, app = f"faust.{tag}.raw", f"faust.{tag}.out", f"perfsift-faust-{tag}"
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    for f in admin.create_topics([NewTopic(topic_in, 1, 1), NewTopic(topic_out, 1, 1)]).values():
        f.result()
    # the tail is there for the embedded broker's high watermark, which can lag by the last batch of a
    # partition until the next write: the last input batch may reach the agent late and its last output
    # batch the reader late, so the test waits for everything up to the tail and checks all it got
    first, second, tail = make_samples(0, 400), make_samples(400, 400), make_samples(800, 400)
    props = {"bootstrap.servers": broker.bootstrap}
    log = tmp_path / "worker.log"
    want = batch_to_samples(SlidingMean(window=5).update(samples_to_batch(first + second + tail)))
    assert len(want) == 1200

    produce(broker.bootstrap, topic_in, first)
    worker = start_worker(broker.bootstrap, app, topic_in, topic_out, log)
    try:
        got = read_json(props, topic_out, len(first) // 2, 180)  # stopped while it may still be working
    finally:
        stop(worker)
    assert got == want[: len(got)] and len(got) >= len(first) // 2, log.read_text()[-3000:]

    produce(broker.bootstrap, topic_in, second + tail)
    worker = start_worker(broker.bootstrap, app, topic_in, topic_out, log)
    try:
        read_json(props, topic_out, len(first) + len(second), 180)
        time.sleep(2.0)  # anything doubled would come now
        got = read_json(props, topic_out, len(want) + 1, 5)
    finally:
        stop(worker)

    # nothing lost, nothing doubled, the means as if uninterrupted: every output so far in order, and at
    # least all of the first two parts (a record doubled or lost on restart breaks the prefix)
    assert len(got) >= len(first) + len(second), log.read_text()[-3000:]
    assert got == want[: len(got)]
    # the state mattered: a fresh operator on the second half alone gives other means
    fresh = batch_to_samples(SlidingMean(window=5).update(samples_to_batch(second)))
    assert fresh[:8] != want[len(first) : len(first) + 8]
