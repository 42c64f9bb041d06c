"""Selection and reduction in one operator: projection pursuit (and optionally statistical data
reduction) decide which metrics carry information; the smoothed samples pass with only those.

Per job, in event time: when a pursuit period closes, its selection applies to the samples of the
following periods — so the reduced stream is a deterministic function of the input, whatever the
micro-batches, and a restart reproduces it. The kept set is, by ``policy``: the pursuit's selected
metrics (``pursuit``), the data-reduction set (``reduction``) or their ``union`` (default), plus
``keep`` (e.g. the metrics a contract needs). Before the first selection everything passes, and
every ``full_every``-th period passes whole so selection can be re-evaluated downstream.

Output, per kind (a :class:`~perfsift.operators.base.Router`; the stage writes each kind to its
topic, by default ``perf.reduced``, ``perf.selection``, ``perf.control``): ``reduced`` (column
batches, one record per input sample: the kept metrics, ``selection_version``, ``full``),
``selection`` (the selection records), ``control`` (a control record whenever the kept set of a
job changes, for adaptive producers) and, with ``forecast`` settings, ``forecast``: the NWS
forecasts (METHODS.md §5) of the metrics the reduced stream keeps, per node, on the same rows (a full
period's extra metrics are not forecast; before the first selection nothing is). So the forecasts
follow what the pipeline keeps on any data, instead of metric names fixed in the pipeline file.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

import numpy as np
from perfsift.operators.base import Router
from perfsift.operators.batch import Batch
from perfsift.operators.forecast.forecast import ForecastBank
from perfsift.operators.forecast.records import ForecastRecords
from perfsift.operators.pursuit.pursuit import ProjectionPursuit
from perfsift.operators.reduction.reduction import DataReduction

POLICIES = ("union", "pursuit", "reduction")
#: selections kept per job for samples that arrive after their period closed (at most one new
#: selection per period, so at least this many periods back); older ones pass whole
HISTORY = 64


class _JobSelection:
    def __init__(self) -> None:
        self.pursuit: list[str] | None = None
        self.reduction: list[str] | None = None
        self.kept: list[str] | None = None  # None: nothing selected yet, everything passes
        self.version = -1
        self.history: list[tuple[int, list[str], int]] = []  # (from period, kept, version)
        self.pending: list[Batch] = []  # samples whose period's selection is not decided yet
        self.samples = 0
        self.values_in = 0
        self.values_out = 0
        self.named: dict[str, int] = {}  # node -> pursuit periods that named it (deviant_nodes)
        self.fewest: int | None = None  # fewest nodes an analysed pursuit period had (None: none yet)


class Reduce(Router):
    """See the module docstring.

    Parameters
    ----------
    pursuit : dict or None
        Parameters of :class:`~perfsift.operators.pursuit.pursuit.ProjectionPursuit` (its ``period`` is the
        reduction period); None turns pursuit off (then ``reduction`` must be set).
    reduction : dict or None
        Parameters of :class:`~perfsift.operators.reduction.reduction.DataReduction` (needs ``perf_metric``).
    keep : tuple of str
        Metrics always kept.
    policy : str
        ``union``, ``pursuit`` or ``reduction``.
    full_every : int
        Every ``full_every``-th period of a job passes whole (``full: true``); 0 = never.
    control : bool
        Emit control records for adaptive producers.
    forecast : dict or None
        Parameters of :class:`~perfsift.operators.forecast.forecast.ForecastBank` (``metrics`` is
        not one: the kept set is forecast); None (default) forecasts nothing.

    Examples
    --------
    The data of :class:`~perfsift.operators.pursuit.pursuit.ProjectionPursuit`'s example: the first
    period passes whole (nothing is selected yet), the second keeps ``bwrite`` only:

    >>> import numpy as np
    >>> from perfsift.operators import Batch
    >>> rng = np.random.default_rng(0)
    >>> t = np.repeat(np.arange(61.0), 8)
    >>> node = np.tile([f"n{p}" for p in range(8)], 61)
    >>> noise = rng.standard_normal((len(t), 3))
    >>> values = np.c_[1 + 0.01 * noise[:, 0], np.where(node == "n0", 3.0, 1.0) + noise[:, 1],
    ...                2 + 0.1 * t + 0.01 * noise[:, 2]]
    >>> batch = Batch.from_columns(ts=t, nodes=node, metrics=["const", "bwrite", "trend"], values=values)
    >>> out = Reduce(pursuit={"period": 30, "window": 1, "slack": 8}).update(batch)
    >>> [(b.metrics, float(b.ts.min()), float(b.ts.max())) for b in out["reduced"]]
    [(('const', 'bwrite', 'trend'), 0.0, 29.0), (('bwrite',), 30.0, 59.0), (('bwrite',), 60.0, 60.0)]
    >>> [c["keep"] for c in out["control"]]
    [['bwrite']]
    """

    #: the reduced samples (a batch per job and period), selection records, control records, forecasts
    outputs: ClassVar[dict[str, bool]] = {"reduced": True, "selection": False, "control": False, "forecast": False}
    #: kinds a stage need not route anywhere (emitted only when configured)
    optional_outputs: ClassVar[tuple[str, ...]] = ("forecast",)

    STATE_VERSION = 3  # 3: per-job counts of the nodes named (nodes_apart)

    def __init__(
        self,
        pursuit: dict[str, Any] | None = None,
        reduction: dict[str, Any] | None = None,
        keep: tuple[str, ...] = (),
        policy: str = "union",
        full_every: int = 10,
        control: bool = True,
        forecast: dict[str, Any] | None = None,
    ) -> None:
        self.pursuit = pursuit
        self.reduction = reduction
        self.keep = keep
        self.policy = policy
        self.full_every = full_every
        self.control = control
        self.forecast = forecast

    def warm_up(self) -> None:
        if self.pursuit is not None:
            ProjectionPursuit(**self.pursuit).warm_up()
        if self.forecast is not None:
            ForecastBank(**self.forecast).warm_up()

    def reset(self) -> None:
        if self.policy not in POLICIES:
            raise ValueError(f"policy must be one of {', '.join(POLICIES)}, got {self.policy!r}")
        if self.pursuit is None and self.reduction is None:
            raise ValueError("reduce needs pursuit or reduction settings (or both)")
        if self.full_every < 0:
            raise ValueError("full_every must be >= 0")
        self.pp_ = ProjectionPursuit(**(self.pursuit or {})) if self.pursuit is not None else None
        self.dr_ = DataReduction(**self.reduction) if self.reduction is not None else None
        if self.forecast is not None and "metrics" in self.forecast:
            raise ValueError("reduce forecasts the metrics it keeps: its forecast settings take no 'metrics'")
        self.fc_ = ForecastBank(**self.forecast) if self.forecast is not None else None
        self.period_ = self.pp_.period if self.pp_ is not None else 30.0  # reduction alone: 30 s periods
        self.jobs_: dict[str, _JobSelection] = {}

    # -- streaming --------------------------------------------------------------------------------
    def update(self, batch: Batch) -> dict[str, Any]:
        out: dict[str, Any] = {"reduced": [], "selection": [], "control": [], "forecast": ForecastRecords()}
        if len(batch) == 0:
            return out
        records: list[dict[str, Any]] = []
        if self.pp_ is not None:
            records += self.pp_.update(batch)
        if self.dr_ is not None:
            records += self.dr_.update(batch)
        self._decide(records, out)
        for ji, job in enumerate(batch.jobs):
            rows = np.flatnonzero(batch.job_idx == ji)
            if len(rows):
                self.jobs_.setdefault(job, _JobSelection()).pending.append(batch.take(rows))
        self._release(out)
        return out

    def flush(self) -> dict[str, Any]:
        """End of an archived trace: close the open periods and let every held sample out."""
        out: dict[str, Any] = {"reduced": [], "selection": [], "control": [], "forecast": ForecastRecords()}
        self._decide(self.pp_.flush() if self.pp_ is not None else [], out)
        self._release(out, final=True)
        return out

    def _decide(self, records: list[dict[str, Any]], out: dict[str, Any]) -> None:
        out["selection"] += records
        for rec in records:
            if rec["kind"] == "pursuit":  # the nodes each period names as standing apart (#32)
                named = self.jobs_.setdefault(rec["job"], _JobSelection()).named
                for node in {d["node"] for d in rec.get("deviant_nodes") or ()}:
                    named[node] = named.get(node, 0) + 1
                if not rec.get("skipped"):
                    js = self.jobs_[rec["job"]]
                    n = int(rec["diagnostics"]["nodes"])
                    js.fewest = n if js.fewest is None else min(js.fewest, n)
            self._apply(rec, out)

    def _open_period(self, job: str) -> int | None:
        """The job's first period whose selection is not known yet (None: pursuit has no data)."""
        if self.pp_ is None:
            return None
        st = self.pp_.jobs_.get(job)
        return None if st is None else st.period

    def _release(self, out: dict[str, Any], final: bool = False) -> None:
        """Samples of period q leave once period q - 1 is decided, with the selection in force from
        q on: the reduced stream does not depend on batching or on how partitions interleave."""
        for job, st in self.jobs_.items():
            if not st.pending:
                continue
            held = Batch.concat(st.pending) if len(st.pending) > 1 else st.pending[0]
            st.pending = []
            periods = np.floor(held.ts / self.period_).astype(np.int64)
            open_p = self._open_period(job)
            ready = np.ones(len(held), dtype=bool) if final or open_p is None else periods <= open_p
            if (~ready).any():
                st.pending = [held.take(np.flatnonzero(~ready))]
            if ready.any():
                rows = np.flatnonzero(ready)
                for q in np.unique(periods[rows]).tolist():
                    sel = rows[periods[rows] == q]
                    part = held.take(sel)
                    out["reduced"] += self._reduce_job(job, part, int(q))
                    forecasts = self._forecast(job, part, int(q)) if self.fc_ is not None else None
                    if forecasts is not None:  # encoded from the batch, without a dict per record
                        out["forecast"].add(forecasts)

    def _apply(self, rec: dict[str, Any], out: dict[str, Any]) -> None:
        st = self.jobs_.setdefault(rec["job"], _JobSelection())
        if rec.get("skipped") and not rec["selected"]:
            return
        if rec["kind"] == "pursuit":
            st.pursuit = list(rec["selected"])
        else:  # data reduction selects node/metric features; the reduced stream and producers keep
            # metric columns (a metric name never matched a feature name: the selection was lost)
            st.reduction = sorted({f.split("/", 1)[-1] for f in rec["selected"]})
        parts = {
            "pursuit": [st.pursuit],
            "reduction": [st.reduction],
            "union": [st.pursuit, st.reduction],
        }[self.policy]
        if all(p is None for p in parts):
            return
        kept = sorted({m for p in parts if p is not None for m in p} | set(self.keep))
        if kept == st.kept:
            return
        st.kept = kept
        st.version += 1
        from_period = round(float(rec["period_end"]) / self.period_)
        st.history = [*st.history[-(HISTORY - 1) :], (from_period, kept, st.version)]
        if self.control:
            per_node = self._samples_per_period(rec)
            out["control"].append(
                {
                    "job": rec["job"],
                    "version": st.version,
                    "ts": float(rec["period_end"]),
                    "keep": kept,
                    "full_every": max(int(self.full_every * per_node), 1) if self.full_every else 1_000_000_000,
                }
            )

    @staticmethod
    def _samples_per_period(rec: dict[str, Any]) -> float:
        """Samples per node in the period the record closed (so producers can count ``full_every``
        in samples); 1 when the record does not say."""
        return float(rec.get("diagnostics", {}).get("samples_per_node") or 1.0)

    def _in_force(self, job: str, period: int) -> tuple[list[str] | None, int]:
        """The kept set and version of the selection in force in ``period`` (None, -1: none yet)."""
        kept, version = None, -1
        for from_period, k, v in self.jobs_[job].history:
            if from_period <= period:
                kept, version = k, v
        return kept, version

    def _forecast(self, job: str, rows: Batch, period: int) -> Batch | None:
        """The forecast bank's output (its records: :class:`ForecastRecords`) for the kept metrics of
        one job's rows of one period; None when nothing is kept."""
        assert self.fc_ is not None
        kept, _ = self._in_force(job, period)
        cols = [j for j, m in enumerate(rows.metrics) if m in set(kept or ())]
        if not cols:
            return None
        kept_rows = rows.with_values(rows.values[:, cols], [rows.metrics[j] for j in cols])
        return self.fc_.update(kept_rows)

    def _reduce_job(self, job: str, rows: Batch, period: int) -> list[Batch]:
        st = self.jobs_.setdefault(job, _JobSelection())
        kept, version = self._in_force(job, period)
        # the history is not pruned here: a node that lags the others (a replay, where one upstream
        # partition's samples come long before another's) gets the selection in force in its
        # sample's period, as if it had been on time, not everything
        full = kept is None or (self.full_every > 0 and period % self.full_every == 0)
        present = ~np.isnan(rows.values)
        st.samples += len(rows)
        st.values_in += int(present.sum())
        if full:
            cols = np.arange(len(rows.metrics))
        else:
            wanted = set(kept or ())
            cols = np.array([j for j, m in enumerate(rows.metrics) if m in wanted], dtype=np.int64)
        st.values_out += int(present[:, cols].sum())
        extra = {
            "selection_version": np.full(len(rows), version, dtype=np.int64),
            "full": np.full(len(rows), full),
        }
        reduced = rows.with_values(rows.values[:, cols], [rows.metrics[j] for j in cols])
        return [
            Batch(
                reduced.ts,
                reduced.node_idx,
                reduced.values,
                reduced.metrics,
                reduced.nodes,
                reduced.job_idx,
                reduced.jobs,
                reduced.seq,
                extra,
            )
        ]

    # -- reporting --------------------------------------------------------------------------------
    def summary(self) -> dict[str, dict[str, Any]]:
        """Per job: samples, metric values in and out, their ratio, the kept metrics and version,
        and ``nodes_apart``: the nodes pursuit named as standing apart and in how many periods, most
        often first (a node is counted once per period); ``nodes_seen``, the job's nodes pursuit has
        seen, and ``fewest_nodes``, the fewest of them an analysed period had (fewer: some nodes'
        samples came after their periods closed, e.g. a replay that outran the node stage, which then
        read one upstream partition's whole backlog before the next)."""
        out = {}
        # a copy first: live views call this from another thread while update() may add a job
        for job, st in list(self.jobs_.items()):
            ratio = st.values_out / st.values_in if st.values_in else math.nan
            out[job] = {
                "samples": st.samples,
                "values_in": st.values_in,
                "values_out": st.values_out,
                "reduction_ratio": ratio,
                "kept": st.kept,
                "selection_version": st.version,
                "nodes_apart": dict(sorted(st.named.items(), key=lambda kv: (-kv[1], kv[0]))),
                "nodes_seen": self._nodes_seen(job),
                "fewest_nodes": st.fewest,
            }
        return out

    def _nodes_seen(self, job: str) -> int | None:
        pst = self.pp_.jobs_.get(job) if self.pp_ is not None else None
        return None if pst is None else len(pst.nodes)

    # -- snapshots -----------------------------------------------------------------------------------
    def _state(self) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        arrays: dict[str, np.ndarray] = {}
        if self.pp_ is not None:
            arrays["pursuit"] = np.frombuffer(self.pp_.snapshot(), dtype=np.uint8)
        if self.dr_ is not None:
            arrays["reduction"] = np.frombuffer(self.dr_.snapshot(), dtype=np.uint8)
        if self.fc_ is not None:
            arrays["forecast"] = np.frombuffer(self.fc_.snapshot(), dtype=np.uint8)
        meta_pending = []  # held samples: name tables in the metadata, columns as arrays
        for i, (job, b) in enumerate((job, b) for job, st in self.jobs_.items() for b in st.pending):
            meta_pending.append({"job": job, "metrics": list(b.metrics), "nodes": list(b.nodes), "jobs": list(b.jobs)})
            for col in ("ts", "node_idx", "job_idx", "seq", "values"):
                arrays[f"pending{i}_{col}"] = getattr(b, col)
        jobs = {
            job: {
                "pursuit": st.pursuit,
                "reduction": st.reduction,
                "kept": st.kept,
                "version": st.version,
                "history": st.history,
                "counts": [st.samples, st.values_in, st.values_out],
                "named": st.named,
                "fewest": st.fewest,
            }
            for job, st in self.jobs_.items()
        }
        return {"jobs": jobs, "pending": meta_pending}, arrays

    def _load_state(self, meta: dict[str, Any], arrays: dict[str, np.ndarray]) -> None:
        if self.pp_ is not None and "pursuit" in arrays:
            self.pp_.restore(arrays["pursuit"].tobytes())
        if self.dr_ is not None and "reduction" in arrays:
            self.dr_.restore(arrays["reduction"].tobytes())
        if self.fc_ is not None and "forecast" in arrays:
            self.fc_.restore(arrays["forecast"].tobytes())
        for job, j in meta["jobs"].items():
            st = _JobSelection()
            st.pursuit, st.reduction, st.kept, st.version = j["pursuit"], j["reduction"], j["kept"], j["version"]
            st.history = [(int(p), list(k), int(v)) for p, k, v in j["history"]]
            st.samples, st.values_in, st.values_out = j["counts"]
            st.named = {str(n): int(c) for n, c in j["named"].items()}
            st.fewest = j.get("fewest")  # absent in snapshots before the count existed
            self.jobs_[job] = st
        for i, held in enumerate(meta.get("pending", [])):
            cols = {c: arrays[f"pending{i}_{c}"].copy() for c in ("ts", "node_idx", "job_idx", "seq", "values")}
            b = Batch(
                cols["ts"],
                cols["node_idx"],
                cols["values"],
                tuple(held["metrics"]),
                tuple(held["nodes"]),
                cols["job_idx"],
                tuple(held["jobs"]),
                cols["seq"],
            )
            self.jobs_[held["job"]].pending.append(b)
