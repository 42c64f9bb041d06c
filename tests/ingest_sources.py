"""Telemetry as the real clients write it, and the samples perfsift must make of it.

Each source returns ``(messages, expected)``: the Kafka messages (value, key, timestamp in ms) as
the exporter would publish them, and per (job, node, ts) the metric values the ingest stage must
produce, computed here from what was recorded (not by perfsift's code).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import orjson

Message = tuple[bytes, bytes | None, int | None]
Expected = dict[tuple[str, str, float], dict[str, float | None]]

#: the histogram's bucket bounds; round 2 records only values in (5, 10]
BOUNDS = [1.0, 5.0, 10.0]


def otlp_requests(hosts: dict[str, str], merge_first: bool = True) -> tuple[list[Any], Expected]:
    """Two collections of an OpenTelemetry SDK (one MeterProvider per host, the host as a
    resource): a counter with an attribute, a gauge with an attribute, a gauge and a histogram;
    encoded with the OTLP exporter's own encoder. Round 1 as one request of every host, round 2
    as one request per host. ``hosts``: host -> service.name."""
    from opentelemetry.exporter.otlp.proto.common._internal.metrics_encoder import encode_metrics
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    from opentelemetry.sdk.resources import Resource

    readers, inst = {}, {}
    for i, (host, job) in enumerate(hosts.items()):
        reader = InMemoryMetricReader()
        mp = MeterProvider(resource=Resource.create({"host.name": host, "service.name": job}), metric_readers=[reader])
        meter = mp.get_meter("perfsift-test")
        inst[host] = (
            meter.create_counter("net.bytes"),
            meter.create_gauge("cpu.util"),
            meter.create_gauge("mem.used"),
            meter.create_histogram("lat", explicit_bucket_boundaries_advisory=BOUNDS),
        )
        readers[host] = (reader, i)
    rounds: list[list[Any]] = []
    recorded: dict[str, list[dict[str, Any]]] = {h: [] for h in hosts}
    for r in range(2):
        reqs = []
        for host, (reader, i) in readers.items():
            counter, cpu, mem, lat = inst[host]
            n_in, n_out = 100 * (i + 1) * (r + 1), 7 * (i + 2)
            counter.add(n_in, {"direction": "in"})
            counter.add(n_out, {"direction": "out"})
            cpu.set(10.0 + i + r, {"state": "user"})
            cpu.set(2.5 * (i + 1) + r, {"state": "system"})
            mem.set(1000.0 * (i + 1) + 3 * r)
            obs = [0.5, 3.0, 3.5, 20.0] if r == 0 else [6.0, 7.0, 8.0, 9.0, 9.5]
            for v in obs:
                lat.record(v)
            data = reader.get_metrics_data()
            assert data is not None
            reqs.append(encode_metrics(data))
            recorded[host].append({"in": n_in, "out": n_out, "cpu.user": 10.0 + i + r, "cpu.system": 2.5 * (i + 1) + r,
                                   "mem": 1000.0 * (i + 1) + 3 * r, "n": len(obs), "sum": sum(obs)})  # fmt: skip
        rounds.append(reqs)
        time.sleep(0.05)
    # the time of each collection, as the SDK stamped it (one per collect)
    stamps = {
        host: [
            req.resource_metrics[0].scope_metrics[0].metrics[0].sum.data_points[0].time_unix_nano * 1e-9 for req in reqs
        ]
        for host, reqs in zip(hosts, zip(*rounds, strict=True), strict=True)
    }
    expected: Expected = {}
    requests = [*rounds[0], *rounds[1]]
    if merge_first:
        first = copy_request(rounds[0][0])
        for req in rounds[0][1:]:
            first.resource_metrics.extend(req.resource_metrics)
        requests = [first, *rounds[1]]
    for host, job in hosts.items():
        (t1, t2), (a, b) = stamps[host], recorded[host]
        dt = t2 - t1
        expected[(job, host, t1)] = {"net.bytes.in": None, "net.bytes.out": None, "cpu.util.user": a["cpu.user"],
                                     "cpu.util.system": a["cpu.system"], "mem.used": a["mem"], "lat.count": None,
                                     "lat.sum": None, "lat.p50": None, "lat.p90": None, "lat.p99": None}  # fmt: skip
        expected[(job, host, t2)] = {
            "net.bytes.in": b["in"] / dt,  # the counter's increase over the interval, per second
            "net.bytes.out": b["out"] / dt,
            "cpu.util.user": b["cpu.user"],
            "cpu.util.system": b["cpu.system"],
            "mem.used": b["mem"],
            "lat.count": b["n"] / dt,
            "lat.sum": b["sum"] / dt,
            # round 2's five values all lie in (5, 10]: linear within the bucket
            "lat.p50": 5.0 + 5.0 * 0.5,
            "lat.p90": 5.0 + 5.0 * 0.9,
            "lat.p99": 5.0 + 5.0 * 0.99,
        }
    return requests, expected


def copy_request(req: Any) -> Any:
    out = type(req)()
    out.CopyFrom(req)
    return out


def otlp_messages(hosts: dict[str, str], fmt: str, keyed: bool = False) -> tuple[list[Message], Expected]:
    """:func:`otlp_requests` framed as the Collector's Kafka exporter does: one request per message,
    protobuf (``otlp_proto``) or protojson (``otlp_json``). ``keyed``: one resource per message,
    keyed by its host (``partition_metrics_by_resource_attributes: true``), so a host's points
    stay in one partition; else the first collection of every host in one unkeyed request."""
    from google.protobuf.json_format import MessageToJson

    reqs, expected = otlp_requests(hosts, merge_first=not keyed)

    def key(r: Any) -> bytes | None:
        if not keyed:
            return None
        attrs = {kv.key: kv.value.string_value for kv in r.resource_metrics[0].resource.attributes}
        return attrs["host.name"].encode()

    if fmt == "otlp_proto":
        return [(r.SerializeToString(), key(r), None) for r in reqs], expected
    return [(MessageToJson(r).encode(), key(r), None) for r in reqs], expected


def telegraf_messages(hosts: list[str], t0: int = 1_700_000_000) -> tuple[list[Message], Expected]:
    """Telegraf's JSON serializer output (``{"fields","name","tags","timestamp"}``, timestamp in
    seconds), two intervals of cpu and mem per host, keyed by host (``routing_tag = "host"``); the
    second interval in the batch format (``{"metrics": [...]}``, one per host)."""
    msgs: list[Message] = []
    expected: Expected = {}
    for k in range(2):
        ts = t0 + 10 * k
        for i, host in enumerate(hosts):
            cpu = {"fields": {"usage_idle": 90.5 - i - k, "usage_user": 5.25 + i + k}, "name": "cpu",
                   "tags": {"cpu": "cpu-total", "host": host}, "timestamp": ts}  # fmt: skip
            mem = {"fields": {"available": 8_000_000 + 1000 * i + k, "used_percent": 40.0 + i}, "name": "mem",
                   "tags": {"host": host}, "timestamp": ts}  # fmt: skip
            if k == 0:
                msgs += [(orjson.dumps(cpu), host.encode(), None), (orjson.dumps(mem), host.encode(), None)]
            else:
                msgs.append((orjson.dumps({"metrics": [cpu, mem]}), host.encode(), None))
            expected[("default", host, float(ts))] = {
                "cpu.cpu-total.usage_idle": 90.5 - i - k,
                "cpu.cpu-total.usage_user": 5.25 + i + k,
                "mem.available": float(8_000_000 + 1000 * i + k),
                "mem.used_percent": 40.0 + i,
            }
    return msgs, expected


def ldms_messages(producers: list[str], t0: float = 1_700_000_000.25) -> tuple[list[Message], Expected]:
    """Rows of an LDMS decomposition of the meminfo set, as store_kafka / store_avro_kafka
    (encoding=JSON) write them: timestamp as "sec.usec" text (the yyjson encoder) or a number.
    LDMS does not key its messages; keyed by producer here, which is what a one-partition topic
    gives (docs/ingest.md): a node's rows stay in order."""
    msgs: list[Message] = []
    expected: Expected = {}
    for k in range(2):
        ts = t0 + k
        for i, prod in enumerate(producers):
            row = {"timestamp": f"{int(ts)}.{round((ts % 1) * 1e6):06d}" if k == 0 else ts, "component_id": i + 1,
                   "job_id": 0, "app_id": 0, "ProducerName": prod, "instance": f"{prod}/meminfo",
                   "MemTotal": 16_000_000, "MemFree": 9_000_000 - 1000 * i - k, "Active": 123.5 + k,
                   "cpu_load": [0.5 + i, 0.25 + k]}  # fmt: skip
            msgs.append((orjson.dumps(row), prod.encode(), None))
            expected[("default", prod, ts)] = {
                "MemTotal": 16_000_000.0,
                "MemFree": float(9_000_000 - 1000 * i - k),
                "Active": 123.5 + k,
                "cpu_load.0": 0.5 + i,
                "cpu_load.1": 0.25 + k,
            }
    return msgs, expected


