"""A worker's HTTP endpoints: ``/healthz`` (liveness), ``/readyz`` (readiness), ``/metrics`` (Prometheus).

Metrics are read from the runner's counters at scrape time, so the processing loop pays nothing.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any

from perfsift.streams.group import readiness
from perfsift.streams.stage import BATCH_BUCKETS, DEAD_LETTER_REASONS, StageStats
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    GCCollector,
    PlatformCollector,
    ProcessCollector,
    generate_latest,
)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector

if TYPE_CHECKING:
    from perfsift.streams.runner import StageRunner

#: the loop must have come round within this many seconds for /healthz to say 200
STALL_S = 120.0


def job_metrics(stage: str, summaries: dict[str, dict[str, Any]]) -> list[GaugeMetricFamily]:
    """Per job, from the operators' summaries (:meth:`Operator.summary`): the selection in force
    (version, metrics kept, share of values sent on) and the nodes per contract state. Nodes are
    counted, never labels, so the series stay few however many nodes a job has."""
    version = GaugeMetricFamily(
        "perfsift_selection_version",
        "version of the kept set in force, as on perf.control and the reduced samples (-1: none yet)",
        labels=["stage", "job"],
    )
    kept = GaugeMetricFamily("perfsift_kept_metrics", "metrics the selection keeps", labels=["stage", "job"])
    ratio = GaugeMetricFamily(
        "perfsift_reduction_ratio", "metric values sent on / values in, so far", labels=["stage", "job"]
    )
    nodes = GaugeMetricFamily(
        "perfsift_contract_nodes", "nodes per contract state (ok, violated, unknown)", labels=["stage", "job", "state"]
    )
    for job, fields in sorted(summaries.items()):
        if "selection_version" in fields:
            version.add_metric([stage, job], fields["selection_version"])
            kept.add_metric([stage, job], len(fields.get("kept") or ()))
            if fields.get("values_in"):
                ratio.add_metric([stage, job], fields["values_out"] / fields["values_in"])
        if "contract_nodes" in fields:
            states = Counter(fields["contract_nodes"].values())
            for state in ("ok", "violated", "unknown"):
                nodes.add_metric([stage, job, state], states[state])
    return [version, kept, ratio, nodes]


def build_info() -> GaugeMetricFamily:
    """``perfsift_build_info``: 1, labelled with the versions of perfsift, Python and the Kafka client."""
    import platform
    from importlib.metadata import PackageNotFoundError, version

    import confluent_kafka

    try:
        own = version("perfsift")
    except PackageNotFoundError:  # pragma: no cover - run from a source tree that is not installed
        own = "unknown"
    g = GaugeMetricFamily(
        "perfsift_build_info",
        "versions of perfsift, Python, confluent-kafka and librdkafka (value 1)",
        labels=["version", "python", "confluent_kafka", "librdkafka"],
    )
    g.add_metric([own, platform.python_version(), confluent_kafka.version()[0], confluent_kafka.libversion()[0]], 1)
    return g


def runner_metrics(
    stage: str, s: StageStats
) -> Iterator[CounterMetricFamily | GaugeMetricFamily | HistogramMetricFamily]:
    """The batch-duration histogram, dead letters by reason, rebalances by event and the chosen
    librdkafka statistics of one runner's counters."""
    cumulative, buckets = 0, []
    for bound, n in zip([*map(str, BATCH_BUCKETS), "+Inf"], s.batch_buckets, strict=True):
        cumulative += n
        buckets.append((bound, cumulative))
    h = HistogramMetricFamily("perfsift_batch_duration_seconds", "time to process one micro-batch", labels=["stage"])
    h.add_metric([stage], buckets, s.busy_s)
    yield h
    dead = CounterMetricFamily(
        "perfsift_dead_letters_by_reason",
        "records sent to the dead-letter topic, by reason",
        labels=["stage", "reason"],
    )
    for reason in DEAD_LETTER_REASONS:
        dead.add_metric([stage, reason], s.dead_by_reason.get(reason, 0))
    yield dead
    reb = CounterMetricFamily(
        "perfsift_rebalances",
        "rebalance events of the stage's consumer (assigned, revoked, lost)",
        labels=["stage", "event"],
    )
    for event in ("assigned", "revoked", "lost"):
        reb.add_metric([stage, event], s.rebalances.get(event, 0))
    yield reb
    rev = CounterMetricFamily(
        "perfsift_revoked_partitions", "input partitions revoked from this worker", labels=["stage"]
    )
    rev.add_metric([stage], s.revoked_partitions)
    yield rev
    replayed = CounterMetricFamily(
        "perfsift_replayed_records",
        "records replayed without emitting after a restart or a moved partition (from its snapshot to the "
        "committed offset)",
        labels=["stage"],
    )
    replayed.add_metric([stage], s.replayed)
    yield replayed
    replaced = CounterMetricFamily(
        "perfsift_producers_replaced",
        "exactly-once producers replaced after a failed transaction (fenced, aborted by the coordinator)",
        labels=["stage"],
    )
    replaced.add_metric([stage], s.producers_replaced)
    yield replaced
    paused = CounterMetricFamily(
        "perfsift_partitions_paused",
        "input partitions paused (event: paused or resumed) by event-time alignment (event_time_hold_bytes)",
        labels=["stage", "event"],
    )
    paused.add_metric([stage, "paused"], s.paused)
    paused.add_metric([stage, "resumed"], s.resumed)
    yield paused
    kafka = GaugeMetricFamily(
        "perfsift_kafka",
        "librdkafka statistics of the stage's clients (statistics.interval.ms): queue_messages, queue_bytes, "
        "tx_bytes, rx_bytes, tx_messages, rx_messages, broker_rtt_seconds, fetch_requests, group_rebalances, "
        "group_assigned_partitions",
        labels=["stage", "client", "statistic"],
    )
    for (client, name), value in sorted(s.kafka.items()):
        kafka.add_metric([stage, client, name], value)
    yield kafka


