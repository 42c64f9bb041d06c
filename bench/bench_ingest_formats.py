"""Decoding throughput of every text and Prometheus ingest format, in process (decode, assemble,
column batch: what differs between formats; the stage and broker around it are measured by
bench_ingest.py's pass-through), and the Prometheus text reader against ``prometheus_client``'s
parser on the same scrapes.

Inputs are the real programs' output in tests/data/ingest, copied for many hosts: node-exporter
1.5 scrapes (507 series, 357 kept), Prometheus 2.42 remote_write requests (500 series each),
collectd 5.12 JSON value lists and Graphite lines (41 values a second), and Telegraf-shaped
line protocol and JSON (20 fields per host and interval, written here).

    python -m bench.bench_ingest_formats [--hosts 200] [--rounds 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import orjson
from perfsift.formats import Assembler, IngestSettings, decoder_for
from perfsift.formats.settings import parse_map

from bench.common import write_result

DATA = Path(__file__).resolve().parents[1] / "tests" / "data" / "ingest"
Message = tuple[bytes, bytes | None, float]


def prometheus_msgs(hosts: int) -> list[Message]:
    scrapes = [(DATA / f"node-exporter-{i}.prom").read_bytes() for i in (1, 2)]
    return [(scrapes[k % 2], f"host{h:04d}".encode(), 1000.0 + 15 * k) for k in range(4) for h in range(hosts)]


def remote_write_msgs(hosts: int) -> list[Message]:
    from perfsift.formats.remote_write import read_request, write_request

    out: list[Message] = []
    for i in range(1, 5):
        req = read_request((DATA / f"prometheus-remote-write-{i}.bin").read_bytes())
        for h in range(hosts):
            for ts in req.timeseries:
                for lb in ts.labels:
                    if lb.name == "instance":
                        lb.value = f"host{h:04d}:9100"
            out.append((write_request(list(req.timeseries)), None, 0.0))
    return out


def collectd_msgs(hosts: int) -> list[Message]:
    lists = [vl for line in (DATA / "collectd-write_http.jsonl").read_bytes().splitlines() for vl in orjson.loads(line)]
    out: list[Message] = []
    for h in range(hosts):
        for vl in lists:
            vl["host"] = f"host{h:04d}"
        out += [(orjson.dumps(lists[i : i + 20]), None, 0.0) for i in range(0, len(lists), 20)]
    return out


def graphite_msgs(hosts: int) -> list[Message]:
    text = (DATA / "collectd-graphite.txt").read_bytes()
    out: list[Message] = [(text.replace(b"collectd.node-a.", f"collectd.host{h:04d}.".encode()), None, 0.0)
                          for h in range(hosts)]  # fmt: skip
    return out


def telegraf(hosts: int, k: int) -> list[dict]:
    ts = 1_700_000_000 + 10 * k
    out: list[dict] = []
    for h in range(hosts):
        tags = {"host": f"host{h:04d}"}
        out.append({"name": "cpu", "tags": {**tags, "cpu": "cpu-total"}, "timestamp": ts,
                    "fields": {f"usage_{f}": 1.5 * j + k for j, f in enumerate(("user", "system", "idle", "iowait",
                               "irq", "softirq", "steal", "guest", "guest_nice", "nice"))}})  # fmt: skip
        mem = {f: 1000 * j + h for j, f in enumerate(("total", "used", "free", "cached", "buffered"))}
        out.append({"name": "mem", "tags": tags, "timestamp": ts, "fields": mem})
        for nic in ("eth0", "eth1"):
            out.append({"name": "net", "tags": {**tags, "interface": nic}, "timestamp": ts,
                        "fields": {"bytes_recv": 10**6 * k + h, "bytes_sent": 10**5 * k + h}})  # fmt: skip
        out.append({"name": "system", "tags": tags, "timestamp": ts, "fields": {"load1": 0.5 + k}})
    return out


def line(obj: dict) -> str:
    tags = "".join(f",{k}={v}" for k, v in sorted(obj["tags"].items()))
    fields = ",".join(f"{k}={v}i" if isinstance(v, int) else f"{k}={v!r}" for k, v in obj["fields"].items())
    return f"{obj['name']}{tags} {fields} {obj['timestamp'] * 10**9}"


def influx_msgs(hosts: int) -> list[Message]:
    out: list[Message] = []
    for k in range(10):
        by_host: dict[str, list[str]] = {}
        for obj in telegraf(hosts, k):
            by_host.setdefault(obj["tags"]["host"], []).append(line(obj))
        out += [("\n".join(lines).encode(), None, 0.0) for lines in by_host.values()]
    return out


def telegraf_msgs(hosts: int) -> list[Message]:
    return [(orjson.dumps(obj), None, 0.0) for k in range(10) for obj in telegraf(hosts, k)]


INPUTS: dict[str, tuple[Callable[[int], list[Message]], dict]] = {
    "prometheus_text": (prometheus_msgs, {}),
    "remote_write": (remote_write_msgs, {}),
    "collectd_json": (collectd_msgs, {}),
    "graphite": (graphite_msgs, {"prefix": "collectd."}),
    "influx_line": (influx_msgs, {}),
    "telegraf_json": (telegraf_msgs, {}),
}


def decode_rate(fmt: str, msgs: list[Message], doc: dict) -> tuple[float, float, int]:
    """(samples/s, points/s, samples) decoding ``msgs`` a poll (500 messages) at a time."""
    asm = Assembler(IngestSettings(fmt, parse_map(fmt, doc or None), 1.0))
    dec = decoder_for(asm)
    t = time.perf_counter()
    n = 0
    for i in range(0, len(msgs), 500):
        asm.now = i / 500  # a row leaves one poll after its first point (a request's spill-over still meets it)
        for value, key, when in msgs[i : i + 500]:
            dec(value, key, when)
        problems = asm.take_problems()
        assert problems == [], (fmt, problems)
        rows = asm.due(asm.now)
        n += len(asm.to_batch(rows)) if rows else 0
    rows = asm.due(0.0, everything=True)
    n += len(asm.to_batch(rows)) if rows else 0
    dt = time.perf_counter() - t
    return n / dt, asm.points / dt, n


def client_parser_rate(msgs: list[Message]) -> float:
    """Series per second of ``prometheus_client.parser`` alone over the same scrapes."""
    from prometheus_client.parser import text_string_to_metric_families

    t = time.perf_counter()
    n = 0
    for value, _, _ in msgs:
        for fam in text_string_to_metric_families(value.decode()):
            n += len(fam.samples)
    return n / (time.perf_counter() - t)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--hosts", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    load0 = os.getloadavg()[0]
    inputs = {fmt: (make(args.hosts), doc) for fmt, (make, doc) in INPUTS.items()}
    rates: dict[str, list[tuple[float, float]]] = {fmt: [] for fmt in inputs}
    parser: list[float] = []
    ours: list[float] = []
    for r in range(args.rounds):  # rounds alternate formats, so drift hits all alike
        for fmt, (msgs, doc) in inputs.items():
            s, p, _ = decode_rate(fmt, msgs, doc)
            rates[fmt].append((s, p))
        prom = inputs["prometheus_text"][0][: 2 * args.hosts]
        parser.append(client_parser_rate(prom))
        t = time.perf_counter()
        asm = Assembler(IngestSettings("prometheus_text", parse_map("prometheus_text", {"exclude": []}), 0.0))
        dec = decoder_for(asm)
        for v, k, w in prom:
            dec(v, k, w)
        ours.append(asm.points / (time.perf_counter() - t))
        print(f"round {r + 1}: " + ", ".join(f"{f} {v[-1][0]:,.0f} samples/s" for f, v in rates.items()))
    med = {f: (statistics.median(s for s, _ in v), statistics.median(p for _, p in v)) for f, v in rates.items()}
    speedup = statistics.median(ours) / statistics.median(parser)
    load = f"{load0:.1f} at the start, {os.getloadavg()[0]:.1f} at the end"
    for f, (s, p) in med.items():
        print(f"{f}: {s:,.0f} samples/s, {p:,.0f} points/s")
    print(f"Prometheus text: perfsift's reader {statistics.median(ours):,.0f} series/s, prometheus_client's parser "
          f"{statistics.median(parser):,.0f} series/s ({speedup:.1f}x); load {load}")  # fmt: skip
    sizes = {"prometheus_text": "node-exporter scrape, 357 of 507 series kept",
             "remote_write": "Prometheus request, 500 series", "collectd_json": "20 value lists a message",
             "graphite": "41 lines a second", "influx_line": "20 fields a host and interval, one message a host",
             "telegraf_json": "one metric a message"}  # fmt: skip
    write_result(
        "ingest_formats",
        {
            "benchmark": "Ingest decoding per format (in process)",
            "script": "bench_ingest_formats",
            "hosts": args.hosts,
            "rounds": args.rounds,
            "median_samples_per_s": {f: s for f, (s, _) in med.items()},
            "median_points_per_s": {f: p for f, (_, p) in med.items()},
            "prometheus_reader_series_per_s": statistics.median(ours),
            "prometheus_client_parser_series_per_s": statistics.median(parser),
            "load_average": load,
            "notes": "Decode, assemble and build the column batch, a poll of 500 messages at a time, no broker "
            "(the stage runtime around it: bench_ingest.py). Medians of the rounds; the 2 cores were shared "
            f"with other work (load average {load}).",
            "rows": [
                *(
                    {
                        "measure": f"--format {f} ({sizes[f]})",
                        "value": f"{s:,.0f} samples/s = {p:,.0f} points/s",
                        "target": "",
                    }
                    for f, (s, p) in med.items()
                ),
                {
                    "measure": "Prometheus text: perfsift's reader vs prometheus_client.parser (series/s, no filter)",
                    "value": f"{statistics.median(ours):,.0f} vs {statistics.median(parser):,.0f} ({speedup:.1f}x)",
                    "target": "",
                },
            ],
        },
    )


if __name__ == "__main__":
    main()
