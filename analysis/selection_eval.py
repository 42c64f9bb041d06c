"""Judging what a selection keeps against planted truth (issue #32; docs/pursuit.md).

:func:`pursuit_kept` runs the projection-pursuit operator offline over a trace (smoothed as the
pipeline's node stage does) and returns, per fresh period, the metrics it kept;
:func:`kruskal_kept` is the issue's floor -- a per-metric Kruskal–Wallis test of the nodes' raw
samples in each period, Bonferroni at ``alpha`` over the metrics; :func:`score` pools precision
and recall over periods.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from perfsift.operators import Batch, ProjectionPursuit, SlidingMean


def pursuit_records(batch: Batch, op: ProjectionPursuit, window: int) -> list[dict[str, Any]]:
    """Every record of ``op`` over ``batch`` smoothed by a sliding mean of ``window`` samples."""
    smoothed = SlidingMean(window=window).update(batch.take(np.argsort(batch.ts, kind="stable")))
    op.reset()
    periods = np.floor(smoothed.ts / op.period)
    cuts = np.flatnonzero(np.diff(periods)) + 1
    records: list[dict[str, Any]] = []
    for chunk in np.split(np.arange(len(smoothed)), cuts):
        records += op.update(smoothed.take(chunk))
    return records + op.flush()


def pursuit_kept(batch: Batch, op: ProjectionPursuit, window: int) -> list[set[str]]:
    """Per fresh (not skipped) period, the set of metrics the operator selected."""
    return [set(r["selected"]) for r in pursuit_records(batch, op, window) if r["skipped"] is None]


def kruskal_kept(batch: Batch, period: float, alpha: float = 0.001, skip: int = 0) -> list[set[str]]:
    """The floor: per period (after the first ``skip``), the metrics whose nodes' raw samples
    differ by a Kruskal–Wallis test at ``alpha`` / number of metrics (Bonferroni)."""
    from scipy.stats import kruskal  # here: scipy.stats costs ~0.5 s of every CLI start

    pid = np.floor(batch.ts / period).astype(np.int64)
    out = []
    for p in np.unique(pid)[skip:]:
        rows = pid == p
        nodes = batch.node_idx[rows]
        kept = set()
        for j, m in enumerate(batch.metrics):
            groups = [batch.values[rows][nodes == k, j] for k in np.unique(nodes)]
            try:
                pv = kruskal(*groups).pvalue
            except ValueError:  # all values identical
                continue
            if pv <= alpha / len(batch.metrics):
                kept.add(m)
        out.append(kept)
    return out


def score(kept: list[set[str]], planted: set[str], k: int = 3) -> dict[str, float]:
    """Pooled over periods: ``precision`` (kept and planted / kept; 1.0 when nothing is kept),
    ``recall`` (kept and planted / min(planted, k), mean over periods), ``two_or_more`` (share of
    periods keeping ≥ min(2, planted) planted metrics), ``empty`` (share keeping nothing),
    ``picks`` and ``periods``."""
    picks = sum(len(s) for s in kept)
    hits = sum(len(s & planted) for s in kept)
    need = min(len(planted), k)
    return {
        "precision": hits / picks if picks else 1.0,
        "recall": float(np.mean([len(s & planted) / need for s in kept])) if kept and need else 0.0,
        "two_or_more": float(np.mean([len(s & planted) >= min(2, need) for s in kept])) if kept else 0.0,
        "empty": float(np.mean([not s for s in kept])) if kept else 0.0,
        "picks": float(picks),
        "periods": float(len(kept)),
    }


def pool(scores: list[dict[str, float]]) -> dict[str, float]:
    """Scores of several traces together: precision over all picks, the rest weighted by periods."""
    picks = sum(s["picks"] for s in scores)
    periods = sum(s["periods"] for s in scores)
    hits = sum(s["precision"] * s["picks"] for s in scores)
    out = {"precision": hits / picks if picks else 1.0, "picks": picks, "periods": periods}
    for key in ("recall", "two_or_more", "empty"):
        out[key] = sum(s[key] * s["periods"] for s in scores) / periods if periods else 0.0
    return out
