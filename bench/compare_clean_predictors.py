"""Which one-step predictor the residual outlier filter should use: the clean operator's local
line (``Clean(mode="predict")``, a least-squares line through the last ``fit`` accepted values,
robust residual scale) against the NWS forecaster bank (``ForecastBank``: the one-step MSE
forecast and the realised RMSE of its forecasts as σ), with the same rules around them: a value is
flagged when its residual exceeds k·σ, a flagged value does not enter the predictor's state, and a
run of ``accept_after`` flags is accepted as a new level. The spec's ``window`` filter and Hampel are
the baselines.

On ``producers.synth.cyclic`` (8 nodes × 6 metrics × 3,000 samples, seeds 0 and 1): precision and
recall of spike flags (flags in the ``3·accept_after`` samples after a level shift counted apart);
on NAB CloudWatch and the Exathlon undisturbed runs: the share of values flagged (outside NAB's
labelled windows). Writes ``bench/results/clean_predictors.json``.

    python -m bench.compare_clean_predictors [--data ../shared/data]
"""

from __future__ import annotations

import argparse
import csv
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from perfsift.operators import Batch, Clean
from perfsift.operators.forecast.forecast import ForecastBank
from perfsift.producers.synth import cyclic
from perfsift.schemas import samples_to_batch

from bench.common import RESULTS, ROOT, machine
from bench.report_nab import _ts, load

ACCEPT_AFTER, N_MIN = 10, 10


def nws_flags(cube: np.ndarray, k: float) -> np.ndarray:
    """Flags (time × node × metric) of the residual filter on the NWS bank's one-step forecasts."""
    steps, nodes, metrics = cube.shape
    bank = ForecastBank()
    pred = np.full((nodes, metrics), np.nan)
    sigma = np.full((nodes, metrics), np.nan)
    accepted = np.zeros((nodes, metrics), dtype=np.int64)
    run = np.zeros((nodes, metrics), dtype=np.int64)
    flags = np.zeros(cube.shape, dtype=bool)
    names, cols = [f"n{p}" for p in range(nodes)], [f"m{j}" for j in range(metrics)]
    for t in range(steps):
        x = cube[t]
        with np.errstate(invalid="ignore"):
            flag = (accepted >= N_MIN) & (np.abs(x - pred) > k * np.maximum(sigma, 1e-12 + 1e-9 * np.abs(pred)))
        run = np.where(flag, run + 1, np.where(np.isnan(x), run, 0))
        new_level = run >= ACCEPT_AFTER
        flag &= ~new_level
        run[new_level] = 0
        flags[t] = flag
        feed = np.where(flag, np.nan, x)
        accepted += ~np.isnan(feed)
        out = bank.update(Batch.from_columns(ts=np.full(nodes, float(t)), nodes=names, metrics=cols, values=feed))
        fed = ~np.isnan(feed)
        pred[fed] = out.values[fed]
        sigma[fed] = out.extra["sigma"][fed]
    return flags


def clean_flags(mode: str) -> Callable[[np.ndarray], np.ndarray]:
    def run(cube: np.ndarray) -> np.ndarray:
        steps, nodes, metrics = cube.shape
        ts = np.repeat(np.arange(steps, dtype=float), nodes)
        names = [f"n{p}" for p in range(nodes)] * steps
        cols = [f"m{j}" for j in range(metrics)]
        batch = Batch.from_columns(ts=ts, nodes=names, metrics=cols, values=cube.reshape(-1, metrics))
        out = Clean(mode=mode, action="flag", impute="none").update(batch)
        flags = np.zeros(steps * nodes * metrics, dtype=bool)
        for i, f in enumerate(out.extra["flags"]):
            for g in f or ():
                flags[i * metrics + out.metrics.index(g["metric"])] = True
        return flags.reshape(cube.shape)

    return run


DETECTORS: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "predict (local line, default)": clean_flags("predict"),
    "NWS bank, k = 4.5": lambda c: nws_flags(c, 4.5),
    "NWS bank, k = 3": lambda c: nws_flags(c, 3.0),
    "window (spec)": clean_flags("window"),
    "hampel": clean_flags("hampel"),
}


