"""Property tests of projection pursuit on random streams with 1e9 level jumps, gaps, repeated
timestamps and skewed node clocks (tests/property_streams.py). Which metrics a period keeps
depends on the optimiser's path, so no oracle gives them; what must hold: every number finite, no
failure on repeated or missing times, the same records from one batch as from micro-batches, and
the same selection when one metric is shifted by 1e9 on every node (pursuit looks at how nodes
differ, not at levels)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from hypothesis import given, settings
from perfsift.operators.batch import Batch
from perfsift.operators.pursuit.pursuit import ProjectionPursuit

from tests.property_streams import Stream, numbers, streams


def pursuit() -> ProjectionPursuit:
    """Small and quick: two dimensions, two restarts, the evidence test off (alpha 1: the data are
    noise, and the test is about numbers, not about which metric stands out)."""
    return ProjectionPursuit(
        period=10.0, window=3, slack=4, restarts=2, dims=2, alpha=1.0, evidence_snapshots=2, evidence_gap=1
    )


def run(stream_parts: list[Batch]) -> list[dict[str, Any]]:
    op = pursuit()
    out = [r for part in stream_parts for r in op.update(part)]
    return out + op.flush()


@settings(max_examples=4, deadline=None)
@given(stream=streams(nodes=(3, 5), metrics=(3, 4), rows=(30, 60)))
def test_pursuit_is_finite_split_free_and_blind_to_a_common_level(stream: Stream) -> None:
    whole = run([stream.batch])
    assert whole and all(r["kind"] == "pursuit" for r in whole)
    assert any(r["selected"] for r in whole) or len(whole) < 3  # periods are analysed, not all skipped
    assert all(math.isfinite(x) for r in whole for x in numbers(r))
    assert run(list(stream.parts())) == whole
    b = stream.batch
    shifted = b.with_values(b.values + np.where(np.arange(b.values.shape[1]) == 0, 1e9, 0.0))
    moved = run([shifted])
    assert [(r["period_start"], r["selected"], r["skipped"]) for r in moved] == [
        (r["period_start"], r["selected"], r["skipped"]) for r in whole
    ]
