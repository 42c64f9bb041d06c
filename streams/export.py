"""``perfsift export`` without the command line: the pipeline's reduced values, forecasts and
contract levels on a Prometheus endpoint, and optionally pushed by remote_write.

- :class:`Exporter` reads perf.reduced, perf.forecast and perf.contract (every partition, no
  consumer group, from ``since_s`` seconds ago by the messages' time) into a
  :class:`~perfsift.formats.prom_out.LatestValues`, whatever their encoding (JSON, Avro, Schema
  Registry Avro: :func:`~perfsift.schemas.detect.decode_any`);
- :class:`ExportServer` serves it as ``/metrics`` (Prometheus text 0.0.4), with ``/healthz`` and
  ``/readyz``;
- :class:`RemoteWriter` posts what changed since its last push every ``interval_s`` seconds to a
  remote_write receiver (Prometheus ``--web.enable-remote-write-receiver``, Mimir, Thanos, ...),
  each value stamped with its record's time (encoded by
  :func:`~perfsift.formats.remote_write.encode_series`, the module that decodes remote_write in).

Why a process of its own, not a route on a stage worker's HTTP server: a worker holds only the
partitions assigned to it, and they move at every rebalance, so each series would hop between
scrape targets (gaps, then two targets for one series), and the three topics come from different
stages. The reduced streams are small (that is the point of perfsift), so one reader of every
partition keeps one complete, stable target; two replicas serve the same series, as a
Prometheus HA pair expects.
"""

from __future__ import annotations

import logging
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from http.server import ThreadingHTTPServer
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, OFFSET_END, Consumer, KafkaError, TopicPartition
from perfsift.formats.prom_out import LatestValues
from perfsift.formats.remote_write import encode_series
from perfsift.schemas import RecordError
from perfsift.schemas.detect import decode_any
from perfsift.streams.clients import consumer_settings
from perfsift.streams.http import PlainHandler
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily
from prometheus_client.registry import Collector

log = logging.getLogger(__name__)

#: the logical topics read and the kind of record each carries
EXPORTED = {"perf.reduced": "reduced", "perf.forecast": "forecast", "perf.contract": "contract"}


class Exporter:
    """Reads ``topics`` (physical name -> kind) into ``values`` until :meth:`stop`.
    ``since_s``: start at the messages of the last ``since_s`` seconds (None: from the
    beginning; 0: only what arrives from now on)."""

    def __init__(
        self,
        props: Mapping[str, str],
        topics: Mapping[str, str],
        values: LatestValues,
        since_s: float | None = 300.0,
        batch: int = 1000,
    ) -> None:
        self.props = dict(props)
        self.topics = dict(topics)
        self.values = values
        self.since_s = since_s
        self.batch = batch
        self.ready = threading.Event()
        self.stop_event = threading.Event()
        self.undecodable = 0
        self.last_loop = time.monotonic()

    def _assign(self, c: Consumer) -> int:
        """Assign every partition of the topics from the start position; the start time in ms
        (0: none)."""
        start_ms = 0 if self.since_s is None or self.since_s <= 0 else int((time.time() - self.since_s) * 1000)
        known = c.list_topics(timeout=10).topics
        tps: list[TopicPartition] = []
        for topic in self.topics:
            if topic not in known or known[topic].error is not None:
                raise ValueError(f"topic {topic} does not exist; `perfsift topics` creates the pipeline's topics")
            parts = sorted(known[topic].partitions)
            if self.since_s is None:
                tps += [TopicPartition(topic, p, OFFSET_BEGINNING) for p in parts]
            elif self.since_s <= 0:
                tps += [TopicPartition(topic, p, OFFSET_END) for p in parts]
            else:  # -1: nothing at or after the time in that partition
                found = c.offsets_for_times([TopicPartition(topic, p, start_ms) for p in parts], timeout=10)
                tps += [TopicPartition(topic, t.partition, t.offset if t.offset >= 0 else OFFSET_END) for t in found]
        c.assign(tps)
        return start_ms

    def run(self) -> None:
        """Consume until :meth:`stop`; one batch of messages at a time into ``values``."""
        settings = consumer_settings(self.props, f"perfsift.export.{time.time_ns()}")
        c = Consumer({**settings, "auto.offset.reset": "latest" if self.since_s == 0 else "earliest"})
        try:
            # the embedded broker answers a time lookup with the first offset: older messages are
            # skipped here by their time
            start_ms = self._assign(c)
            self.ready.set()
            while not self.stop_event.is_set():
                self.last_loop = time.monotonic()
                msgs = c.consume(self.batch, 0.2)
                by_kind: dict[str, list[dict[str, Any]]] = {}
                for m in msgs:
                    err = m.error()
                    if err is not None:
                        if err.code() != KafkaError._PARTITION_EOF:
                            log.warning("export: %s", err)
                        continue
                    if start_ms and m.timestamp()[1] < start_ms:
                        continue
                    try:
                        rec = decode_any(m.value()).record
                    except RecordError:
                        rec = None
                    if not isinstance(rec, dict):
                        self.undecodable += 1
                        continue
                    by_kind.setdefault(self.topics[str(m.topic())], []).append(rec)
                for kind, recs in by_kind.items():
                    self.values.add(kind, recs)
        finally:
            self.ready.clear()
            c.close()

    def stop(self) -> None:
        self.stop_event.set()


