"""Statistical data reduction on real data: Exathlon's three undisturbed runs of one Spark
Streaming application (4 nodes x 55 OS metrics, 5-s buckets; response ``processing_delay_ms``).
Trains on run 15, verifies on runs 18 and 17 (each refit there): R² and adjusted R² of the
selection, RAND (50 random subsets of as many features and squared terms), MAIN (the usual
features: CPU user %, active memory and InfiniBand traffic of each node) and the all-features
refit (the ceiling), for linear and quadratic models at t = 0.9 and 0.95, with ``--lags 1`` and
with ``--smooth 3``.
Writes ``bench/results/reduction_exathlon.json`` and the table in ``docs/reduction.md``.

    python -m bench.bench_exathlon_reduction [--data tests/data/exathlon]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

from perfsift.analysis.evaluation import RegressionTable, evaluate_reduction
from perfsift.cli.ui import read_trace
from perfsift.operators.reduction.buckets import bucket_rows
from perfsift.operators.reduction.regression import expand_predictors

from bench.common import ROOT, write_result

DATA = ROOT.parent / "tests" / "data" / "exathlon"
DOC = ROOT.parent / "docs" / "reduction.md"
BEGIN, END = "<!-- exathlon-table:begin -->", "<!-- exathlon-table:end -->"
TRAIN, VERIFY = "app1_run15.csv", ("app1_run18.csv", "app1_run17.csv")
PERF, INTERVAL = "processing_delay_ms", 5.0
NODES = ("node5", "node6", "node7", "node8")
MAIN = [f"{n}/{m}" for n in NODES for m in ("CPU_ALL_User%", "MEM_active", "NET_ib0-read-KB/s", "NET_ib0-write-KB/s")]
#: (lags, smooth, quadratic, threshold) of each row
CONFIGS = [
    (0, 1, False, 0.9),
    (0, 1, False, 0.95),
    (0, 1, True, 0.9),
    (0, 1, True, 0.95),
    (1, 1, False, 0.9),
    (1, 1, False, 0.95),
    (0, 3, False, 0.9),
    (0, 3, True, 0.9),
]


def table(path: Path, lags: int = 0, smooth: int = 1) -> RegressionTable:
    """One run as a regression table (the CLI's: 5-s buckets, lags and smoothing of the features)."""
    buckets, x, y, names = bucket_rows(read_trace(path), INTERVAL, PERF)
    x, names = expand_predictors(x, names, lags, smooth, buckets)
    return x, y, names


def rows(data: Path) -> list[dict[str, Any]]:
    out = []
    for lags, smooth in dict.fromkeys(c[:2] for c in CONFIGS):
        train, verify = table(data / TRAIN, lags, smooth), [table(data / v, lags, smooth) for v in VERIFY]
        for lg, sm, quadratic, t in CONFIGS:
            if (lg, sm) != (lags, smooth):
                continue
            t0 = time.perf_counter()
            r = evaluate_reduction(train, verify, t, quadratic, main=MAIN, rand_seeds=50)
            for i, v in enumerate(VERIFY):
                rand = r.get("rand", [{}] * len(VERIFY))[i]
                out.append(
                    {
                        "model": "quadratic" if quadratic else "linear",
                        "lags": lags,
                        "smooth": smooth,
                        "threshold": t,
                        "verify": v,
                        "selected": len(r["selected"]),
                        "terms": len(r["terms"]),
                        "representatives": len(r["clusters"]),
                        "features": len(train[2]),
                        "reason": r["reason"],
                        "r2_train": r["r2_train"],
                        "r2": r["r2_verify"][i],
                        "adj_r2": r["adj_r2_verify"][i],
                        "rand_mean": rand.get("mean"),
                        "rand_adj_mean": rand.get("adj_mean"),
                        "rand_p_value": rand.get("p_value"),
                        "rand_subsets": rand.get("subsets"),
                        "main_r2": r["main_r2_verify"][i],
                        "main_adj_r2": r["main_adj_r2_verify"][i],
                        "all_r2": r["all_r2_verify"][i],
                        "all_adj_r2": r["all_adj_r2_verify"][i],
                        "seconds": time.perf_counter() - t0,
                    }
                )
    return out


def _f(v: float | None) -> str:
    return "-" if v is None else f"{v:.3f}"


def markdown(res: list[dict[str, Any]]) -> str:
    head = (
        "| model | lags | smooth | t | verify on | selected (terms) | R² | adj. R² | RAND R² | RAND adj. R² | "
        "RAND ≥ sel. | MAIN R² | MAIN adj. R² | all (ceiling) R² | all adj. R² |\n"
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
    )
    lines = [head]
    for r in res:
        p = "-" if r["rand_p_value"] is None else f"{r['rand_p_value']:.0%}"
        lines.append(
            f"| {r['model']} | {r['lags']} | {r['smooth']} | {r['threshold']} | {r['verify'].removesuffix('.csv')} | "
            f"{r['selected']} ({r['terms']}) | {_f(r['r2'])} | {_f(r['adj_r2'])} | {_f(r['rand_mean'])} | "
            f"{_f(r['rand_adj_mean'])} | {p} | {_f(r['main_r2'])} | {_f(r['main_adj_r2'])} | "
            f"{_f(r['all_r2'])} | {_f(r['all_adj_r2'])} |"
        )
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", type=Path, default=DATA)
    args = ap.parse_args()
    res = rows(args.data)
    md = markdown(res)
    print(md)
    doc = DOC.read_text()
    if BEGIN in doc and END in doc:
        DOC.write_text(doc[: doc.index(BEGIN) + len(BEGIN)] + "\n" + md + "\n" + doc[doc.index(END) :])
        print(f"updated {DOC}")
    wins = sum(
        1
        for r in res
        if r["adj_r2"] is not None and r["rand_adj_mean"] is not None and r["adj_r2"] >= r["rand_adj_mean"]
    )
    path = write_result(
        "reduction_exathlon",
        {
            "benchmark": "data reduction on Exathlon (train run 15, verify runs 18 and 17; 220 features, 5-s rows)",
            "script": "bench_exathlon_reduction",
            "main": MAIN,
            "results": res,
            "rows": [
                {
                    "measure": f"{r['model']}, lags {r['lags']}, smooth {r['smooth']}, t = {r['threshold']}, "
                    f"verify {r['verify'].removesuffix('.csv')}",
                    "value": f"adj. R² {_f(r['adj_r2'])} (RAND {_f(r['rand_adj_mean'])}, MAIN {_f(r['main_adj_r2'])}, "
                    f"all {_f(r['all_adj_r2'])}); {r['selected']} of {r['features']} selected",
                    "target": "adj. R² ≥ RAND's mean",
                }
                for r in res
            ],
            "notes": f"The selection's adjusted R² is at least RAND's mean in {wins} of {len(res)} rows; "
            "the full table and its reading are in docs/reduction.md.",
        },
    )
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