def byte_metrics(stage: str, s: StageStats) -> Iterator[CounterMetricFamily | GaugeMetricFamily]:
    """Bytes read and written per topic (state snapshots included), as payload and as zstd
    compressed (streams/volume.py), and what the stage writes as a ratio to what it reads. The
    pipeline's ratio to raw: ``sum(perfsift_topic_bytes_written_total{kind="payload"}) /
    sum(perfsift_topic_bytes_read_total{topic="perf.raw",kind="payload"})``."""
    for name, doc, table in (
        ("perfsift_topic_bytes_read", "bytes consumed per input topic", s.wire_in),
        ("perfsift_topic_bytes_written", "bytes produced per topic, state snapshots included", s.wire_out),
    ):
        c = CounterMetricFamily(name, f"{doc} (kind: payload, or zstd-compressed)", labels=["stage", "topic", "kind"])
        for topic in sorted(table.payload):
            c.add_metric([stage, topic, "payload"], table.payload[topic])
            c.add_metric([stage, topic, "compressed"], table.compressed[topic])
        yield c
    ratio = GaugeMetricFamily(
        "perfsift_bytes_written_ratio", "bytes the stage wrote / bytes it read", labels=["stage", "kind"]
    )
    for kind, read, written in (
        ("payload", s.wire_in.payload, s.wire_out.payload),
        ("compressed", s.wire_in.compressed, s.wire_out.compressed),
    ):
        if sum(read.values()):
            ratio.add_metric([stage, kind], sum(written.values()) / sum(read.values()))
    yield ratio


class PlainHandler(BaseHTTPRequestHandler):
    """A request handler that answers with :meth:`_send` and logs nothing (the health server's and
    ``perfsift export``'s)."""

    def _send(self, code: int, body: bytes, ctype: str = "text/plain; charset=utf-8") -> None:
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


