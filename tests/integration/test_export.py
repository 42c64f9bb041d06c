"""``perfsift export`` with Debian's Prometheus 2.42 on the embedded broker: the reduce and forecast
stages run on a small trace, Prometheus scrapes the export endpoint (``honor_labels: true``, as
docs/export.md configures it) and its HTTP API returns, for every series, the last value
perf.reduced / perf.forecast carried; remote_write out into Prometheus's receiver is queried back
the same way."""

from __future__ import annotations

import json
import subprocess
import threading
import time
import urllib.parse
import urllib.request
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest
from perfsift.formats.prom_out import LatestValues
from perfsift.producers.publish import publish_samples
from perfsift.schemas.codecs import codec_for
from perfsift.streams.broker import free_port
from perfsift.streams.clients import create_pipeline_topics, producer_settings
from perfsift.streams.config import PipelineConfig, load_pipeline
from perfsift.streams.export import EXPORTED, Exporter, ExportServer, RemoteWriter
from perfsift.streams.runner import StageRunner, run_in_thread, wait_assigned

from tests.conftest import read_topic, wait_until
from tests.debian import program
from tests.unit.test_export_docs import scrape_config

pytestmark = pytest.mark.integration


def samples(start: float, seed: int = 3) -> list[dict]:
    """60 seconds of 2 jobs x 2 nodes x 5 metrics, the last sample ending now."""
    rng = np.random.default_rng(seed)
    out = []
    for t in range(60):
        for job in ("ja", "jb"):
            for n in range(2):
                metrics = {f"m{j}": float(np.round(rng.normal(10 * (j + 1), 2), 4)) for j in range(5)}
                out.append({"ts": start + t, "node": f"{job}-n{n}", "job": job, "seq": t, "metrics": metrics})
    return out


def pipeline(tmp_path: Path, prefix: str) -> PipelineConfig:
    (tmp_path / "p.yaml").write_text(f"""
topic_prefix: "{prefix}"
partitions: 2
commit_interval_s: 0.2
stages:
  select:
    input: perf.raw
    outputs: [perf.reduced, perf.selection, perf.control]
    operators:
      - type: reduce
        # alpha 1: the evidence off (the data are noise on 2 nodes a job; what is selected is not this
        # test's subject, that the exposition equals perf.reduced is); slack 4: a short trace
        pursuit: {{period: 20, window: 5, restarts: 2, slack: 4, alpha: 1}}
  fc:
    input: perf.raw
    outputs: [perf.forecast]
    operators:
      - type: forecast
        metrics: [m0, m3]
""")
    return load_pipeline(tmp_path / "p.yaml", env={})


@contextmanager
def prometheus(tmp_path: Path, targets: list[str]) -> Iterator[str]:
    """Debian's Prometheus scraping ``targets`` every second with docs/export.md's scrape config,
    its remote_write receiver on; yields its URL."""
    binary = program("prometheus")
    port = free_port()
    scrape = {**scrape_config(), "scrape_interval": "1s", "scrape_timeout": "1s"}  # docs/export.md's
    scrape["static_configs"] = [{"targets": targets}]
    conf = tmp_path / "prometheus.yml"
    conf.write_text(json.dumps({"scrape_configs": [scrape]}))  # JSON is YAML
    proc = subprocess.Popen(
        [
            binary,
            f"--config.file={conf}",
            f"--storage.tsdb.path={tmp_path / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--web.enable-remote-write-receiver",
        ],
        stdout=subprocess.DEVNULL,
        stderr=(tmp_path / "prometheus.log").open("wb"),
    )
    url = f"http://127.0.0.1:{port}"
    try:
        assert wait_until(lambda: _ready(url), 30), (tmp_path / "prometheus.log").read_text()[-2000:]
        yield url
    finally:
        proc.terminate()
        proc.wait(20)


