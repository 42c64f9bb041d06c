"""Projection pursuit's fast paths give what the plain ones give (issue #32, ≤ 20 ms per update):
the restarts in one compiled call or on the thread pool, stacks of snapshots or frames at once or
one by one, varimax compiled or in numpy."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from perfsift.analysis.selection_eval import pursuit_records
from perfsift.operators import ProjectionPursuit
from perfsift.operators.pursuit import _pp_kernel
from perfsift.operators.pursuit.deviants import _snapshot_z, robust_z
from perfsift.operators.pursuit.projection import (
    _constants,
    across_processors,
    moment_index,
    moment_indexes,
    polar,
    sphere,
    varimax,
)
from perfsift.producers.classgen import class_trace


def test_restarts_in_one_call_equal_the_thread_pool() -> None:
    rng = np.random.default_rng(0)
    z = sphere(rng.exponential(size=(120, 11)) + rng.normal(size=(120, 11))).z
    starts = rng.normal(size=(11, z.shape[1], 3))
    consts = _constants(len(z), "kstat", False)
    serial = _pp_kernel.run(starts, z, consts, 1e-7, 300, threads=1)
    pooled = _pp_kernel.run(starts, z, consts, 1e-7, 300, threads=2)
    assert serial[3].sum() > 11  # the restarts did iterate
    for a, b in zip(serial, pooled, strict=True):
        np.testing.assert_array_equal(a, b)


def test_records_do_not_depend_on_where_the_restarts_run(monkeypatch: pytest.MonkeyPatch) -> None:
    batch, _ = class_trace(3, nodes=12, duration=240)

    def records() -> list[dict[str, Any]]:
        return pursuit_records(batch, ProjectionPursuit(period=30, window=5), 5)

    serial = records()  # 12 nodes: below POOL_MIN_WORK, one compiled call
    monkeypatch.setattr(_pp_kernel, "POOL_MIN_WORK", 0)
    pooled = records()
    assert sum(r["skipped"] is None for r in serial) >= 5
    assert serial == pooled


def test_stacked_snapshots_are_normalised_as_one_at_a_time() -> None:
    rng = np.random.default_rng(1)
    v = rng.normal(size=(6, 9, 5)) * [1e-3, 1.0, 1e3, 1.0, 1.0] + [0.0, 5.0, -7.0, 1e6, 0.0]
    v[:, :, 4] = 2.5  # the same on every processor: exactly 0 after centring
    v[rng.random(v.shape) < 0.1] = np.nan
    for norm in ("centre", "scale", "noise", "none"):
        stacked = across_processors(v, norm)
        for j in range(len(v)):
            np.testing.assert_array_equal(stacked[j], across_processors(v[j], norm))


def test_snapshot_z_of_uneven_snapshots_equals_one_snapshot_at_a_time() -> None:
    rng = np.random.default_rng(2)
    # snapshots of 5, 5, 4, 2 (too few: no score) and 6 rows, interleaved
    snap = rng.permutation(np.repeat([0, 1, 2, 3, 4], [5, 5, 4, 2, 6]))
    row_id = np.c_[np.arange(len(snap)), snap]
    v = rng.standard_t(3, size=(len(snap), 3))
    z = _snapshot_z(v, row_id)
    for s in range(5):
        rows = np.flatnonzero(snap == s)
        want = robust_z(v[rows]) if len(rows) >= 3 else np.full((len(rows), 3), np.nan)
        np.testing.assert_array_equal(z[rows], want)


def test_frames_and_indexes_of_a_stack_equal_one_by_one() -> None:
    rng = np.random.default_rng(3)
    z = sphere(rng.exponential(size=(80, 7))).z
    a = rng.normal(size=(5, 7, 3))
    frames = polar(a)
    for pp3 in (False, True):
        values = moment_indexes(z, frames, "kstat", pp3)
        for k in range(len(a)):
            np.testing.assert_array_equal(frames[k], polar(a[k]))
            assert values[k] == moment_index(z, frames[k], "kstat", pp3)


def varimax_numpy(loadings: np.ndarray, eps: float = 1e-8, max_iter: int = 1000) -> np.ndarray:
    """R's stats::varimax iteration in numpy, without the canonical order and signs."""
    h = np.linalg.norm(loadings, axis=1)
    x = loadings / h[:, None]
    t = np.eye(x.shape[1])
    d_old = 0.0
    for _ in range(max_iter):
        zr = x @ t
        u, s, vt = np.linalg.svd(x.T @ (zr**3 - zr @ np.diag((zr**2).sum(axis=0)) / len(x)))
        t = u @ vt
        if s.sum() < d_old * (1 + eps):
            break
        d_old = s.sum()
    return x @ t * h[:, None]


@pytest.mark.parametrize("seed", range(5))
def test_compiled_varimax_equals_the_numpy_iteration(seed: int) -> None:
    loadings = np.random.default_rng(seed).uniform(-1, 1, size=(12, 3))
    got, want = varimax(loadings), varimax_numpy(loadings)
    # the same columns up to order and sign (varimax canonicalises them)
    match = np.abs(got.T @ want) / np.outer(np.linalg.norm(got, axis=0), np.linalg.norm(want, axis=0))
    assert np.allclose(np.sort(match.max(axis=1)), 1.0, atol=1e-12)
    order = match.argmax(axis=1)
    np.testing.assert_allclose(np.abs(got), np.abs(want[:, order]), atol=1e-12)
