"""Statistical data reduction (METHODS.md §2.2): step 2, backward elimination
(:mod:`~perfsift.operators.reduction.regression`) against the performance metric over the representatives of
step 1's clusters (:mod:`~perfsift.operators.reduction.redundancy`), and :class:`DataReduction`, the streaming
operator that runs both steps.

Features are (node, metric) pairs named ``node/metric``; rows are time buckets of ``interval``
seconds (value = mean within the bucket); a row is used when the response (``perf_metric``, from
any node) is present.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from perfsift.operators.base import Decider
from perfsift.operators.batch import Batch
from perfsift.operators.reduction.redundancy import (
    Z95,
    Clustering,
    PairwiseMoments,
    cluster_features,
    constant_features,
)
from perfsift.operators.reduction.regression import backward_elimination, design, expand_row, rand_subsets, refit


def reduce_metrics(
    x: np.ndarray,
    y: np.ndarray,
    names: list[str],
    threshold: float = 0.9,
    quadratic: bool = False,
    f_out: float = 2.0,
    z_crit: float = Z95,
    linkage: str = "component",
) -> dict[str, Any]:
    """Both steps on a complete table of rows (offline): returns the selection as a dict."""
    ok = ~np.isnan(y)
    x, y = x[ok], y[ok]
    pm = PairwiseMoments(window=None)
    pm.add(np.concatenate([x, y[:, None]], axis=1), [*names, "__response__"])
    st = pm.stats()
    d = len(names)
    const = constant_features(st["count"][:d], st["mean"][:d], st["sd"][:d])
    cl = cluster_features(
        names, st["r"][:d, :d], st["n"][:d, :d], st["r"][:d, d], const, st["sd"][:d] ** 2, threshold, z_crit, linkage
    )
    return _step2(x, y, names, cl, quadratic, f_out, st["r"][:d, d], threshold)


def _step2(
    x: np.ndarray,
    y: np.ndarray,
    names: list[str],
    cl: Clustering,
    quadratic: bool,
    f_out: float,
    r_y: np.ndarray,
    threshold: float,
) -> dict[str, Any]:
    ix = {n: j for j, n in enumerate(names)}
    reps = cl.representatives
    xr = x[:, [ix[r] for r in reps]] if reps else np.empty((len(x), 0))
    has_y = ~np.isnan(y)
    xr, yr = xr[has_y], y[has_y]
    # [design choice] with hundreds of representatives, scattered gaps would leave no complete row:
    # a missing value takes its column's mean over the window (counted in the diagnostics)
    missing = np.isnan(xr)
    imputed = int(missing.sum())
    if imputed:
        with np.errstate(all="ignore"):
            col_mean = np.nanmean(xr, axis=0) if len(xr) else np.zeros(xr.shape[1])
        xr = np.where(missing, np.nan_to_num(col_mean)[None, :], xr)
    xd, terms, centers = design(xr, reps, quadratic)
    reg = backward_elimination(xd, yr, terms, f_out, centers)
    scores = {n: (0.0 if not np.isfinite(r_y[j]) else float(abs(r_y[j]))) for j, n in enumerate(names)}
    for z in cl.zero_variation:
        scores[z] = 0.0
    return {
        "selected": reg.metrics,
        "terms": reg.terms,
        "coefficients": reg.coefficients,
        "intercept": reg.intercept,
        "centers": reg.centers,
        "quadratic": reg.quadratic,
        "clusters": cl.clusters,
        "zero_variation": cl.zero_variation,
        "collinear": reg.collinear,
        "threshold": threshold,
        # the regression did not run (too few rows, no candidates): nothing was measured
        "r2_train": None if reg.skipped else reg.r2,
        "adj_r2_train": None if reg.skipped else reg.adj_r2,
        "rows": reg.n,
        "n_features": len(names),
        "reduction_degree": None if reg.skipped or not names else 1 - len(reg.metrics) / len(names),
        "history": reg.history,
        "scores": scores,
        "reason": reg.skipped,
        "imputed": imputed,
        "flags": cl.flags,
        "clustering": cl,
    }


class _Job:
    def __init__(self, op: DataReduction) -> None:
        self.moments = PairwiseMoments(op.window, op.blocks)
        self.ring_x = np.full((op.window, 0), np.nan)
        self.ring_y = np.full(op.window, np.nan)
        self.ring_t = np.full(op.window, np.nan)
        self.filled = 0
        self.pos = 0
        self.names: list[str] = []
        self.pending: dict[int, tuple[dict[str, list[float]], list[float]]] = {}
        self.recent: dict[int, dict[str, float]] = {}  # bucket means of the last lags + smooth buckets
        self.max_bucket: int | None = None
        self.done: int | None = None  # the newest bucket already turned into a row (or skipped)
        self.late = 0  # values dropped because their bucket was done
        self.since = 0
        self.clustering: Clustering | None = None
        self.last_r: np.ndarray | None = None
        self.last_zero: set[str] = set()
        self.selected: list[str] | None = None
        self.version = 0


class DataReduction(Decider):
    """Streaming two-step data reduction per job; emits ``reduction`` selection records when the
    selection changes.

    Parameters
    ----------
    perf_metric : str
        Name of the performance metric (the response), from whichever node reports it.
    interval : float
        Bucket length in seconds (rows of the regression).
    threshold : float
        Correlation threshold t of the redundancy test (one-tailed Fisher z at 95 %).
    window : int
        Rows L in the sliding window (block ring of ``blocks`` blocks; the raw ring for step 2).
    quadratic : bool
        Also offer (x − c)² terms to backward elimination.
    f_out : float
        F-to-remove.
    recluster_every : int or None
        Recluster after this many new rows (None = window // 10), or earlier when a correlation
        moved by more than 0.1 or the zero-variation set changed.
    lateness : int
        Buckets to wait for late samples before a bucket becomes a row.
    holdout : float
        Share of the window's newest rows held out: the selected terms are refitted on the older
        rows and scored on these (``r2_holdout``); also where RAND is scored.
    rand_subsets : int
        Random subsets of as many non-constant features as the selection (RAND), refitted and
        scored like it: ``rand_r2_mean`` and ``rand_p_value`` (the share that score at least as
        well). 0 = no RAND comparison.
    seed : int
        Seed of the RAND subsets.
    lags, smooth : int
        Levers as in ``perfsift select-metrics`` (:func:`~perfsift.operators.reduction.regression.expand_row`):
        each feature as its trailing mean over ``smooth`` buckets, and ``lags`` earlier buckets of
        it as features ``node/metric@t-k``.

    Examples
    --------
    ``perf`` is 3·x1 plus noise; x2 is 2·x1 (redundant with it) and ``noise`` is unrelated. The
    clustering puts x1 and x2 together; the first selection (48 rows) still holds ``noise``, the
    second (96) keeps one representative of x1's cluster only:

    >>> import numpy as np
    >>> from perfsift.operators import Batch
    >>> rng = np.random.default_rng(0)
    >>> x1 = rng.standard_normal(120); x2 = 2 * x1 + 0.01 * rng.standard_normal(120)
    >>> noise = rng.standard_normal(120); perf = 3 * x1 + 0.1 * rng.standard_normal(120)
    >>> op = DataReduction(perf_metric="perf", window=96, recluster_every=48, rand_subsets=0)
    >>> records = op.update(Batch.from_columns(ts=range(120), nodes=["a"] * 120, metrics=["x1", "x2", "noise", "perf"],
    ...                                        values=np.c_[x1, x2, noise, perf]))
    >>> for r in records:
    ...     print(r["selected"], r["clusters"])
    ['a/noise', 'a/x2'] [['a/noise'], ['a/x2', 'a/x1']]
    ['a/x2'] [['a/noise'], ['a/x2', 'a/x1']]
    >>> round(records[-1]["r2_holdout"], 3)
    0.998
    """

    output = "selection"
    #: 2: pending buckets hold the raw values (exact bucket means), not per-batch means;
    #: 3: each co-moment block has its own shift (blocks merge as centred statistics);
    #: 4: the last buckets' means for ``lags`` and ``smooth``
    #: 5: the newest bucket done and the count of late values dropped (one row per bucket)
    STATE_VERSION = 5

    def __init__(
        self,
        perf_metric: str = "perf",
        interval: float = 1.0,
        threshold: float = 0.9,
        window: int = 1000,
        blocks: int = 8,
        quadratic: bool = False,
        f_out: float = 2.0,
        linkage: str = "component",
        recluster_every: int | None = None,
        lateness: int = 1,
        holdout: float = 0.2,
        rand_subsets: int = 50,
        seed: int = 0,
        lags: int = 0,
        smooth: int = 1,
    ) -> None:
        self.perf_metric = perf_metric
        self.interval = interval
        self.threshold = threshold
        self.window = window
        self.blocks = blocks
        self.quadratic = quadratic
        self.f_out = f_out
        self.linkage = linkage
        self.recluster_every = recluster_every
        self.lateness = lateness
        self.holdout = holdout
        self.rand_subsets = rand_subsets
        self.seed = seed
        self.lags = lags
        self.smooth = smooth

    def warm_up(self) -> None:
        import scipy.linalg  # noqa: F401  # the refits' eigh, imported where used: here as the stage starts

    def reset(self) -> None:
        if self.window % self.blocks:
            raise ValueError(f"blocks ({self.blocks}) must divide window ({self.window})")
        if not 0 < self.threshold < 1:
            raise ValueError(f"threshold must be in (0, 1), got {self.threshold}")
        if not 0 < self.holdout < 1:
            raise ValueError(f"holdout must be in (0, 1), got {self.holdout}")
        if self.lags < 0 or self.smooth < 1:
            raise ValueError(f"lags must be >= 0 and smooth >= 1, got lags={self.lags}, smooth={self.smooth}")
        self.jobs_: dict[str, _Job] = {}

    def update(self, batch: Batch) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        for ji, job in enumerate(batch.jobs):
            rows = np.nonzero(batch.job_idx == ji)[0]
            if len(rows):
                out += self._update_job(job, batch.take(rows))
        return out

    def late_values(self) -> dict[str, int]:
        """Per job, the values dropped because their bucket had already become a row."""
        return {job: st.late for job, st in self.jobs_.items()}

    def _update_job(self, job: str, batch: Batch) -> list[dict[str, Any]]:
        """Collect the job's values per bucket; every bucket that is ready (``lateness`` buckets
        behind the newest) becomes one row, in bucket order, and the clustering is reconsidered
        after each row. Bucket means are exact (``fsum``) and rows go in one at a time, so the
        records are the same however the stream is cut into batches."""
        st = self.jobs_.setdefault(job, _Job(self))
        self._collect(st, batch)
        if st.max_bucket is None:
            return []
        ready = sorted(b for b in st.pending if b <= st.max_bucket - self.lateness)
        records: list[dict[str, Any]] = []
        for b in ready:
            raw, ys = st.pending.pop(b)
            st.done = b
            feats = {n: math.fsum(v) / len(v) for n, v in raw.items()}
            if self.lags or self.smooth > 1:  # every bucket counts for smoothing, with or without a response
                st.recent = {k: r for k, r in st.recent.items() if k > b - self.lags - self.smooth} | {b: feats}
                feats = expand_row(st.recent, b, self.lags, self.smooth)
            if not ys:  # a row is used when the response is present
                continue
            new_names = sorted(set(feats) - set(st.names))
            if new_names:
                st.names += new_names
                st.ring_x = np.concatenate([st.ring_x, np.full((self.window, len(new_names)), np.nan)], axis=1)
            row = np.full(len(st.names) + 1, np.nan)
            ix = {n: j for j, n in enumerate(st.names)}
            for n, v in feats.items():
                row[ix[n]] = v
            row[-1] = math.fsum(ys) / len(ys)
            st.moments.add(row[None, :], [*st.names, "__response__"])
            st.ring_x[st.pos] = row[:-1]
            st.ring_y[st.pos] = row[-1]
            st.ring_t[st.pos] = b * self.interval
            st.pos = (st.pos + 1) % self.window
            st.filled = min(st.filled + 1, self.window)
            st.since += 1
            due, stats = self._should_recluster(st)
            if due:
                rec = self._recluster(job, st, stats)
                if rec is not None:
                    records.append(rec)
        return records

    def _collect(self, st: _Job, batch: Batch) -> None:
        """Every known value of the batch into its bucket's lists: ``node/metric`` features, and
        the response (``perf_metric`` of any node)."""
        buckets = np.floor(batch.ts / self.interval).astype(np.int64)
        rows, cols = np.nonzero(~np.isnan(batch.values))
        if st.done is not None and len(rows):
            # a value whose bucket already became a row (or was passed over) arrives later than
            # ``lateness`` allows: filing it would add a second, partial row for that bucket, or
            # a row older than the window's newest. It is dropped and counted (``late_values``).
            on_time = buckets[rows] > st.done
            st.late += int((~on_time).sum())
            rows, cols = rows[on_time], cols[on_time]
        if not len(rows):
            return
        y_col = batch.metrics.index(self.perf_metric) if self.perf_metric in batch.metrics else -1
        feature = batch.node_idx[rows] * len(batch.metrics) + cols
        order = np.lexsort((feature, buckets[rows]))  # stable: each group keeps the arrival order
        rows, cols, feature = rows[order], cols[order], feature[order]
        values = batch.values[rows, cols]
        group_bucket = buckets[rows]
        starts = np.flatnonzero(np.r_[True, (np.diff(group_bucket) != 0) | (np.diff(feature) != 0)])
        ends = np.r_[starts[1:], len(rows)]
        for a, e in zip(starts.tolist(), ends.tolist(), strict=True):
            feats, ys = st.pending.setdefault(int(group_bucket[a]), ({}, []))
            c = int(cols[a])
            if c == y_col:
                ys.extend(values[a:e].tolist())
            else:
                name = f"{batch.nodes[batch.node_idx[rows[a]]]}/{batch.metrics[c]}"
                feats.setdefault(name, []).extend(values[a:e].tolist())
        newest = int(buckets[rows].max())
        st.max_bucket = newest if st.max_bucket is None else max(newest, st.max_bucket)

    def _should_recluster(self, st: _Job) -> tuple[bool, dict[str, np.ndarray] | None]:
        """Whether the job reclusters now, and the moments' statistics if they were computed to
        decide (the reclustering uses the same: computed once per row, not twice)."""
        every = self.recluster_every or max(self.window // 10, 1)
        if st.clustering is None:  # the first clustering as soon as a tenth of the window is in
            return st.filled >= max(min(every, self.window // 10), 10), None
        if st.since >= every:
            return True, None
        s = st.moments.stats()
        if st.last_r is not None and s["r"].shape == st.last_r.shape:
            with np.errstate(invalid="ignore"):
                if np.nanmax(np.abs(s["r"] - st.last_r), initial=0.0) > 0.1:  # (b) correlations moved
                    return True, s
        fi = [st.moments.index[n] for n in st.names]
        zero = {st.names[i] for i in np.nonzero(constant_features(s["count"][fi], s["mean"][fi], s["sd"][fi]))[0]}
        return zero != set(st.clustering.zero_variation), s  # (c) a metric entered or left the zero-variation set

    def _recluster(self, job: str, st: _Job, stats: dict[str, np.ndarray] | None = None) -> dict[str, Any] | None:
        st.since = 0
        s = st.moments.stats() if stats is None else stats
        st.last_r = s["r"]
        yi = st.moments.index["__response__"]  # features that appear later sit after the response
        fi = [st.moments.index[n] for n in st.names]
        names = st.names
        const = constant_features(s["count"][fi], s["mean"][fi], s["sd"][fi])
        cl = cluster_features(
            names,
            s["r"][np.ix_(fi, fi)],
            s["n"][np.ix_(fi, fi)],
            s["r"][fi, yi],
            const,
            s["sd"][fi] ** 2,
            self.threshold,
            Z95,
            self.linkage,
            st.clustering,
        )
        st.clustering = cl
        order = np.argsort(st.ring_t[: st.filled])
        x = st.ring_x[: st.filled][order]
        y = st.ring_y[: st.filled][order]
        res = _step2(x, y, names, cl, self.quadratic, self.f_out, s["r"][fi, yi], self.threshold)
        if st.selected is not None and set(res["selected"]) == set(st.selected):  # the same set, maybe reordered
            return None
        st.selected = res["selected"]
        st.version += 1
        t = st.ring_t[: st.filled]
        honest = self._holdout(x, y, names, res, cl, np.random.default_rng((self.seed, st.version)))
        holdout_rows = honest.pop("holdout_rows")
        return {
            "job": job,
            "kind": "reduction",
            "version": st.version,
            "period_start": float(np.nanmin(t)),
            "period_end": float(np.nanmax(t)) + self.interval,
            "selected": res["selected"],
            "scores": res["scores"],
            "index": None,
            "r2_train": res["r2_train"],
            "adj_r2_train": res["adj_r2_train"],
            **honest,
            "reduction_degree": res["reduction_degree"],
            "clusters": res["clusters"],
            "skipped": res["reason"],
            "diagnostics": {
                "rows": int(res["rows"]),
                "features": len(names),
                "zero_variation": len(cl.zero_variation),
                "quadratic": ",".join(res["quadratic"]),
                "threshold": self.threshold,
                "holdout_rows": holdout_rows,
            },
        }

    def _holdout(
        self, x: np.ndarray, y: np.ndarray, names: list[str], res: dict[str, Any], cl: Clustering, rng: Any
    ) -> dict[str, Any]:
        """The selection's terms refitted on the window's older rows and scored on its newest
        ``holdout`` share (rows in time order), and RAND scored the same way."""
        out: dict[str, Any] = {"r2_holdout": None, "rand_r2_mean": None, "rand_p_value": None, "holdout_rows": 0}
        if res["reason"] or not res["terms"]:
            return out
        cut = len(y) - max(round(self.holdout * len(y)), 2)
        old, new = slice(0, cut), slice(cut, None)
        ix = {n: j for j, n in enumerate(names)}
        r2, _, rows = refit(x[old], y[old], names, res["terms"], None, x[new], y[new], ix)
        if not np.isfinite(r2):
            return out
        out.update(r2_holdout=r2, holdout_rows=rows)
        live = [n for n in names if n not in cl.zero_variation]
        rand = []
        for _, terms in rand_subsets(live, res["terms"], self.rand_subsets, rng):
            rand.append(refit(x[old], y[old], names, terms, None, x[new], y[new], ix)[0])
        scored = np.array([v for v in rand if np.isfinite(v)])
        if len(scored):
            out.update(rand_r2_mean=float(scored.mean()), rand_p_value=float(np.mean(scored >= r2)))
        return out

    def _state(self) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        meta: dict[str, Any] = {"jobs": []}
        arrays: dict[str, np.ndarray] = {}
        for i, (job, st) in enumerate(self.jobs_.items()):
            m = st.moments
            cl = st.clustering
            meta["jobs"].append(
                {
                    "job": job,
                    "names": st.names,
                    "filled": st.filled,
                    "pos": st.pos,
                    "since": st.since,
                    "max_bucket": st.max_bucket,
                    "done": st.done,
                    "late": st.late,
                    "selected": st.selected,
                    "version": st.version,
                    "pending": {str(b): [f, y] for b, (f, y) in st.pending.items()},
                    "recent": {str(b): r for b, r in st.recent.items()},
                    "moment_names": m.names,
                    "rows_in_newest": m.rows_in_newest,
                    "blocks": len(m.ring),
                    "clustering": None
                    if cl is None
                    else {
                        "names": cl.names,
                        "zero": cl.zero_variation,
                        "clusters": cl.clusters,
                        "reps": cl.representatives,
                        "flags": cl.flags,
                    },
                }
            )
            arrays[f"{i}_x"], arrays[f"{i}_y"], arrays[f"{i}_t"] = st.ring_x, st.ring_y, st.ring_t
            for bi, blk in enumerate(m.ring):
                for k, v in blk.items():
                    arrays[f"{i}_b{bi}_{k}"] = v
            if cl is not None:
                arrays[f"{i}_edges"] = cl.edges
            if st.last_r is not None:
                arrays[f"{i}_last_r"] = st.last_r
        return meta, arrays

    def _load_state(self, meta: dict[str, Any], arrays: dict[str, np.ndarray]) -> None:
        for i, j in enumerate(meta["jobs"]):
            st = _Job(self)
            st.names, st.filled, st.pos, st.since = list(j["names"]), j["filled"], j["pos"], j["since"]
            st.max_bucket, st.selected, st.version = j["max_bucket"], j["selected"], j["version"]
            st.done, st.late = j["done"], j["late"]
            st.pending = {int(b): (f, y) for b, (f, y) in j["pending"].items()}
            st.recent = {int(b): r for b, r in j["recent"].items()}
            st.ring_x, st.ring_y, st.ring_t = arrays[f"{i}_x"].copy(), arrays[f"{i}_y"].copy(), arrays[f"{i}_t"].copy()
            m = st.moments
            m.names = list(j["moment_names"])
            m.index = {n: k for k, n in enumerate(m.names)}
            m.rows_in_newest = j["rows_in_newest"]
            keys = ("n", "s", "q", "p", "shift", "rows")
            m.ring = [{k: arrays[f"{i}_b{bi}_{k}"].copy() for k in keys} for bi in range(j["blocks"])]
            c = j["clustering"]
            if c is not None:
                st.clustering = Clustering(
                    c["names"], c["zero"], c["clusters"], c["reps"], arrays[f"{i}_edges"].copy(), c["flags"]
                )
            st.last_r = arrays[f"{i}_last_r"].copy() if f"{i}_last_r" in arrays else None
            self.jobs_[j["job"]] = st
