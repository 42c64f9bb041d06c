"""A pipeline file's ``ingest:`` stages: parsed with their mapping, outputs to perf.raw by default,
mistakes named with their place."""

from __future__ import annotations

from pathlib import Path

import pytest
from perfsift.streams.config import ConfigError, load_pipeline


def write(tmp_path: Path, body: str) -> Path:
    p = tmp_path / "p.yaml"
    p.write_text(body)
    return p


def test_an_ingest_stage_with_an_inline_map_and_a_map_file(tmp_path: Path) -> None:
    (tmp_path / "m.yaml").write_text("node: [instance]\nquantiles: [0.5]\n")
    cfg = load_pipeline(
        write(
            tmp_path,
            f"""stages:
  a:
    input: otlp
    ingest: {{format: otlp_json, max_delay: 2.5, map: {{job: null, align: 1}}}}
  b:
    input: scrapes
    ingest: {{format: prometheus_text, map: {tmp_path / "m.yaml"}}}
    operators: [{{type: clean}}]
    outputs: [perf.clean]
""",
        )
    )
    a, b = cfg.stage("a"), cfg.stage("b")
    assert a.outputs == ("perf.raw",) and a.ingest is not None and b.ingest is not None
    assert (a.ingest.format, a.ingest.max_delay, a.ingest.map.job, a.ingest.map.align) == ("otlp_json", 2.5, None, 1.0)
    assert a.ingest.map.node == ("host.name", "host", "instance", "service.instance.id")  # the format's default
    assert (b.ingest.map.node, b.ingest.map.quantiles, b.outputs) == (("instance",), (0.5,), ("perf.clean",))
    assert a.ingest.fingerprint() != b.ingest.fingerprint()


@pytest.mark.parametrize(
    "section, message",
    [
        ("{format: influx}", "stages.a.ingest.format: 'influx' is not one of"),
        ("{format: ldms_json, max_delay: -1}", "max_delay: seconds >= 0"),
        ("{format: ldms_json, map: {nodes: [x]}}", "stages.a.ingest.map: unknown keys ['nodes']"),
        ("{format: ldms_json, batch: 3}", "unknown keys ['batch']"),
        ("ldms_json", "a mapping with 'format'"),
    ],
)
def test_mistakes_name_their_place(tmp_path: Path, section: str, message: str) -> None:
    with pytest.raises(ConfigError) as exc:
        load_pipeline(write(tmp_path, f"stages:\n  a:\n    input: t\n    ingest: {section}\n"))
    assert message in str(exc.value)
