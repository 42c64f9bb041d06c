"""Projection pursuit, the analysis of one period (METHODS.md §1; Vetter & Reed, SC'99).

:func:`projection_pursuit` runs one period's analysis on a matrix (rows = observations, columns =
metrics): standardise, drop constant metrics, sphere through principal components with an
eigenvalue floor and the cap ``d ≤ ⌊(N−1)/2⌋``, optional trimming of outlying rows, then maximise
the exact 3-D moment index (Jones–Sibson / Nason, k-statistics) with its analytic gradient by
L-BFGS over orthonormal 3-frames (polar parametrisation) from random and warm starts, and name
and rank the metrics through structure loadings, varimax and communalities.

The streaming operator that runs it per job and period is
:class:`~perfsift.operators.pursuit.pursuit.ProjectionPursuit`; the compiled optimiser is
:mod:`perfsift.operators.pursuit._pp_kernel`.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from typing import Any

import numpy as np


def _delta(k: int) -> np.ndarray:
    """δ_ab δ_cd + δ_ac δ_bd + δ_ad δ_bc for k dimensions (the Gaussian fourth-moment term)."""
    e = np.eye(k)
    return np.einsum("ab,cd->abcd", e, e) + np.einsum("ac,bd->abcd", e, e) + np.einsum("ad,bc->abcd", e, e)


DELTAS = {k: _delta(k) for k in (1, 2, 3)}


def _constants(n: int, cumulants: str, pp3_compat: bool) -> tuple[float, float, float]:
    """(c3, c4, c4') of §1.3 for n rows."""
    if cumulants == "plain":
        return 1.0 / n, 1.0 / n, 1.0
    if cumulants != "kstat":
        raise ValueError(f"cumulants must be 'kstat' or 'plain', got {cumulants!r}")
    c3 = n / ((n - 1) * (n - 2))
    c4 = n * (n + 1) / ((n - 1) * (n - 2) * (n - 3))
    c4p = 1.0 / ((n - 2) * (n - 3)) if pp3_compat else n * n / ((n - 2) * (n - 3))
    return c3, c4, c4p


def cumulant_tensors(
    y: np.ndarray, cumulants: str = "kstat", pp3_compat: bool = False
) -> tuple[np.ndarray, np.ndarray]:
    """Third- and fourth-order k-statistic (or plain cumulant) tensors of sphered projections y (N×k)."""
    n, k = y.shape
    c3, c4, c4p = _constants(n, cumulants, pp3_compat)
    p2 = (y[:, :, None] * y[:, None, :]).reshape(n, k * k)
    s3 = (p2.T @ y).reshape(k, k, k)
    s4 = (p2.T @ p2).reshape(k, k, k, k)
    return c3 * s3, c4 * s4 - c4p * DELTAS[k]


def moment_index(
    z: np.ndarray, w: np.ndarray, cumulants: str = "kstat", pp3_compat: bool = False, gradient: bool = False
) -> Any:
    """The moment index ``I(W) = Σk_abc²/12 + Σk_abcd²/48`` of sphered data z (N×d) along the
    orthonormal frame w (d×k, k = 3 in the spec; 1 or 2 give the same index in fewer dimensions);
    with ``gradient`` also ``∇_W I = zᵀG`` (§1.4). ``pp3_compat`` returns PP3's value (its
    4th-order constant and the ×12 scale)."""
    n = len(z)
    y = z @ w
    k3, k4 = cumulant_tensors(y, cumulants, pp3_compat)
    scale = 12.0 if pp3_compat else 1.0
    value = scale * (float((k3**2).sum()) / 12 + float((k4**2).sum()) / 48)
    if not gradient:
        return value
    c3, c4, _ = _constants(n, cumulants, pp3_compat)
    k = y.shape[1]
    p2 = (y[:, :, None] * y[:, None, :]).reshape(n, k * k)
    p3 = (p2[:, :, None] * y[:, None, :]).reshape(n, k**3)
    g = (c3 / 2) * (p2 @ k3.reshape(k, k * k).T) + (c4 / 6) * (p3 @ k4.reshape(k, k**3).T)
    return value, scale * (z.T @ g), scale * g


def moment_indexes(z: np.ndarray, ws: np.ndarray, cumulants: str = "kstat", pp3_compat: bool = False) -> np.ndarray:
    """:func:`moment_index` of z along every frame of ``ws`` (R×d×k) at once: the same values, bit
    for bit (numpy's stacked products run the same BLAS call per frame), without R × a dozen small
    numpy calls.

    >>> rng = np.random.default_rng(0)
    >>> z, ws = rng.normal(size=(50, 4)), np.stack([polar(rng.normal(size=(4, 3))) for _ in range(2)])
    >>> moment_indexes(z, ws).tolist() == [moment_index(z, w) for w in ws]
    True
    """
    r, n, k = len(ws), len(z), ws.shape[2]
    c3, c4, c4p = _constants(n, cumulants, pp3_compat)
    y = z @ ws  # R×N×k
    p2 = (y[:, :, :, None] * y[:, :, None, :]).reshape(r, n, k * k)
    p2t = p2.transpose(0, 2, 1)
    k3 = c3 * (p2t @ y).reshape(r, k**3)
    k4 = c4 * (p2t @ p2).reshape(r, k**4) - c4p * DELTAS[k].reshape(k**4)
    scale = 12.0 if pp3_compat else 1.0
    return scale * ((k3**2).sum(axis=1) / 12 + (k4**2).sum(axis=1) / 48)


@dataclass
class Sphered:
    z: np.ndarray  # N×d sphered rows (all rows)
    kept: np.ndarray  # indexes of the non-constant metrics
    vectors: np.ndarray  # n_eff×d principal directions
    values: np.ndarray  # d eigenvalues (descending)
    eigenvalues: np.ndarray  # all eigenvalues of the correlation matrix
    truncated: bool


def sphere(x: np.ndarray, eps_eig: float = 1e-6) -> Sphered:
    """Standardise (population sd), drop constant metrics (§0.2 rule), sphere by PCA with an eigenvalue
    floor and ``d ≤ min(n_eff, ⌊(N−1)/2⌋)`` (§1.2 steps 2–4). Never inverts the correlation matrix."""
    n = len(x)
    mean = x.mean(axis=0)
    sd = x.std(axis=0)
    kept = np.nonzero(sd > np.maximum(1e-9 * np.abs(mean), 1e-12))[0]
    xt = (x[:, kept] - mean[kept]) / sd[kept]
    r = xt.T @ xt / n
    lam, vec = np.linalg.eigh(r)
    lam, vec = lam[::-1], vec[:, ::-1]
    count = int((lam > eps_eig * lam[0]).sum()) if len(lam) and lam[0] > 0 else 0
    d = min(count, len(kept), max((n - 1) // 2, 0))
    z = xt @ vec[:, :d] / np.sqrt(lam[:d]) if d else np.zeros((n, 0))
    return Sphered(z, kept, vec[:, :d], lam[:d], lam, truncated=d < count)


def across_processors(snap: np.ndarray, norm: str = "scale") -> np.ndarray:
    """One snapshot (processors × metrics, NaN = missing) relative to the processors: ``"centre"``
    (and ``"noise"``, which the operator then divides by each metric's noise over the period,
    :func:`~perfsift.operators.pursuit.rows.noise_scale`) subtracts each metric's mean across them,
    ``"scale"`` (the paper's per-snapshot standardisation) also divides by its spread, ``"none"``
    leaves it. Centred, only differences *between processors* count: a metric identical on all
    processors becomes exactly 0 (not a rounding residue of its mean), has zero variance however
    it moves in time, and is never selected. Scaling also stops a common trend's changing
    amplitude from making the stacked noise of a metric heavy-tailed (docs/pursuit.md). A stack of
    snapshots (… × processors × metrics) is taken snapshot by snapshot, with the same values as one
    at a time.

    >>> across_processors(np.array([[1.0, 5.0], [3.0, 5.0]])).tolist()
    [[-1.0, 0.0], [1.0, 0.0]]
    """
    if norm == "none":
        return snap
    with warnings.catch_warnings():  # a metric missing on every processor: NaN stays NaN
        warnings.simplefilter("ignore", RuntimeWarning)
        centred = snap - np.nanmean(snap, axis=-2, keepdims=True)
        same = np.nanmax(snap, axis=-2, keepdims=True) == np.nanmin(snap, axis=-2, keepdims=True)
        centred = np.where(same, np.where(np.isnan(snap), np.nan, 0.0), centred)
        if norm == "scale":
            sd = np.nanstd(snap, axis=-2, keepdims=True)
            centred = centred / np.where(sd > 0, sd, 1.0)
    return centred


def auto_trim_limit(n: int, d: int, alpha: float = 0.01) -> float:
    """Radius beyond which a sphered row is an outlier: ‖z‖² of a Gaussian row is χ²_d, so the
    (1 − alpha/n) quantile leaves all n rows of pure Gaussian data untouched with probability
    about 1 − alpha, at any dimension d (a fixed 3 trims most Gaussian rows once d > 9).

    >>> round(auto_trim_limit(100, 3), 2), round(auto_trim_limit(100, 24), 2)
    (4.59, 7.66)
    """
    from scipy.special import gammaincinv  # here: scipy costs every perfsift process's start

    # chi2.ppf(q, d) is 2 · gammaincinv(d / 2, q) (scipy's _ppf) behind argument checks that cost more
    return float(np.sqrt(2 * gammaincinv(max(d, 1) / 2, 1 - alpha / max(n, 1))))


def trim_rows(z: np.ndarray, mode: str, limit: float = 3.0, form: str = "scaled") -> tuple[np.ndarray, np.ndarray, int]:
    """Shrink (``log``/``sqrt``) or ``remove`` rows with ‖z‖ > limit, then re-sphere (§1.2 step 5).

    Returns (rows for the index, the d×d re-sphering transform T, number of rows trimmed).
    """
    r = np.linalg.norm(z, axis=1)
    out = r > limit
    zz = z.copy()
    if mode == "remove":
        zz = zz[~out]
    elif mode in ("log", "sqrt"):
        rr = r[out] / (limit if form == "scaled" else 1.0)
        rho = 1 + np.log(rr) if mode == "log" else 3 - 2 / np.sqrt(rr)
        if form == "scaled":
            rho = limit * rho
        zz[out] = z[out] * (rho / r[out])[:, None]
    elif mode != "none":
        raise ValueError(f"trim must be none, log, sqrt or remove, got {mode!r}")
    if mode == "none":
        return zz, np.eye(z.shape[1]), 0
    zc = zz - zz.mean(axis=0)
    lam, vec = np.linalg.eigh(zc.T @ zc / len(zc))
    t = vec @ np.diag(1 / np.sqrt(np.maximum(lam, 1e-300))) @ vec.T
    return zc @ t, t, int(out.sum())


def polar(a: np.ndarray) -> np.ndarray:
    """The orthonormal frame nearest to a (``U Vᵀ`` of its thin SVD); of each matrix of a stack
    (R×d×k) at once, with the same values as one by one."""
    u, _, vt = np.linalg.svd(a, full_matrices=False)
    return u @ vt


def varimax(loadings: np.ndarray, normalize: bool = True, eps: float = 1e-8, max_iter: int = 1000) -> np.ndarray:
    """Varimax rotation (Kaiser 1958; the iteration of R ``stats::varimax``), canonicalised: columns by
    decreasing sum of squares, each with its largest-|·| entry positive (§1.7)."""
    x = loadings.copy()
    h = np.linalg.norm(x, axis=1)
    if normalize:
        x = np.divide(x, h[:, None], out=np.zeros_like(x), where=h[:, None] > 0)
    from perfsift.operators.pursuit._pp_kernel import varimax_frame

    # T maximising Σ_a [Σ_j z_ja⁴ − (Σ_j z_ja²)²/p] (z = xT): T = U Vᵀ of the SVD of
    # xᵀ(z³ − z·diag(Σ_j z_ja²)/p) until the criterion's gain falls below eps (compiled: a few dozen
    # rounds of 3×3 products and an SVD cost more in numpy calls than in arithmetic)
    t = varimax_frame(np.ascontiguousarray(x, dtype=np.float64), eps, max_iter)
    rotated = x @ t
    if normalize:
        rotated = rotated * h[:, None]
    order = np.argsort(-(rotated**2).sum(axis=0), kind="stable")
    rotated = rotated[:, order]
    signs = np.sign(rotated[np.argmax(np.abs(rotated), axis=0), np.arange(rotated.shape[1])])
    return rotated * np.where(signs == 0, 1.0, signs)


@dataclass
class PursuitResult:
    index: float
    named: list[str]
    ranking: list[tuple[str, float]]  # every metric, most important first, importance in [0, 1]
    w: np.ndarray = field(repr=False)
    weights: np.ndarray = field(repr=False)  # B, metric space (kept metrics × 3)
    loadings: np.ndarray = field(repr=False)
    rotated: np.ndarray = field(repr=False)
    diagnostics: dict[str, Any] = field(default_factory=dict)
    skipped: str | None = None
    metrics: list[str] = field(default_factory=list)  # the non-constant metrics: rows of weights/loadings


def projection_pursuit(
    x: np.ndarray,
    names: list[str],
    seed: int = 0,
    restarts: int = 10,
    trim: str = "auto",
    trim_limit: float | None = None,
    trim_form: str = "scaled",
    cumulants: str = "kstat",
    pp3_compat: bool = False,
    eps_eig: float = 1e-6,
    gtol: float = 1e-7,
    maxiter: int = 300,
    warm_start: np.ndarray | None = None,
    warm_names: list[str] | None = None,
    optimizer: str = "lbfgs",
    dims: int = 3,
) -> PursuitResult:
    """One projection-pursuit analysis of x (rows × metrics); see the module docstring.

    ``optimizer``: ``"lbfgs"`` (compiled L-BFGS, restarts in parallel; the default), ``"scipy"``
    (scipy's L-BFGS-B on the numpy index, the reference) or ``"scipy-fd"`` (the same with
    finite-difference gradients, the baseline the benchmark compares against). ``dims``: dimension
    of the projection (3 in the spec; 1 and 2 use the same index in fewer dimensions and the scipy
    optimiser) — as many metrics are named, and all are ranked.

    ``warm_start``: metric-space weights B of a previous result (rows named by ``warm_names``),
    mapped into the new sphered coordinates as an extra start.
    """
    rng = np.random.default_rng(seed)
    n = len(x)
    sph = sphere(np.asarray(x, dtype=np.float64), eps_eig)
    d = sph.z.shape[1]
    kept_names = [names[i] for i in sph.kept]
    diag: dict[str, Any] = {
        "rows": n,
        "metrics": len(names),
        "n_eff": len(sph.kept),
        "d": d,
        "eigenvalues": sph.eigenvalues.tolist(),
        "truncated": sph.truncated,
        "low_power": n < 10 * max(d, 1),
        "zero_variance": [m for m in names if m not in kept_names],
    }

    def skipped(reason: str) -> PursuitResult:
        zero = [(m, 0.0) for m in names]
        return PursuitResult(
            0.0,
            [],
            zero,
            np.zeros((d, dims)),
            np.zeros((len(sph.kept), dims)),
            np.zeros((0, dims)),
            np.zeros((0, dims)),
            {**diag, "skipped": True},
            reason,
            kept_names,
        )

    if len(sph.kept) < 2:
        return skipped("fewer than 2 non-constant metrics")
    if d < dims:
        return skipped(f"only {d} sphered dimensions (need {dims}; rows {n})")
    mode = ("log" if n < 100 * d else "none") if trim == "auto" else trim
    limit = trim_limit if trim_limit is not None else auto_trim_limit(n, d)
    zi, t_mat, n_trim = trim_rows(sph.z, mode, limit, trim_form)
    diag.update(trim=mode, trimmed_rows=n_trim, trim_limit=limit)
    if len(zi) < max(8, 2 * d + 1):
        return skipped("too few rows")

    def objective(a_flat: np.ndarray) -> tuple[float, np.ndarray]:
        a = a_flat.reshape(d, dims)
        u, s, vt = np.linalg.svd(a, full_matrices=False)
        w = u @ vt
        value, grad, _ = moment_index(zi, w, cumulants, pp3_compat, gradient=True)
        proj = grad - w @ (w.T @ grad)
        inv_sqrt = vt.T @ np.diag(1 / s) @ vt
        return -value, -(proj @ inv_sqrt).ravel()

    starts = []
    if warm_start is not None and warm_names is not None:
        pos = {m: i for i, m in enumerate(warm_names)}
        b_prev = np.array([warm_start[pos[m]] if m in pos else np.zeros(dims) for m in kept_names])
        a0 = np.diag(np.sqrt(sph.values)) @ sph.vectors.T @ b_prev
        a0 = np.linalg.solve(t_mat, a0) if mode != "none" else a0
        sv = np.linalg.svd(a0, compute_uv=False)
        if sv[-1] > 1e-8 * sv[0]:
            starts.append(a0)
    target = len(starts) + restarts  # the warm start (if usable) comes on top of the random ones
    while len(starts) < target:  # the draws one after the other, as many as still needed at once
        a0s = rng.normal(size=(target - len(starts), d, dims))
        sv = np.linalg.svd(a0s, compute_uv=False)
        starts += [a0 for a0, ok in zip(a0s, sv[:, -1] > 1e-8 * sv[:, 0], strict=True) if ok]
    optima: list[tuple[float, np.ndarray]] = []
    converged = 0
    evaluations = 0
    if dims not in (1, 2, 3):
        raise ValueError(f"dims must be 1, 2 or 3, got {dims}")
    if optimizer == "lbfgs" and dims == 3:
        from perfsift.operators.pursuit import _pp_kernel

        # The kernel maximises the unscaled index; pp3_compat only rescales it (×12, same argmax).
        consts = _constants(len(zi), cumulants, pp3_compat)
        found, _, _, evals, status = _pp_kernel.run(np.array(starts), zi, consts, gtol, maxiter)
        frames = polar(found)
        optima = list(zip(moment_indexes(zi, frames, cumulants, pp3_compat).tolist(), frames, strict=True))
        converged = int((status <= 1).sum())
        evaluations = int(evals.sum())
    elif optimizer in ("lbfgs", "scipy", "scipy-fd"):
        import scipy.optimize  # here: only these optimizers need it, and it costs every process's start

        for a0 in starts:
            if optimizer != "scipy-fd":
                res = scipy.optimize.minimize(
                    objective, a0.ravel(), jac=True, method="L-BFGS-B", options={"gtol": gtol, "maxiter": maxiter}
                )
            else:
                res = scipy.optimize.minimize(
                    lambda a: objective(a)[0],
                    a0.ravel(),
                    method="L-BFGS-B",
                    options={"gtol": gtol, "maxiter": maxiter},
                )
            converged += bool(res.success)
            evaluations += int(res.nfev)
            optima.append((-float(res.fun), polar(res.x.reshape(d, dims))))
    else:
        raise ValueError(f"optimizer must be 'lbfgs', 'scipy' or 'scipy-fd', got {optimizer!r}")
    best = max(range(len(optima)), key=lambda i: optima[i][0])
    best_value, best_w = optima[best]
    # optima within 0.05 of each other (Frobenius distance of their projectors / √2) are the same one
    ws = np.stack([w for _, w in optima])
    proj = ws @ ws.transpose(0, 2, 1)
    same = np.sqrt(((proj[:, None] - proj[None, :]) ** 2).sum(axis=(2, 3))) / np.sqrt(2) < 0.05
    distinct: list[int] = []
    for i in sorted(range(len(optima)), key=lambda i: -optima[i][0]):
        if not same[i, distinct].any():
            distinct.append(i)
    hits = int(same[:, best].sum())
    weights = sph.vectors @ np.diag(1 / np.sqrt(sph.values)) @ t_mat @ best_w  # B: Y = X̃ B
    xt = (x[:, sph.kept] - x[:, sph.kept].mean(axis=0)) / x[:, sph.kept].std(axis=0)
    y = xt @ weights
    yc = (y - y.mean(axis=0)) / y.std(axis=0)
    loadings = np.clip(xt.T @ yc / n, -1.0, 1.0)  # structure loadings corr(x̃_j, y_a)
    rotated = varimax(loadings)
    c_yy = np.atleast_2d(np.corrcoef(y.T))
    comm = np.einsum("ja,ab,jb->j", loadings, np.linalg.pinv(c_yy), loadings)
    comm = np.clip(comm, 0.0, 1.0)
    named: list[str] = []
    for a in range(dims):
        by_loading = np.argsort(-np.abs(rotated[:, a]), kind="stable")
        j = next(int(j) for j in by_loading if kept_names[int(j)] not in named)
        named.append(kept_names[j])
    peak = np.abs(rotated).max(axis=1)
    by_importance = sorted(range(len(kept_names)), key=lambda j: (-comm[j], -peak[j], j))
    ranking = [(kept_names[j], float(comm[j])) for j in by_importance]
    ranking += [(m, 0.0) for m in names if m not in kept_names]
    diag.update(
        restarts=len(starts),
        restarts_converged=converged,
        evaluations=evaluations,
        distinct_optima=len(distinct),
        best_hits=hits,
        unstable_optimum=len(starts) >= 10 and hits == 1,
        skipped=False,
    )
    return PursuitResult(best_value, named, ranking, best_w, weights, loadings, rotated, diag, metrics=kept_names)


def after_round(x: np.ndarray, names: list[str], cols: list[int], named: list[str], limit: float = 0.95) -> list[int]:
    """The columns ``cols`` of ``x`` left for the next round of repeated PP (METHODS.md §1.7,
    ``rank="sequential"``): without the ``named`` metrics and without every metric whose |r| with
    one of them exceeds ``limit`` on the rows PP saw (a near-duplicate carries the same structure
    and would be named again in the next round).

    >>> rng = np.random.default_rng(0)
    >>> a, b, c = rng.normal(size=(3, 50))
    >>> after_round(np.stack([a, b, 2 * a + 0.01 * c, c], axis=1), ["a", "b", "a2", "c"], [0, 1, 2, 3], ["a"])
    [1, 3]
    """
    gone = [j for j in cols if names[j] in named]
    rest = [j for j in cols if names[j] not in named]
    if not gone or not rest:
        return rest
    with np.errstate(all="ignore"):
        r = np.corrcoef(x[:, gone + rest], rowvar=False)[: len(gone), len(gone) :]
    close = (np.abs(np.nan_to_num(r)) > limit).any(axis=0)
    return [j for j, c in zip(rest, close, strict=True) if not c]


def flat_diagnostics(diag: dict[str, Any]) -> dict[str, Any]:
    """A result's diagnostics as a selection record's scalar map (lists become comma-separated
    strings; eigenvalues are summarised)."""
    out: dict[str, Any] = {}
    for k, v in diag.items():
        if k == "eigenvalues":
            if v:
                out["eig_ratio"] = max(float(v[-1] / v[0]), 0.0) if v[0] > 0 else 0.0
            continue
        if isinstance(v, np.generic):
            v = v.item()
        if isinstance(v, list):
            out[k] = ",".join(map(str, v))
        elif isinstance(v, (bool, int, float, str)) or v is None:
            out[k] = v
        else:
            out[k] = str(v)
    return out
