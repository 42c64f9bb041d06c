"""Dynamic statistical projection pursuit, the streaming operator (METHODS.md §1; Vetter & Reed, SC'99).

:class:`ProjectionPursuit`: per job and update period it stacks recent smoothed snapshots of every
node, runs the analysis (:func:`~perfsift.operators.pursuit.projection.projection_pursuit`) with a warm
start from the previous period and returns one ``pursuit`` selection record (or an explained
``skipped`` one).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from perfsift.operators.base import Decider
from perfsift.operators.batch import Batch
from perfsift.operators.pursuit import _pp_kernel, evidence
from perfsift.operators.pursuit import projection as pp
from perfsift.operators.pursuit.deviants import name_nodes, node_deviants
from perfsift.operators.pursuit.evidence import holm, metric_pvalues, significant
from perfsift.operators.pursuit.projection import PursuitResult, flat_diagnostics, projection_pursuit
from perfsift.operators.pursuit.rows import JobState, RowConfig, stacked_rows


class ProjectionPursuit(Decider):
    """Dynamic projection pursuit per job and update period (METHODS.md §1; Vetter & Reed, SC'99).

    Consumes smoothed samples (all nodes of a job: the stage reads a topic keyed by job) and, each
    time event time crosses a period boundary, analyses the period that just ended and returns one
    ``pursuit`` selection record (``schemas/selection.avsc``) — a result, or a ``skipped`` record
    with the reason and the previous selection. A period never fails silently: numerical errors
    become skipped records too, and every number in a record is finite.

    Parameters
    ----------
    period : float
        Update period τ in seconds of event time; periods are aligned to multiples of τ.
    window : int
        Smoothing window w of the input (samples). Stacked snapshots are taken every w samples so
        they share no smoothing window (§1.2).
    row_mode : str
        ``"stacked"`` (default: N = P·h rows from the last h snapshots of every node) or
        ``"processors"`` (the paper: N = P, the newest snapshot only).
    h_max : int
        Most snapshots stacked per node.
    snapshot_norm : str
        Each stacked snapshot relative to the processors: ``"noise"`` (default: centred per
        snapshot, then each metric in units of its nodes' own noise,
        :func:`~perfsift.operators.pursuit.rows.noise_scale`), ``"centre"``, ``"scale"`` (the
        paper's standardisation per snapshot) or ``"none"``; see
        :func:`~perfsift.operators.pursuit.projection.across_processors`.
    target_rows_per_dim : int
        h = ceil(target_rows_per_dim · n_eff / P), capped by ``h_max`` and by what is available.
    n_max : int
        Rows beyond this are subsampled uniformly (seeded).
    trim, trim_limit, cumulants, pp3_compat, restarts, optimizer, dims
        As in :func:`projection_pursuit`.
    rounds : int
        Repeated PP: after each round the named metrics and those with |r| > 0.95 to one of them
        are removed and PP runs again on the rest, so ``selected`` ranks up to ``dims · rounds``
        metrics (scores stay those of the first round).
    min_nodes : int
        Periods with fewer reporting nodes are skipped.
    slack : int
        A period closes when every active node (one seen, and not ``slack`` rows behind another)
        has reported past its end -- an event-time watermark, so the records do not depend on how
        upstream partitions interleave -- or, so that a silent node cannot hold it forever, when
        some node is ``slack`` samples past its end. A job's first period closes only so: until
        then the job's nodes are not known. Records are a deterministic function of the input as
        long as no node runs more than ``slack`` samples ahead of the others and the nodes of a
        job start together (the ring holds that many rows per node and metric: 8 bytes each); a
        node's first samples in a later period that closed before they came are late rows.
    seed : int
        Seed of the restarts; period k of a job uses the seed (seed, k), so a replay or a restored
        snapshot reproduces the same records.
    z_threshold : float
        Nodes whose robust z on the projection reaches it stand apart (:mod:`~perfsift.operators.pursuit.deviants`).
    alpha : float
        A metric is selected only when its nodes differ beyond their own noise at this level (Holm
        over the metrics, :mod:`~perfsift.operators.pursuit.evidence`); a period where none does
        selects nothing and says why (``reason``, ``p_value``). ``selected`` holds 0 to
        ``dims · rounds`` metrics.
    evidence_snapshots : int
        Snapshots (``evidence_gap`` windows apart, the newest in the period) per node that the
        evidence tests; more gives power to rare bursts, fewer reacts sooner (docs/pursuit.md).
    evidence_gap : int
        Windows between the evidence's snapshots: 2 (default) so that noise with a memory of a few
        samples does not pass for a difference; 1 where each input row is already the mean of a
        long window (the pipeline's thinned stream: one 10-sample mean per row).

    Examples
    --------
    Eight nodes, 61 s: a constant with noise, a trend every node shares, and ``bwrite``, two of its
    own noise higher on ``n0``. The first period keeps ``bwrite`` only, with its evidence (it closes
    once a node is ``slack`` rows past its end):

    >>> import numpy as np
    >>> from perfsift.operators import Batch
    >>> rng = np.random.default_rng(0)
    >>> t = np.repeat(np.arange(61.0), 8)
    >>> node = np.tile([f"n{p}" for p in range(8)], 61)
    >>> noise = rng.standard_normal((len(t), 3))
    >>> values = np.c_[1 + 0.01 * noise[:, 0], np.where(node == "n0", 3.0, 1.0) + noise[:, 1],
    ...                2 + 0.1 * t + 0.01 * noise[:, 2]]
    >>> batch = Batch.from_columns(ts=t, nodes=node, metrics=["const", "bwrite", "trend"], values=values)
    >>> record = ProjectionPursuit(period=30, window=1, slack=8).update(batch)[0]  # slack: a short trace
    >>> record["selected"], record["metric_p"]["bwrite"] < 1e-6, record["metric_p"]["const"]
    (['bwrite'], True, 1.0)
    """

    output = "selection"

    # 3: the ring also holds the evidence's snapshots (two windows apart): its capacity changed, so older
    # snapshots are refused (the fingerprint changes too: alpha and evidence_snapshots are parameters)
    STATE_VERSION = 3  # the state holds raw rows: snapshot_norm and alpha change no state

    def __init__(
        self,
        period: float = 30.0,
        window: int = 5,
        row_mode: str = "stacked",
        h_max: int = 10,
        snapshot_norm: str = "noise",
        target_rows_per_dim: int = 50,
        n_max: int = 4000,
        trim: str = "auto",
        trim_limit: float | None = None,
        cumulants: str = "kstat",
        pp3_compat: bool = False,
        restarts: int = 10,
        optimizer: str = "lbfgs",
        dims: int = 3,
        rounds: int = 1,
        min_nodes: int = 2,
        slack: int = 128,
        seed: int = 0,
        z_threshold: float = 3.0,
        alpha: float = 0.01,
        evidence_snapshots: int = 20,
        evidence_gap: int = 2,
    ) -> None:
        self.period = period
        self.window = window
        self.row_mode = row_mode
        self.h_max = h_max
        self.snapshot_norm = snapshot_norm
        self.target_rows_per_dim = target_rows_per_dim
        self.n_max = n_max
        self.trim = trim
        self.trim_limit = trim_limit
        self.cumulants = cumulants
        self.pp3_compat = pp3_compat
        self.restarts = restarts
        self.optimizer = optimizer
        self.dims = dims
        self.rounds = rounds
        self.min_nodes = min_nodes
        self.slack = slack
        self.seed = seed
        self.z_threshold = z_threshold
        self.alpha = alpha
        self.evidence_snapshots = evidence_snapshots
        self.evidence_gap = evidence_gap

    # -- parameters and state ------------------------------------------------------------------
    def warm_up(self) -> None:
        names = [f"m{j}" for j in range(6)]
        x = np.random.default_rng(0).normal(size=(24, len(names)))
        projection_pursuit(x, names, restarts=1, trim=self.trim, cumulants=self.cumulants, optimizer=self.optimizer)
        _pp_kernel.warm_up()  # the restarts of large jobs go to a thread pool: that path too
        evidence.warm_up()  # scipy, imported where used: here as the stage starts, not in its first period
        name_nodes(np.stack([x] * 4), np.tile(np.arange(24.0), (4, 1)), list("abcd"), names, 6.0, 24.0)

    def reset(self) -> None:
        if not self.period > 0:
            raise ValueError(f"period must be > 0 seconds, got {self.period}")
        if self.window < 1 or self.h_max < 1 or self.rounds < 1 or self.restarts < 1 or self.evidence_snapshots < 2:
            raise ValueError("window, h_max, rounds and restarts must be >= 1, evidence_snapshots >= 2")
        if self.evidence_gap < 1:
            raise ValueError(f"evidence_gap must be >= 1, got {self.evidence_gap}")
        if self.snapshot_norm not in ("noise", "centre", "scale", "none"):
            raise ValueError(f"snapshot_norm must be noise, centre, scale or none, got {self.snapshot_norm!r}")
        if not 0 < self.alpha <= 1:
            raise ValueError(f"alpha must be in (0, 1], got {self.alpha}")
        if self.row_mode not in ("stacked", "processors"):
            raise ValueError(f"row_mode must be 'stacked' or 'processors', got {self.row_mode!r}")
        if not self.z_threshold > 0:
            raise ValueError(f"z_threshold must be > 0, got {self.z_threshold}")
        if self.dims not in (1, 2, 3):
            raise ValueError(f"dims must be 1, 2 or 3, got {self.dims}")
        if self.trim not in ("auto", "none", "log", "sqrt", "remove"):
            raise ValueError(f"trim must be auto, none, log, sqrt or remove, got {self.trim!r}")
        if self.optimizer not in ("lbfgs", "scipy", "scipy-fd"):
            raise ValueError(f"optimizer must be lbfgs, scipy or scipy-fd, got {self.optimizer!r}")
        self.jobs_: dict[str, JobState] = {}

    @property
    def capacity(self) -> int:
        """Rows kept per node: enough for h_max (and evidence_snapshots) snapshots w samples apart."""
        rows = max((self.h_max - 1) * self.window, (self.evidence_snapshots - 1) * self.evidence_gap * self.window)
        return rows + 1 + self.slack

    # -- streaming -------------------------------------------------------------------------------
    def update(self, batch: Batch) -> list[dict[str, Any]]:
        records: list[dict[str, Any]] = []
        for ji, job in enumerate(batch.jobs):
            rows = np.nonzero(batch.job_idx == ji)[0]
            if len(rows):
                records += self._update_job(job, batch, rows)
        return records

    def flush(self) -> list[dict[str, Any]]:
        """Close every job's open periods (end of an archived trace)."""
        out = []
        for job, st in self.jobs_.items():
            out += self._close_ready(job, st, final=True)
            st.period = None
        return out

    def _update_job(self, job: str, batch: Batch, rows: np.ndarray) -> list[dict[str, Any]]:
        st = self.jobs_.get(job)
        if st is None:
            st = self.jobs_[job] = JobState(self.capacity)
        rows = rows[np.argsort(batch.ts[rows], kind="stable")]
        cols = self._metric_columns(st, batch.metrics)
        periods = np.floor(batch.ts[rows] / self.period).astype(np.int64)
        out: list[dict[str, Any]] = []
        for chunk in np.split(np.arange(len(rows)), np.flatnonzero(np.diff(periods)) + 1):
            part = rows[chunk]
            if st.period is None:
                st.period = int(periods[chunk[0]])
                if st.first_period is None:
                    st.first_period = st.period
            # Close what this period's rows complete *before* appending them: the ring then still
            # holds every row of the closing periods, however many rows the chunk brings.
            # the job's index of each row's node (new nodes join in the order they first appear)
            codes, first = np.unique(batch.node_idx[part], return_index=True)
            job_ix = np.zeros(len(batch.nodes), dtype=np.int64)
            for c in codes[np.argsort(first)].tolist():
                job_ix[c] = self._node(st, batch.nodes[c])
            ks = job_ix[batch.node_idx[part]]
            pend_last = st.last_ts.copy()
            np.maximum.at(pend_last, ks, batch.ts[part])
            pend_cnt = np.bincount(ks, minlength=len(st.nodes))
            out += self._close_ready(job, st, pend_last, pend_cnt, float(batch.ts[part].min()))
            st.late += int((batch.ts[part] < st.period * self.period).sum())
            self._append(st, batch, part, cols, ks)
        return out + self._close_ready(job, st)

    def _node(self, st: JobState, node: str) -> int:
        k = st.node_ix.get(node)
        if k is None:
            k = st.node_ix[node] = len(st.nodes)
            st.nodes.append(node)
            st.ring = np.concatenate([st.ring, np.full((1, *st.ring.shape[1:]), np.nan)], axis=0)
            st.ring_ts = np.concatenate([st.ring_ts, np.full((1, st.ring_ts.shape[1]), np.nan)], axis=0)
            st.count = np.append(st.count, 0)
            st.last_ts = np.append(st.last_ts, -np.inf)
        return k

    def _close_ready(
        self,
        job: str,
        st: JobState,
        pend_last: np.ndarray | None = None,
        pend_cnt: np.ndarray | None = None,
        pend_start: float = np.inf,
        final: bool = False,
    ) -> list[dict[str, Any]]:
        """Close the open period while the watermark has passed it (every period when final).
        ``pend_*``: the newest time and row count per node, and the first time, of rows about to be
        appended."""
        out: list[dict[str, Any]] = []
        last = st.last_ts if pend_last is None else pend_last
        cnt = np.zeros(len(st.nodes), dtype=np.int64) if pend_cnt is None else pend_cnt
        gone_before = self._gone_before(st)  # the ring does not change while periods close
        while st.period is not None and len(st.nodes):
            p = st.period
            start, end = p * self.period, (p + 1) * self.period
            seen = (st.count > 0) | (cnt > 0)
            if not seen.any() or last[seen].max() < start:
                break  # nothing at or after this period yet
            # A node that lags is waited for; one counts as gone only once another node is
            # ``slack`` rows past its newest (a node that lags a period or two is still there:
            # another upstream partition, read later).
            active = seen & (last >= gone_before)
            ahead = (st.ring_ts >= end).sum(axis=1) + (cnt if pend_start >= end else 0)
            # The job's first period closes only by ``slack``: which nodes the job has is not known
            # before, and a node whose first samples come later (another upstream partition, read
            # after this one's first burst) must count as it does offline.
            young = st.first_period is not None and p <= st.first_period
            if not final and (young or last[active].min() < end) and ahead.max() < self.slack:
                break
            in_period = (st.ring_ts >= start) & (st.ring_ts < end)
            if not in_period.any():  # an empty stretch: one record says so, then on to the next data
                later = st.ring_ts[st.ring_ts >= end]
                nxt = min(float(later.min()) if len(later) else np.inf, pend_start)
                if not np.isfinite(nxt):
                    break
                q = max(int(np.floor(nxt / self.period)), p + 1)
                out.append(self._gap(job, st, p, q))
                st.period = q
                continue
            out.append(self._analyse(job, st, p))
            st.period = p + 1
        return out

    def _gone_before(self, st: JobState) -> float:
        """Nodes whose newest row is older than this count as gone: some node has ``slack`` rows
        after it (the ``slack``-th newest row of the most advanced node; -inf while none has)."""
        cap = st.ring_ts.shape[1]
        if self.slack <= 0 or self.slack > cap or not len(st.nodes):
            return -np.inf
        filled = np.where(np.isnan(st.ring_ts), -np.inf, st.ring_ts)
        return float(np.partition(filled, cap - self.slack, axis=1)[:, cap - self.slack].max())

    def _metric_columns(self, st: JobState, metrics: tuple[str, ...]) -> np.ndarray:
        for m in metrics:
            if m not in st.metric_ix:
                st.metric_ix[m] = len(st.metrics)
                st.metrics.append(m)
        if st.ring.shape[2] < len(st.metrics):
            extra = np.full((st.ring.shape[0], st.ring.shape[1], len(st.metrics) - st.ring.shape[2]), np.nan)
            st.ring = np.concatenate([st.ring, extra], axis=2)
        return np.array([st.metric_ix[m] for m in metrics], dtype=np.int64)

    def _append(self, st: JobState, batch: Batch, rows: np.ndarray, cols: np.ndarray, ks: np.ndarray) -> None:
        """Rows (in time order) into the ring of their node ``ks``; of a node with more rows than
        the ring holds, only the newest can survive and only they are written."""
        cap = st.ring.shape[1]
        order = np.argsort(ks, kind="stable")
        k_sorted, rows = ks[order], rows[order]
        uniq, first, counts = np.unique(k_sorted, return_index=True, return_counts=True)
        skipped = np.maximum(counts - cap, 0)
        rank = np.arange(len(k_sorted)) - np.repeat(first + skipped, counts)
        keep = rank >= 0
        k_sorted, rows, rank = k_sorted[keep], rows[keep], rank[keep]
        pos = (st.count[k_sorted] + rank) % cap
        block = np.full((len(rows), st.ring.shape[2]), np.nan)
        block[:, cols] = batch.values[rows]
        st.ring[k_sorted, pos] = block
        st.ring_ts[k_sorted, pos] = batch.ts[rows]
        st.count[uniq] += counts - skipped
        np.maximum.at(st.last_ts, k_sorted, batch.ts[rows])

    # -- one period --------------------------------------------------------------------------

    def _analyse(self, job: str, st: JobState, period: int) -> dict[str, Any]:
        start, end = period * self.period, (period + 1) * self.period
        cfg = RowConfig(
            self.window,
            self.row_mode,
            self.h_max,
            self.snapshot_norm,
            self.target_rows_per_dim,
            self.evidence_snapshots,
            self.evidence_gap,
        )
        x, names, info, block = stacked_rows(st, start, end, cfg)
        info["late_rows"] = st.late
        st.late = 0
        if info["nodes"] < self.min_nodes:
            return self._record(job, st, start, end, f"{info['nodes']} nodes reported (need {self.min_nodes})", info)
        # Missing values: metrics absent from half the rows or more are left out (importance 0),
        # then rows still missing a value are dropped.
        present = (~np.isnan(x)).mean(axis=0) >= 0.5
        missing = [m for m, ok in zip(names, present, strict=True) if not ok]
        cols = np.flatnonzero(present)
        x = x[:, cols]
        full = ~np.isnan(x).any(axis=1)
        x, row_id = x[full], st.row_id[full]
        used = [names[j] for j in cols]
        info.update(rows=len(x), missing_metrics=",".join(missing))
        rng = np.random.default_rng([self.seed, period & 0x7FFFFFFF])
        if len(x) > self.n_max:
            sub = np.sort(rng.choice(len(x), self.n_max, replace=False))
            x, row_id = x[sub], row_id[sub]
            info.update(rows=len(x), subsampled=True)
        if len(used) < 2 or len(x) < 8:
            return self._record(job, st, start, end, f"{len(used)} metrics with values in {len(x)} rows", info)
        try:
            with np.errstate(all="ignore"):
                res = self._rounds(x, used, rng, st)
        except (np.linalg.LinAlgError, ValueError, FloatingPointError, ZeroDivisionError) as exc:
            return self._record(job, st, start, end, f"numerical failure: {type(exc).__name__}: {exc}", info)
        first = res[0]
        if first.skipped is not None:
            return self._record(job, st, start, end, first.skipped, {**info, **flat_diagnostics(first.diagnostics)})
        if not np.isfinite(first.index) or not all(np.isfinite(v) for _, v in first.ranking):
            return self._record(job, st, start, end, "non-finite index or scores", info)
        scores = {m: float(v) for m, v in first.ranking}
        named: list[str] = []
        for r in res:
            if r.skipped is None:
                named += [m for m in r.named if m not in named]
        metric_p = dict(zip(used, holm(metric_pvalues(block[:, :, cols])).tolist(), strict=True))
        k, snapshots = self.dims * self.rounds, block.shape[1]
        selected, reason, p_value = significant(named, scores, metric_p, snapshots, self.alpha, k)
        if reason is not None and snapshots < 3:  # no evidence yet is not evidence of nothing:
            return self._record(job, st, start, end, reason, info)  # what holds (all, at first) stays
        scores.update({m: 0.0 for m in missing})
        st.weights, st.weight_names = first.weights, list(first.metrics)
        if selected != st.selected:
            st.version += 1
        st.selected, st.scores, st.index = selected, scores, float(first.index)
        info.update(flat_diagnostics(first.diagnostics), rounds=len(res), evidence_snapshots=block.shape[1])
        rec = self._record(job, st, start, end, None, info)
        rec.update(p_value=p_value, reason=reason, metric_p=metric_p)
        apart = node_deviants(x, used, row_id, st.nodes, first.weights, first.metrics, selected, self.z_threshold)
        rec["node_z"], rec["node_position"], rec["deviants"] = apart
        return rec

    def _rounds(self, x: np.ndarray, names: list[str], rng: np.random.Generator, st: JobState) -> list[PursuitResult]:
        out: list[PursuitResult] = []
        cols = list(range(len(names)))
        for r in range(self.rounds):
            res = projection_pursuit(
                x[:, cols],
                [names[j] for j in cols],
                seed=int(rng.integers(2**31)),
                restarts=self.restarts,
                trim=self.trim,
                trim_limit=self.trim_limit,
                cumulants=self.cumulants,
                pp3_compat=self.pp3_compat,
                optimizer=self.optimizer,
                dims=self.dims,
                warm_start=st.weights if r == 0 and st.weights is not None else None,
                warm_names=st.weight_names if r == 0 else None,
            )
            out.append(res)  # next: without the named metrics and those with |r| > 0.95 to one of them
            if r == self.rounds - 1 or res.skipped is not None:
                break
            cols = pp.after_round(x, names, cols, res.named)
            if len(cols) < 2:
                break
        return out

    def _gap(self, job: str, st: JobState, first: int, stop: int) -> dict[str, Any]:
        n = stop - first
        return self._record(
            job, st, first * self.period, stop * self.period, f"no samples in {n} period{'s' if n > 1 else ''}", {}
        )

    def _record(
        self, job: str, st: JobState, start: float, end: float, skipped: str | None, info: dict[str, Any]
    ) -> dict[str, Any]:
        """A ``pursuit`` selection record; a skipped one carries the previous selection."""
        return {
            "job": job,
            "kind": "pursuit",
            "version": st.version,
            "period_start": float(start),
            "period_end": float(end),
            "selected": list(st.selected),
            "scores": dict(st.scores),
            "index": st.index,
            **dict.fromkeys(("r2_train", "adj_r2_train", "r2_holdout", "rand_r2_mean", "rand_p_value")),
            "reduction_degree": None,
            "clusters": [],
            "skipped": skipped,
            "node_z": {},
            "node_position": {},
            "deviants": [],
            "p_value": None,
            "reason": None,
            "metric_p": {},
            **name_nodes(st.ring, st.ring_ts, st.nodes, st.metrics, self.period, end),
            "diagnostics": {k: v for k, v in info.items() if v is not None},
        }

    # -- snapshots ----------------------------------------------------------------------------
    def _state(self) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        meta: dict[str, Any] = {"jobs": []}
        arrays: dict[str, np.ndarray] = {}
        for i, (job, st) in enumerate(self.jobs_.items()):
            keys = ("metrics", "nodes", "period", "first_period", "late", "version", "selected", "scores", "index")
            meta["jobs"].append({"job": job, **{k: getattr(st, k) for k in (*keys, "weight_names")}})
            arrays[f"{i}_ring"], arrays[f"{i}_count"], arrays[f"{i}_last"] = st.ring, st.count, st.last_ts
            arrays[f"{i}_ring_ts"] = st.ring_ts
            if st.weights is not None:
                arrays[f"{i}_weights"] = st.weights
        return meta, arrays

    def _load_state(self, meta: dict[str, Any], arrays: dict[str, np.ndarray]) -> None:
        for i, j in enumerate(meta["jobs"]):
            st = JobState(self.capacity)
            st.metrics = list(j["metrics"])
            st.metric_ix = {m: k for k, m in enumerate(st.metrics)}
            st.nodes = list(j["nodes"])
            st.node_ix = {n: k for k, n in enumerate(st.nodes)}
            st.period, st.late, st.version = j["period"], j["late"], j["version"]
            st.first_period = j.get("first_period")
            st.selected, st.scores, st.index = list(j["selected"]), dict(j["scores"]), j["index"]
            st.weight_names = list(j["weight_names"])
            st.ring, st.count, st.last_ts, st.ring_ts = (
                arrays[f"{i}_{k}"].copy() for k in ("ring", "count", "last", "ring_ts")
            )
            st.weights = arrays[f"{i}_weights"].copy() if f"{i}_weights" in arrays else None
            self.jobs_[j["job"]] = st
