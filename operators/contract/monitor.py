"""Contract monitoring (METHODS.md §4.5-4.6): each sample's distance to its contract's classes,
as a fuzzy violation level, smoothed per node, with persistence and hysteresis.

:class:`ContractMonitor` measures each new sample's distance to the nearest class of each space
(:mod:`~perfsift.operators.contract.signature`) in tolerance units (Chebyshev by default), turns
it into a violation level in [0, 1] with the fuzzy rulebase
(:mod:`~perfsift.operators.contract.rules`), smooths it per node and raises or clears a violation
with persistence and hysteresis (:class:`ViolationTracker`, §4.6).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from perfsift.operators._keyed import KeyedColumns, group_rows, grow
from perfsift.operators.base import Decider
from perfsift.operators.batch import Batch
from perfsift.operators.contract.rules import DEFAULT_RULEBASE, Rulebase
from perfsift.operators.contract.signature import (
    ContractError,
    Dimension,
    capability_column,
    check_contract,
    contract_path,
    load_contract,
    phi,
)
from perfsift.operators.forecast.forecast import ForecastBank

STATES = ("ok", "violated", "unknown")


class ViolationTracker:
    """Per key: the EWMA (weight 1/2) of violation levels, and an ok/violated state raised after
    ``k_persist`` consecutive smoothed levels >= ``theta_on`` and cleared below ``theta_off``
    (§4.6). NaN levels leave a key's state alone and come out as ``unknown``."""

    def __init__(self, theta_on: float, theta_off: float, k_persist: int) -> None:
        self.theta_on, self.theta_off, self.k_persist = theta_on, theta_off, k_persist
        self.ewma = np.full(0, np.nan)
        self.run = np.zeros(0, dtype=np.int64)  # consecutive rows at or above theta_on
        self.state = np.zeros(0, dtype=np.int64)  # 0 ok, 1 violated

    def update(self, keys: np.ndarray, violation: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(smoothed level, state index into STATES) per row; rows of a key in arrival order."""
        k = len(keys)
        smoothed = np.full(k, np.nan)
        state = np.full(k, 2, dtype=np.int64)
        if not k:
            return smoothed, state
        nk = int(keys.max()) + 1
        self.ewma = grow(self.ewma, 0, nk, np.nan)
        self.run = grow(self.run, 0, nk, 0)
        self.state = grow(self.state, 0, nk, 0)
        order, _, _, rank = group_rows(keys)
        for r in range(int(rank.max()) + 1):
            rows = order[rank == r]
            kk = keys[rows]
            v = violation[rows]
            ok = ~np.isnan(v)
            prev = self.ewma[kk]
            new = np.where(np.isnan(prev), v, 0.5 * prev + 0.5 * v)
            new = np.where(ok, new, prev)
            self.ewma[kk] = new
            run = np.where(ok, np.where(new >= self.theta_on, self.run[kk] + 1, 0), self.run[kk])
            self.run[kk] = run
            st = self.state[kk]
            st = np.where(ok & (run >= self.k_persist), 1, st)
            st = np.where(ok & (new < self.theta_off), 0, st)
            self.state[kk] = st
            smoothed[rows] = new
            state[rows] = np.where(ok, st, 2)
        return smoothed, state

    def arrays(self, n: int) -> dict[str, np.ndarray]:
        return {"ewma": self.ewma[:n], "run": self.run[:n], "state": self.state[:n]}

    def load(self, arrays: Mapping[str, np.ndarray]) -> None:
        self.ewma = arrays["ewma"].astype(np.float64).copy()
        self.run = arrays["run"].astype(np.int64).copy()
        self.state = arrays["state"].astype(np.int64).copy()


class ContractMonitor(Decider):
    """Evaluate samples against a contract, per (job, node).

    Output: a batch with the same rows whose values are the per-dimension violation levels (columns
    named ``space:dim``), with extra columns ``violation`` (overall level, NaN = unknown), ``smoothed``
    (EWMA), ``state`` (index into :data:`STATES`), ``driver`` (column of the dimension driving the
    level, -1 if unknown) and ``distance`` (per-dimension distances in tolerance units). The
    application level (share of a job's nodes in violation) is :func:`job_summary`'s business.

    Parameters
    ----------
    contract : dict or str
        A contract (see :func:`derive_contract`) or the path of a contract JSON file.
    metric : str
        ``"chebyshev"`` (nearest class by the largest deviation) or ``"euclid"``.
    combine, weights : str, dict, optional
        ``"max"``, ``"mean"`` or ``"weighted"`` (§4.6) of the dimensions' levels; ``weights`` maps
        ``"space:dimension"`` to a weight (1 for a dimension not named), used by ``"weighted"``:
        ``v = Σ w_j v_j / Σ w_j``.
    theta_on, theta_off, k_persist : float, float, int
        Raise when the smoothed level is >= theta_on for k_persist rows; clear below theta_off.
    capability_forecasts : dict, optional
        ``{unit: metric}``: take a node's capability in ``unit`` from the NWS forecast of ``metric``
        made before each sample (§5) instead of the contract's fixed capabilities - the paper's
        way to set expectations without a baseline of the same resources. Until a node has a
        forecast, the contract's capability (or 1) is used.

    Examples
    --------
    A contract derived from a baseline where cpu stays near 0.5; a node that jumps to 0.95 is at
    level 1 at once and raised after ``k_persist`` = 2 rows:

    >>> import numpy as np
    >>> from perfsift.operators import Batch
    >>> from perfsift.operators.contract.signature import derive_contract
    >>> rng = np.random.default_rng(1)
    >>> baseline = Batch.from_columns(ts=range(50), nodes=["a"] * 50, metrics=["cpu"],
    ...                               values=(0.5 + 0.01 * rng.standard_normal((50, 1))).round(3))
    >>> op = ContractMonitor(contract=derive_contract(baseline, {"load": ["cpu"]}))
    >>> out = op.update(Batch.from_columns(ts=range(5), nodes=["a"] * 5, metrics=["cpu"],
    ...                                     values=[[0.5], [0.5], [0.95], [0.95], [0.95]]))
    >>> out.metrics, out.values[:, 0].round(2).tolist(), [STATES[i] for i in out.extra["state"]]
    (('load:cpu',), [0.0, 0.0, 1.0, 1.0, 1.0], ['ok', 'ok', 'ok', 'violated', 'violated'])
    """

    output = "contract"
    FILE_PARAMS = ("contract",)

    def records(self, out: Batch | list[dict[str, Any]]) -> list[dict[str, Any]]:
        return contract_records(out) if isinstance(out, Batch) else out

    def param_file(self, name: str) -> Path | None:
        """The contract file: a path, or the bundled contract of that name (``demo``)."""
        if name == "contract" and isinstance(self.contract, str | Path):
            path = contract_path(self.contract)
            return path if path.is_file() else None
        return super().param_file(name)

    def __init__(
        self,
        contract: dict[str, Any] | str | None = None,
        metric: str = "chebyshev",
        combine: str = "max",
        theta_on: float = 0.5,
        theta_off: float = 0.3,
        k_persist: int = 2,
        capability_forecasts: dict[str, str] | None = None,
        weights: dict[str, float] | None = None,
    ) -> None:
        self.contract = contract
        self.metric = metric
        self.combine = combine
        self.theta_on = theta_on
        self.theta_off = theta_off
        self.k_persist = k_persist
        self.capability_forecasts = capability_forecasts
        self.weights = weights

    def reset(self) -> None:
        doc = self.contract
        if doc is None:
            raise ContractError("ContractMonitor needs a contract (a dict or a contract file path)")
        if isinstance(doc, str | Path):
            doc = load_contract(doc)
        else:
            check_contract(doc)
        if self.metric not in ("chebyshev", "euclid") or self.combine not in ("max", "mean", "weighted"):
            raise ValueError("metric must be chebyshev|euclid and combine max|mean|weighted")
        self.doc_ = doc
        self.spaces_ = [
            (
                sp["name"],
                [Dimension.parse(d) for d in sp["dims"]],
                np.array([c["centroid"] for c in sp["classes"]], dtype=np.float64),
                np.array([c["tolerance"] for c in sp["classes"]], dtype=np.float64),
            )
            for sp in doc["spaces"]
        ]
        self.dim_names_ = [f"{name}:{d.expr}" for name, dims, _, _ in self.spaces_ for d in dims]
        unknown = sorted(set(self.weights or {}) - set(self.dim_names_))
        if unknown or any(not w >= 0 for w in (self.weights or {}).values()):
            raise ValueError(f"weights: non-negative numbers for dimensions {self.dim_names_}; not found: {unknown}")
        self.weights_ = np.array([float((self.weights or {}).get(n, 1.0)) for n in self.dim_names_])
        rb = Rulebase.parse(doc.get("rulebase", DEFAULT_RULEBASE), "contract rulebase")
        self.lut_x_, self.lut_y_ = rb.table()
        self.caps_ = doc.get("capabilities") or {}
        self.bank_ = ForecastBank(metrics=sorted(set((self.capability_forecasts or {}).values())))
        self.cols_ = KeyedColumns()
        self.tracker_ = ViolationTracker(self.theta_on, self.theta_off, self.k_persist)

    def levels(self, distance: np.ndarray) -> np.ndarray:
        """Violation level of distances (fuzzy rulebase via its exact lookup table)."""
        out = np.interp(distance, self.lut_x_, self.lut_y_)
        out[np.isnan(distance)] = np.nan
        return out

    def update(self, batch: Batch) -> Batch:
        k = len(batch)
        forecast_caps = self._forecast_capabilities(batch) if self.capability_forecasts else {}
        dist_cols, level_cols = [], []
        for _, dims, cent, tol in self.spaces_:
            cols = []
            for d in dims:
                cap = capability_column(batch, d.unit, self.caps_)
                if d.unit in forecast_caps:
                    fc = forecast_caps[d.unit]
                    cap = np.where(np.isnan(fc) | (fc <= 0), cap if cap is not None else 1.0, fc)
                cols.append(phi(d.values(batch, cap)))
            pts = np.stack(cols, axis=1) if cols else np.empty((k, 0))
            delta = np.abs(pts[:, None, :] - cent[None, :, :]) / tol[None, :, :]  # [k, C, m]
            score = delta.max(axis=2) if self.metric == "chebyshev" else np.sqrt((delta**2).mean(axis=2))
            best = np.argmin(np.where(np.isnan(score), np.inf, score), axis=1)
            d = delta[np.arange(k), best]  # [k, m]; NaN rows stay NaN
            dist_cols.append(d)
            level_cols.append(self.levels(d))
        dist = np.concatenate(dist_cols, axis=1) if dist_cols else np.empty((k, 0))
        lev = np.concatenate(level_cols, axis=1) if level_cols else np.empty((k, 0))
        unknown = np.isnan(lev).any(axis=1)
        safe = np.where(np.isnan(lev), -np.inf, lev)
        driver = np.where(unknown, -1, np.argmax(safe, axis=1)) if lev.shape[1] else np.full(k, -1)
        with np.errstate(all="ignore"):
            if self.combine == "weighted":
                violation = lev @ self.weights_ / self.weights_.sum()
            else:
                violation = lev.max(axis=1) if self.combine == "max" else lev.mean(axis=1)
        violation[unknown] = np.nan

        smoothed, state = self.tracker_.update(self.cols_.row_keys(batch) if k else np.zeros(0, np.int64), violation)
        return Batch(
            ts=batch.ts,
            node_idx=batch.node_idx,
            values=lev,
            metrics=tuple(self.dim_names_),
            nodes=batch.nodes,
            job_idx=batch.job_idx,
            jobs=batch.jobs,
            seq=batch.seq,
            extra={"violation": violation, "smoothed": smoothed, "state": state, "driver": driver, "distance": dist},
        )

    def _forecast_capabilities(self, batch: Batch) -> dict[str, np.ndarray]:
        """Per unit, each row's capability forecast made *before* that row (NaN where none yet)."""
        assert self.capability_forecasts is not None
        bank = self.bank_
        metrics = [m for m in bank.metrics or [] if m in batch.metrics]
        if not metrics:
            return {}
        # the forecast standing before each row: the bank's output for the key's previous row,
        # or, for a key's first row in this batch, the last forecast kept from earlier batches
        before = {m: np.full(len(batch), np.nan) for m in metrics}
        keys = bank.cols_.row_keys(batch)
        cols = bank.cols_.metric_columns(tuple(metrics))
        order, _, _, rank = group_rows(keys)
        first = order[rank == 0]
        for m, c in zip(metrics, cols.tolist(), strict=True):
            nk, nm = bank.series_of_.shape
            if len(first) and nm > c:
                sid = np.full(len(first), -1)
                ok = keys[first] < nk
                sid[ok] = bank.series_of_[keys[first][ok], c]
                has = sid >= 0
                before[m][first[has]] = bank.fin_mse_f_[sid[has]]
        out = bank.update(batch)
        for j, m in enumerate(out.metrics):
            prev_rows = order[1:][rank[1:] > 0]
            before[m][prev_rows] = out.values[order[:-1][rank[1:] > 0], j]
        return {unit: before[metric] for unit, metric in self.capability_forecasts.items() if metric in before}

    def summary(self) -> dict[str, dict[str, Any]]:
        """Per job, the contract state of each node now (``contract_nodes``: node -> ok, violated
        or unknown before its first evaluated row), for live views."""
        out: dict[str, dict[str, Any]] = {}
        ewma, state = self.tracker_.ewma, self.tracker_.state
        evaluated = min(len(ewma), len(state))  # live views read this while update() may grow them
        for i, (job, node) in enumerate(self.cols_.keys):
            known = i < evaluated and ewma[i] == ewma[i]
            nodes = out.setdefault(job, {"contract_nodes": {}})["contract_nodes"]
            nodes[node] = STATES[int(state[i])] if known else "unknown"
        return out

    def _state(self) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        nk = len(self.cols_.keys)
        arrays = self.tracker_.arrays(nk)
        if self.capability_forecasts:
            arrays["bank"] = np.frombuffer(self.bank_.snapshot(), dtype=np.uint8)
        return {"keys": self.cols_.keys}, arrays

    def _load_state(self, meta: dict[str, Any], arrays: dict[str, np.ndarray]) -> None:
        self.cols_.load(meta["keys"])
        self.tracker_.load(arrays)
        if "bank" in arrays:
            self.bank_.restore(arrays["bank"].tobytes())


def contract_records(out: Batch) -> list[dict[str, Any]]:
    """perf.contract records (schemas/contract.avsc) of a :class:`ContractMonitor` output batch."""
    names = out.metrics
    spaces: dict[str, list[int]] = {}
    for j, n in enumerate(names):
        spaces.setdefault(n.split(":", 1)[0], []).append(j)
    lev, dist = out.values, out.extra["distance"]
    recs = []
    nodes, jobs = out.node_names(), out.job_names()
    for i in range(len(out)):
        v = float(out.extra["violation"][i])
        sp = {}
        for name, cols in spaces.items():
            lv = lev[i, cols]
            dv = dist[i, cols]
            known = not np.isnan(lv).any()
            sp[name] = {
                "violation": float(lv.max()) if known else None,
                "distance": float(dv.max()) if known else None,
                "dims": {names[j].split(":", 1)[1]: (None if np.isnan(lev[i, j]) else float(lev[i, j])) for j in cols},
            }
        drv = int(out.extra["driver"][i])
        sm = float(out.extra["smoothed"][i])
        recs.append(
            {
                "ts": float(out.ts[i]),
                "node": nodes[i],
                "job": jobs[i],
                "violation": None if np.isnan(v) else v,
                "smoothed": None if np.isnan(sm) else sm,
                "state": STATES[int(out.extra["state"][i])],
                "driver": names[drv] if drv >= 0 else None,
                "spaces": sp,
            }
        )
    return recs


def sampling_interval(records: Sequence[Mapping[str, Any]]) -> float | None:
    """The sampling interval of a run: the median gap between consecutive distinct time stamps of
    one node, over all nodes (None with fewer than two stamps on every node)."""
    per_node: dict[str, list[float]] = {}
    for r in records:
        per_node.setdefault(r["node"], []).append(float(r["ts"]))
    gaps = [np.diff(np.unique(ts)) for ts in per_node.values()]
    flat = np.concatenate(gaps) if gaps else np.empty(0)
    flat = flat[flat > 0]
    return float(np.median(flat)) if flat.size else None


def job_summary(records: Sequence[Mapping[str, Any]], interval: float | None = None) -> dict[str, Any]:
    """Per node: rows, rows violated, mean and max level; per job: the largest share of its nodes in
    violation at once (the application level of §4.6).

    "At once" means *in one sampling interval*, not at one exact time stamp: nodes' clocks never agree
    to the microsecond. Time is cut into buckets of ``interval`` seconds (default: the run's median
    sampling interval, :func:`sampling_interval`) anchored 1 % of an interval before the job's first
    time stamp; a node
    counts once per bucket, by its last state in it; the share is the nodes violated over the nodes
    with a row in the bucket. Skew between nodes below 0.99 of an interval therefore does not split
    a round of samples (10 ms and 900 ms skew at a 1 s interval give the same share as aligned clocks)."""
    if interval is not None and not interval > 0:
        raise ValueError(f"interval must be > 0 seconds, got {interval}")
    step = interval if interval is not None else sampling_interval(records)
    nodes: dict[str, dict[str, Any]] = {}
    start: dict[str, float] = {}
    for r in records:
        n = nodes.setdefault(r["node"], {"job": r["job"], "rows": 0, "violated": 0, "unknown": 0, "levels": []})
        n["rows"] += 1
        n["violated"] += r["state"] == "violated"
        n["unknown"] += r["state"] == "unknown"
        if r["violation"] is not None:
            n["levels"].append(r["violation"])
        start[r["job"]] = min(start.get(r["job"], float(r["ts"])), float(r["ts"]))
    by_bucket: dict[tuple[str, float], dict[str, tuple[float, str]]] = {}
    for r in records:
        ts = float(r["ts"])
        # anchored 1 % of an interval before the job's first sample, so that the first node's own
        # later samples do not fall a rounding error short of their bucket (5.08 - 0.08 < 5)
        bucket = float(np.floor((ts - start[r["job"]]) / step + 0.01)) if step else ts
        seen = by_bucket.setdefault((r["job"], bucket), {})
        if r["node"] not in seen or seen[r["node"]][0] <= ts:  # the node's last state in the bucket
            seen[r["node"]] = (ts, r["state"])
    per_node = {
        k: {
            "job": v["job"],
            "rows": v["rows"],
            "violated": v["violated"],
            "unknown": v["unknown"],
            "mean_level": float(np.mean(v["levels"])) if v["levels"] else None,
            "max_level": float(np.max(v["levels"])) if v["levels"] else None,
        }
        for k, v in sorted(nodes.items())
    }
    per_job: dict[str, float] = {}
    for (job, _), last in by_bucket.items():
        share = sum(s == "violated" for _, s in last.values()) / len(last)
        per_job[job] = max(per_job.get(job, 0.0), share)
    return {"nodes": per_node, "max_share_violated": per_job, "interval": step}
