"""Step 2 of statistical data reduction (METHODS.md §2.2): backward elimination against the
performance metric, and :class:`DataReduction`, the streaming operator that runs both steps.

Features are (node, metric) pairs named ``node/metric``; rows are time buckets of ``interval``
seconds (value = mean within the bucket); a row is used when the response (``perf_metric``, from
any node) is present.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
from perfsift.operators.base import Operator
from perfsift.operators.batch import Batch
from perfsift.operators.redundancy import (
    Z95,
    Clustering,
    PairwiseMoments,
    cluster_features,
    constant_features,
)

SQUARE = "^2"


@dataclass
class Regression:
    """Result of backward elimination (coefficients in the original units)."""

    terms: list[str]
    coefficients: list[float]
    intercept: float
    centers: dict[str, float]  # centre c_j of each kept quadratic term (x - c)^2
    r2: float
    adj_r2: float
    n: int
    history: list[tuple[str, float]] = field(default_factory=list)
    collinear: list[str] = field(default_factory=list)
    ridge: float = 0.0
    skipped: str | None = None

    @property
    def metrics(self) -> list[str]:
        """Features kept through their linear or their quadratic term, in term order."""
        return list(dict.fromkeys(t.removesuffix(SQUARE) for t in self.terms))

    @property
    def quadratic(self) -> list[str]:
        return [t.removesuffix(SQUARE) for t in self.terms if t.endswith(SQUARE)]


def design(
    x: np.ndarray, names: list[str], quadratic: bool, centers: dict[str, float] | None = None
) -> tuple[np.ndarray, list[str], dict[str, float]]:
    """Columns x_j and, with ``quadratic``, (x_j − c_j)² with c_j the column mean (or the given centres)."""
    if not quadratic:
        return x, list(names), {}
    c = centers if centers is not None else {n: float(np.mean(x[:, j])) for j, n in enumerate(names)}
    sq = np.stack([(x[:, j] - c[n]) ** 2 for j, n in enumerate(names)], axis=1) if names else x[:, :0]
    return np.concatenate([x, sq], axis=1), [*names, *(n + SQUARE for n in names)], c


def _drop_collinear(z: np.ndarray, tol: float = 1e-10) -> list[int]:
    """Greedy pivoted Cholesky on the correlation of standardised columns: indexes of the columns
    whose residual variance on the accepted ones is >= tol."""
    n = len(z)
    corr = z.T @ z / n
    keep: list[int] = []
    chol = np.zeros((0, 0))
    for j in range(corr.shape[0]):
        if keep:
            v = np.linalg.solve(chol, corr[keep, j])
            resid = corr[j, j] - v @ v
        else:
            v, resid = np.zeros(0), corr[j, j]
        if resid >= tol:
            keep.append(j)
            new = np.zeros((len(keep), len(keep)))
            new[:-1, :-1] = chol
            new[-1, :-1] = v
            new[-1, -1] = np.sqrt(resid)
            chol = new
    return keep


def backward_elimination(
    x: np.ndarray, y: np.ndarray, names: list[str], f_out: float = 2.0, centers: dict[str, float] | None = None
) -> Regression:
    """OLS with intercept, then remove the term with the smallest partial F while F < ``f_out``.

    Partial F from the inverse cross-product (``F_j = β_j² / (s² G_jj)`` = t_j²) and the O(p²)
    sweep down-date; G is recomputed every 20 removals or when a diagonal turns non-positive.
    """
    n, p = x.shape
    if p == 0 or n < p + 2:
        return Regression(
            [],
            [],
            float(np.mean(y)) if n else float("nan"),
            {},
            0.0,
            0.0,
            n,
            skipped=f"need at least p + 2 = {p + 2} complete rows, have {n}" if p else "no candidates",
        )
    mean, sd = x.mean(axis=0), x.std(axis=0)
    sd = np.where(sd > 0, sd, 1.0)
    z = (x - mean) / sd
    keep = _drop_collinear(z)
    collinear = [names[j] for j in range(p) if j not in keep]
    z = z[:, keep]
    terms = [names[j] for j in keep]
    mean, sd = mean[keep], sd[keep]
    yc = y - y.mean()
    sst = float(yc @ yc)
    xtx = z.T @ z
    xty = z.T @ yc
    ridge = 0.0
    if np.linalg.cond(xtx) > 1e12:
        ridge = 1e-10 * np.trace(xtx) / len(terms)

    def fit(cols: list[int]) -> tuple[np.ndarray, np.ndarray, float]:
        a = xtx[np.ix_(cols, cols)] + ridge * np.eye(len(cols))
        g = np.linalg.inv(a)
        b = g @ xty[cols]
        return g, b, sst - float(b @ xty[cols])

    active = list(range(len(terms)))
    g, b, sse = fit(active)
    history: list[tuple[str, float]] = []
    removals = 0
    while active:
        df = n - len(active) - 1
        s2 = sse / df if df > 0 else np.inf
        f = b**2 / (s2 * np.diag(g)) if s2 > 0 else np.full(len(active), np.inf)
        k = int(np.argmin(f))  # ties -> lowest index
        if f[k] >= f_out:
            break
        history.append((terms[active[k]], float(f[k])))
        gk = g[:, k].copy()
        sse += b[k] ** 2 / g[k, k]
        b = np.delete(b - gk * b[k] / g[k, k], k)
        g = np.delete(np.delete(g - np.outer(gk, gk) / g[k, k], k, 0), k, 1)
        del active[k]
        removals += 1
        if active and (removals % 20 == 0 or (np.diag(g) <= 0).any()):
            g, b, sse = fit(active)
    sel = [terms[i] for i in active]
    coef = b / sd[active]
    intercept = float(y.mean() - coef @ mean[active]) if active else float(y.mean())
    r2 = 1 - sse / sst if sst > 0 else 0.0
    adj = 1 - (1 - r2) * (n - 1) / (n - len(sel) - 1) if n - len(sel) - 1 > 0 else r2
    used_centers = {
        t.removesuffix(SQUARE): (centers or {}).get(t.removesuffix(SQUARE), 0.0) for t in sel if t.endswith(SQUARE)
    }
    return Regression(
        sel,
        [float(c) for c in coef],
        intercept,
        used_centers,
        float(r2),
        float(adj),
        n,
        history,
        collinear,
        float(ridge),
    )


def refit_r2(x: np.ndarray, y: np.ndarray, names: list[str], terms: list[str], centers: dict[str, float]) -> float:
    """R² of an OLS refit of ``terms`` (linear ``f`` or quadratic ``f^2`` about ``centers``) on new data,
    as the paper verifies a selection on other traces. Rows with a missing value are skipped."""
    ix = {n: j for j, n in enumerate(names)}
    cols = []
    for t in terms:
        base = t.removesuffix(SQUARE)
        v = x[:, ix[base]] if base in ix else np.full(len(x), np.nan)
        cols.append((v - centers.get(base, 0.0)) ** 2 if t.endswith(SQUARE) else v)
    a = np.stack(cols, axis=1) if cols else np.empty((len(x), 0))
    ok = ~np.isnan(y) & ~np.isnan(a).any(axis=1)
    a, yy = a[ok], y[ok]
    if len(yy) < len(terms) + 2:
        return float("nan")
    sd = a.std(axis=0)
    a = (a - a.mean(axis=0)) / np.where(sd > 0, sd, 1.0)  # squared counters reach 1e16: scale before solving
    design_m = np.concatenate([np.ones((len(yy), 1)), a], axis=1)
    beta, *_ = np.linalg.lstsq(design_m, yy, rcond=None)
    resid = yy - design_m @ beta
    sst = float(((yy - yy.mean()) ** 2).sum())
    return float(1 - resid @ resid / sst) if sst > 0 else 0.0


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
        "r2_train": reg.r2,
        "adj_r2_train": reg.adj_r2,
        "rows": reg.n,
        "n_features": len(names),
        "reduction_degree": 1 - len(reg.metrics) / len(names) if names else 0.0,
        "history": reg.history,
        "scores": scores,
        "skipped": reg.skipped,
        "imputed": imputed,
        "flags": cl.flags,
        "clustering": cl,
    }


def bucket_rows(
    batch: Batch, interval: float, perf_metric: str | None
) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[str]]:
    """(bucket index per row, values [buckets, features], response [buckets], feature names) of one
    job's samples: the mean of each ``node/metric`` and of ``perf_metric`` (over nodes) per bucket."""
    b = np.floor(batch.ts / interval).astype(np.int64)
    buckets, inv = np.unique(b, return_inverse=True)
    rows, cols = np.nonzero(~np.isnan(batch.values))
    is_y = np.array([m == perf_metric for m in batch.metrics])[cols]
    feat_names = [
        f"{batch.nodes[batch.node_idx[r]]}/{batch.metrics[c]}" for r, c in zip(rows[~is_y], cols[~is_y], strict=True)
    ]
    names, fidx = (
        np.unique(np.array(feat_names, dtype=object), return_inverse=True)
        if feat_names
        else (np.array([], dtype=object), np.array([], dtype=np.int64))
    )
    sums = np.zeros((len(buckets), len(names)))
    cnt = np.zeros((len(buckets), len(names)))
    rx, cx = rows[~is_y], cols[~is_y]
    np.add.at(sums, (inv[rx], fidx), batch.values[rx, cx])
    np.add.at(cnt, (inv[rx], fidx), 1)
    ysum = np.zeros(len(buckets))
    ycnt = np.zeros(len(buckets))
    np.add.at(ysum, inv[rows[is_y]], batch.values[rows[is_y], cols[is_y]])
    np.add.at(ycnt, inv[rows[is_y]], 1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return buckets, sums / cnt, ysum / ycnt, [str(n) for n in names]


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
        self.max_bucket: int | None = None
        self.since = 0
        self.clustering: Clustering | None = None
        self.last_r: np.ndarray | None = None
        self.last_zero: set[str] = set()
        self.selected: list[str] | None = None
        self.version = 0


class DataReduction(Operator):
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
    """

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

    def reset(self) -> None:
        if self.window % self.blocks:
            raise ValueError(f"blocks ({self.blocks}) must divide window ({self.window})")
        if not 0 < self.threshold < 1:
            raise ValueError(f"threshold must be in (0, 1), got {self.threshold}")
        self.jobs_: dict[str, _Job] = {}

    def update(self, batch: Batch) -> list[dict[str, Any]]:
        if not hasattr(self, "jobs_"):
            self.reset()
        out: list[dict[str, Any]] = []
        for ji, job in enumerate(batch.jobs):
            rows = np.nonzero(batch.job_idx == ji)[0]
            if len(rows):
                out += self._update_job(job, batch.take(rows))
        return out

    def _update_job(self, job: str, batch: Batch) -> list[dict[str, Any]]:
        st = self.jobs_.setdefault(job, _Job(self))
        buckets, vals, y, names = bucket_rows(batch, self.interval, self.perf_metric)
        for i, bk in enumerate(buckets.tolist()):
            feats, ys = st.pending.setdefault(bk, ({}, []))
            for j in np.nonzero(~np.isnan(vals[i]))[0]:
                feats.setdefault(names[j], []).append(vals[i, j])  # bucket means of sub-batches, averaged
            if not np.isnan(y[i]):
                ys.append(y[i])
        if len(buckets):
            st.max_bucket = max(int(buckets.max()), st.max_bucket if st.max_bucket is not None else -(2**62))
        ready = sorted(b for b in st.pending if st.max_bucket is not None and b <= st.max_bucket - self.lateness)
        records: list[dict[str, Any]] = []
        if not ready:
            return records
        new_names = sorted({n for b in ready for n in st.pending[b][0]} - set(st.names))
        if new_names:
            st.names += new_names
            st.ring_x = np.concatenate([st.ring_x, np.full((self.window, len(new_names)), np.nan)], axis=1)
        ix = {n: j for j, n in enumerate(st.names)}
        mat = np.full((len(ready), len(st.names)), np.nan)
        yv = np.full(len(ready), np.nan)
        for i, b in enumerate(ready):
            feats, ys = st.pending.pop(b)
            for n, v in feats.items():
                mat[i, ix[n]] = float(np.mean(v))
            if ys:
                yv[i] = float(np.mean(ys))
        keep = ~np.isnan(yv)  # a row is used when the response is present
        mat, yv, tv = mat[keep], yv[keep], np.array(ready, dtype=np.float64)[keep] * self.interval
        if len(yv) == 0:
            return records
        st.moments.add(np.concatenate([mat, yv[:, None]], axis=1), [*st.names, "__response__"])
        for i in range(len(yv)):
            st.ring_x[st.pos] = mat[i]
            st.ring_y[st.pos] = yv[i]
            st.ring_t[st.pos] = tv[i]
            st.pos = (st.pos + 1) % self.window
            st.filled = min(st.filled + 1, self.window)
        st.since += len(yv)
        if self._should_recluster(st):
            rec = self._recluster(job, st)
            if rec is not None:
                records.append(rec)
        return records

    def _should_recluster(self, st: _Job) -> bool:
        every = self.recluster_every or max(self.window // 10, 1)
        if st.clustering is None:  # the first clustering as soon as a tenth of the window is in
            return st.filled >= max(min(every, self.window // 10), 10)
        if st.since >= every:
            return True
        s = st.moments.stats()
        if st.last_r is not None and s["r"].shape == st.last_r.shape:
            with np.errstate(invalid="ignore"):
                if np.nanmax(np.abs(s["r"] - st.last_r), initial=0.0) > 0.1:  # (b) correlations moved
                    return True
        fi = [st.moments.index[n] for n in st.names]
        zero = {st.names[i] for i in np.nonzero(constant_features(s["count"][fi], s["mean"][fi], s["sd"][fi]))[0]}
        return zero != set(st.clustering.zero_variation)  # (c) a metric entered or left the zero-variation set

    def _recluster(self, job: str, st: _Job) -> dict[str, Any] | None:
        st.since = 0
        s = st.moments.stats()
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
        if res["selected"] == st.selected:
            return None
        st.selected = res["selected"]
        st.version += 1
        t = st.ring_t[: st.filled]
        return {
            "job": job,
            "kind": "reduction",
            "version": st.version,
            "period_start": float(np.nanmin(t)),
            "period_end": float(np.nanmax(t)) + self.interval,
            "selected": res["selected"],
            "scores": res["scores"],
            "index": None,
            "r2": res["r2_train"],
            "reduction_degree": res["reduction_degree"],
            "clusters": res["clusters"],
            "skipped": res["skipped"],
            "diagnostics": {
                "rows": int(res["rows"]),
                "features": len(names),
                "zero_variation": len(cl.zero_variation),
                "quadratic": ",".join(res["quadratic"]),
                "threshold": self.threshold,
                "adj_r2": res["adj_r2_train"],
            },
        }

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
                    "selected": st.selected,
                    "version": st.version,
                    "pending": {str(b): [f, y] for b, (f, y) in st.pending.items()},
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
            arrays[f"{i}_shift"] = m.shift
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
            st.pending = {int(b): (f, y) for b, (f, y) in j["pending"].items()}
            st.ring_x, st.ring_y, st.ring_t = arrays[f"{i}_x"].copy(), arrays[f"{i}_y"].copy(), arrays[f"{i}_t"].copy()
            m = st.moments
            m.names = list(j["moment_names"])
            m.index = {n: k for k, n in enumerate(m.names)}
            m.shift = arrays[f"{i}_shift"].copy()
            m.rows_in_newest = j["rows_in_newest"]
            m.ring = [
                {k: arrays[f"{i}_b{bi}_{k}"].copy() for k in ("n", "s", "q", "p", "rows")} for bi in range(j["blocks"])
            ]
            c = j["clustering"]
            if c is not None:
                st.clustering = Clustering(
                    c["names"], c["zero"], c["clusters"], c["reps"], arrays[f"{i}_edges"].copy(), c["flags"]
                )
            st.last_r = arrays[f"{i}_last_r"].copy() if f"{i}_last_r" in arrays else None
            self.jobs_[j["job"]] = st
