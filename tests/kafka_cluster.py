"""A three-node Apache Kafka 4.x cluster (KRaft, combined controller+broker) on 127.0.0.1 for the
tests marked ``kafka_cluster``.

Kafka's jars come from Maven Central only: ``mvn dependency:copy-dependencies`` on
``tests/kafka-cluster.pom.xml`` into ``~/.cache/perfsift/kafka-<version>/`` (``.ci/run`` does it
before the suite; the fixture does it on first use). Each node runs in its own JVM with a small heap;
topics default to replication factor 3 and ``min.insync.replicas`` 2, as a production cluster would.
Each test file that uses it (under ``--dist loadfile`` one worker runs a whole file) starts a cluster
of its own with its first marked test and kills it after its last. Without Java or Maven the tests
skip with one line, except with ``CI=true``, where that is a failure.
"""

from __future__ import annotations

import base64
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.kafka_cluster_security import broker_properties, tls_material

POM = Path(__file__).with_name("kafka-cluster.pom.xml")
#: the broker's version: the pom's (also read by .ci/run)
KAFKA_VERSION = re.search(r"<kafka.version>(.+)</kafka.version>", POM.read_text()).group(1)  # type: ignore[union-attr]
HOST = "127.0.0.1"
HEAP = os.environ.get("PERFSIFT_TEST_KAFKA_HEAP", "-Xmx256m -Xms64m")
JVM = ["-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Xss512k", "-Djava.awt.headless=true"]
LOG4J = """log4j.rootLogger=INFO, f
log4j.appender.f=org.apache.log4j.FileAppender
log4j.appender.f.File={file}
log4j.appender.f.layout=org.apache.log4j.PatternLayout
log4j.appender.f.layout.ConversionPattern=%d %p %c %m%n
log4j.logger.kafka.request.logger=WARN
log4j.logger.state.change.logger=WARN
"""


def jar_dir() -> Path:
    return Path(os.environ.get("PERFSIFT_KAFKA_JARS", Path.home() / ".cache" / "perfsift" / f"kafka-{KAFKA_VERSION}"))


def fetch_jars() -> Path:
    """Kafka's broker and its dependencies in the cache folder, fetched by Maven if not there."""
    out = jar_dir()
    if not (out / f"kafka_2.13-{KAFKA_VERSION}.jar").exists():
        if shutil.which("mvn") is None:
            raise FileNotFoundError("mvn not found")
        subprocess.run(
            [
                "mvn",
                "-q",
                "-B",
                "-f",
                str(POM),
                "dependency:copy-dependencies",
                f"-Dkafka.version={KAFKA_VERSION}",
                f"-DoutputDirectory={out}",
            ],
            check=True,
            timeout=900,
        )
    return out


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((HOST, 0))
        return int(s.getsockname()[1])


