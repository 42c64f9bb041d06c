"""``perfsift ingest`` on the real embedded broker: records written as the real clients write them
(OpenTelemetry SDK + OTLP encoder, Telegraf's JSON serializer, LDMS store_kafka rows, a
prometheus_client registry) become perfsift samples on perf.raw, value by value, and go on
through the default pipeline's node stage; the lateness bound holds on the wall clock with no
more data; what cannot be used is dead-lettered with its reason; pending samples survive a restart."""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path

import orjson
import pytest
from perfsift.streams.clients import create_pipeline_topics
from perfsift.streams.config import StageConfig, load_pipeline
from perfsift.streams.ingest_stage import IngestRunner, stage_runner
from perfsift.streams.runner import run_in_thread, wait_assigned

from tests import ingest_sources as src
from tests.conftest import read_topic
from tests.integration.test_pipeline import pipeline_file

pytestmark = pytest.mark.integration

SOURCES = {
    "otlp_proto": lambda: src.otlp_messages({"op0": "jobA", "op1": "jobA", "op2": "jobB"}, "otlp_proto", keyed=True),
    "otlp_json": lambda: src.otlp_messages({"oj0": "jobA", "oj1": "jobC"}, "otlp_json", keyed=True),
    "telegraf_json": lambda: src.telegraf_messages(["tg0", "tg1"]),
    "ldms_json": lambda: src.ldms_messages(["ld0", "ld1", "ld2"]),
    "prometheus_text": lambda: src.prometheus_messages(["pr0", "pr1"]),
    "perfsift": lambda: src.perfsift_messages(["ps0", "ps1"]),
}


def ingest_pipeline(tmp_path: Path, prefix: str, max_delay: float, formats: list[str]) -> Path:
    lines = [f'topic_prefix: "{prefix}"', "partitions: 2", "commit_interval_s: 0.3", "stages:"]
    for fmt in formats:
        lines += [f"  in_{fmt}:", f"    input: in.{fmt}", "    ingest:", f"      format: {fmt}",
                  f"      max_delay: {max_delay}"]  # fmt: skip
    path = tmp_path / "pipeline.yaml"
    path.write_text("\n".join(lines) + "\n")
    return path


def check_values(got: dict, want: dict) -> None:
    assert set(got) == set(want)
    for key, metrics in want.items():
        assert set(got[key]) == set(metrics), key
        for name, v in metrics.items():
            assert (got[key][name] is None) == (v is None), (key, name)
            if v is not None:
                assert got[key][name] == pytest.approx(v, rel=1e-9), (key, name)


def test_every_format_arrives_value_by_value_and_goes_on_through_the_node_stage(
    kafka: dict, prefix: str, tmp_path: Path
) -> None:
    cfg = load_pipeline(ingest_pipeline(tmp_path, prefix, 0.5, list(SOURCES)))
    # the default node stage at full rate (one smoothed record per sample on perf.smoothed, JSON)
    node = load_pipeline(pipeline_file(tmp_path, prefix, full_rate=True)).stage("node")
    cfg = replace(cfg, stages={**cfg.stages, "node": node})
    assert all(cfg.stage(f"in_{f}").outputs == ("perf.raw",) for f in SOURCES)
    create_pipeline_topics(cfg, kafka)
    runners = [stage_runner(st, cfg, kafka, embedded=True) for st in cfg.stages.values()]
    assert sum(isinstance(r, IngestRunner) for r in runners) == len(SOURCES)
    failures: list[BaseException] = []
    threads = [run_in_thread(r, on_error=failures.append) for r in runners]
    try:
        assert wait_assigned(runners, 60)
        want: dict = {}
        for fmt, make in SOURCES.items():
            msgs, expected = make()
            src.produce(kafka, cfg.topic(f"in.{fmt}"), msgs)
            want.update(expected)
        raw = read_topic(kafka, cfg.topic("perf.raw"), lambda r: len(r) >= len(want), timeout=60)
        smoothed = read_topic(kafka, cfg.topic("perf.smoothed"), lambda r: len(r) >= len(want), timeout=90)
    finally:
        for r in runners:
            r.stop()
        for t in threads:
            t.join(30)
    assert failures == []  # every stage ran to its drain and final commit
    got = {(s["job"], s["node"], s["ts"]): s["metrics"] for s in raw}
    assert len(raw) == len(got)  # one sample per (job, node, ts)
    check_values(got, want)
    # on through clean (flags only) and the sliding mean: each node's first sample is its own mean
    assert {(s["job"], s["node"], s["ts"]) for s in smoothed} == set(want)
    first: dict = {}
    for s in sorted(smoothed, key=lambda s: s["ts"]):
        first.setdefault((s["job"], s["node"]), s)
    for (job, node), s in first.items():
        for name, v in want[(job, node, s["ts"])].items():
            if v is not None:
                assert s["metrics"][name] == pytest.approx(v, rel=1e-9), (node, name)
    ingest_stats = [r.stats for r in runners if isinstance(r, IngestRunner)]
    assert sum(st.dead_letters for st in ingest_stats) == 0
    assert sum(st.records_out for st in ingest_stats) == len(want)


