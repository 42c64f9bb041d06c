"""The state record on perf.state (streams/checkpoint.py): binary, smaller than the base64-in-JSON
records of earlier versions, which still restore; a chain restored from either continues exactly
as the uninterrupted one."""

from __future__ import annotations

import base64

import numpy as np
import orjson
from perfsift.producers.synth import spmd
from perfsift.schemas import samples_to_batch
from perfsift.streams.checkpoint import Checkpoints, parse_record
from perfsift.streams.config import load_pipeline
from perfsift.streams.stage import Chain


def test_a_restored_chain_continues_exactly_and_old_records_still_restore() -> None:
    stage = load_pipeline().stage("node")
    samples, _ = spmd("sweep3d", nodes=4, duration=200, seed=3)
    batch = samples_to_batch(samples)
    first, rest = batch.take(np.arange(400)), batch.take(np.arange(400, len(batch)))
    cp = Checkpoints({}, "g", "perf.state", 4, "node")
    chain = Chain(stage, "json", "columns")
    chain.process(first)
    record = cp.record("perf.raw", 2, 401, chain, chain.fingerprint())
    snaps = [op.snapshot() for op in chain.operators]
    legacy = orjson.dumps({"stage": "node", "topic": "perf.raw", "partition": 2, "next_offset": 401,
                           "fingerprint": chain.fingerprint(),
                           "operators": [base64.b64encode(s).decode() for s in snaps]})  # fmt: skip
    assert len(record) < 0.8 * len(legacy)
    parsed = parse_record(record)
    assert parsed["operators"] == snaps and parsed["next_offset"] == 401 and parsed["partition"] == 2
    want = chain.process(rest).topics
    for rec in (record, legacy):
        fresh = chain.fresh()
        assert cp.restore(fresh, parse_record(rec), chain.fingerprint(), "perf.raw:2") == 401
        assert fresh.process(rest).topics == want
