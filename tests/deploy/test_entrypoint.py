"""What the container runs, run here without Docker: the image's entrypoint command line with
Kafka settings from the environment, against the embedded broker."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from perfsift.producers.publish import publish_samples
from perfsift.schemas.detect import decode_any
from perfsift.streams.broker import free_port
from perfsift.streams.clients import create_pipeline_topics
from perfsift.streams.config import load_pipeline

from tests.conftest import read_topic, smoothed_means, wait_until

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.integration


def get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=2) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def test_container_command_line_becomes_ready_processes_and_stops_on_sigterm(kafka: dict, prefix: str) -> None:
    config = ROOT / "k8s" / "base" / "pipeline.yaml"  # what the ConfigMap mounts at /etc/perfsift
    port = free_port()
    env = {
        **os.environ,
        "PERFSIFT_BOOTSTRAP": kafka["bootstrap.servers"],
        "PERFSIFT_HTTP_PORT": str(port),
        "PERFSIFT_HTTP_HOST": "127.0.0.1",  # the image listens on 0.0.0.0; tests stay on loopback
        "PERFSIFT_TOPIC_PREFIX": prefix,
        "PERFSIFT_COMMIT_INTERVAL_S": "0.2",
        "PERFSIFT_KAFKA_CLIENT_ID": "entrypoint-test",
        "PERFSIFT_LOG_FORMAT": "json",  # as the Deployments set them
        "PERFSIFT_LOG_LEVEL": "info",
    }
    cfg = load_pipeline(config, env=env)
    create_pipeline_topics(cfg, kafka)
    # ENTRYPOINT ["perfsift"] + args of the Deployment
    cmd = [sys.executable, "-m", "perfsift", "worker", "smooth", "--config", str(config)]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

    def ready() -> bool:
        assert proc.poll() is None, proc.stdout.read() if proc.stdout else ""
        try:
            return get(f"http://127.0.0.1:{port}/readyz")[0] == 200
        except OSError:
            return False

    try:
        assert wait_until(ready, 60, 0.2)
        assert get(f"http://127.0.0.1:{port}/healthz")[0] == 200
        samples = [{"ts": 1.0 + i, "node": f"n{i % 3}", "seq": i // 3, "metrics": {"x": float(i)}} for i in range(90)]
        publish_samples(kafka, cfg.topic("perf.clean"), samples)  # the smooth stage reads perf.clean
        # one mean per node every 10 samples (the k8s layout's emit_every), in column frames
        want = smoothed_means(samples)
        out = read_topic(kafka, cfg.topic("perf.smoothed.byjob"), lambda r: len(r) >= len(want))
        assert len(out) == len(want) == 9 and {(s["node"], s["metrics"]["x"]) for s in out} == want
        messages = read_topic(kafka, cfg.topic("perf.smoothed.byjob"),
                              lambda r: sum(len(decode_any(m.value()).record) for m in r) >= len(want),
                              decode=False)  # fmt: skip
        # the counters move right after the batch is handed to the producer: allow that instant
        wait_until(
            lambda: 'perfsift_records_in_total{stage="smooth"} 90.0' in get(f"http://127.0.0.1:{port}/metrics")[1], 10
        )
        code, metrics = get(f"http://127.0.0.1:{port}/metrics")
        assert code == 200 and 'perfsift_records_in_total{stage="smooth"} 90.0' in metrics
        # records out count messages: each frame once
        out_line = f'perfsift_topic_records_out_total{{stage="smooth",topic="perf.smoothed.byjob"}} {len(messages)}.0'
        assert out_line in metrics
        assert get(f"http://127.0.0.1:{port}/nope")[0] == 404
    finally:
        proc.send_signal(signal.SIGTERM)
        rc = proc.wait(30)
    log = proc.stdout.read() if proc.stdout else ""
    assert rc == 0, log
    lines = [json.loads(line) for line in log.splitlines()]  # JSON logs: every line is an object
    events = [x for x in lines if x.get("logger", "").startswith("perfsift.")]
    assert all({"time", "level", "logger", "message"} <= x.keys() for x in events)
    (start,) = [x for x in events if x.get("guarantee")]
    assert start["guarantee"] == "at_least_once" and start["stage"] == "smooth"  # the embedded broker is recognised
    assigned = [p for x in events if x.get("event") == "assigned" for p in x["partitions"]]
    assert sorted(assigned) == list(range(cfg.partitions))
    (stopped,) = [x for x in events if "stats" in x]
    assert stopped["stats"]["records_in"] == 90 and lines[-1]["records_in"] == 90  # the last line: the counts
