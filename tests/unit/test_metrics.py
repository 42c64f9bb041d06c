"""The per-job Prometheus gauges: the selection in force and the nodes per contract state, read
from real operators' summaries after real streams."""

from __future__ import annotations

from typing import Any

import numpy as np
from perfsift.operators import SlidingMean
from perfsift.operators.contract import ContractMonitor, derive_contract
from perfsift.operators.reduce import Reduce
from perfsift.producers.synth import master_worker, spmd
from perfsift.schemas import samples_to_batch
from perfsift.streams.http import job_metrics
from prometheus_client.core import GaugeMetricFamily


def values(families: list[GaugeMetricFamily]) -> dict[tuple[str, ...], float]:
    """(metric name, label values...) -> value."""
    return {(f.name, *s.labels.values()): s.value for f in families for s in f.samples}


def test_selection_gauges_follow_the_reduce_operator() -> None:
    samples, _ = spmd("sweep3d", nodes=12, duration=600, seed=1)
    batch = SlidingMean(window=5).update(samples_to_batch(samples))
    op = Reduce(pursuit={"period": 30.0, "window": 5}, full_every=5)
    before = values(job_metrics("select", op.summary()))
    assert before == {}  # nothing seen, no series
    for rows in np.array_split(np.arange(len(batch)), 4):
        op.update(batch.take(rows))
    got = values(job_metrics("select", op.summary()))
    summary = op.summary()["sweep3d"]
    assert got[("perfsift_selection_version", "select", "sweep3d")] == summary["selection_version"] >= 0
    # the kept set's size, whatever it is (0..3 since #32: sweep3d's phased pkts_in and pkts_out)
    assert got[("perfsift_kept_metrics", "select", "sweep3d")] == len(summary["kept"])
    ratio = got[("perfsift_reduction_ratio", "select", "sweep3d")]
    assert ratio == summary["values_out"] / summary["values_in"] and 0.2 < ratio < 0.6
    assert not any(k[0] == "perfsift_contract_nodes" for k in got)


def test_contract_gauges_count_nodes_per_state() -> None:
    spaces = {"intrinsic": ["instructions_per_s / flops_per_s", "messages_per_s / bytes_per_s"]}
    contract: dict[str, Any] = derive_contract(samples_to_batch(master_worker(seed=1)[0]), spaces)
    mon = ContractMonitor(contract)
    mon.update(samples_to_batch(master_worker(seed=3, fewer_flops=range(6, 12))[0]))
    got = values(job_metrics("contract", mon.summary()))
    job = "master-worker"
    assert got[("perfsift_contract_nodes", "contract", job, "violated")] == 6  # nodes 6-11 do fewer flops
    assert got[("perfsift_contract_nodes", "contract", job, "ok")] == 6
    assert got[("perfsift_contract_nodes", "contract", job, "unknown")] == 0
    assert not any(k[0] == "perfsift_selection_version" for k in got)


def test_byte_metrics_state_what_a_stage_read_and_wrote_per_topic() -> None:
    from perfsift.streams.http import byte_metrics
    from perfsift.streams.stage import StageStats

    s = StageStats("node")
    s.count_in("perf.raw", [b'{"ts":1.0,"node":"a","metrics":{"x":1.0}}'] * 100)
    s.count_out({"perf.reduced": ([b'{"x":1.0}'] * 100, [b"a"] * 100)})
    s.count_state(b"\x00" * 500)
    got = {(f.name, *x.labels.values()): x.value for f in byte_metrics("node", s) for x in f.samples}
    assert got[("perfsift_topic_bytes_read", "node", "perf.raw", "payload")] == s.wire_in.payload["perf.raw"] == 4100
    assert got[("perfsift_topic_bytes_written", "node", "perf.reduced", "payload")] == 900
    assert got[("perfsift_topic_bytes_written", "node", "perf.state", "payload")] == 500
    compressed = got[("perfsift_topic_bytes_written", "node", "perf.reduced", "compressed")]
    assert 0 < compressed < 900 and compressed == s.wire_out.compressed["perf.reduced"]
    assert got[("perfsift_bytes_written_ratio", "node", "payload")] == 1400 / 4100
    written_c = s.wire_out.compressed["perf.reduced"] + s.wire_out.compressed["perf.state"]
    assert got[("perfsift_bytes_written_ratio", "node", "compressed")] == written_c / s.wire_in.compressed["perf.raw"]
