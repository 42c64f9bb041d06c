"""What projection pursuit keeps, against planted truth (issue #32): precision and recall per node
count on the class of random jobs (``producers.classgen``), on the held-out class and on calm jobs,
for the new default (evidence at alpha = 0.01, ``snapshot_norm = noise``), the old default (the
projection's three named metrics, ``snapshot_norm = scale``, no evidence) and the issue's floor
(per-metric Kruskal–Wallis of the raw samples per period, Bonferroni alpha = 0.001).
Writes ``bench/results/selection.json``; the tables are in docs/pursuit.md.

    python -m bench.bench_selection [--seeds 5] [--nodes 4,8,16,32,64,128]
"""

from __future__ import annotations

import argparse
import time
import warnings
from typing import Any

from perfsift.analysis.selection_eval import kruskal_kept, pool, pursuit_kept, score
from perfsift.operators import ProjectionPursuit
from perfsift.producers.classgen import class_trace, heldout_trace

from bench.common import write_result

WINDOW, PERIOD, DURATION = 5, 30.0, 240
CONFIGS: dict[str, dict[str, Any]] = {
    "new default (noise, alpha 0.01)": {},
    "old default (scale, no evidence)": {"snapshot_norm": "scale", "alpha": 1.0},
}


def run(kind: str, nodes: int, seeds: int) -> dict[str, Any]:
    make = heldout_trace if kind == "heldout" else class_trace
    extra = {"planted": 0} if kind == "calm" else {}
    rows: dict[str, list[dict[str, float]]] = {name: [] for name in [*CONFIGS, "Kruskal-Wallis floor"]}
    for seed in range(seeds):
        batch, truth = make(seed, nodes=nodes, duration=DURATION, **extra)
        for name, kw in CONFIGS.items():
            op = ProjectionPursuit(period=PERIOD, window=WINDOW, **kw)
            rows[name].append(score(pursuit_kept(batch, op, WINDOW), truth.planted))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            rows["Kruskal-Wallis floor"].append(score(kruskal_kept(batch, PERIOD), truth.planted, k=99))
    return {name: pool(s) for name, s in rows.items()}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--nodes", default="4,8,16,32,64,128")
    ap.add_argument("--kinds", default="class,heldout,calm")
    args = ap.parse_args()
    result: dict[str, Any] = {"seeds": args.seeds, "duration_s": DURATION, "period_s": PERIOD, "window": WINDOW}
    for kind in args.kinds.split(","):
        result[kind] = {}
        for nodes in (int(n) for n in args.nodes.split(",")):
            t = time.perf_counter()
            result[kind][str(nodes)] = r = run(kind, nodes, args.seeds)
            line = " | ".join(
                f"{name[:12]}: prec {v['precision']:.2f} rec {v['recall']:.2f} >=2 {v['two_or_more']:.2f} "
                f"empty {v['empty']:.2f}"
                for name, v in r.items()
            )
            print(f"{kind:8s} P={nodes:4d} {line} ({time.perf_counter() - t:.0f} s)", flush=True)
    print(write_result("selection", result))


if __name__ == "__main__":
    main()
