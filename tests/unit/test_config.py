"""Configuration precedence: defaults < pipeline YAML < PERFSIFT_* environment < command-line flags."""

from __future__ import annotations

from pathlib import Path

import pytest
from perfsift.streams.clients import kafka_properties, parse_props
from perfsift.streams.config import ConfigError, load_pipeline, parse_settings


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


def test_kafka_settings_precedence_defaults_file_env_flags(tmp_path: Path) -> None:
    from perfsift.streams.clients import consumer_settings, producer_settings

    cfg = load_pipeline(
        write(tmp_path, "kafka: {linger.ms: 20, session.timeout.ms: 9000, enable.idempotence: false}\n")
    )
    assert cfg.kafka == {"linger.ms": "20", "session.timeout.ms": "9000", "enable.idempotence": "false"}
    env = {"PERFSIFT_KAFKA_LINGER_MS": "30"}
    props = kafka_properties("k:9092", parse_props(["session.timeout.ms=45000"]), env=env, file=cfg.kafka)
    consumer, producer = consumer_settings(props, "g"), producer_settings(props)
    assert consumer["session.timeout.ms"] == "45000" and consumer["heartbeat.interval.ms"] == 500  # flag; default
    assert producer["linger.ms"] == "30" and producer["enable.idempotence"] == "false"  # env over file; file
    assert producer["compression.type"] == "zstd" and consumer["group.id"] == "g"
    with pytest.raises(ConfigError, match="kafka: a mapping"):
        load_pipeline(write(tmp_path, "kafka: [linger.ms]\n"))


@pytest.mark.parametrize(
    ("text", "env", "msg"),
    [
        ("partitions: many\n", {}, "partitions: expected int"),
        ("nonsense: 1\n", {}, "unknown settings ['nonsense']"),
        ("guarantee: sometimes\n", {}, "guarantee must be one of"),
        ("stages: {s: {outputs: [b]}}\n", {}, "stages.s: a stage needs 'input'"),
        ("stages: {s: {input: a}}\n", {}, "stages.s: 'outputs' must be a non-empty list"),
        ("stages: {s: {input: a, outputs: [b], output: [c]}}\n", {}, "stages.s: unknown keys ['output']"),
        ("stages: {s: {input: a, outputs: b}}\n", {}, "'outputs' must be a non-empty list"),
        ("stages: {s: {input: a, outputs: [b], emit: pdf}}\n", {}, "'pdf' does not match what the stage emits"),
        (
            "stages: {s: {input: a, emit: contract, operators: [{type: pursuit}]}}\n",
            {},
            "'contract' does not match what pursuit emits (selection)",
        ),
        (
            "stages: {s: {input: a, outputs: [perf.reduced], operators: [{type: reduce, pursuit: {}}]}}\n",
            {},
            "no topic for the selection, control output of reduce",
        ),
        (
            "stages: {s: {input: a, outputs: [perf.reduced, perf.selection, perf.control, perf.contract],"
            " operators: [{type: reduce, pursuit: {}}]}}\n",
            {},
            "no such kind of output goes to ['perf.contract']",
        ),
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


def test_outputs_follow_from_the_last_operators_role(tmp_path: Path) -> None:
    """A decider's records go to its kind's topic and a router's kinds to theirs, unless the file
    names topics; ``emit:`` may be left out."""
    text = """stages:
  sel: {input: perf.smoothed.byjob, operators: [{type: pursuit}]}
  red: {input: perf.smoothed.byjob, operators: [{type: reduce, pursuit: {}}]}
  fc: {input: perf.smoothed, outputs: [team.forecast], operators: [{type: forecast}]}
  sm: {input: perf.raw, outputs: [perf.smoothed], operators: [{type: sliding_mean}]}
"""
    cfg = load_pipeline(write(tmp_path, text))
    assert cfg.stage("sel").outputs == ("perf.selection",) and cfg.stage("sel").role == "decide"
    assert cfg.stage("red").outputs == ("perf.reduced", "perf.selection", "perf.control")
    assert cfg.stage("red").routes == {
        "reduced": ("perf.reduced",),
        "selection": ("perf.selection",),
        "control": ("perf.control",),
        "forecast": (),  # optional: only with forecast settings, and then where the file says
    }
    assert cfg.stage("fc").outputs == ("team.forecast",)
    assert cfg.stage("sm").role == "transform"


def test_a_knowledge_base_named_in_the_file_is_read_once_and_handed_to_clean(tmp_path: Path) -> None:
    """``kb:`` and ``app:`` on a clean operator: the runtime reads the application's history and
    the operator gets it as data (it opens no database); an edited knowledge base is another
    configuration (the fingerprint follows the history's content)."""
    from perfsift.operators.clean.clean import Clean
    from perfsift.producers.synth import spmd
    from perfsift.streams.knowledge import KnowledgeBase

    db = tmp_path / "kb.sqlite"
    base, _ = spmd("cactus", nodes=3, duration=100, seed=1)
    with KnowledgeBase(str(db)) as kb:
        kb.add_run("cactus", base, source="base.jsonl")
    ops = f"[{{type: clean, kb: {db}, app: cactus}}]"
    text = f"stages: {{s: {{input: perf.raw, outputs: [perf.clean], operators: {ops}}}}}\n"
    stage = load_pipeline(write(tmp_path, text)).stage("s")
    op = stage.build_chain()[0]
    assert isinstance(op, Clean) and op.history is not None
    assert op.history.maxima["cpu_user"] == max(s["metrics"]["cpu_user"] for s in base)
    before = op.fingerprint()
    with KnowledgeBase(str(db)) as kb:
        kb.add_run("cactus", [{**s, "metrics": {**s["metrics"], "cpu_user": 1e6}} for s in base[:5]], source="x")
    again = load_pipeline(write(tmp_path, text)).stage("s").build_chain()[0]
    assert again.fingerprint() != before
