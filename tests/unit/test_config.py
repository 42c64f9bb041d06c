"""Configuration precedence: defaults < pipeline YAML < PERFSIFT_* environment < command-line flags."""

from __future__ import annotations

from pathlib import Path

import pytest
from perfsift.streams.config import ConfigError, kafka_properties, load_pipeline, parse_props, parse_settings


def write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "p.yaml"
    p.write_text(text)
    return p


def test_precedence_of_pipeline_settings(tmp_path: Path) -> None:
    p = write(tmp_path, "partitions: 6\nbatch_size: 100\nstages: {}\n")
    assert load_pipeline(p, env={}).partitions == 6  # YAML over default
    assert load_pipeline(p, env={}).commit_interval_s == 1.0  # default where YAML is silent
    env = {"PERFSIFT_PARTITIONS": "8", "PERFSIFT_COMMIT_INTERVAL_S": "0.5"}
    cfg = load_pipeline(p, env=env)
    assert (cfg.partitions, cfg.commit_interval_s, cfg.batch_size) == (8, 0.5, 100)  # env over YAML
    cfg = load_pipeline(p, env=env, overrides=parse_settings(["partitions=10"]))
    assert (cfg.partitions, cfg.commit_interval_s) == (10, 0.5)  # flags over env


def test_precedence_of_kafka_properties() -> None:
    env = {"PERFSIFT_KAFKA_SASL_MECHANISM": "SCRAM-SHA-512", "PERFSIFT_KAFKA_CLIENT_ID": "from-env"}
    props = kafka_properties("k:9092", parse_props(["client.id=from-flag"]), env=env)
    assert props == {"bootstrap.servers": "k:9092", "sasl.mechanism": "SCRAM-SHA-512", "client.id": "from-flag"}


@pytest.mark.parametrize(
    ("text", "env", "msg"),
    [
        ("partitions: many\n", {}, "partitions: expected int"),
        ("nonsense: 1\n", {}, "unknown settings ['nonsense']"),
        ("guarantee: sometimes\n", {}, "guarantee must be one of"),
        ("stages: {s: {input: a}}\n", {}, "stages.s: a stage needs 'input'"),
        ("stages: {s: {input: a, outputs: b}}\n", {}, "'outputs' must be a non-empty list"),
        ("stages: {s: {input: a, outputs: [b], emit: pdf}}\n", {}, "unknown output kind 'pdf'"),
        (
            "stages: {s: {input: a, outputs: [b], operators: [{type: sliding_mean, window: 0}]}}\n",
            {},
            "bad parameters for sliding_mean",
        ),
        ("snapshots: true\n", {"PERFSIFT_SNAPSHOTS": "maybe"}, "$PERFSIFT_SNAPSHOTS: snapshots: expected bool"),
        (": : :\n", {}, "not valid YAML"),
    ],
)
def test_bad_settings_name_the_place(tmp_path: Path, text: str, env: dict, msg: str) -> None:
    with pytest.raises(ConfigError) as exc:
        load_pipeline(write(tmp_path, text), env=env)
    assert msg in str(exc.value)


def test_bad_flags() -> None:
    with pytest.raises(ConfigError, match="--set expects KEY=VALUE"):
        parse_settings(["window=3"])
    with pytest.raises(ConfigError, match="--kafka-prop expects key=value"):
        parse_props(["novalue"])
