"""Monitoring tools a shop already runs, into perf.raw on the embedded broker: ``perfsift scrape``
of exporters (a committed node-exporter scrape served here, a dead target, and the real
prometheus-node-exporter where Debian's package is installed), Prometheus remote_write posted to
the ingest worker's endpoint (Prometheus 2.42's own requests, and Prometheus itself where
installed), and ``perfsift produce --raw``; every value checked against its source."""

from __future__ import annotations

import itertools
import subprocess
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import orjson
import pytest
from perfsift.formats import Assembler, IngestSettings, decoder_for
from perfsift.formats.settings import DEFAULT_MAPS
from perfsift.streams.broker import free_port
from perfsift.streams.clients import create_pipeline_topics
from perfsift.streams.config import PipelineConfig, load_pipeline
from perfsift.streams.http import HealthServer
from perfsift.streams.ingest_stage import IngestRunner, http_routes, stage_runner
from perfsift.streams.runner import run_in_thread, wait_assigned
from typer.testing import CliRunner

from tests.conftest import read_topic, wait_until
from tests.debian import program
from tests.integration.test_ingest import ingest_pipeline

pytestmark = pytest.mark.integration
DATA = Path(__file__).parent.parent / "data" / "ingest"
SCRAPE = (DATA / "node-exporter-1.prom").read_bytes()
MEM = "node_memory_MemTotal_bytes"


@pytest.fixture()
def exporter() -> Iterator[str]:
    """An exporter on 127.0.0.1 serving the committed node-exporter scrape, its CPU user time
    growing 2.5 s per request."""
    line = next(ln for ln in SCRAPE.splitlines() if ln.startswith(b'node_cpu_seconds_total{cpu="0",mode="user"}'))
    count = [0]

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            v = float(line.split()[-1]) + 2.5 * count[0]
            count[0] += 1
            body = SCRAPE.replace(line, line.rsplit(b" ", 1)[0] + f" {v}".encode())
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            pass

    srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield f"127.0.0.1:{srv.server_address[1]}"
    srv.shutdown()
    srv.server_close()


def fixture_value(name: bytes) -> float:
    return float(next(ln for ln in SCRAPE.splitlines() if ln.startswith(name + b" ")).split()[-1])


def run_stage(
    kafka: dict, prefix: str, tmp_path: Path, fmt: str, max_delay: float = 0.3
) -> tuple[IngestRunner, threading.Thread, PipelineConfig]:
    cfg = load_pipeline(ingest_pipeline(tmp_path, prefix, max_delay, [fmt]))
    create_pipeline_topics(cfg, kafka)
    runner = stage_runner(cfg.stage(f"in_{fmt}"), cfg, kafka, embedded=True)
    assert isinstance(runner, IngestRunner)
    thread = run_in_thread(runner)
    assert wait_assigned([runner], 120)
    return runner, thread, cfg


def test_scrape_feeds_the_ingest_stage_and_a_dead_target_stops_nothing(
    kafka: dict, prefix: str, tmp_path: Path, exporter: str
) -> None:
    runner, thread, cfg = run_stage(kafka, prefix, tmp_path, "prometheus_text")
    targets = [f"fixture={exporter}", f"dead=127.0.0.1:{free_port()}"]
    try:
        res = CliRunner().invoke(
            __import__("perfsift.cli", fromlist=["app"]).app,
            ["scrape", *targets, "--topic", cfg.topic("in.prometheus_text"), "-b", kafka["bootstrap.servers"],
             "--interval", "1s", "--timeout", "2s", "--rounds", "3"],
        )  # fmt: skip
        assert res.exit_code == 0, res.output
        raw = read_topic(kafka, cfg.topic("perf.raw"), lambda r: len(r) >= 3, timeout=60)
    finally:
        runner.stop()
        thread.join(30)
    assert '"dead"' in res.output and "Connection refused" in res.output  # counted, logged, others went on
    fixture = sorted(raw, key=lambda s: s["ts"])
    assert [s["node"] for s in fixture] == ["fixture"] * 3
    assert [s["metrics"][MEM] for s in fixture] == [fixture_value(MEM.encode())] * 3
    for a, b in itertools.pairwise(fixture):  # 2.5 s of CPU per scrape, over the scrapes' spacing
        rate = b["metrics"]["node_cpu_seconds_total{cpu=0,mode=user}"]
        assert rate == pytest.approx(2.5 / (b["ts"] - a["ts"]), rel=1e-9)
    assert not any(k.startswith(("go_", "process_")) or "_info" in k for k in fixture[0]["metrics"])