def prometheus_messages(hosts: list[str], t0_ms: int = 1_700_000_000_000) -> tuple[list[Message], Expected]:
    """Two scrapes of a ``prometheus_client`` registry per host (``generate_latest()``), one scrape
    per message keyed by the host, the scrape time as the message timestamp. Names as the series
    are exposed, labels as ``{key=value}``."""
    from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

    msgs: list[Message] = []
    expected: Expected = {}
    regs = {}
    for host in hosts:
        reg = CollectorRegistry()
        regs[host] = (reg, Gauge("temp_celsius", "t", ["sensor"], registry=reg),
                      Counter("requests", "r", registry=reg), Histogram("io_seconds", "h", buckets=(0.1, 1.0),
                                                                         registry=reg))  # fmt: skip
    for k in range(2):
        ts_ms = t0_ms + 15_000 * k
        for i, host in enumerate(hosts):
            reg, temp, req, hist = regs[host]
            temp.labels("cpu0").set(40.0 + i + k)
            req.inc(30 * (i + 1) * (k + 1))
            for v in [0.05, 0.5] if k == 0 else [0.2, 0.4, 0.6, 0.8]:
                hist.observe(v)
            msgs.append((generate_latest(reg), host.encode(), ts_ms))
            ts = ts_ms / 1000
            if k == 0:
                expected[("default", host, ts)] = {"temp_celsius{sensor=cpu0}": 40.0 + i, "requests_total": None,
                                                   "io_seconds_count": None, "io_seconds_sum": None,
                                                   "io_seconds{quantile=0.5}": None, "io_seconds{quantile=0.9}": None,
                                                   "io_seconds{quantile=0.99}": None}  # fmt: skip
            else:
                expected[("default", host, ts)] = {
                    "temp_celsius{sensor=cpu0}": 41.0 + i,
                    "requests_total": 60 * (i + 1) / 15.0,
                    "io_seconds_count": 4 / 15.0,
                    "io_seconds_sum": sum([0.2, 0.4, 0.6, 0.8]) / 15.0,
                    # the four new observations all lie in (0.1, 1.0]
                    "io_seconds{quantile=0.5}": 0.1 + 0.9 * 0.5,
                    "io_seconds{quantile=0.9}": 0.1 + 0.9 * 0.9,
                    "io_seconds{quantile=0.99}": 0.1 + 0.9 * 0.99,
                }
    return msgs, expected


def perfsift_messages(nodes: list[str]) -> tuple[list[Message], Expected]:
    """perfsift samples, for the pass-through format: they arrive as they are."""
    msgs: list[Message] = []
    expected: Expected = {}
    for k in range(2):
        for i, node in enumerate(nodes):
            sample = {"ts": 1000.0 + k, "node": node, "job": "jp", "metrics": {"a": 1.5 * i + k, "b": None}}
            msgs.append((orjson.dumps(sample), node.encode(), None))
            expected[("jp", node, 1000.0 + k)] = {"a": 1.5 * i + k, "b": None}
    return msgs, expected


def produce(props: dict[str, str], topic: str, msgs: Sequence[Message]) -> None:
    from confluent_kafka import Producer

    p = Producer(props)
    for value, key, ts in msgs:
        if ts is None:
            p.produce(topic, value, key)
        else:
            p.produce(topic, value, key, timestamp=ts)
    assert p.flush(30) == 0
