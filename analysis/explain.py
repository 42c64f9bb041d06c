"""``perfsift explain DIR``: the findings of a run's or an analysis's output folder in words.

Four answers, from the files there (:mod:`perfsift.analysis.findings`): what the reduced stream
kept and why (projection pursuit's selections with their importance scores, data reduction's fit),
which nodes stood apart on the projection and when, which contracts were violated on which nodes,
and how forecasts and model predictions compared with what was measured. ``period`` narrows every
answer to the period containing that time, ``node`` to one node.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from perfsift.analysis.findings import (
    Folder,
    contract_levels,
    forecast_bands,
    load_folder,
    period_of,
    prediction_stats,
    stood_apart,
)


def _when(t: float, t0: float) -> str:
    return f"+{t - t0:.0f} s"


def _metrics(ms: list[dict[str, Any]]) -> str:
    return ", ".join(f"{m['metric']} {m['deviation']:+.1f}" for m in ms)


def explain(path: Path, period: float | None = None, node: str | None = None) -> list[str]:
    """The answers as lines of text (sections start with ``## ``)."""
    f = load_folder(path)
    if f.empty():
        raise FileNotFoundError(f"{path}: no selection, reduced, contract, forecast or prediction file to explain")
    pursuit = f.pursuit
    t0 = min([r["period_start"] for r in f.selections] + [r["ts"] for r in f.reduced[:1]], default=0.0)
    at = period_of(pursuit, period) if period is not None else None

    def in_scope(start: float, end: float) -> bool:
        return at is None or start <= at < end

    lines: list[str] = [f"perfsift explain {path} (times as seconds after {t0:.0f})"]
    if at is not None:
        lines.append(f"period: the one containing {_when(at, t0)}")
    if node is not None:
        lines.append(f"node: {node}")
    lines += _kept(f, pursuit, t0, in_scope)
    lines += _apart(pursuit, t0, in_scope, node)
    lines += _contracts(f, t0, at, node)
    lines += _predictions(f, t0, at, node)
    return lines


def _kept(f: Folder, pursuit: list[dict[str, Any]], t0: float, in_scope: Any) -> list[str]:
    lines = ["", "## What was kept and why"]
    for job, j in sorted((f.summary.get("jobs") or {}).items()):
        if j.get("kept"):
            lines.append(f"{job}: the reduced stream keeps {', '.join(j['kept'])} now")
    shown = [r for r in pursuit if in_scope(r["period_start"], r["period_end"])]
    if not pursuit:
        lines.append("no projection-pursuit selections in this folder")
    for r in shown:
        span = f"{_when(r['period_start'], t0)}..{_when(r['period_end'], t0)}"
        if r.get("skipped"):
            lines.append(f"{r['job']} {span}: kept {', '.join(r['selected']) or 'everything'} ({r['skipped']})")
            continue
        if not r["selected"] and r.get("reason"):  # evidence: nothing differed (issue #32)
            lines.append(f"{r['job']} {span}: kept nothing (beyond the metrics always kept): {r['reason']}")
            continue
        scores = r.get("scores") or {}
        mp = r.get("metric_p") or {}
        why = ", ".join(f"{m} {scores.get(m, 0.0):.2f}" + (f" p={mp[m]:.2g}" if m in mp else "") for m in r["selected"])
        lines.append(
            f"{r['job']} {span}: kept {', '.join(r['selected'])}: the metrics in which the nodes differed "
            f"most (importance {why}; index {r.get('index') or 0.0:.2f}"
            + (f"; period p = {r['p_value']:.2g}" if r.get("p_value") is not None else "")
            + ")"
        )
    if len(pursuit) > 1 and len(shown) == len(pursuit):
        counts: dict[str, int] = {}
        for r in pursuit:
            for m in r["selected"] if not r.get("skipped") else []:
                counts[m] = counts.get(m, 0) + 1
        top = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:6]
        lines.append("most often kept: " + ", ".join(f"{m} ({c} of {len(pursuit)} periods)" for m, c in top))
        empty = [r for r in pursuit if not r.get("skipped") and not r["selected"] and r.get("reason")]
        if empty:
            lines.append(
                f"kept nothing in {len(empty)} of {len(pursuit)} periods: "
                "no metric differed across nodes beyond its own noise"
            )
    for r in f.reductions:
        if not in_scope(r["period_start"], r["period_end"]):
            continue
        if r.get("skipped"):
            lines.append(f"data reduction {_when(r['period_end'], t0)}: not fitted ({r['skipped']})")
            continue
        r2 = r.get("r2_holdout")
        rand, p = r.get("rand_r2_mean"), r.get("rand_p_value")
        lines.append(
            f"data reduction {_when(r['period_end'], t0)}: {', '.join(r['selected'])} explain the performance metric "
            f"(R² {r.get('r2_train') or 0:.3f}"
            + (f", held out {r2:.3f}" if r2 is not None else "")
            + (f"; random subsets {rand:.3f}, p = {p:.3f}" if rand is not None and p is not None else "")
            + ")"
        )
    return lines


