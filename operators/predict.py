"""Structural-model predictions as a stream, and model-driven contracts.

:class:`ModelPredictor` keeps the NWS forecasts (§5) of the metrics a model reads, per (job,
node). Before the samples of each new timestamp of a job go into those forecasts, it evaluates
the model from them - so the prediction for time t uses only what was known before t - and emits
one ``perf.prediction`` record per output (and node, for per-node outputs). When the model maps an
output to an observed metric (``observed:``), the record also carries the observed value, its
deviation ``z`` in sigmas, and a contract verdict: the distance ``|z| / tolerance_sigma`` (1 at
the edge of the ±2σ interval by default) goes through the same fuzzy rulebase as the contracts
(§4), then the same smoothing, persistence and hysteresis. No baseline run is needed: the model
sets the expectation.
"""

from __future__ import annotations

import contextlib
from collections import deque
from pathlib import Path
from typing import Any

import numpy as np
from perfsift.models import bundled
from perfsift.models.expressions import ModelError
from perfsift.models.structural import Prediction, StructuralModel
from perfsift.operators.base import Decider
from perfsift.operators.batch import Batch
from perfsift.operators.contract import STATES, ViolationTracker
from perfsift.operators.contract.rules import DEFAULT_RULEBASE, Rulebase
from perfsift.operators.forecast.forecast import ForecastBank

#: a batch's forecasts as :meth:`ModelPredictor._learned` gives them: the bank's metrics, each
#: row's node, and (rows, metrics) arrays of the forecasts, their sigmas and the observed values
_Learned = tuple[list[str], list[str], np.ndarray, np.ndarray, np.ndarray]


def load_model(model: str | Path | StructuralModel) -> StructuralModel:
    """A model from a path, or the name of a bundled model (``"sor"``)."""
    if isinstance(model, StructuralModel):
        return model
    p = Path(model)
    if p.is_file():
        return StructuralModel.load(p)
    try:
        return StructuralModel.load(bundled(str(model)))
    except FileNotFoundError as e:
        raise ModelError(f"no model file {str(model)!r} and {e}", str(model)) from None