def _ready(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/-/ready", timeout=1) as r:
            return r.status == 200
    except OSError:
        return False


def query(url: str, promql: str) -> dict[tuple[tuple[str, str], ...], float]:
    """An instant query: labels (without __name__) -> value, as Prometheus's API gives it."""
    with urllib.request.urlopen(f"{url}/api/v1/query?{urllib.parse.urlencode({'query': promql})}", timeout=5) as r:
        body = json.load(r)
    assert body["status"] == "success", body
    return {
        tuple(sorted((k, v) for k, v in s["metric"].items() if k != "__name__")): float(s["value"][1])
        for s in body["data"]["result"]
    }


def last_values(records: list[dict]) -> tuple[dict[tuple[str, str, str], float], set[tuple[str, str, str]]]:
    """The last non-null value of each (job, node, metric) on perf.reduced, and the series of
    records that are not full samples (the ones the export creates)."""
    last: dict[tuple[str, str, str], float] = {}
    created: set[tuple[str, str, str]] = set()
    for rec in records:
        for metric, v in rec["metrics"].items():
            if v is not None:
                last[(rec["job"], rec["node"], metric)] = v
                if not rec["full"]:
                    created.add((rec["job"], rec["node"], metric))
    return last, created


def test_prometheus_scrapes_the_reduced_values_and_forecast_bounds(kafka: dict, prefix: str, tmp_path: Path) -> None:
    cfg = pipeline(tmp_path, prefix)
    create_pipeline_topics(cfg, kafka)
    data = samples(time.time() - 60)
    runners = [StageRunner(cfg.stage(s), cfg, kafka, embedded=True) for s in ("select", "fc")]
    threads = [run_in_thread(r) for r in runners]
    assert wait_assigned(runners, 120)
    publish_samples(kafka, cfg.topic("perf.raw"), data)
    done = wait_until(lambda: all(r.stats.records_in >= len(data) for r in runners), 120)
    assert done, [(r.stage.name, r.stats.records_in, r.stats.dead_letters) for r in runners]
    for r, t in zip(runners, threads, strict=True):
        r.stop()
        t.join(20)
    n_reduced, n_forecast = runners[0].stats.by_topic["perf.reduced"], runners[1].stats.by_topic["perf.forecast"]
    assert n_reduced > len(data) // 2 and n_forecast > 0, (n_reduced, n_forecast, runners[0].stats.by_topic)
    # a contract record in Avro single-object encoding beside the stages' JSON
    contract = {
        "ts": time.time(),
        "node": "ja-n0",
        "job": "ja",
        "violation": 0.75,
        "smoothed": 0.5,
        "state": "violated",
        "driver": "m0",
        "spaces": {},
    }
    from confluent_kafka import Producer

    p = Producer(producer_settings(kafka))
    p.produce(cfg.topic("perf.contract"), codec_for("avro", "contract").encode(contract), b"ja-n0")
    assert p.flush(10) == 0

    values = LatestValues()
    exporter = Exporter(kafka, {cfg.topic(t): k for t, k in EXPORTED.items()}, values, since_s=600)
    server = ExportServer(values, exporter, 0, "127.0.0.1").start()
    thread = threading.Thread(target=exporter.run, daemon=True)
    thread.start()
    reduced = read_topic(kafka, cfg.topic("perf.reduced"), lambda r: len(r) >= n_reduced)
    forecast = read_topic(kafka, cfg.topic("perf.forecast"), lambda r: len(r) >= n_forecast)
    try:
        want = {"reduced": n_reduced, "forecast": n_forecast, "contract": 1}
        assert wait_until(lambda: dict(values.records) == want, 30), values.records
        with prometheus(tmp_path, [f"127.0.0.1:{server.port}"]) as prom:
            # a scrape after everything was read: Prometheus has the records' count, then the values
            instance = ("instance", f"127.0.0.1:{server.port}")
            counts = {(instance, ("job", "perfsift-export"), ("kind", k)): float(n) for k, n in want.items()}
            assert wait_until(lambda: query(prom, "perfsift_export_records_total") == counts, 30), (
                query(prom, "perfsift_export_records_total"),
                counts,
                query(prom, "up"),
            )
            got = query(prom, "perfsift_reduced")
            lower = query(prom, "perfsift_forecast_lower")
            upper = query(prom, "perfsift_forecast_upper")
            violation = query(prom, "perfsift_contract_violation")
    finally:
        exporter.stop()
        thread.join(20)
        server.stop()
    last, created = last_values(reduced)
    series = {(d["job"], d["node"], d["metric"]): v for d, v in ((dict(k), v) for k, v in got.items())}
    assert all(dict(k)["instance"] == instance[1] for k in got)
    shape = Counter((r["full"], r["selection_version"], len(r["metrics"])) for r in reduced)
    assert series.keys() == created and len(created) >= 4, shape  # every selected series, and nothing else
    assert series == {k: last[k] for k in created}  # each equal to perf.reduced's last value, exactly
    bounds = {}
    for rec in forecast:
        for field in ("lower", "upper"):
            if rec[field] is not None:
                bounds[(field, rec["job"], rec["node"], rec["metric"])] = rec[field]
    got_bounds = {
        (field, d["job"], d["node"], d["metric"]): v
        for field, table in (("lower", lower), ("upper", upper))
        for d, v in ((dict(k), v) for k, v in table.items())
    }
    assert got_bounds == bounds and len(bounds) == 2 * 4 * 2  # 4 nodes x m0, m3, both bounds
    assert violation == {(("instance", instance[1]), ("job", "ja"), ("node", "ja-n0")): 0.75}


def test_remote_write_out_lands_in_prometheus(tmp_path: Path) -> None:
    values = LatestValues()
    now = time.time()
    values.add(
        "reduced",
        [
            {"ts": now - 2, "node": "rw-n1", "job": "rw", "metrics": {"cpu": 0.1 + 0.2, "mem": 12345.678901234567}},
            {"ts": now - 1, "node": "rw-n1", "job": "rw", "metrics": {"cpu": 1 / 3}},
        ],
    )
    values.add(
        "forecast",
        [
            {
                "ts": now - 1,
                "node": "rw-n1",
                "job": "rw",
                "metric": "cpu",
                "forecast": 0.4,
                "sigma": 0.05,
                "lower": 0.3,
                "upper": 0.5,
                "method": "mean",
            }
        ],
    )
    with prometheus(tmp_path, []) as prom:
        writer = RemoteWriter(f"{prom}/api/v1/write", values, interval_s=1.0)
        assert writer.push() == 204
        got = query(prom, "perfsift_reduced")
        assert query(prom, "perfsift_forecast_upper") == {(("job", "rw"), ("metric", "cpu"), ("node", "rw-n1")): 0.5}
        # a value older than what the receiver has for its series is refused (out of order) and dropped
        values.add("reduced", [{"ts": now - 10, "node": "rw-n1", "job": "rw", "metrics": {"cpu": 9.0}}])
        assert writer.push() == 400 and writer.refused == 1
    assert got == {
        (("job", "rw"), ("metric", "cpu"), ("node", "rw-n1")): 1 / 3,
        (("job", "rw"), ("metric", "mem"), ("node", "rw-n1")): 12345.678901234567,
    }


def test_the_export_command_serves_pushes_and_stops_on_sigterm(kafka: dict, prefix: str, tmp_path: Path) -> None:
    """``perfsift export`` as an operator runs it: a reduced record already on the topic is on
    /metrics and, with --remote-write, in Prometheus; SIGTERM ends it at once with exit code 0."""
    import signal
    import sys

    from confluent_kafka import Producer

    (tmp_path / "p.yaml").write_text(f'topic_prefix: "{prefix}"\n')
    cfg = load_pipeline(tmp_path / "p.yaml", env={})
    create_pipeline_topics(cfg, kafka)
    rec = {
        "ts": time.time(),
        "node": "cli-n1",
        "job": "cj",
        "seq": 1,
        "metrics": {"cpu": 0.1 + 0.2},
        "selection_version": 1,
        "full": False,
    }
    p = Producer(producer_settings(kafka))
    p.produce(cfg.topic("perf.reduced"), codec_for("json", "reduced").encode(rec), b"cli-n1")
    assert p.flush(10) == 0
    port = free_port()
    line = 'perfsift_reduced{job="cj",metric="cpu",node="cli-n1"} 0.30000000000000004'
    want = {(("job", "cj"), ("metric", "cpu"), ("node", "cli-n1")): 0.1 + 0.2}
    with prometheus(tmp_path, []) as prom:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "perfsift",
                "export",
                "-b",
                kafka["bootstrap.servers"],
                "--config",
                str(tmp_path / "p.yaml"),
                "--port",
                str(port),
                "--since",
                "beginning",
                "--remote-write",
                f"{prom}/api/v1/write",
                "--remote-write-interval",
                "1s",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        try:
            assert wait_until(lambda: line in _get(f"http://127.0.0.1:{port}/metrics"), 60)
            assert _get(f"http://127.0.0.1:{port}/readyz") == "ready\n"
            assert wait_until(lambda: query(prom, "perfsift_reduced") == want, 20)
        finally:
            proc.send_signal(signal.SIGTERM)
            _, err = proc.communicate(timeout=15)
    assert proc.returncode == 0, err.decode()[-2000:]


def _get(url: str) -> str:
    try:
        with urllib.request.urlopen(url, timeout=2) as r:
            return str(r.read().decode())
    except OSError:
        return ""
