"""Selection and reduction in one operator: projection pursuit (and optionally statistical data
reduction) decide which metrics carry information; the smoothed samples pass with only those.

Per job, in event time: when a pursuit period closes, its selection applies to the samples of the
following periods — so the reduced stream is a deterministic function of the input, whatever the
micro-batches, and a restart reproduces it. The kept set is, by ``policy``: the pursuit's selected
metrics (``pursuit``), the data-reduction set (``reduction``) or their ``union`` (default), plus
``keep`` (e.g. the metrics a contract needs). Before the first selection everything passes, and
every ``full_every``-th period passes whole so selection can be re-evaluated downstream.

Output: a dict topic → records, routed by the stage: ``perf.reduced`` (column batches, one record
per input sample: the kept metrics, ``selection_version``, ``full``), ``perf.selection``
(the selection records) and ``perf.control`` (a control record whenever the kept set of a job
changes, for adaptive producers).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from perfsift.operators.base import Operator
from perfsift.operators.batch import Batch
from perfsift.operators.pursuit import ProjectionPursuit
from perfsift.operators.selection import DataReduction

POLICIES = ("union", "pursuit", "reduction")


class _JobSelection:
    def __init__(self) -> None:
        self.pursuit: list[str] | None = None
        self.reduction: list[str] | None = None
        self.kept: list[str] | None = None  # None: nothing selected yet, everything passes
        self.version = -1
        self.first_period: int | None = None
        self.rows_in_period: dict[int, int] = {}
        self.nodes_in_period: dict[int, set[str]] = {}
        self.samples = 0
        self.values_in = 0
        self.values_out = 0


class Reduce(Operator):
    """See the module docstring.

    Parameters
    ----------
    pursuit : dict or None
        Parameters of :class:`~perfsift.operators.pursuit.ProjectionPursuit` (its ``period`` is the
        reduction period); None turns pursuit off (then ``reduction`` must be set).
    reduction : dict or None
        Parameters of :class:`~perfsift.operators.selection.DataReduction` (needs ``perf_metric``).
    keep : tuple of str
        Metrics always kept.
    policy : str
        ``union``, ``pursuit`` or ``reduction``.
    full_every : int
        Every ``full_every``-th period of a job passes whole (``full: true``); 0 = never.
    control : bool
        Emit control records for adaptive producers.
    """

    STATE_VERSION = 1

    def __init__(
        self,
        pursuit: dict[str, Any] | None = None,
        reduction: dict[str, Any] | None = None,
        keep: tuple[str, ...] = (),
        policy: str = "union",
        full_every: int = 10,
        control: bool = True,
    ) -> None:
        self.pursuit = pursuit
        self.reduction = reduction
        self.keep = keep
        self.policy = policy
        self.full_every = full_every
        self.control = control

    def reset(self) -> None:
        if self.policy not in POLICIES:
            raise ValueError(f"policy must be one of {', '.join(POLICIES)}, got {self.policy!r}")
        if self.pursuit is None and self.reduction is None:
            raise ValueError("reduce needs pursuit or reduction settings (or both)")
        if self.full_every < 0:
            raise ValueError("full_every must be >= 0")
        self.pp_ = ProjectionPursuit(**(self.pursuit or {})) if self.pursuit is not None else None
        self.dr_ = DataReduction(**self.reduction) if self.reduction is not None else None
        for op in (self.pp_, self.dr_):
            if op is not None:
                op.reset()
        self.period_ = self.pp_.period if self.pp_ is not None else 30.0  # reduction alone: 30 s periods
        self.jobs_: dict[str, _JobSelection] = {}

    # -- streaming --------------------------------------------------------------------------------
    def update(self, batch: Batch) -> dict[str, Any]:
        if not hasattr(self, "jobs_"):
            self.reset()
        out: dict[str, Any] = {"perf.reduced": [], "perf.selection": [], "perf.control": []}
        if len(batch) == 0:
            return out
        periods = np.floor(batch.ts / self.period_).astype(np.int64)
        order = np.argsort(periods, kind="stable")  # rows of a job keep their order within a period
        bounds = np.flatnonzero(np.diff(periods[order])) + 1
        for chunk in np.split(order, bounds):
            self._period_chunk(batch.take(chunk), int(periods[chunk[0]]), out)
        return out

    def _period_chunk(self, chunk: Batch, period: int, out: dict[str, Any]) -> None:
        """Selections first (a closing period decides for this one), then this period's samples."""
        records: list[dict[str, Any]] = []
        if self.pp_ is not None:
            records += self.pp_.update(chunk)
        if self.dr_ is not None:
            records += self.dr_.update(chunk)
        out["perf.selection"] += records
        for rec in records:
            self._apply(rec, out)
        for ji, job in enumerate(chunk.jobs):
            rows = np.flatnonzero(chunk.job_idx == ji)
            if len(rows):
                out["perf.reduced"] += self._reduce_job(job, chunk.take(rows), period)

    def _apply(self, rec: dict[str, Any], out: dict[str, Any]) -> None:
        st = self.jobs_.setdefault(rec["job"], _JobSelection())
        if rec.get("skipped") and not rec["selected"]:
            return
        if rec["kind"] == "pursuit":
            st.pursuit = list(rec["selected"])
        else:
            st.reduction = list(rec["selected"])
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
        if self.control:
            per_node = self._samples_per_period(st)
            out["perf.control"].append(
                {
                    "job": rec["job"],
                    "version": st.version,
                    "ts": float(rec["period_end"]),
                    "keep": kept,
                    "full_every": max(int(self.full_every * per_node), 1) if self.full_every else 1_000_000_000,
                }
            )

    @staticmethod
    def _samples_per_period(st: _JobSelection) -> float:
        """Samples per node in a recent complete period (for producers' full_every, in samples)."""
        done = sorted(p for p in st.rows_in_period if st.nodes_in_period.get(p))
        if len(done) < 2:
            return 1.0
        p = done[-2]  # the newest one may still be filling
        return max(st.rows_in_period[p] / len(st.nodes_in_period[p]), 1.0)

    def _reduce_job(self, job: str, rows: Batch, period: int) -> list[Batch]:
        st = self.jobs_.setdefault(job, _JobSelection())
        if st.first_period is None:
            st.first_period = period
        st.rows_in_period[period] = st.rows_in_period.get(period, 0) + len(rows)
        st.nodes_in_period.setdefault(period, set()).update(rows.node_names())
        for old in [p for p in st.rows_in_period if p < period - 2]:  # bounded state
            st.rows_in_period.pop(old)
            st.nodes_in_period.pop(old, None)
        full = st.kept is None or (self.full_every > 0 and (period - st.first_period) % self.full_every == 0)
        present = ~np.isnan(rows.values)
        st.samples += len(rows)
        st.values_in += int(present.sum())
        if full:
            cols = np.arange(len(rows.metrics))
        else:
            wanted = set(st.kept or ())
            cols = np.array([j for j, m in enumerate(rows.metrics) if m in wanted], dtype=np.int64)
        st.values_out += int(present[:, cols].sum())
        extra = {
            "selection_version": np.full(len(rows), st.version, dtype=np.int64),
            "full": np.full(len(rows), full),
        }
        reduced = rows.with_values(rows.values[:, cols], [rows.metrics[j] for j in cols])
        return [Batch(reduced.ts, reduced.node_idx, reduced.values, reduced.metrics, reduced.nodes, reduced.job_idx,
                      reduced.jobs, reduced.seq, extra)]  # fmt: skip

    # -- reporting --------------------------------------------------------------------------------
    def summary(self) -> dict[str, dict[str, Any]]:
        """Per job: samples, metric values in and out, their ratio, the kept metrics and version."""
        out = {}
        for job, st in getattr(self, "jobs_", {}).items():
            ratio = st.values_out / st.values_in if st.values_in else math.nan
            out[job] = {
                "samples": st.samples,
                "values_in": st.values_in,
                "values_out": st.values_out,
                "reduction_ratio": ratio,
                "kept": st.kept,
                "selection_version": st.version,
            }
        return out

    # -- snapshots -----------------------------------------------------------------------------------
    def _state(self) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        arrays: dict[str, np.ndarray] = {}
        if self.pp_ is not None:
            arrays["pursuit"] = np.frombuffer(self.pp_.snapshot(), dtype=np.uint8)
        if self.dr_ is not None:
            arrays["reduction"] = np.frombuffer(self.dr_.snapshot(), dtype=np.uint8)
        jobs = {
            job: {
                "pursuit": st.pursuit,
                "reduction": st.reduction,
                "kept": st.kept,
                "version": st.version,
                "first_period": st.first_period,
                "rows_in_period": {str(p): n for p, n in st.rows_in_period.items()},
                "nodes_in_period": {str(p): sorted(v) for p, v in st.nodes_in_period.items()},
                "counts": [st.samples, st.values_in, st.values_out],
            }
            for job, st in self.jobs_.items()
        }
        return {"jobs": jobs}, arrays

    def _load_state(self, meta: dict[str, Any], arrays: dict[str, np.ndarray]) -> None:
        if self.pp_ is not None and "pursuit" in arrays:
            self.pp_.restore(arrays["pursuit"].tobytes())
        if self.dr_ is not None and "reduction" in arrays:
            self.dr_.restore(arrays["reduction"].tobytes())
        for job, j in meta["jobs"].items():
            st = _JobSelection()
            st.pursuit, st.reduction, st.kept, st.version = j["pursuit"], j["reduction"], j["kept"], j["version"]
            st.first_period = j["first_period"]
            st.rows_in_period = {int(p): n for p, n in j["rows_in_period"].items()}
            st.nodes_in_period = {int(p): set(v) for p, v in j["nodes_in_period"].items()}
            st.samples, st.values_in, st.values_out = j["counts"]
            self.jobs_[job] = st
