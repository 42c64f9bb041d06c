"""``perfsift analyze`` and the Kafka stage runner put their records through the same stage step
(``streams/stage.py``: decode, limits, chain, encode), so they publish the same records and park
the same ones, by construction. Here the runner's Kafka clients are an in-memory producer and
messages handed to it as a consumer would, one input partition per stage."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import orjson
from perfsift.analysis.analyze import Analysis
from perfsift.producers import number_samples
from perfsift.producers.synth import spmd
from perfsift.streams.config import PipelineConfig, load_pipeline, with_overrides
from perfsift.streams.limits import Limits
from perfsift.streams.runner import StageRunner
from perfsift.streams.topics import DEADLETTER_TOPIC, STATE_TOPIC


class Message:
    """What ``Consumer.consume`` returns, for one record."""

    def __init__(self, topic: str, offset: int, value: bytes, key: bytes | None) -> None:
        self._topic, self._offset, self._value, self._key = topic, offset, value, key

    def topic(self) -> str:
        return self._topic

    def partition(self) -> int:
        return 0

    def offset(self) -> int:
        return self._offset

    def value(self) -> bytes:
        return self._value

    def key(self) -> bytes | None:
        return self._key

    def error(self) -> None:
        return None

    def timestamp(self) -> tuple[int, int]:
        return (1, 0)


class Producer:
    """An in-memory sink for everything a runner produces, per topic, in order."""

    def __init__(self) -> None:
        self.topics: dict[str, list[tuple[bytes, bytes | None]]] = {}

    def produce(self, topic: str, value: bytes, key: bytes | None = None, partition: int = -1) -> None:
        self.topics.setdefault(topic, []).append((value, key))

    def poll(self, timeout: float = 0) -> int:
        return 0

    def flush(self, timeout: float = 0) -> int:
        return 0


def runner(cfg: PipelineConfig, name: str) -> tuple[StageRunner, Producer]:
    stage = cfg.stage(name)
    r = StageRunner(stage, cfg, {"bootstrap.servers": "127.0.0.1:9"}, embedded=True)
    r._producer = producer = Producer()  # type: ignore[assignment]
    r._parts[(cfg.topic(stage.input), 0)] = r._fresh()
    return r, producer


class Recorded(Analysis):
    """The analysis, with every record its stages publish also kept in memory, per topic."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.published: dict[str, list[bytes]] = {}

    def _write(self, topic: str, encoded: list[bytes]) -> None:
        self.published.setdefault(topic, []).extend(encoded)
        super()._write(topic, encoded)


def trace() -> tuple[list[bytes], int]:
    """Six nodes of one job (one more than ``max_nodes_per_job``), with a sample of too many
    metrics, one too large and one that is not JSON among them; and the samples of the sixth node."""
    samples, _ = spmd("sweep3d", nodes=6, duration=600, seed=3)
    values = [orjson.dumps(s) for s in number_samples(iter(samples))]
    sixth = list(dict.fromkeys(s["node"] for s in samples))[5]
    wide = {**samples[10], "metrics": {f"m{i}": float(i) for i in range(40)}}
    huge = {**samples[20], "metrics": {**samples[20]["metrics"], "x" * 30_000: 1.0}}
    values[300:300] = [orjson.dumps(wide), b"not json at all", orjson.dumps(huge)]
    return values, sum(s["node"] == sixth for s in samples)


def test_analyze_and_the_runner_publish_and_park_the_same_records(tmp_path: Path) -> None:
    base = load_pipeline(None)
    limits = Limits(max_metrics_per_sample=20, max_nodes_per_job=5, max_record_bytes=20_000)
    cfg = with_overrides(dataclasses.replace(base, limits=limits, snapshots=False))
    assert [s.name for s in cfg.stages.values()] == ["node", "select"]
    values, n_sixth = trace()
    analysis = Recorded(cfg, tmp_path / "analysis")
    node, node_out = runner(cfg, "node")
    select, select_out = runner(cfg, "select")
    chunk, offsets = 700, {"perf.raw": 0, "perf.smoothed.byjob": 0}

    def consume(r: StageRunner, topic: str, records: list[tuple[bytes, bytes | None]]) -> None:
        start = offsets[topic]
        r._process([Message(topic, start + i, v, k) for i, (v, k) in enumerate(records)])  # type: ignore[misc]
        offsets[topic] += len(records)

    for at in range(0, len(values), chunk):
        part = values[at : at + chunk]
        analysis.feed_records(part)
        consume(node, "perf.raw", [(v, None) for v in part])
        framed = node_out.topics.get("perf.smoothed.byjob", [])
        consume(select, "perf.smoothed.byjob", framed[offsets["perf.smoothed.byjob"] :])

    streamed = {t: [v for v, _ in rs] for t, rs in {**node_out.topics, **select_out.topics}.items()}
    for topic in ["perf.smoothed.byjob", "perf.reduced", "perf.selection", "perf.control", "perf.forecast"]:
        assert streamed[topic], topic
        assert analysis.published[topic] == streamed[topic], topic
    assert set(streamed) == set(analysis.published) | {DEADLETTER_TOPIC} and STATE_TOPIC not in streamed

    # the same records parked for the same reasons: the limits hold offline too
    parked = [orjson.loads(v) for v, _ in node_out.topics[DEADLETTER_TOPIC]]
    offline = [orjson.loads(record) for _, record in analysis.dead_letters]
    assert [(d["value"], d["reason"]) for d in offline] == [(d["value"], d["reason"]) for d in parked]
    reasons = node.stats.dead_by_reason
    assert analysis.stats["node"].dead_by_reason == reasons and DEADLETTER_TOPIC not in select_out.topics
    assert reasons["malformed"] == reasons["too_many_metrics"] == reasons["record_too_large"] == 1
    assert reasons["too_many_nodes"] == n_sixth  # the node over max_nodes_per_job: every sample parked
    kept_nodes = {orjson.loads(v)["node"] for v in streamed["perf.reduced"]}
    assert len(kept_nodes) == 5 and len(parked) == sum(reasons.values())