def test_the_live_node_exporter_scraped_into_perf_raw(kafka: dict, prefix: str, tmp_path: Path) -> None:
    """Debian's prometheus-node-exporter on a free loopback port, scraped with --samples: its
    MemTotal is the kernel's, its CPUs' mode times add up to about one second per second."""
    from perfsift.cli import app

    exporter_bin = program("prometheus-node-exporter")
    cfg = load_pipeline(ingest_pipeline(tmp_path, prefix, 0.3, ["prometheus_text"]))
    create_pipeline_topics(cfg, kafka)
    port = free_port()
    proc = subprocess.Popen(
        [exporter_bin, f"--web.listen-address=127.0.0.1:{port}"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        assert wait_until(lambda: _up(f"http://127.0.0.1:{port}/metrics"), 20)
        args = ["scrape", f"live=127.0.0.1:{port}", "--samples", "--topic", cfg.topic("perf.raw"),
                "-b", kafka["bootstrap.servers"], "--interval", "2s", "--rounds", "2"]  # fmt: skip
        res = CliRunner().invoke(app, args)
        assert res.exit_code == 0, res.output
    finally:
        proc.terminate()
        proc.wait(10)
    raw = sorted(read_topic(kafka, cfg.topic("perf.raw"), lambda r: len(r) >= 2, timeout=60), key=lambda s: s["ts"])
    mem_kb = next(int(ln.split()[1]) for ln in Path("/proc/meminfo").read_text().splitlines()
                  if ln.startswith("MemTotal:"))  # fmt: skip
    assert [s["metrics"][MEM] for s in raw] == [mem_kb * 1024.0] * 2
    cpu0 = sum(v for k, v in raw[1]["metrics"].items() if k.startswith("node_cpu_seconds_total{cpu=0,"))
    assert cpu0 == pytest.approx(1.0, abs=0.2)  # seconds of CPU 0 per second, over all its modes


def test_scrape_samples_go_straight_to_perf_raw(kafka: dict, prefix: str, tmp_path: Path, exporter: str) -> None:
    from perfsift.cli import app

    cfg = load_pipeline(ingest_pipeline(tmp_path, prefix, 0.3, ["prometheus_text"]))
    create_pipeline_topics(cfg, kafka)
    args = ["scrape", f"n1={exporter}", "--samples", "--topic", cfg.topic("perf.raw"), "-b", kafka["bootstrap.servers"],
            "--interval", "0.5s", "--rounds", "3"]  # fmt: skip
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    raw = sorted(read_topic(kafka, cfg.topic("perf.raw"), lambda r: len(r) >= 3, timeout=60), key=lambda s: s["ts"])
    assert [s["node"] for s in raw] == ["n1"] * 3
    assert {s["metrics"][MEM] for s in raw} == {fixture_value(MEM.encode())}
    user = [s["metrics"].get("node_cpu_seconds_total{cpu=0,mode=user}") for s in raw]
    assert user[0] is None and user[1:] == [
        pytest.approx(2.5 / (b["ts"] - a["ts"])) for a, b in itertools.pairwise(raw)
    ]


def _up(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=1):
            return True
    except (urllib.error.URLError, OSError):
        return False


def _post(url: str, body: bytes) -> int:
    req = urllib.request.Request(url, body, {"Content-Encoding": "snappy", "Content-Type": "application/x-protobuf"})
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)


def test_remote_write_requests_posted_to_the_worker_arrive_value_by_value(
    kafka: dict, prefix: str, tmp_path: Path
) -> None:
    # the four requests are posted one after another: on a loaded machine more than 0.3 s apart,
    # and a sample due before the last request's series (e.g. `up`) came went out without them
    runner, thread, cfg = run_stage(kafka, prefix, tmp_path, "remote_write", max_delay=5.0)
    health = HealthServer(runner, 0, "127.0.0.1", post=http_routes(runner)).start()
    url = f"http://127.0.0.1:{health.port}/api/v1/write"
    bodies = [(DATA / f"prometheus-remote-write-{i}.bin").read_bytes() for i in range(1, 5)]
    # what the decoder makes of the same requests in process: the samples perf.raw must carry
    asm = Assembler(IngestSettings("remote_write", DEFAULT_MAPS["remote_write"], 0.0))
    dec = decoder_for(asm)
    for b in bodies:
        dec(b, None, 0.0)
    want = {(j, n, ts): row for j, n, ts, row in asm.due(0.0, everything=True)}
    try:
        assert [_post(url, b) for b in bodies] == [204] * 4
        assert _post(url, b"not snappy at all") == 400
        receiver = runner.remote_write  # type: ignore[attr-defined]
        assert (receiver.requests, receiver.refused) == (4, 1)
        raw = read_topic(kafka, cfg.topic("perf.raw"), lambda r: len(r) >= len(want), timeout=60)
    finally:
        health.stop()
        runner.stop()
        thread.join(30)
    got = {(s["job"], s["node"], s["ts"]): s["metrics"] for s in raw}
    assert got.keys() == want.keys() and len(want) == 4
    for key, row in want.items():
        assert {k: v for k, v in got[key].items() if v is not None} == {k: v for k, v in row.items() if v is not None}


def test_a_prometheus_server_remote_writes_into_perf_raw(kafka: dict, prefix: str, tmp_path: Path) -> None:
    """Prometheus 2.42 scrapes the committed node-exporter scrape every second and posts to the
    worker: MemTotal on perf.raw as the exporter said."""
    prom = program("prometheus")
    runner, thread, cfg = run_stage(kafka, prefix, tmp_path, "remote_write")
    health = HealthServer(runner, 0, "127.0.0.1", post=http_routes(runner)).start()
    try:
        got = _prometheus_writes(prom, f"http://127.0.0.1:{health.port}/api/v1/write", kafka, cfg, tmp_path)
    finally:
        health.stop()
        runner.stop()
        thread.join(30)
    assert got == fixture_value(MEM.encode())


def _prometheus_writes(prom: str, url: str, kafka: dict, cfg: PipelineConfig, tmp_path: Path) -> float | None:
    """Prometheus scraping a fixture exporter every second with remote_write to ``url``: the
    MemTotal of the first sample of node 'prom-target' on perf.raw."""
    srv_port = free_port()
    data = SCRAPE

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: object) -> None:
            pass

    srv = ThreadingHTTPServer(("127.0.0.1", srv_port), Handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    conf = tmp_path / "prometheus.yml"
    conf.write_text(f"""global: {{scrape_interval: 1s}}
scrape_configs:
  - job_name: node
    static_configs: [{{targets: ["127.0.0.1:{srv_port}"], labels: {{}}}}]
    relabel_configs: [{{target_label: instance, replacement: "prom-target:9100"}}]
remote_write:
  - url: {url}
    queue_config: {{batch_send_deadline: 1s}}
""")
    proc = subprocess.Popen([prom, f"--config.file={conf}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                             f"--web.listen-address=127.0.0.1:{free_port()}"], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)  # fmt: skip
    try:
        out = read_topic(
            kafka,
            cfg.topic("perf.raw"),
            lambda r: any(s["node"] == "prom-target" and MEM in s["metrics"] for s in r),
            90,
        )
    finally:
        proc.terminate()
        proc.wait(20)
        srv.shutdown()
        srv.server_close()
    vals = [s["metrics"][MEM] for s in out if s["node"] == "prom-target" and MEM in s["metrics"]]
    return vals[0] if vals else None


def test_produce_raw_publishes_bytes_as_kcat_would(kafka: dict, prefix: str, tmp_path: Path) -> None:
    from perfsift.cli import app

    runner, thread, cfg = run_stage(kafka, prefix, tmp_path, "influx_line")
    topic = cfg.topic("in.influx_line")
    lines = (
        "cpu,host=n1,cpu=cpu-total usage_idle=97.5 1700000000000000000\n"
        "cpu,host=n2,cpu=cpu-total usage_idle=12 1700000000000000000\n"
    )
    try:
        res = CliRunner().invoke(app, ["produce", "--raw", "-t", topic, "-k", "n1", "-b", kafka["bootstrap.servers"]],
                                 input=lines)  # fmt: skip
        assert res.exit_code == 0 and "published 2 messages" in res.output, res.output
        raw = read_topic(kafka, cfg.topic("perf.raw"), lambda r: len(r) >= 2, timeout=60)
    finally:
        runner.stop()
        thread.join(30)
    got = {(s["node"], s["ts"]): s["metrics"] for s in raw}
    assert got == {("n1", 1.7e9): {"cpu.cpu-total.usage_idle": 97.5}, ("n2", 1.7e9): {"cpu.cpu-total.usage_idle": 12.0}}


def _kcat(args: list[str], data: bytes, lib: str | None) -> subprocess.CompletedProcess[bytes]:
    env = {"PATH": "/usr/bin:/bin", **({"LD_LIBRARY_PATH": lib} if lib else {})}
    return subprocess.run([program("kcat"), *args], input=data, capture_output=True, timeout=60, env=env, check=False)


def test_debians_kcat_needs_the_bundled_librdkafka_and_then_feeds_the_ingest_stage(
    kafka: dict, prefix: str, tmp_path: Path
) -> None:
    """kcat 1.7.1 on librdkafka 2.0.2 cannot read the embedded broker's ApiVersions answer; with
    ``LD_LIBRARY_PATH=$(perfsift broker --client-lib)`` it publishes a scrape like any client."""
    from perfsift.streams.broker import client_library_dir

    program("kcat")
    runner, thread, cfg = run_stage(kafka, prefix, tmp_path, "prometheus_text")
    topic = cfg.topic("in.prometheus_text")
    scrape = tmp_path / "scrape.prom"
    scrape.write_bytes(SCRAPE)
    try:
        stock = _kcat(["-P", "-b", kafka["bootstrap.servers"], "-t", topic, "-k", "kc1", str(scrape)], b"", None)
        if b"Read underflow" not in stock.stderr:
            pytest.skip(f"this kcat talks to the embedded broker by itself: {stock.stderr[-200:]!r}")
        fixed = _kcat(["-P", "-b", kafka["bootstrap.servers"], "-t", topic, "-k", "kc1", str(scrape)], b"",
                      str(client_library_dir(tmp_path / "lib")))  # fmt: skip
        assert fixed.returncode == 0, fixed.stderr
        raw = read_topic(kafka, cfg.topic("perf.raw"), lambda r: len(r) >= 1, timeout=60)
    finally:
        runner.stop()
        thread.join(30)
    (sample,) = raw
    assert sample["node"] == "kc1" and sample["metrics"][MEM] == fixture_value(MEM.encode())


def test_collectds_write_kafka_into_the_ingest_stage(kafka: dict, prefix: str, tmp_path: Path) -> None:
    """collectd 5.12 (cpu, memory, interface, load; write_kafka Format JSON, keyed by its host,
    StoreRates false: perfsift makes the rates) on the bundled librdkafka: every gauge on perf.raw
    is the one collectd published, cpu jiffies become rates."""
    from perfsift.streams.broker import client_library_dir

    collectd = program("collectd")
    runner, thread, cfg = run_stage(kafka, prefix, tmp_path, "collectd_json")
    topic = cfg.topic("in.collectd_json")
    conf = tmp_path / "collectd.conf"
    conf.write_text(f"""Hostname "cd-node"
FQDNLookup false
Interval 1
BaseDir "{tmp_path}"
PIDFile "{tmp_path}/collectd.pid"
PluginDir "/usr/lib/collectd"
TypesDB "/usr/share/collectd/types.db"
LoadPlugin cpu
LoadPlugin memory
LoadPlugin interface
LoadPlugin load
LoadPlugin write_kafka
<Plugin write_kafka>
  Property "metadata.broker.list" "{kafka["bootstrap.servers"]}"
  <Topic "{topic}">
    Format JSON
    Key "cd-node"
    StoreRates false
  </Topic>
</Plugin>
""")
    env = {"PATH": "/usr/bin:/bin:/usr/sbin", "LD_LIBRARY_PATH": str(client_library_dir(tmp_path / "lib"))}
    proc = subprocess.Popen(
        [collectd, "-C", str(conf), "-f"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )

    def four_with_memory(samples: list[dict]) -> bool:  # a second's sample may hold only some plugins
        return sum(any(k.startswith("memory/") for k in s["metrics"]) for s in samples) >= 4

    try:
        raw = read_topic(kafka, cfg.topic("perf.raw"), four_with_memory, timeout=90)
    finally:
        proc.terminate()
        proc.wait(20)
    published: dict[tuple[float, str], float] = {}

    def memory_of(msgs: list) -> bool:  # the gauges collectd published, until every sample's are read
        published.clear()
        for m in msgs:
            for vl in orjson.loads(m.value()):
                if vl["plugin"] == "memory":
                    published[(float(int(vl["time"])), f"memory/memory-{vl['type_instance']}")] = vl["values"][0]
        return {s["ts"] for s in raw} <= {t for t, _ in published}

    try:
        read_topic(kafka, topic, memory_of, timeout=60, decode=False)
    finally:
        runner.stop()
        thread.join(30)
    assert {s["node"] for s in raw} == {"cd-node"}
    checked = 0
    for s in raw:
        for name, v in s["metrics"].items():
            if name.startswith("memory/"):
                assert v == published[(s["ts"], name)], name
                checked += 1
    assert checked >= 4 * 6 and any("cpu-0/cpu-user" in s["metrics"] for s in raw)
