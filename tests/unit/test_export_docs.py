"""docs/export.md and its Grafana dashboard stay true: the dashboard asks only for series the
exporter writes (with the labels they have), and the scrape config is the one the integration
test runs Prometheus with (:func:`scrape_config`)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import yaml
from perfsift.formats.prom_out import FAMILIES, LatestValues
from prometheus_client import CollectorRegistry, generate_latest

DOCS = Path(__file__).resolve().parents[2] / "docs"
DASHBOARD = DOCS / "grafana" / "perfsift-dashboard.json"


def scrape_config() -> dict[str, Any]:
    """The ``scrape_configs`` entry of docs/export.md's Prometheus block."""
    text = (DOCS / "export.md").read_text()
    block = re.search(r"```yaml\n(# prometheus.yml.*?)```", text, re.S)
    assert block is not None, "docs/export.md lost its prometheus.yml block"
    (entry,) = yaml.safe_load(block.group(1))["scrape_configs"]
    return dict(entry)


def exported_names() -> dict[str, tuple[str, ...]]:
    """Every family name on the exporter's /metrics (as exposed, counters with _total) -> labels."""
    lv = LatestValues()
    reg = CollectorRegistry()
    reg.register(lv)
    names = {name: labels for name, (_, labels) in FAMILIES.items()}
    lv.add("reduced", [{"ts": 1.0, "node": "n", "metrics": {}}])  # every counter with a sample
    for line in generate_latest(reg).decode().splitlines():
        if not line.startswith("#"):
            names.setdefault(re.split(r"[{ ]", line, maxsplit=1)[0], ())
    names["perfsift_export_records_total"] = names["perfsift_export_refused_total"] = ("kind",)
    return names


def queries(dash: dict[str, Any]) -> list[str]:
    exprs = [t["expr"] for p in dash["panels"] for t in p["targets"]]
    exprs += [v["definition"] for v in dash["templating"]["list"] if v["type"] == "query"]
    return exprs


def test_the_scrape_config_keeps_perfsifts_job_label() -> None:
    entry = scrape_config()
    assert entry["honor_labels"] is True
    assert entry["static_configs"][0]["targets"] == ["perfsift-export:9464"]


def test_the_dashboard_asks_only_for_exported_series_and_labels() -> None:
    dash = json.loads(DASHBOARD.read_text())
    names = exported_names()
    exprs = queries(dash)
    assert len(exprs) >= 10
    used: set[str] = set()
    for expr in exprs:
        for name, selector in re.findall(r"\b(perfsift_[a-z_]+)(\{[^}]*\})?", expr):
            assert name in names, f"{name} in {expr!r} is not exported"
            used.add(name)
            for label in re.findall(r"([a-z_]+)\s*=~?", selector):
                assert label in names[name], f"{name} has no label {label!r} ({expr!r})"
    # the panels the docs promise: reduced values, forecast between its bounds, contracts
    assert {
        "perfsift_reduced",
        "perfsift_forecast",
        "perfsift_forecast_lower",
        "perfsift_forecast_upper",
        "perfsift_contract_violation",
        "perfsift_contract_state",
    } <= used
    upper = next(p for p in dash["panels"] if p["title"].startswith("Forecast"))["fieldConfig"]["overrides"][0]
    fill = next(prop["value"] for prop in upper["properties"] if prop["id"] == "custom.fillBelowTo")
    assert fill.startswith("lower ")  # the band between the bounds is shaded


def test_the_dashboard_is_importable() -> None:
    dash = json.loads(DASHBOARD.read_text())
    ids = [p["id"] for p in dash["panels"]]
    assert len(ids) == len(set(ids)) and dash["uid"] and dash["schemaVersion"] >= 36
    for p in dash["panels"]:
        assert p["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
        assert [t["refId"] for t in p["targets"]] == [chr(65 + i) for i in range(len(p["targets"]))]