class ModelPredictor(Decider):
    """Predict a structural model's outputs every timestamp of every job, from the forecasts.

    Parameters
    ----------
    model : str
        Model file path or bundled model name.
    method : str
        ``"auto"``, ``"first-order"`` or ``"monte-carlo"`` (see :mod:`perfsift.models.structural`).
    samples, seed : int
        Monte Carlo draws per prediction and the seed (each prediction reseeds from (seed, ts), so
        a replay gives the same numbers).
    history : int
        Observations kept per (node, metric) for ``distribution: empirical`` parameters.
    tolerance_sigma : float
        Deviation, in sigmas, that counts as distance 1 for the rulebase (2 = the interval's edge).
    rulebase : str, optional
        Rulebase text (default: the contracts' default).
    theta_on, theta_off, k_persist : float, float, int
        Violation state machine, as for :class:`~perfsift.operators.contract.ContractMonitor`.

    Output: a list of ``perf.prediction`` records (``schemas/prediction.avsc``).

    Examples
    --------
    The bundled SOR model reads each node's available CPU share and bandwidth; node ``b`` with
    half its CPU takes longer per iteration than ``a`` with 90 %, and the job's iteration time is
    the slowest node's:

    >>> from perfsift.operators import Batch
    >>> op = ModelPredictor(model="sor", method="first-order")
    >>> ts = [t for t in range(6) for _ in "ab"]
    >>> out = op.update(Batch.from_columns(ts=ts, nodes=["a", "b"] * 6, metrics=["cpu_avail", "bw_avail"],
    ...                                     values=[[0.9, 100.0], [0.5, 100.0]] * 6))
    >>> [(r["output"], r["node"], round(r["mean"], 4)) for r in out if r["ts"] == 5.0]
    [('IterTime', '*', 3.4), ('NodeTime', 'a', 3.3111), ('NodeTime', 'b', 3.4)]
    """

    output = "prediction"
    FILE_PARAMS = ("model",)

    def param_file(self, name: str) -> Path | None:
        """The model file: a path, or the bundled model of that name."""
        path = super().param_file(name)
        if path is None and name == "model" and isinstance(self.model, str):
            with contextlib.suppress(FileNotFoundError):
                path = bundled(self.model)
        return path

    def __init__(
        self,
        model: str = "sor",
        method: str = "auto",
        samples: int = 2000,
        seed: int = 0,
        history: int = 50,
        tolerance_sigma: float = 2.0,
        rulebase: str | None = None,
        theta_on: float = 0.5,
        theta_off: float = 0.3,
        k_persist: int = 2,
    ) -> None:
        self.model = model
        self.method = method
        self.samples = samples
        self.seed = seed
        self.history = history
        self.tolerance_sigma = tolerance_sigma
        self.rulebase = rulebase
        self.theta_on = theta_on
        self.theta_off = theta_off
        self.k_persist = k_persist

    def reset(self) -> None:
        self.model_ = load_model(self.model)
        m = self.model_
        self.inputs_ = {n: p.metric for n, p in m.parameters.items() if p.metric is not None}
        self.bank_ = ForecastBank(metrics=sorted(set(self.inputs_.values())))
        rb = Rulebase.parse(self.rulebase or DEFAULT_RULEBASE, "prediction rulebase")
        self.lut_x_, self.lut_y_ = rb.table()
        self.tracker_ = ViolationTracker(self.theta_on, self.theta_off, self.k_persist)
        self.keys_: dict[tuple[str, str, str], int] = {}  # (job, output, node) -> tracker key
        self.nodes_: dict[str, list[str]] = {}  # job -> nodes seen, sorted
        self.last_: dict[tuple[str, str, str], tuple[float, float]] = {}  # (job, node, metric) -> forecast, sigma
        self.seen_: dict[tuple[str, str, str], deque[float]] = {}  # observations, for empirical draws
        self.last_ts_: dict[str, float] = {}
        self.pending_: dict[str, tuple[float, Prediction | None]] = {}
        self.counts_ = {"predictions": 0, "first-order": 0, "monte-carlo": 0, "not_ready": 0}

    # -- inputs ------------------------------------------------------------------------------------
    def inputs_for(self, job: str) -> dict[str, dict[str, Any]] | None:
        """The model's metric parameters for a job's nodes, or None until every node has them."""
        nodes = self.nodes_[job]
        out: dict[str, dict[str, Any]] = {}
        for name, metric in self.inputs_.items():
            p = self.model_.parameters[name]
            got = [self.last_.get((job, n, metric)) for n in nodes]
            if any(g is None for g in got):
                return None
            mean = np.array([g[0] for g in got if g is not None])
            sigma = np.array([g[1] for g in got if g is not None])
            if p.stochastic and np.isnan(sigma).any():
                return None
            entry: dict[str, Any] = {"mean": mean, "sigma": sigma}
            if p.distribution == "empirical":
                seen = [list(self.seen_.get((job, n, metric), ())) for n in nodes]
                depth = max(len(s) for s in seen)
                hist = np.full((depth, len(nodes)), np.nan)
                for j, s in enumerate(seen):
                    hist[depth - len(s) :, j] = s
                entry["samples"] = hist
            out[name] = entry
        return out

    def _predict(self, job: str, ts: float) -> Prediction | None:
        inputs = self.inputs_for(job)
        if inputs is None:
            self.counts_["not_ready"] += 1
            return None
        seed = int(np.random.SeedSequence([self.seed, int(ts * 1000) & 0xFFFFFFFF]).generate_state(1)[0])
        pred = self.model_.predict(
            inputs, method=self.method, samples=self.samples, seed=seed, nodes=len(self.nodes_[job]), quantiles=False
        )  # the records carry the mean and sigma only
        self.counts_["predictions"] += 1
        self.counts_[pred.method] += 1
        return pred

    # -- streaming ---------------------------------------------------------------------------------
    def update(self, batch: Batch) -> list[dict[str, Any]]:
        records: list[dict[str, Any]] = []
        if not len(batch):
            return records
        jobs, nodes = batch.job_names(), batch.node_names()
        col = {m: j for j, m in enumerate(batch.metrics)}
        # (job, ts) groups in time order; rows keep their order within a group
        order = np.lexsort((np.arange(len(batch)), batch.ts, batch.job_idx))
        job_idx, ts = batch.job_idx[order], batch.ts[order]
        cut = np.flatnonzero((np.diff(job_idx) != 0) | (np.diff(ts) != 0)) + 1
        # the forecasts learn the whole batch in one call, in group order: a series' forecast after
        # each of its rows is the same as group by group (the bank's rows of a series go in arrival
        # order), and a group's forecasts are filed in ``last_`` only after its prediction is made
        learned = self._learned(batch.take(order))
        pending: list[tuple[dict[str, Any], int, float]] = []  # records whose contract verdict is due
        for a, e in zip(np.r_[0, cut].tolist(), np.r_[cut, len(order)].tolist(), strict=True):
            rows = order[a:e]
            job, t = jobs[int(rows[0])], float(batch.ts[rows[0]])
            known = self.nodes_.setdefault(job, [])
            new_nodes = sorted({nodes[int(r)] for r in rows} - set(known))
            if new_nodes:
                known.extend(new_nodes)
                known.sort()
            first_part = t > self.last_ts_.get(job, -np.inf)
            if first_part:
                self.pending_[job] = (t, self._predict(job, t))
                self.last_ts_[job] = t
            pt, pred = self.pending_.get(job, (None, None))
            if pred is not None and pt == t:
                records.extend(self._records(job, t, pred, batch, rows, col, nodes, first_part, pending))
            self._learn(job, learned, a, e)
        self._judge(pending)
        return records

    def _learned(self, part: Batch) -> _Learned:
        """The bank's forecasts and sigmas after each row of ``part``, and the rows' values of the
        bank's metrics (in the bank's order), with the rows' node names."""
        out = self.bank_.update(part)
        src = part.values[:, [part.metrics.index(m) for m in out.metrics]]
        return list(out.metrics), part.node_names(), out.values, out.extra["sigma"], src

    def _learn(self, job: str, learned: _Learned, a: int, e: int) -> None:
        """File rows ``a:e`` of the batch's learned forecasts and observations for ``job`` (as
        Python floats, a group's rows at a time: a whole batch as lists would take 4-8x the memory of
        its arrays)."""
        metrics, names, values, sigma, src = learned
        f_rows, s_rows, x_rows = values[a:e].tolist(), sigma[a:e].tolist(), src[a:e].tolist()
        for j, metric in enumerate(metrics):
            for i in range(e - a):
                node = names[a + i]
                f = f_rows[i][j]
                if f == f:
                    self.last_[(job, node, metric)] = (f, s_rows[i][j])
                x = x_rows[i][j]
                if x == x:
                    self.seen_.setdefault((job, node, metric), deque(maxlen=self.history)).append(x)

    def _records(
        self,
        job: str,
        t: float,
        pred: Prediction,
        batch: Batch,
        rows: np.ndarray,
        col: dict[str, int],
        nodes: list[str],
        first_part: bool,
        pending: list[tuple[dict[str, Any], int, float]],
    ) -> list[dict[str, Any]]:
        known = self.nodes_[job]
        where = {n: i for i, n in enumerate(known[: pred.nodes])}
        recs: list[dict[str, Any]] = []
        for output, stats in pred.outputs.items():
            metric = self.model_.observed.get(output)
            if self.model_.per_node(output):
                targets = [(nodes[int(r)], where.get(nodes[int(r)]), [int(r)]) for r in rows]
                targets = [x for x in targets if x[1] is not None]
            elif first_part:
                targets = [("*", 0, [int(r) for r in rows])]
            else:
                continue  # a reduced output is reported once per timestamp, with its first rows
            means, sds = stats["mean"].tolist(), stats["sigma"].tolist()
            for node, i, obs_rows in targets:
                assert i is not None
                mean, sd = means[i], sds[i]
                obs = None
                if metric is not None and metric in col:
                    vals = batch.values[obs_rows, col[metric]]
                    vals = vals[~np.isnan(vals)]
                    obs = float(vals.max()) if len(vals) else None  # the slowest report counts
                recs.append(self._record(job, t, output, node, mean, sd, pred, obs, pending))
        return recs

    def _record(
        self,
        job: str,
        t: float,
        output: str,
        node: str,
        mean: float,
        sd: float,
        pred: Prediction,
        obs: float | None,
        pending: list[tuple[dict[str, Any], int, float]],
    ) -> dict[str, Any]:
        z = None
        rec = {
            "ts": t,
            "job": job,
            "model": self.model_.name,
            "output": output,
            "node": node,
            "mean": mean,
            "sigma": sd,
            "lower": mean - 2 * sd,
            "upper": mean + 2 * sd,
            "method": pred.method,
            "observed": obs,
            "z": z,
            "violation": None,
            "state": "unknown",
        }
        if obs is not None:
            z = (obs - mean) / sd if sd > 0 else (0.0 if obs == mean else float(np.sign(obs - mean)) * np.inf)
            key = self.keys_.setdefault((job, output, node), len(self.keys_))
            pending.append((rec, key, abs(z) / self.tolerance_sigma))
            rec["z"] = float(z) if np.isfinite(z) else None
        return rec

    def _judge(self, pending: list[tuple[dict[str, Any], int, float]]) -> None:
        """The contract verdicts of a batch's records, in one pass of the tracker (which takes a
        key's rows in arrival order: the same as one record at a time)."""
        if not pending:
            return
        dist = np.array([d for _, _, d in pending])
        lev = np.interp(np.minimum(dist, self.lut_x_[-1]), self.lut_x_, self.lut_y_)
        _, st = self.tracker_.update(np.array([k for _, k, _ in pending], dtype=np.int64), lev)
        for (rec, _, _), level, s in zip(pending, lev.tolist(), st.tolist(), strict=True):
            rec["violation"], rec["state"] = level, STATES[s]

    # -- snapshots ---------------------------------------------------------------------------------
    def _state(self) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        meta = {
            "keys": [list(k) for k in self.keys_],
            "nodes": self.nodes_,
            "last": [[*k, *v] for k, v in self.last_.items()],
            "seen": [[*k, list(v)] for k, v in self.seen_.items()],
            "last_ts": self.last_ts_,
            "counts": self.counts_,
        }
        arrays = self.tracker_.arrays(len(self.keys_))
        arrays["bank"] = np.frombuffer(self.bank_.snapshot(), dtype=np.uint8)
        return meta, arrays

    def _load_state(self, meta: dict[str, Any], arrays: dict[str, np.ndarray]) -> None:
        self.keys_ = {(k[0], k[1], k[2]): i for i, k in enumerate(meta["keys"])}
        self.nodes_ = {j: list(n) for j, n in meta["nodes"].items()}
        self.last_ = {(r[0], r[1], r[2]): (float(r[3]), float(r[4])) for r in meta["last"]}
        self.seen_ = {(r[0], r[1], r[2]): deque(r[3], maxlen=self.history) for r in meta["seen"]}
        self.last_ts_ = {j: float(t) for j, t in meta["last_ts"].items()}
        self.counts_ = dict(meta["counts"])
        self.tracker_.load(arrays)
        self.bank_.restore(arrays["bank"].tobytes())
        # the prediction standing for the last timestamp is recomputed from the restored forecasts
        # only if more rows of that timestamp come; records already emitted are not repeated
        self.pending_ = {}


def summarize(records: list[dict[str, Any]]) -> dict[str, Any]:
    """Per (output, node): predictions, coverage of the observed values by mean ± 2σ, mean |z|,
    rows in violation and the methods used."""
    out: dict[str, Any] = {}
    for r in records:
        s = out.setdefault(
            f"{r['output']}@{r['node']}",
            {
                "output": r["output"],
                "node": r["node"],
                "predictions": 0,
                "observed": 0,
                "covered": 0,
                "abs_z": 0.0,
                "violated": 0,
                "methods": {},
            },
        )
        s["predictions"] += 1
        s["methods"][r["method"]] = s["methods"].get(r["method"], 0) + 1
        if r["observed"] is not None:
            s["observed"] += 1
            s["covered"] += int(r["lower"] <= r["observed"] <= r["upper"])
            s["abs_z"] += abs(r["z"]) if r["z"] is not None else 0.0
            s["violated"] += int(r["state"] == "violated")
    for s in out.values():
        n = max(s["observed"], 1)
        s["coverage"] = s["covered"] / n if s["observed"] else None
        s["mean_abs_z"] = s.pop("abs_z") / n if s["observed"] else None
    return out
