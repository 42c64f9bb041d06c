"""Projection-pursuit core against the oracles of METHODS.md §1.11."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.stats
from perfsift.operators.pursuit.projection import (
    cumulant_tensors,
    moment_index,
    polar,
    projection_pursuit,
    sphere,
    varimax,
)


def sphered(n: int = 50, d: int = 5, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return sphere(rng.exponential(size=(n, d)) + rng.normal(size=(n, d))).z


def frame(d: int, seed: int = 1) -> np.ndarray:
    return polar(np.random.default_rng(seed).normal(size=(d, 3)))


def test_k_statistics_match_scipy() -> None:
    z = sphered()
    w = frame(z.shape[1])
    u = np.random.default_rng(2).normal(size=3)
    u /= np.linalg.norm(u)
    k3, k4 = cumulant_tensors(z @ w)
    v = z @ w @ u
    assert np.einsum("abc,a,b,c", k3, u, u, u) == pytest.approx(scipy.stats.kstat(v, 3), abs=1e-12)
    assert np.einsum("abcd,a,b,c,d", k4, u, u, u, u) == pytest.approx(scipy.stats.kstat(v, 4), abs=1e-12)


def test_symmetric_data_has_no_third_order_cumulants() -> None:
    b = np.random.default_rng(3).exponential(size=(40, 5))
    z = sphere(np.concatenate([b, -b])).z
    for seed in range(5):
        w = frame(z.shape[1], seed)
        k3, k4 = cumulant_tensors(z @ w)
        assert np.abs(k3).max() < 1e-12
        assert moment_index(z, w) == pytest.approx((k4**2).sum() / 48, rel=1e-12)


def test_rotation_invariance_and_symmetric_gradient() -> None:
    z = sphered(200, 6)
    w = frame(6)
    r = polar(np.random.default_rng(4).normal(size=(3, 3)))
    value, grad, g = moment_index(z, w, gradient=True)
    assert moment_index(z, w @ r) == pytest.approx(value, rel=1e-12)
    s = w.T @ grad
    np.testing.assert_allclose(s, (z @ w).T @ g, atol=1e-12 * max(1.0, np.abs(s).max()))  # Wᵀ∇I = YᵀG
    np.testing.assert_allclose(s, s.T, atol=1e-12 * max(1.0, np.abs(s).max()))


@pytest.mark.parametrize("cumulants", ["kstat", "plain"])
def test_gradient_matches_finite_differences(cumulants: str) -> None:
    z = sphered(300, 6)
    w = frame(6)
    e = np.random.default_rng(5).normal(size=w.shape)
    _, grad, _ = moment_index(z, w, cumulants, gradient=True)
    h = 1e-6
    fd = (moment_index(z, w + h * e, cumulants) - moment_index(z, w - h * e, cumulants)) / (2 * h)
    assert fd == pytest.approx(float((grad * e).sum()), rel=1e-6)


def test_gaussian_baseline_and_pp3_compatible_value() -> None:
    rng = np.random.default_rng(6)
    n = 10_000
    z = sphere(rng.normal(size=(n, 6))).z
    values = [moment_index(z, frame(6, s)) for s in range(50)]
    assert 5 / n <= np.mean(values) <= 20 / n
    pp3 = [moment_index(z, frame(6, s), pp3_compat=True) for s in range(50)]
    assert 10.5 <= np.mean(pp3) <= 12


def planted(n: int = 2000, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    cols = [rng.exponential(1, n), rng.laplace(0, 1, n), -rng.gamma(2, 1, n)] + [rng.normal(size=n) for _ in range(5)]
    return np.stack(cols, axis=1)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_planted_structure_is_named_and_ranked_unit_invariantly(seed: int) -> None:
    x = planted(seed=seed)
    names = [f"m{i}" for i in range(8)]
    r = projection_pursuit(x, names, seed=seed)
    assert set(r.named) == {"m0", "m1", "m2"}
    h = dict(r.ranking)
    assert all(h[f"m{i}"] > 0.9 for i in range(3)) and all(h[f"m{i}"] < 0.1 for i in range(3, 8))
    scaled = x * np.array([1, 1e6, 3, 1, 50, 1, 1, 1e-2]) + np.array([0, 1e9, 0, 0, 0, 5, 0, 0])
    r2 = projection_pursuit(scaled, names, seed=seed)
    assert [m for m, _ in r2.ranking] == [m for m, _ in r.ranking]
    assert r2.index == pytest.approx(r.index, rel=1e-10)
    np.testing.assert_allclose(r.w.T @ r.w, np.eye(3), atol=1e-10)  # Stiefel feasibility


def test_p_equals_n_equals_12_is_low_power_not_an_error() -> None:
    x = np.random.default_rng(7).normal(size=(12, 12))
    r = projection_pursuit(x, [f"m{i}" for i in range(12)], seed=0)
    assert r.diagnostics["d"] <= 5 and r.diagnostics["low_power"]
    assert all(0.0 <= v <= 1.0 for _, v in r.ranking)


def test_degenerate_inputs_are_skipped_with_a_reason() -> None:
    x = np.random.default_rng(8).normal(size=(100, 4))
    x[:, 1:] = 3.0  # one non-constant metric
    r = projection_pursuit(x, ["a", "b", "c", "d"])
    assert r.skipped == "fewer than 2 non-constant metrics" and r.named == []
    assert r.diagnostics["zero_variance"] == ["b", "c", "d"]
    y = np.random.default_rng(9).normal(size=(100, 2))
    r = projection_pursuit(np.c_[y, y.sum(axis=1)], ["a", "b", "c"])  # rank 2: d < 3
    assert r.skipped is not None and "sphered dimensions" in r.skipped
    assert all(np.isfinite(v) for _, v in r.ranking)


def test_varimax_recovers_a_simple_structure() -> None:
    l0 = np.zeros((9, 3))
    l0[[0, 1, 2], 0] = [0.9, 0.8, 0.7]
    l0[[3, 4, 5], 1] = [0.9, 0.6, 0.5]
    l0[[6, 7, 8], 2] = [0.8, 0.7, 0.6]
    rot = polar(np.random.default_rng(10).normal(size=(3, 3)))
    got = varimax(l0 @ rot, eps=1e-12)
    # columns may come in another order; match each recovered column to its original
    for a in range(3):
        best = min(np.abs(got[:, b] - l0[:, a]).max() for b in range(3))
        assert best < 1e-6


def test_warm_start_reaches_the_same_optimum() -> None:
    x = planted(seed=4)
    names = [f"m{i}" for i in range(8)]
    first = projection_pursuit(x, names, seed=4)
    again = projection_pursuit(x, names, seed=99, restarts=1, warm_start=first.weights, warm_names=first.metrics)
    assert again.index == pytest.approx(first.index, rel=1e-6)


# -- the compiled optimiser ---------------------------------------------------------------------


@pytest.mark.parametrize("cumulants,pp3", [("kstat", False), ("plain", False), ("kstat", True)])
def test_compiled_index_and_gradient_equal_the_numpy_reference(cumulants: str, pp3: bool) -> None:
    from perfsift.operators.pursuit import _pp_kernel
    from perfsift.operators.pursuit.projection import _constants

    for n, d in [(30, 4), (200, 9)]:
        z = sphered(n, d, seed=n)
        w = frame(d, seed=d)
        y, grad = np.empty((n, 3)), np.empty((d, 3))
        value = _pp_kernel.index_gradient(z, w, *_constants(n, cumulants, pp3), y, grad, _pp_kernel.CONSTS)
        ref, ref_grad, _ = moment_index(z, w, cumulants, pp3, gradient=True)
        scale = 12.0 if pp3 else 1.0  # the kernel maximises the unscaled index
        assert value * scale == pytest.approx(ref, rel=1e-12)
        np.testing.assert_allclose(grad * scale, ref_grad, rtol=1e-10, atol=1e-12)


def test_compiled_lbfgs_reaches_the_scipy_optimum() -> None:
    rng = np.random.default_rng(7)
    x = rng.normal(size=(400, 10))
    x[:, 3] += np.where(rng.random(400) < 0.15, 5.0, 0.0)  # a planted skewed group
    x[:, 6] = rng.standard_t(3, size=400)
    names = [f"m{i}" for i in range(10)]
    fast = projection_pursuit(x, names, optimizer="lbfgs")
    ref = projection_pursuit(x, names, optimizer="scipy")
    assert fast.index == pytest.approx(ref.index, rel=1e-6)
    assert set(fast.named) == set(ref.named)
    assert fast.diagnostics["restarts_converged"] >= 8
    # the same subspace
    assert np.linalg.norm(fast.w @ fast.w.T - ref.w @ ref.w.T) < 1e-3


def test_finite_difference_baseline_finds_a_lower_or_equal_optimum() -> None:
    rng = np.random.default_rng(8)
    x = rng.normal(size=(150, 6))
    x[:, 0] = rng.exponential(size=150) ** 2
    names = [f"m{i}" for i in range(6)]
    fd = projection_pursuit(x, names, optimizer="scipy-fd", restarts=3)
    exact = projection_pursuit(x, names, optimizer="lbfgs", restarts=3)
    assert fd.index <= exact.index * (1 + 1e-6)
    assert exact.named[0] == "m0" and "m0" in fd.named  # the planted skewed metric, named by both


@pytest.mark.parametrize("dims", [1, 2])
def test_one_and_two_dimensional_pursuit_find_the_planted_metric(dims: int) -> None:
    rng = np.random.default_rng(dims)
    x = rng.normal(size=(500, 8))
    x[:, 5] = rng.lognormal(0, 1, size=500)  # the one non-Gaussian metric
    res = projection_pursuit(x, [f"m{i}" for i in range(8)], dims=dims)
    assert len(res.named) == dims and res.w.shape[1] == dims
    assert res.ranking[0][0] == "m5" and res.ranking[0][1] > 0.9
    with pytest.raises(ValueError, match="dims"):
        projection_pursuit(x, [f"m{i}" for i in range(8)], dims=4)


@pytest.mark.parametrize("d", [3, 12, 24])
def test_automatic_trimming_leaves_pure_gaussian_data_untouched_at_any_dimension(d: int) -> None:
    """The limit comes from the χ²_d quantile; a fixed limit of 3 shrank 72 % of these rows at d = 12."""
    x = np.random.default_rng(d).normal(size=(50 * d, d))
    res = projection_pursuit(x, [f"m{i}" for i in range(d)], restarts=1, dims=min(3, d))
    assert res.diagnostics["trim"] == "log" and res.diagnostics["trimmed_rows"] == 0
    fixed = projection_pursuit(x, [f"m{i}" for i in range(d)], restarts=1, dims=min(3, d), trim_limit=3.0)
    assert fixed.diagnostics["trimmed_rows"] > (0.5 * len(x) if d >= 12 else 0)
