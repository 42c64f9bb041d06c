"""Producers against the real embedded broker: replay (exactly once, timing, loops), adaptive
instrumentation following perf.control, and the live host sampler."""

from __future__ import annotations

import json
import time
from collections import Counter
from pathlib import Path

import pytest
from confluent_kafka import Producer
from perfsift.producers.synth import TABLE1, spmd
from perfsift.producers.traces import write_samples
from perfsift.schemas import codec_for
from perfsift.streams.clients import create_pipeline_topics
from perfsift.streams.config import default_pipeline_path, load_pipeline, with_overrides

from tests.conftest import read_topic
from tests.e2e.cli import perfsift, perfsift_here
from tests.replay_check import check_exactly_once, replay_subprocess, write_trace


def trace(tmp_path: Path, name: str, nodes: int = 10, duration: int = 300) -> tuple[Path, int]:
    s, _ = spmd("cactus", nodes=nodes, duration=duration, seed=1)
    path = tmp_path / name
    write_samples(({**x, "seq": -1} for x in s), path)
    return path, len(s)


def setup(kafka: dict[str, str], prefix: str, tmp_path: Path) -> Path:
    """A pipeline file with this test's topic prefix; topics created."""
    cfg = with_overrides(load_pipeline(), topic_prefix=prefix)
    create_pipeline_topics(cfg, kafka)
    path = tmp_path / "pipeline.yaml"
    path.write_text(default_pipeline_path().read_text().replace('topic_prefix: ""', f'topic_prefix: "{prefix}"'))
    return path


