"""Imputation quality next to the simple methods a user would otherwise use: the clean operator's
KNN (``impute="knn"``), its last value and running mean, and linear interpolation between the
neighbouring observed values of the same series (offline only: it needs the next value).

Traces: ``producers.synth.multiplexed`` (8 nodes × 6 PMU events driven by a shared load, one event
missing per interval in rotation plus 1 % gaps, 1,000 intervals) and ``producers.synth.cyclic``
(8 nodes × 6 smooth cyclic metrics, 1 % gaps, no spikes). Per method: the share of gaps filled and
the RMSE against the true values, relative to the series' own scale. Writes
``bench/results/imputation.json``.

    python -m bench.compare_imputation
"""

from __future__ import annotations

import json

import numpy as np
from perfsift.operators import Clean
from perfsift.producers.synth import cyclic, multiplexed
from perfsift.schemas import samples_to_batch

from bench.common import RESULTS, machine


def interpolate(cube: np.ndarray) -> np.ndarray:
    """Linear interpolation over time per (node, metric); NaN outside the observed range."""
    out = cube.copy()
    t = np.arange(cube.shape[0], dtype=float)
    for p in range(cube.shape[1]):
        for j in range(cube.shape[2]):
            ok = ~np.isnan(cube[:, p, j])
            if ok.sum() >= 2:
                v = np.interp(t, t[ok], cube[ok, p, j], left=np.nan, right=np.nan)
                out[~ok, p, j] = v[~ok]
    return out


def evaluate(samples: list[dict], true: np.ndarray, metrics: list[str]) -> dict[str, dict[str, float]]:
    b = samples_to_batch(samples)
    cols = [b.metrics.index(m) for m in metrics]
    obs = b.values[:, cols]
    gaps = np.isnan(obs)
    truth = true.reshape(-1, len(cols))[gaps]
    scale = np.broadcast_to(np.std(true, axis=0), true.shape).reshape(obs.shape)[gaps]  # per (node, metric)
    filled = {m: Clean(mode="none", impute=m).update(b).values[:, cols][gaps] for m in ("knn", "last", "mean")}
    filled["linear interpolation (offline)"] = interpolate(obs.reshape(true.shape)).reshape(obs.shape)[gaps]
    res = {}
    for name, v in filled.items():
        ok = ~np.isnan(v)
        res[name] = {"filled": float(ok.mean()), "rmse": float(np.sqrt(np.mean((v[ok] - truth[ok]) ** 2))),
                     "rmse / series sd": float(np.sqrt(np.mean(((v[ok] - truth[ok]) / scale[ok]) ** 2)))}  # fmt: skip
    return res


def main() -> None:
    mux, mux_truth = multiplexed(samples=1000, seed=1)
    cyc, cyc_truth = cyclic(samples=3000, seed=1, spikes=0.0, shifts=0.0)
    result = {
        "multiplexed": evaluate(mux, mux_truth["values"], mux_truth["metrics"]),
        "cyclic": evaluate(cyc, cyc_truth["values"], cyc_truth["metrics"]),
    }
    lines = ["| method | multiplexed: filled · RMSE (÷ series sd) | cyclic, 1 % gaps: filled · RMSE (÷ series sd) |",
             "|---|---|---|"]  # fmt: skip
    for name in result["multiplexed"]:
        cells = [f"{r[name]['filled']:.1%} · {r[name]['rmse']:,.0f} ({r[name]['rmse / series sd']:.3f})"
                 for r in result.values()]  # fmt: skip
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    print("\n".join(lines))
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "imputation.json").write_text(json.dumps({"machine": machine(), **result}, indent=2) + "\n")


if __name__ == "__main__":
    main()
