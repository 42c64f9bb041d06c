"""Projection pursuit on real data: Exathlon's three undisturbed Spark Streaming runs (4 nodes ×
55 OS metrics, 5-s buckets; tests/data/exathlon = ../shared/data/exathlon). Per run: how often a
period keeps nothing, what is kept most often, and which node stands apart how often -- is what is
kept explained by the nodes' roles (one node hosts the driver, the others run executors)?
Writes ``bench/results/pursuit_exathlon.json``; the numbers are in docs/pursuit.md.

    python -m bench.bench_exathlon_pursuit [--data ../shared/data/exathlon] [--period 60]
"""

from __future__ import annotations

import argparse
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
from perfsift.analysis.selection_eval import pursuit_records
from perfsift.cli.ui import read_trace
from perfsift.operators import ProjectionPursuit

from bench.common import ROOT, write_result

DATA = ROOT.parent / "tests" / "data" / "exathlon"  # the same files as ../shared/data/exathlon
RUNS = ("app1_run15.csv", "app1_run17.csv", "app1_run18.csv")


def analyse(path: Path, period: float, **kw: Any) -> dict[str, Any]:
    batch = read_trace(path)
    nodes = [i for i, n in enumerate(batch.nodes) if n != "driver"]
    rows = np.flatnonzero(np.isin(batch.node_idx, nodes))
    cols = [j for j, m in enumerate(batch.metrics) if m != "processing_delay_ms"]
    b = batch.take(rows)
    b = type(b)(
        ts=b.ts,
        node_idx=b.node_idx,
        values=b.values[:, cols],
        metrics=tuple(batch.metrics[j] for j in cols),
        nodes=b.nodes,
        job_idx=b.job_idx,
        jobs=b.jobs,
        seq=b.seq,
    )
    # the buckets are 5-s means already: window 1 (snapshots one bucket apart, the evidence's two)
    recs = [r for r in pursuit_records(b, ProjectionPursuit(period=period, window=1, **kw), 1) if r["skipped"] is None]
    kept = Counter(m for r in recs for m in r["selected"])
    apart = Counter(d["node"] for r in recs for d in r["deviants"])
    top_z = Counter(max(r["node_z"], key=r["node_z"].get) for r in recs if r["node_z"] and r["selected"])
    return {
        "periods": len(recs),
        "kept_nothing": sum(not r["selected"] for r in recs),
        "mean_kept": float(np.mean([len(r["selected"]) for r in recs])) if recs else 0.0,
        "most_kept": kept.most_common(8),
        "stood_apart": apart.most_common(),
        "farthest_node_when_kept": top_z.most_common(),
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", type=Path, default=DATA)
    ap.add_argument("--period", type=float, default=60.0)
    args = ap.parse_args()
    result: dict[str, Any] = {"period_s": args.period}
    for name, kw in (("new default", {}), ("old default", {"snapshot_norm": "scale", "alpha": 1.0})):
        result[name] = {}
        for run in RUNS:
            r = result[name][run] = analyse(args.data / run, args.period, **kw)
            print(f"{name} {run}: {r}", flush=True)
    print(write_result("pursuit_exathlon", result))


if __name__ == "__main__":
    main()