@pytest.mark.parametrize("fmt", ["sddfb", "csv"])
def test_replay_delivers_every_job_node_seq_exactly_once(kafka: dict, prefix: str, tmp_path: Path, fmt: str) -> None:
    path, n = trace(tmp_path, f"t.{fmt}")
    config = setup(kafka, prefix, tmp_path)
    summary = tmp_path / "s.json"
    bs = kafka["bootstrap.servers"]
    # through main() in this process: `perfsift replay` as a process is the timing test's and the
    # million-sample test's
    r = perfsift_here("replay", str(path), "--max-speed", "--loop", "2", "--job", "replayed", "-b", bs,
                      "-c", str(config), "--summary-json", str(summary))  # fmt: skip
    assert r.returncode == 0, r.stderr[-2000:]
    assert json.loads(summary.read_text())["published"] == 2 * n
    got = read_topic(kafka, f"{prefix}perf.raw", lambda rs: len(rs) >= 2 * n)
    keys = Counter((g["job"], g["node"], g["seq"]) for g in got)
    assert len(got) == 2 * n and max(keys.values()) == 1
    per_node = Counter(g["node"] for g in got)
    assert set(per_node.values()) == {2 * n // 10}
    seqs = sorted(g["seq"] for g in got if g["node"] == "n03")
    assert seqs == list(range(2 * n // 10))
    ts = sorted(g["ts"] for g in got if g["node"] == "n03")
    assert len(set(ts)) == len(ts)  # the second pass is shifted: event time keeps growing
    assert ts[-1] - ts[0] == pytest.approx(599.0)


def test_replay_keeps_the_traces_timing_scaled_by_speed(kafka: dict, prefix: str, tmp_path: Path) -> None:
    path, _ = trace(tmp_path, "t.jsonl", nodes=2, duration=6)  # 5 s of trace time
    config = setup(kafka, prefix, tmp_path)
    t0 = time.monotonic()
    r = perfsift("replay", str(path), "--speed", "2", "-b", kafka["bootstrap.servers"], "-c", str(config))
    assert r.returncode == 0, r.stderr[-2000:]
    assert "published 12 samples" in r.stdout
    assert time.monotonic() - t0 >= 2.5  # 5 trace seconds at 2x


@pytest.mark.parametrize("encoding", ["json", "avro"])
def test_adaptive_replay_sends_only_the_selected_metrics(
    kafka: dict, prefix: str, tmp_path: Path, encoding: str
) -> None:
    """Control records are read, and samples written, in the pipeline's encoding."""
    codec = codec_for(encoding, "sample")
    path, n = trace(tmp_path, "t.jsonl", nodes=4, duration=100)
    config = setup(kafka, prefix, tmp_path)
    config.write_text(config.read_text().replace("encoding: json", f"encoding: {encoding}"))
    p = Producer({**kafka})
    control = {"job": "cactus", "version": 1, "ts": 0.0, "keep": ["disk_pwrite", "forks"], "full_every": 10}
    p.produce(f"{prefix}perf.control", codec_for(encoding, "control").encode(control), b"cactus")
    assert p.flush(10) == 0
    summary = tmp_path / "s.json"
    r = perfsift_here("replay", str(path), "--max-speed", "--adaptive", "-b", kafka["bootstrap.servers"], "-c",
                      str(config), "--summary-json", str(summary))  # fmt: skip
    assert r.returncode == 0, r.stderr[-2000:]
    assert "saved" in r.stdout
    msgs = read_topic(kafka, f"{prefix}perf.raw", lambda rs: len(rs) >= n, decode=False)
    got = [codec.decode(m.value()) for m in msgs]
    full = [g for g in got if len(g["metrics"]) == 12]
    reduced = [g for g in got if set(g["metrics"]) == {"disk_pwrite", "forks"}]
    assert len(full) + len(reduced) == n == len(got)
    assert len(full) == n // 10  # every 10th sample of each node is whole
    assert all(g["seq"] % 10 == 0 for g in full)
    stats = json.loads(summary.read_text())
    assert stats["reduced_samples"] == len(reduced) and stats["bytes_saved"] > 0.6 * stats["bytes_full"]


def test_sampler_publishes_plausible_rates_for_ten_seconds(kafka: dict, prefix: str, tmp_path: Path) -> None:
    config = setup(kafka, prefix, tmp_path)
    r = perfsift("sample", "--interval", "1s", "--duration", "10s", "--node", "probe", "-b",
                 kafka["bootstrap.servers"], "-c", str(config), timeout=60)  # fmt: skip
    assert r.returncode == 0, r.stderr[-2000:]
    got = read_topic(kafka, f"{prefix}perf.raw", lambda rs: len(rs) >= 9)
    assert 9 <= len(got) <= 11 and {g["node"] for g in got} == {"probe"}
    assert [g["seq"] for g in got] == list(range(len(got)))
    for g in got:
        m = g["metrics"]
        for name in TABLE1:
            assert m[name] is not None and m[name] >= 0, (name, m)
        # the rest of the CPU time is steal and guest time (a VM): the three never exceed 100 %
        assert 80.0 <= m["cpu_idle"] + m["cpu_user"] + m["cpu_kern"] <= 100.5
        assert m["mem_free"] > 0 and m["interrupts"] > 0 and m["ctx_switches"] > 0
    assert abs(got[-1]["ts"] - got[0]["ts"] - (len(got) - 1)) < 1.0  # one per second


def test_a_million_sample_replay_arrives_exactly_once_in_flat_memory(kafka: dict, prefix: str, tmp_path: Path) -> None:
    """The issue's scale: 1,000,000 samples × 12 metrics at --max-speed, checked by a consumer
    (rates and the RSS curve are in docs/benchmarks.md from bench/bench_replay.py)."""
    path = tmp_path / "million.jsonl"
    n = write_trace(path, "jsonl", nodes=100, seconds=10_000)
    assert n == 1_000_000
    config = setup(kafka, prefix, tmp_path)
    summary = tmp_path / "s.json"
    _, rss = replay_subprocess(path, kafka["bootstrap.servers"], summary, ["-c", str(config)])
    assert json.loads(summary.read_text())["published"] == n
    check = check_exactly_once(kafka["bootstrap.servers"], f"{prefix}perf.raw", n)
    assert check == {"received": n, "keys": 100, "duplicates": 0, "gaps": 0}
    late = [r for t, r in rss if t > 3.0]
    assert late and max(late) < 1.5 * min(late) + 50 * 2**20  # flat: no growth with the samples sent