class _RunnerCollector(Collector):
    def __init__(self, runner: StageRunner) -> None:
        self.runner = runner

    def collect(self) -> Iterator[CounterMetricFamily | GaugeMetricFamily | HistogramMetricFamily]:
        s, stage = self.runner.stats, self.runner.stage.name
        for name, doc, value in (
            ("perfsift_records_in", "records consumed", s.records_in),
            ("perfsift_records_out", "records produced", s.records_out),
            ("perfsift_dead_letters", "records sent to the dead-letter topic", s.dead_letters),
            ("perfsift_batches", "micro-batches processed", s.batches),
            ("perfsift_bytes_in", "bytes consumed", s.bytes_in),
            ("perfsift_bytes_out", "bytes produced", s.bytes_out),
            ("perfsift_commits", "offset commits", s.commits),
            ("perfsift_busy_seconds", "seconds spent processing batches", s.busy_s),
            (
                "perfsift_ingest_series_dropped",
                "metric values an ingest stage left out of samples over the "
                "limit max_metrics_per_sample (a node keeps the same first metrics, in name order)",
                s.series_dropped,
            ),
            (
                "perfsift_missing_metrics",
                "metrics an operator is configured for (e.g. forecast metrics) that its input never carried "
                "(each is logged once)",
                len(s.missing_metrics),
            ),
        ):
            c = CounterMetricFamily(name, doc, labels=["stage"])
            c.add_metric([stage], value)
            yield c
        per_topic = CounterMetricFamily(
            "perfsift_topic_records_out", "records produced per output topic, taps included", labels=["stage", "topic"]
        )
        for topic, n in sorted(s.by_topic.items()):
            per_topic.add_metric([stage, topic], n)
        yield per_topic
        yield from byte_metrics(stage, s)
        lag = GaugeMetricFamily(
            "perfsift_consumer_lag", "approximate lag per input partition", labels=["stage", "partition"]
        )
        for p, v in sorted(s.lag.items()):
            lag.add_metric([stage, str(p)], v)
        yield lag
        g = GaugeMetricFamily("perfsift_last_batch_seconds", "latency of the last batch", labels=["stage"])
        g.add_metric([stage], s.last_batch_ms / 1000)
        yield g
        a = GaugeMetricFamily("perfsift_assigned_partitions", "input partitions assigned", labels=["stage"])
        a.add_metric([stage], len(self.runner.assigned()))
        yield a
        yield from runner_metrics(stage, s)
        yield build_info()
        yield from job_metrics(stage, self.runner.job_summaries())


class HealthServer:
    """Serves the endpoints of one runner on ``host:port`` in a daemon thread (port 0 = any free port)."""

    def __init__(
        self,
        runner: StageRunner,
        port: int,
        host: str = "0.0.0.0",
        post: dict[str, Callable[[bytes, Any], tuple[int, bytes]]] | None = None,
    ) -> None:
        """``post``: path -> handler(body, headers) -> (status, body), e.g. ``/api/v1/write`` of
        an ingest stage of remote_write (:class:`~perfsift.formats.remote_write.RemoteWriteReceiver`)."""
        routes = dict(post or {})
        registry = CollectorRegistry()
        registry.register(_RunnerCollector(runner))
        ProcessCollector(registry=registry)  # process_* (CPU, memory, file descriptors)
        GCCollector(registry=registry)  # python_gc_*
        PlatformCollector(registry=registry)  # python_info

        class Handler(PlainHandler):
            def do_GET(self) -> None:
                path = self.path.split("?", 1)[0]
                if path == "/healthz":
                    stalled = time.monotonic() - runner.last_loop > STALL_S
                    self._send(503 if stalled else 200, b"stalled\n" if stalled else b"ok\n")
                elif path == "/readyz":
                    ready, why = readiness(runner)
                    self._send(200 if ready else 503, b"ready\n" if ready else f"not ready: {why}\n".encode())
                elif path == "/metrics":
                    self._send(200, generate_latest(registry), CONTENT_TYPE_LATEST)
                else:
                    self._send(404, b"try /healthz, /readyz or /metrics\n")

            def do_POST(self) -> None:
                route = routes.get(self.path.split("?", 1)[0])
                if route is None:
                    self._send(
                        405 if self.path.split("?", 1)[0] in ("/healthz", "/readyz", "/metrics") else 404,
                        b"POST: only " + ", ".join(routes).encode() + b"\n",
                    )
                    return
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                code, answer = route(body, self.headers)
                self._send(code, answer)

        self.server = ThreadingHTTPServer((host, port), Handler)
        self.port = int(self.server.server_address[1])
        self.thread = threading.Thread(target=self.server.serve_forever, name="health", daemon=True)

    def start(self) -> HealthServer:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