class KafkaCluster:
    """Three KRaft nodes; ``bootstrap`` lists their client listeners. ``kill(i)`` sends SIGKILL to
    node ``i`` (1-based node id), ``start(i)`` brings it back on the same ports and data."""

    def __init__(self, nodes: int = 3, extra: dict[str, str] | None = None) -> None:
        self.jars = fetch_jars()
        self.root = Path(tempfile.mkdtemp(prefix="perfsift-kafka-"))
        self.ids = list(range(1, nodes + 1))
        self.ports = {i: free_port() for i in self.ids}
        self.controller_ports = {i: free_port() for i in self.ids}
        #: the SASL_SSL listener (SCRAM-SHA-512, ACLs) as the prod overlay sets it up: tests/kafka_cluster_security.py
        self.sasl_ports = {i: free_port() for i in self.ids}
        self.secure_bootstrap = ",".join(f"{HOST}:{self.sasl_ports[i]}" for i in self.ids)
        self.ca, self.keystore = tls_material(self.root / "tls")
        self.extra = extra or {}
        self.cluster_id = "-"
        while self.cluster_id.startswith("-"):  # StorageTool would read "-t -abc" as an option
            self.cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        self.procs: dict[int, subprocess.Popen[bytes]] = {}
        self.bootstrap = ",".join(f"{HOST}:{self.ports[i]}" for i in self.ids)

    def config(self, i: int) -> Path:
        voters = ",".join(f"{j}@{HOST}:{self.controller_ports[j]}" for j in self.ids)
        props = {
            "process.roles": "broker,controller",
            "node.id": str(i),
            "controller.quorum.voters": voters,
            "listeners": f"PLAINTEXT://{HOST}:{self.ports[i]},SASL_SSL://{HOST}:{self.sasl_ports[i]},"
            f"CONTROLLER://{HOST}:{self.controller_ports[i]}",
            "advertised.listeners": f"PLAINTEXT://{HOST}:{self.ports[i]},SASL_SSL://{HOST}:{self.sasl_ports[i]}",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT,SASL_SSL:SASL_SSL",
            "log.dirs": str(self.root / f"node{i}" / "data"),
            "num.partitions": "3",
            "default.replication.factor": "3",
            "min.insync.replicas": "2",
            "offsets.topic.replication.factor": "3",
            "offsets.topic.num.partitions": "6",
            "transaction.state.log.replication.factor": "3",
            "transaction.state.log.min.isr": "2",
            "transaction.state.log.num.partitions": "6",
            "group.initial.rebalance.delay.ms": "0",
            "auto.create.topics.enable": "true",
            "num.network.threads": "2",
            "num.io.threads": "2",
            "background.threads": "2",
            "log.segment.bytes": str(16 << 20),
            "unclean.leader.election.enable": "false",
            **broker_properties(self.keystore),
            **self.extra,
        }
        path = self.root / f"node{i}" / "server.properties"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
        (path.parent / "log4j.properties").write_text(LOG4J.format(file=path.parent / "server.log"))
        return path

    def _java(self, i: int, main: str, *args: str) -> list[str]:
        log4j = self.root / f"node{i}" / "log4j.properties"
        return [
            "java",
            *HEAP.split(),
            *JVM,
            f"-Dlog4j.configuration=file:{log4j}",
            "-cp",
            f"{self.jars}/*",
            main,
            *args,
        ]

    def start(self, i: int | None = None) -> None:
        """Start every node (formatting their storage first) or bring node ``i`` back."""
        for j in self.ids if i is None else [i]:
            cfg = self.root / f"node{j}" / "server.properties"
            if not cfg.exists():
                self.config(j)
                subprocess.run(
                    self._java(j, "kafka.tools.StorageTool", "format", "-t", self.cluster_id, "-c", str(cfg)),
                    check=True,
                    capture_output=True,
                    timeout=120,
                )
            out = (self.root / f"node{j}" / "stdout.log").open("ab")
            self.procs[j] = subprocess.Popen(
                self._java(j, "kafka.Kafka", str(cfg)), stdout=out, stderr=subprocess.STDOUT, start_new_session=True
            )
        self.wait_ready()

    def warm_up(self) -> None:
        """Create the internal topics (__consumer_offsets, __transaction_state, RF 3) with one
        transaction and one group commit: made lazily by the first client, they took the first
        exactly-once worker past its 30 s init_transactions on a loaded 2-core machine."""
        from confluent_kafka import Consumer, Producer, TopicPartition
        from confluent_kafka.admin import AdminClient, NewTopic

        props: dict[str, Any] = {"bootstrap.servers": self.bootstrap, "log_level": 0}
        admin = AdminClient(props)
        for f in admin.create_topics([NewTopic("perfsift.warmup", 1, 3)]).values():
            f.result(60)
        p = Producer(props | {"transactional.id": "perfsift-warmup"})
        p.init_transactions(120)
        p.begin_transaction()
        p.produce("perfsift.warmup", b"x")
        p.commit_transaction(60)
        c = Consumer(props | {"group.id": "perfsift-warmup", "enable.auto.commit": False})
        c.commit(offsets=[TopicPartition("perfsift.warmup", 0, 1)], asynchronous=False)
        c.close()

    def wait_ready(self, timeout: float = 120.0) -> None:
        """Until every running node is a registered broker and an RF-3 topic can be created."""
        from confluent_kafka.admin import AdminClient

        admin = AdminClient({"bootstrap.servers": self.bootstrap, "log_level": 0})
        deadline = time.monotonic() + timeout
        want = {j for j, p in self.procs.items() if p.poll() is None}
        while time.monotonic() < deadline:
            dead = [j for j in want if self.procs[j].poll() is not None]
            if dead:
                raise RuntimeError(f"kafka node {dead} exited:\n{self.log(dead[0])[-3000:]}")
            try:
                md = admin.list_topics(timeout=5)
                if set(md.brokers) >= want:
                    return
            except Exception:  # not up yet
                pass
            time.sleep(0.5)
        raise TimeoutError(f"kafka cluster not ready in {timeout} s:\n{self.log(self.ids[0])[-3000:]}")

    def log(self, i: int) -> str:
        parts = [self.root / f"node{i}" / n for n in ("stdout.log", "server.log")]
        return "\n".join(p.read_text(errors="replace")[-6000:] for p in parts if p.exists())

    def kill(self, i: int) -> None:
        """SIGKILL node ``i`` (no controlled shutdown)."""
        p = self.procs[i]
        p.send_signal(signal.SIGKILL)
        p.wait(30)

    def leaders(self, topic: str) -> dict[int, int]:
        """Partition -> leader node id of ``topic``."""
        from confluent_kafka.admin import AdminClient

        md = AdminClient({"bootstrap.servers": self.bootstrap}).list_topics(topic, timeout=10)
        return {p: m.leader for p, m in md.topics[topic].partitions.items()}

    def stop(self) -> None:
        """SIGKILL every node: the cluster and its data are thrown away, and a controlled shutdown
        (SIGTERM) took 12-13 s of the session's end (up to a minute for the last nodes)."""
        for i in self.procs:
            self.kill(i)  # a node already down (a test's kill) is left as it is
        shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> KafkaCluster:
        try:
            self.start()
            self.warm_up()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def missing_tools() -> str | None:
    """Why the cluster cannot run here (no Java, no Maven and no cached jars), or None."""
    if shutil.which("java") is None:
        return "java not found"
    if not (jar_dir() / f"kafka_2.13-{KAFKA_VERSION}.jar").exists() and shutil.which("mvn") is None:
        return "mvn not found and no Kafka jars cached"
    return None


@pytest.fixture(scope="module")
def kafka_cluster() -> Iterator[KafkaCluster]:
    """A three-node Apache Kafka cluster for one test file (see the module docstring), killed when
    the file's last test is done: with ``--dist loadfile`` the worker goes on to other files, and a
    session-long cluster's six idle JVMs (two files) burnt about 100 CPU-s of the suite's two cores."""
    reason = missing_tools()
    if reason is not None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"kafka_cluster tests need Java and Maven under CI=true: {reason}")
        pytest.skip(f"Apache Kafka cluster unavailable: {reason}")
    with KafkaCluster() as cluster:
        yield cluster
