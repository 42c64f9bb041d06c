"""The Grafana dashboard shipped in k8s/: valid, mounted for Grafana's sidecar, and every metric it
queries is one a worker exports (a renamed metric would leave a panel silently empty)."""

from __future__ import annotations

import json
import re
from pathlib import Path

from perfsift.streams.config import load_pipeline
from perfsift.streams.http import _RunnerCollector
from perfsift.streams.runner import StageRunner
from prometheus_client import CollectorRegistry, generate_latest

from tests.deploy.kustomize import render

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "k8s" / "base" / "grafana-dashboard.json"


def exported_names() -> set[str]:
    """Metric names on a worker's /metrics, from the exporter itself (a runner needs no broker to be
    built): the sample names (counters with ``_total``) and the declared families, which also
    cover gauges that have no sample until a job or partition appears."""
    cfg = load_pipeline()
    registry = CollectorRegistry()
    for stage in cfg.stages.values():
        registry.register(_RunnerCollector(StageRunner(stage, cfg, {"bootstrap.servers": "127.0.0.1:1"})))
    text = generate_latest(registry).decode()
    declared = set(re.findall(r"^# TYPE (\w+) ", text, re.M))
    samples = set(re.findall(r"^(perfsift_\w+)[{ ]", text, re.M))
    return declared | samples


def test_every_queried_metric_is_exported_and_panels_are_distinct() -> None:
    dash = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for p in dash["panels"] for t in p["targets"]]
    queried = {m for e in exprs for m in re.findall(r"\bperfsift_\w+", e)}
    names = exported_names()
    assert queried and queried <= names, sorted(queried - names)
    # the per-job gauges, the point of a dashboard over the live view, are all on it
    assert {"perfsift_selection_version", "perfsift_reduction_ratio", "perfsift_contract_nodes"} <= queried
    ids = [p["id"] for p in dash["panels"]]
    assert len(set(ids)) == len(ids) and len({p["title"] for p in dash["panels"]}) == len(ids)
    assert all(t["datasource"]["uid"] == "${datasource}" for p in dash["panels"] for t in p["targets"])


def test_the_dashboard_is_a_configmap_for_grafanas_sidecar() -> None:
    for overlay in ("dev", "prod"):
        (cm,) = [
            d for d in render(ROOT / "k8s" / "overlays" / overlay) if d["metadata"]["name"] == "perfsift-dashboard"
        ]
        assert cm["kind"] == "ConfigMap" and cm["metadata"]["labels"]["grafana_dashboard"] == "1"
        assert cm["data"]["grafana-dashboard.json"] == DASHBOARD.read_text()
