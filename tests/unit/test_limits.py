"""The limits a stage's input partition applies (streams/limits.py), without a broker."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pytest
from perfsift.operators import Batch
from perfsift.streams.config import ConfigError, load_pipeline
from perfsift.streams.limits import Guard, Limits


def test_limits_come_from_the_pipeline_file_with_defaults(tmp_path: Path) -> None:
    p = tmp_path / "p.yaml"
    p.write_text("limits: {max_nodes_per_job: 7}\n")
    lim = load_pipeline(p).limits
    assert lim.max_nodes_per_job == 7 and lim.max_name_length == Limits().max_name_length == 256
    p.write_text("limits: {max_nodes: 7}\n")
    with pytest.raises(ConfigError, match="limits: a mapping with keys among max_name_length"):
        load_pipeline(p)
    p.write_text("limits: {max_jobs: 0}\n")
    with pytest.raises(ConfigError, match="positive integers"):
        load_pipeline(p)


def test_guard_refuses_rows_over_the_limits_and_keeps_the_rest_unchanged() -> None:
    nan = np.nan
    b = Batch.from_columns(
        ts=[0, 1, 2, 3, 4, 5],
        nodes=["a", "b" * 300, "c", "d", "a", "a"],
        metrics=["cpu", "m" * 300, "io"],
        values=[[1, nan, nan], [2, nan, nan], [3, 5, nan], [4, nan, nan], [5, nan, nan], [6, nan, 7]],
        jobs=["j", "j", "j", "j", "k", "j"],
    )
    guard = Guard(Limits(max_nodes_per_job=1, max_jobs=1, max_metrics_per_sample=1))
    kept, refused = guard.check(b)
    assert [(r, why) for r, why, _ in refused] == [
        (1, "name_too_long"),  # node name
        (2, "name_too_long"),  # a value for a metric with a long name
        (3, "too_many_nodes"),  # d: job j has its one node (a)
        (4, "too_many_jobs"),  # k: j is the one job
        (5, "too_many_metrics"),  # two values
    ]
    assert kept.ts.tolist() == [0.0] and kept.nodes == ("a",) and kept.jobs == ("j",) and kept.metrics == ("cpu",)
    assert guard.nodes == {"j": {"a"}}
    # the next batch: a known node passes, the limits still hold
    again, refused = guard.check(Batch.from_columns(ts=[9, 9], nodes=["a", "e"], metrics=["cpu"], values=[[1], [2]],
                                                    jobs=["j", "j"]))  # fmt: skip
    assert again.ts.tolist() == [9.0] and [why for _, why, _ in refused] == ["too_many_nodes"]


def test_guard_passes_a_batch_within_the_limits_as_it_is() -> None:
    b = Batch.from_columns(ts=[0, 1], nodes=["a", "b"], metrics=["cpu"], values=[[1], [2]])
    kept, refused = Guard(Limits()).check(b)
    assert kept is b and refused == []
    assert Guard(Limits(max_record_bytes=3)).oversized([b"abc", b"abcd", None]) == [1]


def test_a_job_over_a_limit_is_told_once_in_one_line_naming_the_limit(caplog: pytest.LogCaptureFixture) -> None:
    guard = Guard(Limits(max_nodes_per_job=2))
    nodes = [f"n{i}" for i in range(5)]
    batch = Batch.from_columns(ts=[0] * 5, nodes=nodes, metrics=["cpu"], values=[[1]] * 5, jobs=["big"] * 5)
    with caplog.at_level(logging.WARNING, logger="perfsift.runner"):
        for _ in range(3):
            _, refused = guard.check(batch)
            assert len(refused) == 3
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1
    assert lines[0].startswith("limits.max_nodes_per_job = 2 refuses records of job 'big'")
    assert "\n" not in lines[0]
