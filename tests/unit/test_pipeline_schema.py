"""The pipeline file's JSON Schema: generated from the settings, the limits and the operators'
signatures, committed as docs/pipeline.schema.json, in agreement with the loader, and the
validate check that reports each mistake at its line with a suggestion."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from jsonschema import Draft202012Validator
from perfsift.operators.contract.signature import ContractError
from perfsift.operators.registry import OPERATORS
from perfsift.streams.config import ConfigError, load_pipeline
from perfsift.streams.pipeline_schema import config_error_line, pipeline_schema, schema_errors

ROOT = Path(__file__).resolve().parents[2]
PIPELINES = [ROOT / "streams" / "pipeline.yaml", ROOT / "k8s" / "base" / "pipeline.yaml"]


def test_the_committed_schema_is_the_generated_one() -> None:
    committed = json.loads((ROOT / "docs" / "pipeline.schema.json").read_text())
    assert committed == pipeline_schema(), "regenerate: perfsift validate --schema > docs/pipeline.schema.json"
    Draft202012Validator.check_schema(committed)


@pytest.mark.parametrize("path", PIPELINES, ids=lambda p: str(p.relative_to(ROOT)))
def test_the_shipped_pipelines_fit_the_schema_and_load(path: Path) -> None:
    assert schema_errors(path) == []
    assert load_pipeline(path, env={}).stages


def test_every_operator_builds_from_the_defaults_the_schema_states() -> None:
    """The schema's parameters are the constructors': their defaults build each operator, except
    the two that need a setting without a usable default, and they refuse naming a parameter the
    schema lists (so the schema does not miss what the constructor asks for)."""
    defs = pipeline_schema()["$defs"]
    assert set(OPERATORS) <= set(defs)
    refused = set()
    for name, cls in OPERATORS.items():
        props = {k: v for k, v in defs[name]["properties"].items() if k not in ("type", "publish")}
        assert defs[name]["required"] == ["type"]
        try:
            op = cls(**{k: v["default"] for k, v in props.items() if "default" in v})
        except (ValueError, ContractError) as exc:
            assert any(k in str(exc) for k in props), (name, exc)
            refused.add(name)
            continue
        assert type(op) is cls
    assert refused == {"contract", "reduce"}


def write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "pipeline.yaml"
    p.write_text(text)
    return p


BAD = """\
partitons: 4
guarantee: exactly_onec
limits:
  max_jobz: 10
stages:
  node:
    input: perf.raw
    outputs: [perf.clean]
    operators:
      - type: sliding_mean
        windw: 5
      - type: forecst
      - type: ewma
        alpha: high
"""


def test_schema_mistakes_come_with_their_line_and_a_suggestion(tmp_path: Path) -> None:
    p = write(tmp_path, BAD)
    errors = schema_errors(p)
    assert [e.split(": ", 2)[0] for e in errors] == [f"{p}:{n}" for n in (1, 2, 4, 11, 12, 14)]
    by_line = {e.split(": ", 2)[0]: e for e in errors}
    assert "(did you mean 'partitions'?)" in by_line[f"{p}:1"]
    assert "(did you mean 'exactly_once'?)" in by_line[f"{p}:2"]
    assert "(did you mean 'max_jobs'?)" in by_line[f"{p}:4"]
    assert "stages.node.operators[0].windw" in by_line[f"{p}:11"] and "(did you mean 'window'?)" in by_line[f"{p}:11"]
    assert "(did you mean 'forecast'?)" in by_line[f"{p}:12"]
    assert "stages.node.operators[2].alpha: 'high' is not of type 'number'" in by_line[f"{p}:14"]
    # the loader refuses the same file (the schema is no looser than the loader here)
    with pytest.raises(ConfigError):
        load_pipeline(p, env={})


def test_a_mistake_only_the_loader_sees_still_gets_its_line(tmp_path: Path) -> None:
    p = write(
        tmp_path,
        "stages:\n  node:\n    input: perf.raw\n    operators:\n      - type: forecast\n      - type: ewma\n",
    )
    assert schema_errors(p) == []
    with pytest.raises(ConfigError) as exc:
        load_pipeline(p, env={})
    line = config_error_line(p, str(exc.value))
    assert line.startswith(f"{p}:5: stages.node.operators[0]: forecast emits records"), line


def test_yaml_syntax_errors_name_their_line(tmp_path: Path) -> None:
    p = write(tmp_path, "partitions: 4\nstages:\n  node: [\n")
    (error,) = schema_errors(p)
    assert error.startswith(f"{p}:4: not valid YAML"), error  # PyYAML's mark: the line after the open [


@pytest.mark.parametrize("otlp_out", ["true", "false", "team.otlp"])
def test_the_output_settings_the_loader_takes_fit_the_schema(tmp_path: Path, otlp_out: str) -> None:
    """Every encoding the loader accepts, ``otlp_out`` as a flag or a topic and a registry section
    fit the schema (a schema narrower than the loader would fail ``perfsift validate`` on a good file)."""
    for encoding in ("json", "avro", "confluent-avro"):
        p = write(
            tmp_path,
            f"encoding: {encoding}\notlp_out: {otlp_out}\nschema_registry:\n  url: mock://x\n"
            "stages:\n  s:\n    input: perf.raw\n    outputs: [perf.smoothed]\n    operators: [{type: ewma}]\n",
        )
        assert schema_errors(p) == [], encoding
        assert load_pipeline(p, env={}).encoding == encoding
    bad = write(tmp_path, "encoding: protobuf\n")
    assert any("encoding" in e for e in schema_errors(bad))


def test_an_ingest_stage_fits_the_schema(tmp_path: Path) -> None:
    p = write(
        tmp_path,
        "stages:\n  in:\n    input: otel.metrics\n    ingest: {format: otlp_proto, max_delay: 2}\n"
        "  s:\n    input: perf.raw\n    outputs: [perf.smoothed]\n    operators: [{type: ewma}]\n",
    )
    assert schema_errors(p) == []
    assert load_pipeline(p, env={}).stage("in").ingest is not None
    bad = write(tmp_path, "stages:\n  in:\n    input: x\n    ingest: {format: otlp_protobuf}\n")
    assert any("did you mean 'otlp_proto'" in e for e in schema_errors(bad))
