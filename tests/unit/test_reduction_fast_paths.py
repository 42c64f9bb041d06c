"""The data reduction's fast paths against slow references: the window's co-moments against the
fold of every block, the connected components of the redundancy graph against a union-find over
every edge, the design columns against a column-by-column stack, and a refit against numpy's least
squares."""

from __future__ import annotations

import numpy as np
import pytest
from perfsift.operators.reduction.redundancy import PairwiseMoments, _components
from perfsift.operators.reduction.regression import SQUARE, _columns, refit


def union_find(d: int, edges: np.ndarray) -> np.ndarray:
    """Each node's component label, the smallest index in it: a union-find over the pairs above
    the diagonal that links the larger root under the smaller (the code's former loop)."""
    parent = list(range(d))

    def find(a: int) -> int:
        while parent[a] != a:
            parent[a] = parent[parent[a]]
            a = parent[a]
        return a

    for a, b in zip(*np.nonzero(np.triu(edges, 1)), strict=True):
        ra, rb = find(int(a)), find(int(b))
        if ra != rb:
            parent[max(ra, rb)] = min(ra, rb)
    return np.array([find(i) for i in range(d)], dtype=np.int64)


def test_components_equal_a_union_find() -> None:
    rng = np.random.default_rng(0)
    sizes = 0
    for trial in range(400):
        d = int(rng.integers(0, 50))
        edges = rng.random((d, d)) < rng.uniform(0, 0.15)
        if trial % 2:  # the clustering's graphs are symmetric; the pairs above the diagonal count
            edges |= edges.T
        ref = union_find(d, edges)
        assert np.array_equal(_components(d, edges), ref), trial
        sizes += len(np.unique(ref)) if d else 0
    path = np.eye(60, k=1, dtype=bool)[::-1, ::-1]  # one long chain, linked from its far end
    assert np.array_equal(_components(60, path | path.T), np.zeros(60, dtype=np.int64))
    assert sizes > 400  # graphs with several components, not only one or all singletons


def stacked(x: np.ndarray, names: list[str], terms: list[str], centers: dict[str, float]) -> np.ndarray:
    """The design columns one by one, as the code built them before it gathered them."""
    ix = {n: j for j, n in enumerate(names)}
    cols = []
    for t in terms:
        base = t.removesuffix(SQUARE)
        v = x[:, ix[base]] if base in ix else np.full(len(x), np.nan)
        cols.append((v - centers.get(base, 0.0)) ** 2 if t.endswith(SQUARE) else v)
    return np.stack(cols, axis=1) if cols else np.empty((len(x), 0))


@pytest.mark.parametrize(
    "terms",
    [["b", "a"], ["a", "c^2", "b", "a^2"], ["gone", "a", "gone^2"], []],
    ids=["linear", "squares", "missing", "none"],
)
def test_design_columns_equal_a_column_by_column_stack(terms: list[str]) -> None:
    rng = np.random.default_rng(1)
    x = rng.normal(1e3, 5.0, size=(40, 3))
    x[rng.random(x.shape) < 0.1] = np.nan
    names = ["a", "b", "c"]
    centers = {"a": 1000.5, "c": 998.25}
    got = _columns(x, {n: j for j, n in enumerate(names)}, terms, centers)
    ref = stacked(x, names, terms, centers)
    assert got.shape == ref.shape and got.flags.c_contiguous
    assert np.array_equal(got, ref, equal_nan=True)  # bit for bit: the refits downstream are too
    assert np.isnan(x).any() and not np.shares_memory(got, x)


def test_refit_equals_numpy_least_squares_and_the_shared_index_changes_nothing() -> None:
    rng = np.random.default_rng(2)
    x = rng.normal(size=(120, 4))
    y = 2 * x[:, 0] - x[:, 1] + 0.5 * (x[:, 2] - 0.1) ** 2 + 0.1 * rng.normal(size=120)
    x[5, 3] = np.nan  # a row the refit skips
    names = ["a", "b", "c", "d"]
    terms = ["a", "b", "c^2", "d"]
    r2, adj, rows = refit(x, y, names, terms, {"c": 0.1})
    ok = ~np.isnan(x).any(axis=1)
    design = np.c_[np.ones(ok.sum()), x[ok][:, [0, 1]], (x[ok][:, 2] - 0.1) ** 2, x[ok][:, 3]]
    beta = np.linalg.lstsq(design, y[ok], rcond=None)[0]
    resid = y[ok] - design @ beta
    ref = 1 - resid @ resid / ((y[ok] - y[ok].mean()) ** 2).sum()
    assert rows == 119 and r2 == pytest.approx(ref, abs=1e-12) and adj is not None
    index = {n: j for j, n in enumerate(names)}
    assert refit(x, y, names, terms, None, index=index) == refit(x, y, names, terms, None)
    shared = refit(x[:90], y[:90], names, terms, None, x[90:], y[90:], index)
    assert shared == refit(x[:90], y[:90], names, terms, None, x[90:], y[90:])


def whole_fold(pm: PairwiseMoments) -> dict[str, np.ndarray]:
    """The window's totals as the code made them before it kept the older blocks' merge: every
    block centred and merged, oldest first."""
    ref = pm.reference()
    out = pm._centred(pm.ring[0], ref)
    for b in pm.ring[1:]:
        out = pm._merge(out, pm._centred(b, ref))
    return out


def test_co_moments_equal_the_fold_of_every_block_after_each_row() -> None:
    """Rows one at a time through a ring of 4 blocks of 5, a feature that starts late (a new
    column, then a new reference with its first value) and gaps: after every row, the totals are
    those of the whole fold, bit for bit."""
    rng = np.random.default_rng(3)
    pm = PairwiseMoments(window=20, blocks=4)
    names = ["a", "b", "c"]
    checked = 0
    for i in range(70):
        if i == 23:
            names = [*names, "late"]
        row = rng.normal(1e6, 3.0, size=(1, len(names)))
        row[rng.random(row.shape) < 0.15] = np.nan
        if i % 5 == 0:  # each block starts with the same values: a new ring has the same reference
            row[0] = 1e6 + np.arange(len(names))
        if 23 <= i < 31:
            row[0, 3] = np.nan  # a column with no value yet: its reference comes with its first
        pm.add(row, names)
        got, ref = pm.totals(), whole_fold(pm)
        for k in ("n", "mean", "m2", "c"):
            assert np.array_equal(got[k], ref[k], equal_nan=True), (i, k)
        checked += len(pm.ring) > 1
    assert checked > 60 and len(pm.names) == 4