def test_a_sample_leaves_after_max_delay_without_more_data_and_bad_records_are_dead_lettered(
    kafka: dict, prefix: str, tmp_path: Path
) -> None:
    delay = 3.0
    cfg = load_pipeline(ingest_pipeline(tmp_path, prefix, delay, ["ldms_json"]))
    create_pipeline_topics(cfg, kafka)
    runner = stage_runner(cfg.stage("in_ldms_json"), cfg, kafka, embedded=True)
    thread = run_in_thread(runner)
    topic = cfg.topic("in.ldms_json")
    try:
        assert wait_assigned([runner], 60)
        row = {"timestamp": 100.5, "ProducerName": "n1", "MemFree": 5.0}
        # keyed by the node (one partition per node, as docs/ingest.md asks): lateness is per partition
        src.produce(kafka, topic, [(orjson.dumps(row), b"n1", None)])
        sent = time.monotonic()
        early = read_topic(kafka, cfg.topic("perf.raw"), lambda r: time.monotonic() - sent > delay * 0.5, timeout=60)
        assert early == []  # still waiting for more points of (n1, 100.5)
        out = read_topic(kafka, cfg.topic("perf.raw"), lambda r: len(r) >= 1, timeout=30)
        assert [(s["node"], s["ts"], s["metrics"]) for s in out] == [("n1", 100.5, {"MemFree": 5.0})]
        bad = [
            (b"{not json", b"n1", None),
            (orjson.dumps({"timestamp": 101, "MemFree": 1.0}), b"n1", None),  # no ProducerName
            (orjson.dumps({"timestamp": 100.5, "ProducerName": "n1", "Active": 2.0}), b"n1", None),  # after it left
        ]
        src.produce(kafka, topic, bad)
        dead = read_topic(kafka, cfg.topic("perf.deadletter"), lambda r: len(r) >= 3, timeout=30)
    finally:
        runner.stop()
        thread.join(30)
    reasons = sorted(d["reason"] for d in dead)
    assert any(r.startswith("not JSON") for r in reasons)
    assert any("no node column (ProducerName, producer, component_id)" in r for r in reasons)
    assert any("arrived after their sample was emitted" in r for r in reasons)
    assert runner.stats.dead_by_reason == {"malformed": 1, "unmapped": 1, "late": 1}


def test_pending_samples_survive_a_restart_in_the_checkpoint(kafka: dict, prefix: str, tmp_path: Path) -> None:
    cfg = load_pipeline(ingest_pipeline(tmp_path, prefix, 3600.0, ["telegraf_json"]))
    create_pipeline_topics(cfg, kafka)
    msgs, want = src.telegraf_messages(["a", "b"])
    first = stage_runner(cfg.stage("in_telegraf_json"), cfg, kafka, embedded=True)
    thread = run_in_thread(first)
    assert wait_assigned([first], 60)
    src.produce(kafka, cfg.topic("in.telegraf_json"), msgs)
    deadline = time.monotonic() + 30
    while first.stats.records_in < len(msgs) and time.monotonic() < deadline:
        time.sleep(0.1)
    first.stop()
    thread.join(30)
    assert first.stats.records_in == len(msgs) and first.stats.records_out == 0  # all still pending
    # the same group with a short lateness bound: the restored rows leave, nothing is read again
    cfg2 = load_pipeline(ingest_pipeline(tmp_path, prefix, 0.2, ["telegraf_json"]))
    second = stage_runner(cfg2.stage("in_telegraf_json"), cfg2, kafka, embedded=True)
    thread = run_in_thread(second)
    try:
        out = read_topic(kafka, cfg.topic("perf.raw"), lambda r: len(r) >= len(want), timeout=60)
    finally:
        second.stop()
        thread.join(30)
    check_values({(s["job"], s["node"], s["ts"]): s["metrics"] for s in out}, want)
    assert second.stats.records_in == 0 and second.stats.restored_partitions >= 1


def test_the_ingest_command_runs_the_stage(kafka: dict, prefix: str, tmp_path: Path) -> None:
    from perfsift.cli import app
    from typer.testing import CliRunner

    msgs, want = src.telegraf_messages(["c0", "c1"])
    mapping = tmp_path / "map.yaml"
    mapping.write_text("rename: {mem.available: mem_free}\nexclude: ['cpu.*.usage_user']\n")
    cfg = load_pipeline(None, overrides={"topic_prefix": prefix})  # what the command reads
    create_pipeline_topics(replace(cfg, stages={"in": StageConfig("in", "telegraf", ("perf.raw",), ())}), kafka)
    src.produce(kafka, f"{prefix}telegraf", msgs)
    args = ["ingest", "--format", "telegraf_json", "--topic", "telegraf", "-b", kafka["bootstrap.servers"],
            "--map", str(mapping), "--max-delay", "0.2", "--idle-exit", "10", "--http-port", "0",
            "--set", f"topic_prefix={prefix}"]  # fmt: skip
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    out = read_topic(kafka, cfg.topic("perf.raw"), lambda r: len(r) >= len(want), timeout=30)
    got = {(s["job"], s["node"], s["ts"]): s["metrics"] for s in out}
    renamed = {
        key: {("mem_free" if k == "mem.available" else k): v for k, v in m.items() if not k.endswith("usage_user")}
        for key, m in want.items()
    }
    check_values(got, renamed)
