"""Backward elimination (METHODS.md §2.2, step 2 of statistical data reduction): an OLS fit of the
performance metric on candidate features (linear, and with ``quadratic`` also (x − c)² terms),
from which the term with the smallest partial F is removed while F < F-to-remove; and the R² of a
selection refitted on other data.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

SQUARE = "^2"
LAG = "@t-"


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
    """Greedy Cholesky on the correlation of standardised columns, in column order: indexes of the
    columns whose residual variance on the accepted ones is >= tol.

    Left-looking: ``w`` holds L⁻¹·corr[keep, :] for every column, one row per accepted column, so a
    column's coefficients on the accepted ones are its column of ``w`` (no triangular solve per
    column: those, through scipy's wrapper, were most of a reclustering's time), and an accepted
    column adds its row. The same residuals as solving L·v = corr[keep, j] for each column
    (tests/unit/test_reduction.py checks the kept columns against that).

    >>> z = np.array([[1.0, 2.0, 1.0], [-1.0, -2.0, 1.0], [1.0, 2.0, -1.0], [-1.0, -2.0, -1.0]])
    >>> _drop_collinear(z)  # the second column is twice the first
    [0, 2]
    """
    n = len(z)
    corr = z.T @ z / n
    p = corr.shape[0]
    keep: list[int] = []
    rows = np.zeros((p, p))  # w is rows[:len(keep)]: filled in place, not re-stacked per column
    for j in range(p):
        w = rows[: len(keep)]
        v = w[:, j]
        resid = corr[j, j] - v @ v
        if resid >= tol:
            rows[len(keep)] = (corr[j] - v @ w) / np.sqrt(resid)
            keep.append(j)
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
        f = b**2 / (s2 * g.diagonal()) if s2 > 0 else np.full(len(active), np.inf)
        k = int(np.argmin(f))  # ties -> lowest index
        if f[k] >= f_out:
            break
        history.append((terms[active[k]], float(f[k])))
        gk = g[:, k].copy()
        sse += b[k] ** 2 / g[k, k]
        rest = np.arange(len(active) - 1)  # every index but k, in order (one gather, no np.delete)
        rest[k:] += 1
        b = (b - gk * b[k] / g[k, k])[rest]
        g = (g - gk[:, None] * gk[None, :] / g[k, k])[rest[:, None], rest]
        del active[k]
        removals += 1
        if active and (removals % 20 == 0 or (g.diagonal() <= 0).any()):
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


def _columns(x: np.ndarray, index: Mapping[str, int], terms: list[str], centers: Mapping[str, float]) -> np.ndarray:
    """The design columns of ``terms`` (linear ``f`` or quadratic ``f^2`` about ``centers``) from
    ``x``, whose column of feature ``f`` is ``index[f]`` (a feature not in it: a column of NaN).

    One gather of the columns and one ``(x - c)²`` over the squares: the values a column-by-column
    stack of ``x[:, j]`` and ``(x[:, j] - c) ** 2`` gives, in the same C-ordered layout."""
    base = [t.removesuffix(SQUARE) for t in terms]
    if not terms:
        return np.empty((len(x), 0))
    j = [index.get(b, -1) for b in base]
    a = (
        np.take(x, j, axis=1)
        if min(j) >= 0
        else np.where(np.array(j) >= 0, np.take(x, np.maximum(j, 0), axis=1), np.nan)
    )
    a = np.ascontiguousarray(a)  # x[:, j] comes out in Fortran order: the stack was in C order
    sq = [k for k, t in enumerate(terms) if t.endswith(SQUARE)]
    if sq:
        a[:, sq] = (a[:, sq] - np.array([centers.get(base[k], 0.0) for k in sq])) ** 2
    return a


def _least_squares(z: np.ndarray, yc: np.ndarray) -> np.ndarray:
    """Minimum-norm least-squares coefficients of centred ``yc`` on centred, standardised ``z``,
    from the eigen-decomposition of ``zᵀz`` (directions with eigenvalue below 1e-10 of the largest
    dropped, so duplicated or collinear columns are fine). A p × p problem after one GEMM: RAND
    refits 50 subsets of ~100 terms per table, and an n × p least-squares solver per subset
    dominated the evaluation."""
    if z.shape[1] == 0:
        return np.zeros(0)
    from scipy.linalg import eigh

    w, v = eigh(z.T @ z, check_finite=False, driver="evd")
    keep = w > 1e-10 * max(float(w[-1]), 1e-300)
    return v[:, keep] @ ((v[:, keep].T @ (z.T @ yc)) / w[keep])


def adjusted(r2: float, n: int, p: int) -> float | None:
    """Adjusted R² ``1 − (1 − R²)(n − 1)/(n − p − 1)`` of ``p`` terms on ``n`` rows (None when n ≤ p + 1)."""
    return float(1 - (1 - r2) * (n - 1) / (n - p - 1)) if n - p - 1 > 0 else None


def refit(
    x: np.ndarray,
    y: np.ndarray,
    names: list[str],
    terms: list[str],
    centers: dict[str, float] | None,
    x_new: np.ndarray | None = None,
    y_new: np.ndarray | None = None,
    index: Mapping[str, int] | None = None,
) -> tuple[float, float | None, int]:
    """(R², adjusted R², rows) of an OLS refit of ``terms`` on ``(x, y)``, as the paper verifies a
    selection on other traces; with ``x_new, y_new``, the R² of that fit's predictions of ``y_new``
    (out of sample: 1 − SSE/SST about ``y_new``'s own mean, may be negative; its adjusted value is
    None, there is nothing to adjust for). Rows with a missing value are skipped; NaN when there are
    fewer than len(terms) + 2 rows.

    ``centers=None`` centres each square on the mean of ``x`` itself, "the mean at fitting time"
    of METHODS.md §2.2: a refit on another trace is a new fit, and a centre carried over from a
    trace at another level turns (x − c)² into a mostly linear term there.

    ``index`` is ``names``' column index ``{name: j}``, for a caller that refits many term lists
    on the same table (RAND)."""
    ix = {n: j for j, n in enumerate(names)} if index is None else index
    if centers is None:
        with np.errstate(all="ignore"):
            centers = {
                t.removesuffix(SQUARE): float(np.nanmean(x[:, ix[t.removesuffix(SQUARE)]]))
                for t in terms
                if t.endswith(SQUARE) and t.removesuffix(SQUARE) in ix
            }
    a = _columns(x, ix, terms, centers)
    ok = ~np.isnan(y) & ~np.isnan(a).any(axis=1)
    a, yy = a[ok], y[ok]
    if len(yy) < len(terms) + 2:
        return float("nan"), None, len(yy)
    mu, sd = a.mean(axis=0), a.std(axis=0)
    sd = np.where(sd > 0, sd, 1.0)  # squared counters reach 1e16: scale before solving
    z = (a - mu) / sd
    y0 = float(yy.mean())
    beta = _least_squares(z, yy - y0)
    if x_new is not None and y_new is not None:
        b = _columns(x_new, ix, terms, centers)
        ok = ~np.isnan(y_new) & ~np.isnan(b).any(axis=1)
        b, yn = b[ok], y_new[ok]
        if len(yn) < 2:
            return float("nan"), None, len(yn)
        resid = yn - y0 - ((b - mu) / sd) @ beta
        sst = float(((yn - yn.mean()) ** 2).sum())
        return (float(1 - resid @ resid / sst) if sst > 0 else 0.0), None, len(yn)
    resid = yy - y0 - z @ beta
    sst = float(((yy - yy.mean()) ** 2).sum())
    r2 = float(1 - resid @ resid / sst) if sst > 0 else 0.0
    return r2, adjusted(r2, len(yy), len(terms)), len(yy)


def refit_r2(
    x: np.ndarray, y: np.ndarray, names: list[str], terms: list[str], centers: dict[str, float] | None
) -> float:
    """R² of :func:`refit` (NaN when there are too few complete rows)."""
    return refit(x, y, names, terms, centers)[0]


def rand_subsets(
    live: list[str], terms: list[str], subsets: int, rng: np.random.Generator
) -> list[tuple[list[str], list[str]]]:
    """RAND baseline: ``subsets`` random picks of as many of the ``live`` features as ``terms``
    (a selection's terms) use, each as (features, terms) with the same term structure: as many
    features with both their linear term and their square, with the linear term only, and with the
    square only [design choice: with every pick's square, a quadratic RAND subset had up to twice
    the selection's terms, and refitted on a verification trace it was a larger model]."""
    lin = {t for t in terms if not t.endswith(SQUARE)}
    sq = {t.removesuffix(SQUARE) for t in terms if t.endswith(SQUARE)}
    both, lin_only, k = len(lin & sq), len(lin - sq), len(lin | sq)
    out = []
    for _ in range(subsets if 0 < k <= len(live) else 0):
        pick = [str(p) for p in rng.choice(np.array(live, dtype=object), size=k, replace=False)]
        linear = pick[: both + lin_only]
        squares = [p + SQUARE for p in pick[:both] + pick[both + lin_only :]]
        out.append((pick, linear + squares))
    return out


def expand_predictors(
    x: np.ndarray, names: list[str], lags: int = 0, smooth: int = 1, buckets: np.ndarray | None = None
) -> tuple[np.ndarray, list[str]]:
    """Predictors as levers for a response that follows its causes with a delay or through noise:
    each feature smoothed by a trailing sliding-window mean of ``smooth`` buckets (METHODS.md §0.3,
    averaging the values present; fewer at the start), and with ``lags`` the smoothed feature of
    1..lags buckets earlier as extra features ``name@t-k`` (NaN where that bucket has no row).
    ``buckets`` are the rows' bucket indexes (default: consecutive rows); a gap is not bridged.

    >>> x = np.arange(4.0)[:, None]
    >>> z, n = expand_predictors(x, ["a"], lags=1, smooth=2)
    >>> n, z[:, 0].tolist(), z[1:, 1].tolist()
    (['a', 'a@t-1'], [0.0, 0.5, 1.5, 2.5], [0.0, 0.5, 1.5])
    """
    if lags < 0 or smooth < 1:
        raise ValueError(f"lags must be >= 0 and smooth >= 1, got lags={lags}, smooth={smooth}")
    if lags == 0 and smooth == 1:
        return x, list(names)
    b = np.arange(len(x)) if buckets is None else np.asarray(buckets, dtype=np.int64)
    span = int(b.max() - b.min()) + 1 if len(b) else 0
    slot = b - (b.min() if len(b) else 0)
    grid = np.full((span + lags, x.shape[1]), np.nan)  # the rows on a gap-free grid of buckets
    grid[slot + lags] = x
    present = ~np.isnan(grid)
    csum = np.cumsum(np.where(present, grid, 0.0), axis=0)
    ccnt = np.cumsum(present, axis=0)
    lo = np.maximum(np.arange(len(grid)) - smooth, -1)
    with np.errstate(invalid="ignore", divide="ignore"):
        prev_s = np.where(lo[:, None] >= 0, csum[np.maximum(lo, 0)], 0.0)
        prev_c = np.where(lo[:, None] >= 0, ccnt[np.maximum(lo, 0)], 0)
        smoothed = (csum - prev_s) / (ccnt - prev_c)  # NaN where the window holds no value
    cols = [smoothed[slot + lags - k] for k in range(lags + 1)]
    out_names = [*names, *(f"{n}{LAG}{k}" for k in range(1, lags + 1) for n in names)]
    return np.concatenate(cols, axis=1), out_names


def expand_row(recent: dict[int, dict[str, float]], bucket: int, lags: int, smooth: int) -> dict[str, float]:
    """One bucket's features as :func:`expand_predictors` makes them, for a stream: ``recent``
    holds the bucket means of the last ``lags + smooth`` buckets (``bucket`` included); each
    feature is its mean over the buckets ``bucket − smooth + 1 .. bucket`` that have it, and
    ``name@t-k`` the same ``k`` buckets earlier.

    >>> rows = {1: {"a": 0.0}, 2: {"a": 1.0}, 3: {"a": 2.0}}
    >>> expand_row(rows, 3, lags=1, smooth=2)
    {'a': 1.5, 'a@t-1': 0.5}
    """
    out: dict[str, float] = {}
    for k in range(lags + 1):
        window = [recent[j] for j in range(bucket - k - smooth + 1, bucket - k + 1) if j in recent]
        for n in dict.fromkeys(n for w in window for n in w):
            vals = [w[n] for w in window if n in w and not math.isnan(w[n])]
            if vals:
                out[n if k == 0 else f"{n}{LAG}{k}"] = math.fsum(vals) / len(vals)
    return out
