"""Statistical data reduction of archived traces, evaluated (Yang et al., CCGrid'06): the reduction
at one correlation threshold and its R² on verification traces, against two baselines - RAND
(random subsets of as many metrics, averaged) and MAIN (the metrics one would usually pick) - and
the sweep of thresholds 0.05..1.0 behind the paper's Figures 2 and 4.

A trace enters as a regression table ``(x, y, names)``: one row per time bucket, the features in
the columns of ``x``, the performance metric in ``y`` (:func:`perfsift.operators.selection.bucket_rows`).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from perfsift.operators.regression import refit_r2
from perfsift.operators.selection import reduce_metrics

#: a trace as a regression table: features (rows x columns), performance metric, feature names
RegressionTable = tuple[np.ndarray, np.ndarray, list[str]]


def reduce_and_verify(
    train: RegressionTable, verify: list[RegressionTable], threshold: float, quadratic: bool = False, f_out: float = 2.0
) -> dict[str, Any]:
    """The reduction of ``train`` at correlation threshold ``threshold`` (what
    :func:`~perfsift.operators.selection.reduce_metrics` returns, without the clustering), with
    ``r2_verify``: the R² of its model refitted on each verification table."""
    x, y, names = train
    res = reduce_metrics(x, y, names, threshold=threshold, quadratic=quadratic, f_out=f_out)
    res.pop("clustering")
    res["r2_verify"] = [refit_r2(xv, yv, nv, res["terms"], res["centers"]) for xv, yv, nv in verify]
    return res


def rand_r2(
    train: RegressionTable, verify: list[RegressionTable], result: dict[str, Any], quadratic: bool, seeds: int
) -> list[float]:
    """RAND: per verification table, the mean R² of ``seeds`` random subsets of the non-constant
    features, each as large as ``result``'s selection (seeded, so the same every time)."""
    x, _, names = train
    rng = np.random.default_rng(0)
    live = [n for n in names if n not in result["zero_variation"]]
    k = len(result["selected"])
    rand = []
    for _ in range(seeds):
        pick = [str(p) for p in rng.choice(live, size=k, replace=False)]
        terms = pick + ([p + "^2" for p in pick] if quadratic else [])
        centers = {p: float(np.nanmean(x[:, names.index(p)])) for p in pick}
        rand.append([refit_r2(xv, yv, nv, terms, centers) for xv, yv, nv in verify])
    means: list[float] = np.nanmean(np.array(rand), axis=0).tolist()
    return means


def threshold_sweep(
    train: RegressionTable, verify: list[RegressionTable], quadratic: bool, f_out: float
) -> list[dict[str, Any]]:
    """The reduction at thresholds 0.05, 0.10, ..., 1.0 (1.0 runs as 0.999): features selected,
    reduction degree, R² on the training table and mean R² on the verification tables."""
    rows = []
    for t in np.round(np.arange(0.05, 1.0001, 0.05), 2):
        r = reduce_and_verify(train, verify, float(min(t, 0.999)), quadratic, f_out)
        rows.append(
            {
                "threshold": float(t),
                "selected": len(r["selected"]),
                "reduction_degree": r["reduction_degree"],
                "r2_train": r["r2_train"],
                "r2_verify": float(np.mean(r["r2_verify"])) if r["r2_verify"] else None,
            }
        )
    return rows


def evaluate_reduction(
    train: RegressionTable,
    verify: list[RegressionTable],
    threshold: float,
    quadratic: bool = False,
    f_out: float = 2.0,
    main: list[str] | None = None,
    rand_seeds: int = 20,
    sweep: bool = False,
) -> dict[str, Any]:
    """The reduction at ``threshold`` (:func:`reduce_and_verify`) and, with verification tables,
    ``rand_r2_verify`` (:func:`rand_r2`) and, for ``main`` features, ``main_r2_verify``; with
    ``sweep``, the rows of :func:`threshold_sweep`. ``history`` (the backward elimination's
    steps) comes as lists, ready for JSON."""
    result = reduce_and_verify(train, verify, threshold, quadratic, f_out)
    live = [n for n in train[2] if n not in result["zero_variation"]]
    if verify and 0 < len(result["selected"]) <= len(live):
        result["rand_r2_verify"] = rand_r2(train, verify, result, quadratic, rand_seeds)
    if main and verify:
        result["main"] = main
        result["main_r2_verify"] = [refit_r2(xv, yv, nv, main, {}) for xv, yv, nv in verify]
    if sweep:
        result["sweep"] = threshold_sweep(train, verify, quadratic, f_out)
    result["history"] = [[t, f] for t, f in result["history"]]
    return result
