"""otlp_out on the embedded broker: the reduce and forecast stages' results come back from the OTLP
topic, read with opentelemetry-proto, equal to perf.reduced and perf.forecast value by value."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest
from perfsift.producers.publish import publish_samples
from perfsift.streams.clients import create_pipeline_topics
from perfsift.streams.config import load_pipeline
from perfsift.streams.runner import StageRunner, run_in_thread

from tests.conftest import read_topic, wait_until

pytestmark = pytest.mark.integration

#: every forecast field and its OTLP gauge (formats/otlp/otlp_out.py)
FORECAST_GAUGES = (
    ("forecast", ""),
    ("lower", ".lower"),
    ("upper", ".upper"),
    ("sigma", ".sigma"),
    ("mae_forecast", ".mae_forecast"),
    ("lower_mae", ".lower_mae"),
    ("upper_mae", ".upper_mae"),
    ("mae", ".mae"),
)


def samples(seed: int = 1) -> list[dict]:
    rng = np.random.default_rng(seed)
    out = []
    for t in range(90):
        for job, nodes in (("ja", 3), ("jb", 2)):
            for n in range(nodes):
                metrics: dict[str, float | None] = {
                    f"m{j}": float(np.round(rng.normal(10 * (j + 1), 2), 4)) for j in range(5)
                }
                if rng.random() < 0.1:
                    metrics["m2"] = None
                out.append({"ts": 1.7e9 + t, "node": f"{job}-n{n}", "job": job, "seq": t, "metrics": metrics})
    return out


def otlp_points(values: list[bytes]) -> dict[tuple, float]:
    """(job, node, ts ns, gauge, point attributes) -> value, over every request; no duplicates."""
    got: dict[tuple, float] = {}
    for v in values:
        req = ExportMetricsServiceRequest.FromString(v)
        assert len(req.resource_metrics) == 1  # one resource per message
        rm = req.resource_metrics[0]
        res = {a.key: a.value.string_value for a in rm.resource.attributes}
        for sm in rm.scope_metrics:
            assert sm.scope.name == "perfsift"
            for metric in sm.metrics:
                for p in metric.gauge.data_points:
                    attrs = tuple(sorted((a.key, a.value.string_value) for a in p.attributes))
                    key = (res["service.name"], res["host.name"], p.time_unix_nano, metric.name, attrs)
                    assert key not in got, key
                    got[key] = p.as_double
    return got


def test_otlp_out_carries_reduced_and_forecast_values(kafka: dict, prefix: str, tmp_path: Path) -> None:
    (tmp_path / "p.yaml").write_text(f"""
topic_prefix: "{prefix}"
partitions: 2
commit_interval_s: 0.2
otlp_out: true
stages:
  select:
    input: perf.raw
    outputs: [perf.reduced, perf.selection, perf.control]
    operators:
      - type: reduce
        pursuit: {{period: 20, window: 5, restarts: 2, slack: 8}}  # the first period closes 8 rows on
  fc:
    input: perf.raw
    outputs: [perf.forecast]
    operators:
      - type: forecast
        metrics: [m0, m3]
""")
    cfg = load_pipeline(tmp_path / "p.yaml", env={})
    assert cfg.otlp_out == "perf.reduced.otlp"
    create_pipeline_topics(cfg, kafka)  # creates the OTLP topic too
    data = samples()
    runners = [StageRunner(cfg.stage(s), cfg, kafka, embedded=True) for s in ("select", "fc")]
    threads = [run_in_thread(r) for r in runners]
    publish_samples(kafka, cfg.topic("perf.raw"), data)
    assert wait_until(lambda: all(r.stats.records_in >= len(data) for r in runners), 60)
    for r, t in zip(runners, threads, strict=True):
        r.stop()
        t.join(20)
    n_reduced = runners[0].stats.by_topic["perf.reduced"]
    n_forecast = runners[1].stats.by_topic["perf.forecast"]
    n_otlp = sum(r.stats.by_topic.get("perf.reduced.otlp", 0) for r in runners)
    assert n_reduced > len(data) // 2 and n_forecast > 0 and n_otlp > 0
    reduced = read_topic(kafka, cfg.topic("perf.reduced"), lambda r: len(r) >= n_reduced)
    forecast = read_topic(kafka, cfg.topic("perf.forecast"), lambda r: len(r) >= n_forecast)
    otlp = read_topic(kafka, cfg.topic("perf.reduced.otlp"), lambda r: len(r) >= n_otlp, decode=False)
    assert (len(reduced), len(forecast), len(otlp)) == (n_reduced, n_forecast, n_otlp)
    got = otlp_points([m.value() for m in otlp])

    want: dict[tuple, float] = {}
    for rec in reduced:
        for name, v in rec["metrics"].items():
            if v is not None:
                want[(rec["job"], rec["node"], round(rec["ts"] * 1e9), f"perfsift.reduced.{name}", ())] = v
    for rec in forecast:
        attrs = (("metric", rec["metric"]),)
        for field, gauge in FORECAST_GAUGES:
            if rec[field] is not None:
                want[(rec["job"], rec["node"], round(rec["ts"] * 1e9), f"perfsift.forecast{gauge}", attrs)] = rec[field]
    assert got == want  # every value, and nothing else
    # the MAE bound is there too (METHODS.md 5.3), derived by the reader as the bounds are
    assert {k[3] for k in got} >= {f"perfsift.forecast{gauge}" for _, gauge in FORECAST_GAUGES}
    assert {k[1] for k in got} == {s["node"] for s in data}
    # each message is keyed by its resource's node
    for m in otlp:
        rm = ExportMetricsServiceRequest.FromString(m.value()).resource_metrics[0]
        assert m.key().decode() == {a.key: a.value.string_value for a in rm.resource.attributes}["host.name"]