class RemoteWriter:
    """Every ``interval_s`` seconds, the series updated since the last successful push, posted to
    ``url`` as one remote_write request (values at their records' time, in milliseconds). A
    request the receiver refuses (4xx: e.g. samples too old or out of order) is dropped and
    counted; a failed one (5xx, no answer) is retried at the next push with what changed since."""

    def __init__(
        self,
        url: str,
        values: LatestValues,
        interval_s: float = 15.0,
        timeout_s: float = 10.0,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        self.url = url
        self.values = values
        self.interval_s = interval_s
        self.timeout_s = timeout_s
        self.headers = dict(headers or {})
        self.stop_event = threading.Event()
        self.mark = -float("inf")
        self.requests = 0
        self.samples = 0
        self.refused = 0
        self.failed = 0
        self.last_error = ""

    def push(self) -> int:
        """One push; the HTTP status (0: nothing to send, -1: no answer)."""
        now = self.values.clock()
        changed = self.values.updated_since(self.mark)
        if not changed:
            return 0
        body = encode_series(
            (self.values.labelled(family, key), [(round(ts * 1000), value)]) for family, key, value, ts in changed
        )
        req = urllib.request.Request(
            self.url,
            body,
            method="POST",
            headers={
                "Content-Encoding": "snappy",
                "Content-Type": "application/x-protobuf",
                "X-Prometheus-Remote-Write-Version": "0.1.0",
                "User-Agent": "perfsift-export",
                **self.headers,
            },
        )
        try:
            with urllib.request.urlopen(req, timeout=self.timeout_s) as resp:
                status = int(resp.status)
        except urllib.error.HTTPError as exc:
            status, self.last_error = int(exc.code), exc.read()[:300].decode("utf-8", "replace")
        except (urllib.error.URLError, OSError) as exc:
            status, self.last_error = -1, str(exc)
        if 200 <= status < 300:
            self.mark, self.requests, self.samples = now, self.requests + 1, self.samples + len(changed)
        elif 400 <= status < 500:  # the receiver will never take these: go on after them
            self.mark, self.refused = now, self.refused + 1
            log.warning("remote_write %s refused %d samples (%d): %s", self.url, len(changed), status, self.last_error)
        else:
            self.failed += 1
            log.warning("remote_write %s failed (%d): %s", self.url, status, self.last_error)
        return status

    def run(self) -> None:
        while not self.stop_event.wait(self.interval_s):
            self.push()
        self.push()  # what came in since the last push

    def stop(self) -> None:
        self.stop_event.set()


class _OwnCollector(Collector):
    """The reader's and the pusher's counters."""

    def __init__(self, exporter: Exporter, writers: list[RemoteWriter]) -> None:
        self.exporter = exporter
        self.writers = writers

    def collect(self) -> Any:
        c = CounterMetricFamily("perfsift_export_undecodable", "messages that are not a record of any encoding")
        c.add_metric([], self.exporter.undecodable)
        yield c
        for name, doc, attr in (
            ("perfsift_export_remote_write_requests", "remote_write requests accepted (2xx)", "requests"),
            ("perfsift_export_remote_write_samples", "samples in accepted remote_write requests", "samples"),
            ("perfsift_export_remote_write_refused", "remote_write requests refused (4xx), dropped", "refused"),
            ("perfsift_export_remote_write_failed", "remote_write requests failed (5xx, no answer), retried", "failed"),
        ):
            c = CounterMetricFamily(name, doc, labels=["url"])
            for w in self.writers:
                c.add_metric([w.url], getattr(w, attr))
            yield c


class ExportServer:
    """``/metrics`` of ``values`` (and the exporter's own counters), ``/healthz``, ``/readyz`` on
    ``host:port`` in a daemon thread (port 0: any free port)."""

    def __init__(
        self,
        values: LatestValues,
        exporter: Exporter,
        port: int,
        host: str = "127.0.0.1",
        writers: list[RemoteWriter] | None = None,
    ) -> None:
        registry = CollectorRegistry()
        registry.register(values)
        registry.register(_OwnCollector(exporter, list(writers or [])))

        class Handler(PlainHandler):
            def do_GET(self) -> None:
                path = self.path.split("?", 1)[0]
                if path == "/metrics":
                    self._send(200, generate_latest(registry), CONTENT_TYPE_LATEST)
                elif path == "/healthz":
                    stalled = time.monotonic() - exporter.last_loop > 120
                    self._send(503 if stalled else 200, b"stalled\n" if stalled else b"ok\n")
                elif path == "/readyz":
                    ready = exporter.ready.is_set()
                    self._send(200 if ready else 503, b"ready\n" if ready else b"not ready\n")
                else:
                    self._send(404, b"try /metrics, /healthz or /readyz\n")

        self.server = ThreadingHTTPServer((host, port), Handler)
        self.port = int(self.server.server_address[1])
        self.thread = threading.Thread(target=self.server.serve_forever, name="export-http", daemon=True)

    def start(self) -> ExportServer:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
