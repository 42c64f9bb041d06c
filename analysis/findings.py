"""What a run's or an analysis's output folder says, as data: the files ``perfsift run --report DIR``
and ``perfsift analyze --out DIR`` write (:data:`~perfsift.analysis.analyze.FILES`, ``summary.json``)
read back and summarised for ``perfsift explain`` (:mod:`perfsift.analysis.explain`) and the report
(:mod:`perfsift.analysis.report`).

Every reader is tolerant: a file may be missing, a record may lack a field (records of other
versions), and forecasts may come one per sample or one per node and period.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import orjson
from perfsift.schemas.forecast_wire import complete_forecast


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """The records of a JSON-lines file; [] when it does not exist. A torn last line (a file being
    rewritten) is left out."""
    if not path.exists():
        return []
    out = []
    for line in path.read_bytes().splitlines():
        if line.strip():
            try:
                out.append(orjson.loads(line))
            except orjson.JSONDecodeError:
                continue
    return out


@dataclass
class Folder:
    """The outputs of one run or analysis."""

    path: Path
    summary: dict[str, Any] = field(default_factory=dict)
    selections: list[dict[str, Any]] = field(default_factory=list)
    reduced: list[dict[str, Any]] = field(default_factory=list)
    contracts: list[dict[str, Any]] = field(default_factory=list)
    forecasts: list[dict[str, Any]] = field(default_factory=list)
    predictions: list[dict[str, Any]] = field(default_factory=list)

    @property
    def pursuit(self) -> list[dict[str, Any]]:
        return sorted((s for s in self.selections if s.get("kind") == "pursuit"), key=lambda s: s["period_start"])

    @property
    def reductions(self) -> list[dict[str, Any]]:
        return sorted((s for s in self.selections if s.get("kind") == "reduction"), key=lambda s: s["period_start"])

    def empty(self) -> bool:
        return not (self.selections or self.reduced or self.contracts or self.forecasts or self.predictions)


def load_folder(path: Path) -> Folder:
    """Read every output file of ``path`` that exists."""
    summary = orjson.loads((path / "summary.json").read_bytes()) if (path / "summary.json").exists() else {}
    return Folder(
        path,
        summary if isinstance(summary, dict) else {},
        read_jsonl(path / "selection.jsonl"),
        read_jsonl(path / "reduced.jsonl"),
        read_jsonl(path / "contract.jsonl"),
        [complete_forecast(f) for f in read_jsonl(path / "forecast.jsonl")],  # bounds are not on the wire
        read_jsonl(path / "prediction.jsonl"),
    )


def stood_apart(pursuit: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """Per node (by decreasing number of periods): the analysed periods in which it stood apart,
    each ``{"job", "start", "end", "z", "metrics"}``."""
    out: dict[str, list[dict[str, Any]]] = {}
    for r in pursuit:
        for d in r.get("deviants") or []:
            out.setdefault(d["node"], []).append(
                {
                    "job": r["job"],
                    "start": r["period_start"],
                    "end": r["period_end"],
                    "z": d["z"],
                    "metrics": d["metrics"],
                }
            )
    return dict(sorted(out.items(), key=lambda kv: (-len(kv[1]), kv[0])))


def contract_levels(contracts: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per node: ``ts`` and ``level`` arrays (violation level, NaN = unknown), how many evaluations
    were ``violated``, the first and last such time and the dimension that drove them most often."""
    by_node: dict[str, list[dict[str, Any]]] = {}
    for c in contracts:
        by_node.setdefault(c["node"], []).append(c)
    out: dict[str, dict[str, Any]] = {}
    for node, recs in sorted(by_node.items()):
        recs.sort(key=lambda c: c["ts"])
        bad = [c for c in recs if c.get("state") == "violated"]
        drivers: dict[str, int] = {}
        for c in bad:
            if c.get("driver"):
                drivers[c["driver"]] = drivers.get(c["driver"], 0) + 1
        out[node] = {
            "ts": np.array([c["ts"] for c in recs], dtype=float),
            "level": np.array([np.nan if c.get("violation") is None else c["violation"] for c in recs], dtype=float),
            "evaluations": len(recs),
            "violated": len(bad),
            "first": bad[0]["ts"] if bad else None,
            "last": bad[-1]["ts"] if bad else None,
            "driver": max(drivers, key=drivers.__getitem__) if drivers else None,
        }
    return out


