"""OTLP forms of contract and prediction records (reduced and forecast: tests/integration/test_otlp_out.py)."""

from __future__ import annotations

import pytest
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest
from perfsift.formats.otlp.otlp_out import to_requests


def read(values: list[bytes]) -> list[tuple[dict[str, str], dict[tuple, float]]]:
    out = []
    for v in values:
        (rm,) = ExportMetricsServiceRequest.FromString(v).resource_metrics
        points = {
            (m.name, tuple((a.key, a.value.string_value) for a in p.attributes), p.time_unix_nano): p.as_double
            for sm in rm.scope_metrics
            for m in sm.metrics
            for p in m.gauge.data_points
        }
        out.append(({a.key: a.value.string_value for a in rm.resource.attributes}, points))
    return out


def test_contract_records_give_violation_gauges_per_node() -> None:
    recs = [
        {"ts": 10.0, "node": "a", "job": "j", "violation": 0.75, "smoothed": 0.5, "state": "violated", "driver": "x",
         "spaces": {"cpu": {"violation": 0.75}, "io": {"violation": None}}},
        {"ts": 11.0, "node": "a", "job": "j", "violation": None, "smoothed": None, "state": "unknown", "driver": None,
         "spaces": {}},
        {"ts": 10.0, "node": "b", "job": "j", "violation": 0.0, "smoothed": 0.0, "state": "ok", "driver": None,
         "spaces": {}},
    ]  # fmt: skip
    values, keys = to_requests("contract", recs)
    assert keys == [b"a", b"b"]
    (res_a, a), (res_b, b) = read(values)
    assert res_a == {"service.name": "j", "host.name": "a"} and res_b["host.name"] == "b"
    t = 10 * 10**9
    assert a == {
        ("perfsift.contract.violation", (), t): 0.75,
        ("perfsift.contract.violation.smoothed", (), t): 0.5,
        ("perfsift.contract.violated", (), t): 1.0,
        ("perfsift.contract.space.violation", (("space", "cpu"),), t): 0.75,
    }  # the unknown record at ts 11 has no value: no point
    assert b[("perfsift.contract.violated", (), t)] == 0.0 and len(b) == 3


def test_prediction_records_keep_model_and_output_and_a_job_wide_node_has_no_host() -> None:
    rec = {"ts": 5.5, "job": "j", "model": "sor", "output": "iter", "node": "*", "mean": 2.0, "sigma": 0.25,
           "lower": 1.5, "upper": 2.5, "method": "first-order", "observed": None, "z": None, "violation": None,
           "state": "unknown"}  # fmt: skip
    values, keys = to_requests("prediction", [rec])
    ((res, points),) = read(values)
    assert res == {"service.name": "j"} and keys == [b"*"]
    attrs = (("model", "sor"), ("output", "iter"))
    t = 5_500_000_000
    assert points == {(f"perfsift.prediction.{f}", attrs, t): rec[f] for f in ("mean", "lower", "upper", "sigma")}


def test_an_unknown_kind_is_refused() -> None:
    with pytest.raises(ValueError, match="no OTLP form"):
        to_requests("selection", [{"ts": 1.0, "node": "a"}])


@pytest.mark.parametrize("encoding", ["json", "avro"])
def test_a_stage_adds_the_otlp_copy_of_what_it_emits(tmp_path, encoding: str) -> None:  # type: ignore[no-untyped-def]
    """The hook the runner calls, offline: the OTLP topic's points are the forecast records' values,
    whatever the encoding they were written in, and nothing written is decoded to make them."""
    import numpy as np
    from perfsift.schemas import codec_for, samples_to_batch
    from perfsift.streams.config import load_pipeline
    from perfsift.streams.outputs import StageOutputs
    from perfsift.streams.stage import Chain

    (tmp_path / "p.yaml").write_text(
        f"encoding: {encoding}\notlp_out: my.otlp\nstages:\n  fc:\n    input: perf.raw\n    outputs: [perf.forecast]\n"
        "    operators:\n      - type: forecast\n        metrics: [x]\n"
    )
    cfg = load_pipeline(tmp_path / "p.yaml", env={})
    stage = cfg.stage("fc")
    rng = np.random.default_rng(0)
    batch = samples_to_batch(
        [{"ts": float(t), "node": f"n{n}", "job": "j", "metrics": {"x": float(rng.normal())}} for t in range(40)
         for n in range(2)]
    )  # fmt: skip
    emitted = Chain(stage, encoding).process(batch)
    written, keys = emitted.topics["perf.forecast"]
    # the OTLP copy is built from the operator's records, not by decoding what was just encoded:
    # with the encoded records replaced by bytes that decode to nothing, it is the same
    emitted.topics["perf.forecast"] = ([b"\x00 not a record"] * len(written), keys)
    emitted = StageOutputs(cfg, stage).extend(emitted)
    records = [codec_for(encoding, "forecast").decode(v) for v in written]
    assert records and set(emitted.topics) == {"perf.forecast", "my.otlp"}
    got: dict[tuple, float] = {}
    for res, points in read(emitted.topics["my.otlp"][0]):
        for (name, attrs, t), v in points.items():
            got[(res["host.name"], name, attrs, t)] = v
    want = {
        (r["node"], f"perfsift.forecast{suffix}", (("metric", "x"),), round(r["ts"] * 1e9)): r[f]
        for r in records
        for f, suffix in (
            ("forecast", ""),
            ("lower", ".lower"),
            ("upper", ".upper"),
            ("sigma", ".sigma"),
            ("mae_forecast", ".mae_forecast"),
            ("lower_mae", ".lower_mae"),
            ("upper_mae", ".upper_mae"),
            ("mae", ".mae"),
        )
        if r[f] is not None
    }
    assert got == want
    assert {name for _, name, _, _ in got} >= {"perfsift.forecast.lower_mae", "perfsift.forecast.mae"}
    assert emitted.topics["my.otlp"][1] == [b"n0", b"n1"]
