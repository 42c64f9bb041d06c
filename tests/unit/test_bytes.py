"""Bytes on the wire (streams/volume.py) on the bundled demo through the default pipeline: the
accounting adds up to the bytes of the records, and the lean default writes less than it reads."""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np
import orjson
import pytest
from perfsift.analysis.analyze import analyze
from perfsift.producers import demo_trace_path
from perfsift.streams.config import load_pipeline
from perfsift.streams.volume import SAMPLE_BYTES, TopicBytes, compressed_size, written_bytes


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict, Path]:
    out = tmp_path_factory.mktemp("demo")
    return analyze(demo_trace_path(), load_pipeline(), out), out


def test_the_accounting_is_the_bytes_of_the_records(demo: tuple[dict, Path]) -> None:
    summary, out = demo
    volume = summary["bytes"]
    with gzip.open(demo_trace_path()) as fh:
        raw = [orjson.dumps(orjson.loads(line)) for line in fh.read().splitlines() if line.strip()]
    # perf.raw as the analysis puts it on the wire (numbered samples: one "seq" more per record)
    assert volume["raw"]["payload"] >= sum(map(len, raw))
    for topic, name in [("perf.reduced", "reduced.jsonl"), ("perf.forecast", "forecast.jsonl"),
                        ("perf.selection", "selection.jsonl")]:  # fmt: skip
        lines = (out / name).read_bytes().splitlines()
        row = volume["topics"][topic]
        assert row["payload"] == sum(map(len, lines)) and row["messages"] == len(lines)
        assert 0 < row["compressed"] < row["payload"]
        assert row["ratio"] == round(row["payload"] / volume["raw"]["payload"], 4)
    assert volume["written"]["payload"] == sum(r["payload"] for r in volume["topics"].values())
    assert summary["bytes_written_ratio"] == volume["bytes_written_ratio"]


def test_the_default_pipeline_writes_less_than_it_reads(demo: tuple[dict, Path]) -> None:
    """Goals of issues #24 and #20 on the demo (bytes are deterministic; no time is asserted).
    Offline there are no state snapshots: the streaming run adds them (docs/benchmarks.md)."""
    volume = demo[0]["bytes"]
    assert volume["bytes_written_ratio"] <= 1.0
    # 0.290 when the node stage forecast two named metrics (1,920 records); 0.344 since the select
    # stage forecasts the three kept ones of every selected row (2,832 records), on any data (#31);
    # 0.487 when each forecast record carried the MAE bound beside the MSE one (#33: four more
    # numbers a record); 0.339 since the bounds, and mae_forecast where it equals the forecast, are
    # derived by readers instead of written (schemas/forecast_wire.py; docs/benchmarks.md)
    assert volume["bytes_written_compressed_ratio"] <= 0.35
    assert volume["topics"]["perf.forecast"]["compressed_ratio"] <= 0.14
    reduced = volume["topics"]["perf.reduced"]
    assert reduced["compressed_ratio"] <= 0.2 and reduced["ratio"] <= 0.2
    # smoothed samples go out as column frames: a few messages, not one per sample
    assert volume["topics"]["perf.smoothed.byjob"]["messages"] <= 4


def test_compressed_is_what_zstd_makes_of_each_micro_batch() -> None:
    t = TopicBytes()
    batch1, batch2 = [b'{"x":1}'] * 100, [b'{"y":2}'] * 50
    t.add("a", batch1)
    t.add("a", batch2)
    assert t.payload["a"] == 7 * 150 and t.messages["a"] == 150
    assert t.compressed["a"] == compressed_size(b"".join(batch1)) + compressed_size(b"".join(batch2))
    v = written_bytes({"payload": 2100, "compressed": 100}, [t.as_dict(), t.as_dict()])
    assert v["written"]["payload"] == 2100 and v["bytes_written_ratio"] == 1.0
    assert v["bytes_written_compressed_ratio"] == round(2 * t.compressed["a"] / 100, 4)


def test_a_large_micro_batch_is_estimated_from_its_head_within_a_few_percent() -> None:
    """Over SAMPLE_BYTES, the first SAMPLE_BYTES stand for the whole (compressed with the whole's
    zstd parameters): on raw samples of the bench's shape the estimate stays within 6 % of
    compressing every byte, tombstones count as messages but not bytes."""
    rng = np.random.default_rng(3)
    names = [f"metric_{j}" for j in range(12)]

    def sample(s: int, q: int) -> bytes:
        metrics = dict(zip(names, rng.normal(100, 20, 12).round(3).tolist(), strict=True))
        return orjson.dumps({"ts": 1.7e9 + s, "node": f"n{q:03d}", "job": "sweep3d", "seq": s, "metrics": metrics})

    values = [sample(s, q) for s in range(40) for q in range(64)]
    whole = b"".join(values)
    assert len(whole) > 3 * SAMPLE_BYTES
    t = TopicBytes()
    t.add("perf.raw", [*values, None])
    assert t.messages["perf.raw"] == len(values) + 1 and t.payload["perf.raw"] == len(whole)
    exact = compressed_size(whole)
    assert abs(t.compressed["perf.raw"] / exact - 1) < 0.06