def measured(reduced: list[dict[str, Any]]) -> dict[tuple[str, str], tuple[np.ndarray, np.ndarray]]:
    """Per (node, metric): the measured (smoothed) values of the reduced stream, (ts, values) in time
    order; only where the metric was sent."""
    cols: dict[tuple[str, str], tuple[list[float], list[float]]] = {}
    for r in reduced:
        for m, v in (r.get("metrics") or {}).items():
            if v is not None:
                ts, vs = cols.setdefault((r["node"], m), ([], []))
                ts.append(r["ts"])
                vs.append(v)
    out = {}
    for key, (ts, vs) in cols.items():
        t, v = np.array(ts), np.array(vs)
        order = np.argsort(t, kind="stable")
        out[key] = (t[order], v[order])
    return out


@dataclass
class Band:
    """One forecast series against what was measured: the band in force at each measured time."""

    node: str
    metric: str
    ts: np.ndarray  # measured times
    value: np.ndarray  # measured values
    forecast: np.ndarray  # the forecast in force (the newest made before ts); NaN: none yet
    lower: np.ndarray
    upper: np.ndarray

    @property
    def scored(self) -> int:
        return int((~np.isnan(self.lower)).sum())

    @property
    def outside(self) -> int:
        ok = ~np.isnan(self.lower)
        return int(((self.value[ok] < self.lower[ok]) | (self.value[ok] > self.upper[ok])).sum())


def forecast_bands(folder: Folder) -> list[Band]:
    """Every forecast series that has measured values, by decreasing share of measured values
    outside their ±2σ band. The band in force at a measured time is the one of the newest forecast
    record made strictly before it (forecasts predict what comes next: one record per sample or one
    per period alike)."""
    series: dict[tuple[str, str], list[tuple[float, float, float, float]]] = {}
    for f in folder.forecasts:
        lo, hi = f.get("lower"), f.get("upper")
        series.setdefault((f["node"], f["metric"]), []).append(
            (f["ts"], f["forecast"], np.nan if lo is None else lo, np.nan if hi is None else hi)
        )
    seen = measured(folder.reduced)
    bands = []
    for key, rows in series.items():
        if key not in seen:
            continue
        arr = np.array(sorted(rows))
        ts, value = seen[key]
        idx = np.searchsorted(arr[:, 0], ts, side="left") - 1
        have = idx >= 0
        pick = np.where(have, idx, 0)

        def col(j: int, pick: np.ndarray = pick, have: np.ndarray = have, arr: np.ndarray = arr) -> np.ndarray:
            return np.where(have, arr[pick, j], np.nan)

        bands.append(Band(key[0], key[1], ts, value, col(1), col(2), col(3)))
    return sorted(bands, key=lambda b: (-(b.outside / b.scored if b.scored else 0.0), -b.outside, b.node, b.metric))


def prediction_stats(predictions: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per (model, output, node): predictions, how many had an observed value, the share of those
    inside ±2σ, the mean |z| and how many were violated."""
    groups: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
    for p in predictions:
        groups.setdefault((p.get("model", ""), p["output"], p["node"]), []).append(p)
    out = []
    for (model, output, node), recs in sorted(groups.items()):
        obs = [p for p in recs if p.get("observed") is not None]
        inside = sum(p["lower"] <= p["observed"] <= p["upper"] for p in obs)
        zs = [abs(p["z"]) for p in obs if p.get("z") is not None]
        out.append(
            {
                "model": model,
                "output": output,
                "node": node,
                "predictions": len(recs),
                "observed": len(obs),
                "coverage": inside / len(obs) if obs else None,
                "mean_abs_z": float(np.mean(zs)) if zs else None,
                "violated": sum(p.get("state") == "violated" for p in recs),
            }
        )
    return out


def bytes_before_after(summary: dict[str, Any]) -> dict[str, float] | None:
    """Bytes of the raw, smoothed and reduced streams as ``summary.json`` tells them (``bytes_raw``,
    ``bytes_smoothed`` or the topic ``perf.smoothed``, ``bytes_reduced``); None when fewer than two."""
    topics = summary.get("topics") or {}
    found = {
        "raw": summary.get("bytes_raw"),
        "smoothed": summary.get("bytes_smoothed") or (topics.get("perf.smoothed") or {}).get("bytes"),
        "reduced": summary.get("bytes_reduced") or (topics.get("perf.reduced") or {}).get("bytes"),
    }
    out = {k: float(v) for k, v in found.items() if isinstance(v, (int, float)) and v > 0}
    return out if len(out) >= 2 else None


def period_of(pursuit: list[dict[str, Any]], t: float) -> float:
    """An event time from ``--period T``: T itself when it lies within the records' span, else
    seconds after the start of the first period."""
    if not pursuit:
        return t
    first = pursuit[0]["period_start"]
    return t if t >= first else first + t
