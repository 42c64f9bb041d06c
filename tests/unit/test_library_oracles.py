"""The independent review's oracles kept as tests (issue #33): a library referees each method.
scikit-fuzzy's centroid defuzzification for the contract rulebase; scikit-learn's
KNeighborsRegressor for the cleaner's KNN imputation rule; statsmodels OLS for the regression."""

from __future__ import annotations

import numpy as np
import pytest
import skfuzzy
from perfsift.operators.contract.rules import Rulebase


def test_rulebase_centroids_equal_scikit_fuzzy() -> None:
    rb = Rulebase.default()
    inp, out = rb.inputs[0], rb.outputs[0]
    var = rb.variables[out]
    # 20,001 points: scikit-fuzzy's discrete centroid is then within 2.5e-9 of the exact one (200,001:
    # 2.5e-11, 6x slower), far inside the 1e-5 the check allows
    y = np.linspace(var.lo, var.hi, 20_001)
    lo_in, hi_in = rb.variables[inp].lo, rb.variables[inp].hi
    checked = 0
    for d in np.linspace(lo_in, hi_in, 41):
        alphas = [float(a) for a in rb.strengths({inp: d})]
        agg = np.zeros_like(y)
        for rule, alpha in zip(rb.rules, alphas, strict=True):
            for v, s in rule.assigns:
                if v == out and alpha > 0:
                    agg = np.maximum(agg, np.minimum(alpha, var.sets[s].mu(y)))
        if agg.max() == 0:
            continue
        want = skfuzzy.defuzz(y, agg, "centroid")
        assert rb.evaluate({inp: float(d)})[out] == pytest.approx(want, abs=1e-5)
        checked += 1
    assert checked >= 30


def test_knn_imputation_equals_kneighbors_regressor() -> None:
    """Complete references with negative values (no log1p): standardised features, k nearest with
    inverse-distance weights, as scikit-learn's KNeighborsRegressor(weights="distance")."""
    from perfsift.operators.clean._clean_kernel import knn_impute
    from sklearn.neighbors import KNeighborsRegressor

    rng = np.random.default_rng(7)
    for trial in range(40):
        n, m, k = int(rng.integers(8, 60)), int(rng.integers(2, 7)), int(rng.integers(1, 8))
        refs = rng.normal(0, 1, (n, m)) * rng.uniform(0.1, 100, m)
        row = rng.normal(0, 1, m) * refs.std(axis=0)
        e = int(rng.integers(m))
        feats = [f for f in range(m) if f != e]
        mu, sd = refs[:, feats].mean(axis=0), refs[:, feats].std(axis=0)
        model = KNeighborsRegressor(n_neighbors=min(k, n), weights="distance")
        model.fit((refs[:, feats] - mu) / sd, refs[:, e])
        want = float(model.predict(((row[feats] - mu) / sd)[None, :])[0])
        got = knn_impute(refs, row, e, k, False, False, 1)
        assert got == pytest.approx(want, rel=1e-9, abs=1e-12), trial


def test_backward_elimination_equals_a_statsmodels_ols_loop() -> None:
    """Drop the term with the smallest t² (= partial F) while it is below f_out, refitting with
    statsmodels OLS each time: the same removals in the same order, the same coefficients and R²."""
    import statsmodels.api as sm
    from perfsift.operators.reduction.regression import backward_elimination

    for seed in range(12):
        rng = np.random.default_rng(seed)
        n, p = 120, 8
        x = rng.normal(size=(n, p)) * rng.uniform(0.5, 50, p) + 1e6 * (seed % 2)  # an offset too
        y = x[:, 0] * 0.3 - x[:, 3] * 0.02 + rng.normal(size=n) * 2
        names = [f"m{j}" for j in range(p)]
        got = backward_elimination(x, y, names, f_out=4.0)
        active = list(range(p))
        removed = []
        while active:
            fit = sm.OLS(y, sm.add_constant(x[:, active], has_constant="add")).fit()
            t2 = np.asarray(fit.tvalues)[1:] ** 2
            j = int(np.argmin(t2))
            if t2[j] >= 4.0:
                break
            removed.append(names[active[j]])
            del active[j]
        fit = sm.OLS(y, sm.add_constant(x[:, active], has_constant="add")).fit()
        assert [h for h, _ in got.history] == removed, seed
        assert got.terms == [names[j] for j in active]
        np.testing.assert_allclose(got.coefficients, np.asarray(fit.params)[1:], rtol=1e-7)
        assert got.r2 == pytest.approx(fit.rsquared, rel=1e-9)
