"""Cleaning throughput on column batches, one core, in metric values per second.

Batches of 5,000 samples × 12 metrics from 256 nodes (normal data with 0.5 % spikes; 2 % gaps in
the imputation runs), after a warm-up batch. Modes: predict (the default), window and Hampel, without
and with KNN imputation; and a naive per-record Python loop of the window rule as the baseline.

    python -m bench.bench_clean
"""

from __future__ import annotations

import os
import statistics
import time

os.environ.setdefault("NUMBA_NUM_THREADS", "1")

import numpy as np
from perfsift.operators import Batch, Clean

from bench.common import write_result

ROWS, METRICS, NODES = 5000, 12, 256


def batches(n: int, gaps: float, seed: int = 0) -> list[Batch]:
    rng = np.random.default_rng(seed)
    out = []
    for b in range(n):
        vals = rng.normal(100, 5, size=(ROWS, METRICS))
        vals[rng.random(vals.shape) < 0.005] *= 20
        if gaps:
            vals[rng.random(vals.shape) < gaps] = np.nan
        ts = (1.7e9 + b * (ROWS // NODES + 1) + np.arange(ROWS) // NODES).astype(np.float64)
        nodes = [f"n{i % NODES:03d}" for i in range(ROWS)]
        out.append(Batch.from_columns(ts=ts, nodes=nodes, metrics=[f"m{j}" for j in range(METRICS)], values=vals))
    return out


def rate(op: Clean, data: list[Batch]) -> float:
    op.update(data[0])  # warm-up (and numba's cache load)
    times = []
    for b in data[1:]:
        t = time.perf_counter()
        op.update(b)
        times.append(time.perf_counter() - t)
    return ROWS * METRICS / statistics.median(times)


def naive(data: list[Batch], window: int = 100, k: float = 3.0) -> float:
    """Per record and metric, Python lists: mean + k·σ of the last accepted values."""
    state: dict[tuple[str, str], list[float]] = {}
    times = []
    for b in data:
        nodes = b.node_names()
        rows = b.values.tolist()
        t = time.perf_counter()
        for node, row in zip(nodes, rows, strict=True):
            for m, x in zip(b.metrics, row, strict=True):
                hist = state.setdefault((node, m), [])
                if len(hist) >= 10:
                    mu = sum(hist) / len(hist)
                    sd = (sum((h - mu) ** 2 for h in hist) / len(hist)) ** 0.5
                    if x - mu > k * sd:
                        continue
                hist.append(x)
                if len(hist) > window:
                    hist.pop(0)
        times.append(time.perf_counter() - t)
    return ROWS * METRICS / statistics.median(times[1:])


def main() -> None:
    clean_data, gappy = batches(8, 0.0), batches(8, 0.02, seed=1)
    results = {
        "predict (default), no imputation": rate(Clean(impute="none"), clean_data),
        "window, no imputation": rate(Clean(mode="window", impute="none"), clean_data),
        "hampel, no imputation": rate(Clean(mode="hampel", impute="none"), clean_data),
        "predict + KNN imputation (2 % gaps)": rate(Clean(), gappy),
        "window + KNN imputation (2 % gaps)": rate(Clean(mode="window"), gappy),
        "naive per-record Python loop (window rule)": naive(clean_data[:4]),
    }
    for k, v in results.items():
        print(f"{k}: {v:,.0f} values/s")
    base = results["naive per-record Python loop (window rule)"]
    rows = [
        {"measure": f"clean {name}, {ROWS} × {METRICS} batches, 1 core", "value": f"{v:,.0f} values/s"
         + ("" if "naive" in name else f" ({v / base:,.0f}× naive)"),
         "target": ">= 2,000,000" if "no imputation" in name else ("baseline" if "naive" in name else ">= 500,000")}
        for name, v in results.items()
    ]  # fmt: skip
    write_result("clean", {"benchmark": "Cleaning throughput", "script": "bench_clean", "rows": rows})


if __name__ == "__main__":
    main()