def _apart(pursuit: list[dict[str, Any]], t0: float, in_scope: Any, node: str | None) -> list[str]:
    lines = ["", "## Nodes that stood apart"]
    nodes = stood_apart([r for r in pursuit if in_scope(r["period_start"], r["period_end"])])
    if node is not None:
        nodes = {n: v for n, v in nodes.items() if n == node}
    if not pursuit:
        return [*lines, "no projection-pursuit selections, so no projection to stand apart on"]
    if not nodes:
        who = f"node {node}" if node else "node"
        return [*lines, f"no {who} stood apart on the projection (robust z below the threshold)"]
    for n, periods in nodes.items():
        when = ", ".join(f"{_when(p['start'], t0)}..{_when(p['end'], t0)}" for p in periods)
        lines.append(f"{n} stood apart in {len(periods)} period{'s' if len(periods) > 1 else ''}: {when}")
        for p in periods:
            lines.append(f"  {_when(p['start'], t0)}: z {p['z']:.1f}; differs most in {_metrics(p['metrics'])}")
    if node is not None:
        for r in pursuit:
            z = (r.get("node_z") or {}).get(node)
            if z is not None and in_scope(r["period_start"], r["period_end"]):
                lines.append(f"  {node} at {_when(r['period_start'], t0)}: z {z:.1f}")
    return lines


def _span(f: Folder, at: float | None) -> tuple[float, float]:
    """The times ``--period`` selects: the pursuit period containing ``at`` (everything without it)."""
    if at is None:
        return -float("inf"), float("inf")
    span = next(
        ((r["period_start"], r["period_end"]) for r in f.pursuit if r["period_start"] <= at < r["period_end"]), None
    )
    return span or (at, at + 1.0)


def _contracts(f: Folder, t0: float, at: float | None, node: str | None) -> list[str]:
    lines = ["", "## Contracts"]
    if not f.contracts:
        return [*lines, "no contract ran (run or analyze with --contract FILE)"]
    lo, hi = _span(f, at)
    recs = [c for c in f.contracts if lo <= c["ts"] < hi]
    levels = contract_levels(recs)
    if node is not None:
        levels = {n: v for n, v in levels.items() if n == node}
    bad = {n: v for n, v in levels.items() if v["violated"]}
    lines.append(f"{len(bad)} of {len(levels)} nodes violated the contract at some time")
    for n, v in sorted(bad.items(), key=lambda kv: -kv[1]["violated"]):
        lines.append(
            f"{n}: violated in {v['violated']} of {v['evaluations']} evaluations, {_when(v['first'], t0)}.."
            f"{_when(v['last'], t0)}" + (f", driven mostly by {v['driver']}" if v["driver"] else "")
        )
    return lines


def _predictions(f: Folder, t0: float, at: float | None, node: str | None) -> list[str]:
    lines = ["", "## Predictions against what was measured"]
    lo, hi = _span(f, at)
    preds = [p for p in f.predictions if (node is None or p["node"] in (node, "*")) and lo <= p["ts"] < hi]
    for s in prediction_stats(preds):
        cov = f"{s['coverage']:.0%} inside ±2σ" if s["coverage"] is not None else "nothing observed"
        z = f", mean |z| {s['mean_abs_z']:.2f}" if s["mean_abs_z"] is not None else ""
        lines.append(
            f"model {s['model']} {s['output']} on {s['node']}: {s['predictions']} predictions, {cov}{z}, "
            f"{s['violated']} violated"
        )
    if not f.predictions:
        lines.append("no structural model ran (its predictions would be in prediction.jsonl)")
    bands = [b for b in forecast_bands(f) if node is None or b.node == node]
    if not f.forecasts:
        lines.append("no forecasts in this folder")
    elif not bands:
        lines.append("forecasts were made, but none of their series was measured in the reduced stream")
    else:
        total = sum(b.scored for b in bands)
        out = sum(b.outside for b in bands)
        lines.append(
            f"forecasts: {total:,} measured values of {len(bands)} series had a band; {out:,} "
            f"({out / total if total else 0:.1%}) fell outside ±2σ (about 5 % expected)"
        )
        for b in bands[:5]:
            if b.outside:
                lines.append(f"  {b.node} {b.metric}: {b.outside} of {b.scored} outside")
    return lines
