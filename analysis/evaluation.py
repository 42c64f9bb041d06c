"""Statistical data reduction of archived traces, evaluated (Yang et al., CCGrid'06): the reduction
at one correlation threshold and its R² on verification traces, against two baselines - RAND
(random subsets of as many metrics, averaged) and MAIN (the metrics one would usually pick) - and
the sweep of thresholds 0.05..1.0 behind the paper's Figures 2 and 4.

A trace enters as a regression table ``(x, y, names)``: one row per time bucket, the features in
the columns of ``x``, the performance metric in ``y`` (:func:`perfsift.operators.reduction.reduction.bucket_rows`).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from perfsift.operators.reduction.reduction import reduce_metrics
from perfsift.operators.reduction.regression import SQUARE, rand_subsets, refit

#: a trace as a regression table: features (rows x columns), performance metric, feature names
RegressionTable = tuple[np.ndarray, np.ndarray, list[str]]


def reduce_and_verify(
    train: RegressionTable, verify: list[RegressionTable], threshold: float, quadratic: bool = False, f_out: float = 2.0
) -> dict[str, Any]:
    """The reduction of ``train`` at correlation threshold ``threshold`` (what
    :func:`~perfsift.operators.reduction.reduction.reduce_metrics` returns, without the clustering), with
    ``r2_verify`` and ``adj_r2_verify``: R² and adjusted R² of its terms refitted on each
    verification table (None for each when the regression could not run: ``reason``). A refit
    centres the squares on the verification table's own means (:func:`refit` with no centres)."""
    x, y, names = train
    res = reduce_metrics(x, y, names, threshold=threshold, quadratic=quadratic, f_out=f_out)
    res.pop("clustering")
    fits = [refit(xv, yv, nv, res["terms"], None) if not res["reason"] else None for xv, yv, nv in verify]
    res["r2_verify"] = [None if f is None or not np.isfinite(f[0]) else f[0] for f in fits]
    res["adj_r2_verify"] = [None if f is None else f[1] for f in fits]
    return res


def rand_comparison(
    train: RegressionTable, tables: list[RegressionTable], result: dict[str, Any], subsets: int
) -> list[dict[str, Any]]:
    """RAND as a distribution, per table: ``subsets`` random subsets of the non-constant features,
    each with as many features and the same term structure as ``result``'s selection (seeded, so the same
    every time), refitted on the table like the selection: the selection's ``r2`` and ``adj_r2``
    there, the subsets' ``mean`` and ``adj_mean``, and ``p_value``, the share of subsets whose R²
    is at least the selection's."""
    names = train[2]
    live = [n for n in names if n not in result["zero_variation"]]
    picks = rand_subsets(live, result["terms"], subsets, np.random.default_rng(0))
    out = []
    for xv, yv, nv in tables:
        r2, adj, _ = refit(xv, yv, nv, result["terms"], None)
        fits = [refit(xv, yv, nv, terms, None) for _, terms in picks]
        r = np.array([f[0] for f in fits if np.isfinite(f[0])])
        a = np.array([f[1] for f in fits if f[1] is not None and np.isfinite(f[0])])
        out.append(
            {
                "r2": r2 if np.isfinite(r2) else None,
                "adj_r2": adj,
                "subsets": len(r),
                "mean": float(r.mean()) if len(r) else None,
                "adj_mean": float(a.mean()) if len(a) else None,
                "p_value": float(np.mean(r >= r2)) if len(r) and np.isfinite(r2) else None,
            }
        )
    return out


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
                "r2_verify": float(np.mean(r["r2_verify"])) if r["r2_verify"] and None not in r["r2_verify"] else None,
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
    rand_seeds: int = 50,
    sweep: bool = False,
) -> dict[str, Any]:
    """The reduction at ``threshold`` (:func:`reduce_and_verify`) and ``rand``: the RAND comparison
    (:func:`rand_comparison`) on each verification table, or on the training table without any
    (``rand_on`` says which), with ``rand_r2_verify`` its means on the verification tables; for
    ``main`` features, ``main_r2_verify`` and ``main_adj_r2_verify``; with verification tables,
    ``all_r2_verify`` and ``all_adj_r2_verify``, the ceiling: every non-constant feature (and with
    ``quadratic`` its square) refitted on each (None where the rows do not suffice); with ``sweep``, the rows of
    :func:`threshold_sweep`. ``history`` (the backward elimination's steps) comes as lists, ready
    for JSON."""
    result = reduce_and_verify(train, verify, threshold, quadratic, f_out)
    if not result["reason"]:
        result["rand_on"] = "verify" if verify else "train"
        result["rand"] = rand_comparison(train, verify or [train], result, rand_seeds)
        if verify:
            result["rand_r2_verify"] = [r["mean"] for r in result["rand"]]
    if main and verify:
        result["main"] = main
        fits = [refit(xv, yv, nv, main, {}) for xv, yv, nv in verify]
        result["main_r2_verify"] = [f[0] for f in fits]
        result["main_adj_r2_verify"] = [f[1] for f in fits]
    if verify:  # the ceiling: every non-constant feature (and its square) refitted on each table
        live = [n for n in train[2] if n not in result["zero_variation"]]
        terms = live + ([n + SQUARE for n in live] if quadratic else [])
        fits = [refit(xv, yv, nv, terms, None) for xv, yv, nv in verify]
        result["all_r2_verify"] = [f[0] if np.isfinite(f[0]) else None for f in fits]
        result["all_adj_r2_verify"] = [f[1] if np.isfinite(f[0]) else None for f in fits]
    if sweep:
        result["sweep"] = threshold_sweep(train, verify, quadratic, f_out)
    result["history"] = [[t, f] for t, f in result["history"]]
    return result


def not_better_than_chance(rand: dict[str, Any], alpha: float = 0.05) -> bool:
    """True when more than ``alpha`` of the random subsets score at least as well as the selection."""
    return rand["p_value"] is None or rand["p_value"] > alpha