def synthetic(seed: int) -> dict[str, dict[str, float]]:
    samples, truth = cyclic(seed=seed)
    b = samples_to_batch(samples)
    names = truth["metrics"]
    cube = b.values[:, [b.metrics.index(m) for m in names]].reshape(-1, truth["nodes"], len(names))
    spike = np.zeros(cube.shape, dtype=bool)
    zone = np.zeros(cube.shape, dtype=bool)
    for s in truth["spikes"]:
        spike[s["step"], int(s["node"][1:]), names.index(s["metric"])] = True
    after = [(slice(sh["step"], sh["step"] + 3 * ACCEPT_AFTER), int(sh["node"][1:]), names.index(sh["metric"]))
             for sh in truth["shifts"]]  # fmt: skip
    for where in after:
        zone[where] = True
    zone &= ~spike
    res = {}
    for name, detect in DETECTORS.items():
        f = detect(cube)
        rest = f & ~zone
        res[name] = {"precision": float((rest & spike).sum() / max(rest.sum(), 1)),
                     "recall": float((f & spike).sum() / spike.sum()),
                     "max flags per level shift": int(max(f[where].sum() for where in after))}  # fmt: skip
    return res


def nab(data: Path) -> dict[str, float]:
    windows: dict[str, list[tuple[float, float]]] = {}
    with (data / "windows.csv").open() as fh:
        for r in csv.DictReader(fh):
            windows.setdefault(Path(r["file"]).name, []).append((_ts(r["window_start"]), _ts(r["window_end"])))
    outside = dict.fromkeys(DETECTORS, 0)
    points = 0
    for path in sorted((data / "realAWSCloudwatch").glob("*.csv")):
        ts, v = load(path)
        inside = np.zeros(len(v), dtype=bool)
        for a, b in windows.get(path.name, []):
            inside |= (ts >= a) & (ts <= b)
        points += len(v)
        for name, detect in DETECTORS.items():
            outside[name] += int((detect(v[:, None, None])[:, 0, 0] & ~inside).sum())
    return {name: n / points for name, n in outside.items()}


def exathlon(data: Path) -> dict[str, float]:
    from perfsift.producers.traces import iter_csv_samples

    flagged = dict.fromkeys(DETECTORS, 0)
    values = 0
    for path in sorted(data.glob("app1_run*.csv")):
        b = samples_to_batch([s for s in iter_csv_samples(path) if s["node"] != "driver"])
        nodes = sorted(set(b.node_names()))
        keep = [j for j, m in enumerate(b.metrics) if m != "processing_delay_ms"]
        if len(b) % len(nodes):
            raise ValueError(f"{path}: not one row per node and bucket")
        cube = b.values[:, keep].reshape(-1, len(nodes), len(keep))
        values += int((~np.isnan(cube)).sum())
        for name, detect in DETECTORS.items():
            flagged[name] += int(detect(cube).sum())
    return {name: n / values for name, n in flagged.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", type=Path, default=ROOT.parent.parent / "shared" / "data")
    args = ap.parse_args()
    synth = {seed: synthetic(seed) for seed in (0, 1)}
    nab_share, ex_share = nab(args.data / "nab"), exathlon(args.data / "exathlon")
    head = "cyclic seed 0: precision / recall | seed 1 | max flags per level shift | NAB: flagged outside | Exathlon"
    lines = [f"| detector | {head} |", "|---|---|---|---|---|---|"]
    for name in DETECTORS:
        s0, s1 = synth[0][name], synth[1][name]
        per_shift = max(s0["max flags per level shift"], s1["max flags per level shift"])
        lines.append(f"| {name} | {s0['precision']:.3f} / {s0['recall']:.3f} | {s1['precision']:.3f} / "
                     f"{s1['recall']:.3f} | {per_shift} | {nab_share[name]:.2%} | {ex_share[name]:.2%} |")  # fmt: skip
    print("\n".join(lines))
    RESULTS.mkdir(exist_ok=True)
    result: dict[str, Any] = {"machine": machine(), "cyclic": synth, "nab_outside": nab_share, "exathlon": ex_share}
    (RESULTS / "clean_predictors.json").write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
