"""The ingest stage's assembled samples take the stage step's limits (``streams/stage.py``:
``sized`` for its messages, ``step_batch`` for its samples), broker-free: an in-memory producer,
messages handed to the runner as a consumer would."""

from __future__ import annotations

import base64
import time
from collections import Counter
from pathlib import Path

import orjson
from perfsift.streams.config import load_pipeline
from perfsift.streams.ingest_stage import IngestRunner
from perfsift.streams.topics import DEADLETTER_TOPIC

from tests.unit.test_stage_step import Message, Producer


def test_assembled_samples_over_the_limits_are_parked_with_their_reason(tmp_path: Path) -> None:
    (tmp_path / "p.yaml").write_text("""
partitions: 1
snapshots: false
limits:
  max_nodes_per_job: 3
  max_name_length: 20
  max_record_bytes: 2000
stages:
  in_ldms:
    input: in.ldms
    outputs: [perf.clean]
    ingest:
      format: ldms_json
      max_delay: 0.2
    operators:
      - type: clean
        mode: none
        impute: none
""")
    cfg = load_pipeline(tmp_path / "p.yaml", env={})
    stage = cfg.stage("in_ldms")
    runner = IngestRunner(stage, cfg, {"bootstrap.servers": "127.0.0.1:9"}, embedded=True)
    runner._producer = out = Producer()  # type: ignore[assignment]
    runner._parts[(stage.input, 0)] = runner._fresh()
    values: list[bytes | None] = [
        orjson.dumps({"timestamp": 100.0 + t, "ProducerName": f"n{n}", "MemFree": 50.0 + t})
        for t in range(4)
        for n in range(5)
    ]
    long_name = orjson.dumps({"timestamp": 110.0, "ProducerName": "n0", "x" * 30: 1.0})
    huge = orjson.dumps({"timestamp": 111.0, "ProducerName": "n1", "MemFree": 1.0, "pad": "y" * 3000})
    values += [long_name, huge, None]
    runner._process([Message(stage.input, i, v, b"k") for i, v in enumerate(values)])  # type: ignore[arg-type, misc]
    runner._emit_due(time.monotonic(), everything=True)

    parked = [orjson.loads(v) for v, _ in out.topics[DEADLETTER_TOPIC]]
    reasons = Counter(runner.stats.dead_by_reason)
    assert reasons == {"record_too_large": 1, "malformed": 1, "too_many_nodes": 8, "name_too_long": 1}
    assert len(parked) == sum(reasons.values())
    # a refused sample is parked as itself (it has no message of its own), a refused message as it came
    refused_nodes = [orjson.loads(base64.b64decode(d["value"]))["node"] for d in parked if d["offset"] == -1]
    assert sorted(refused_nodes) == ["n0"] + ["n3"] * 4 + ["n4"] * 4
    assert [d["offset"] for d in parked if d["offset"] != -1] == [21, 22]
    kept = [orjson.loads(v) for v, _ in out.topics["perf.clean"]]
    assert Counter(r["node"] for r in kept) == {"n0": 4, "n1": 4, "n2": 4}
    assert runner.stats.bytes_in == sum(len(v) for v in values if v is not None)
