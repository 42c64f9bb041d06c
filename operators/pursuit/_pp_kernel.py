"""Compiled projection-pursuit optimiser (numba), the fast path of
:func:`perfsift.operators.pursuit.projection.projection_pursuit`.

The objective is the one of METHODS.md §1.5: ``f(A) = −I(polar(A))`` with gradient
``−(I − WWᵀ)∇_W I (AᵀA)^{−1/2}``. The index and its gradient (§1.3–1.4) are computed in two fused
passes over the rows using the symmetry of the cumulant tensors (10 distinct third-order and 15
distinct fourth-order entries), about ``N(6d + 100)`` flops per evaluation. The optimiser is a
L-BFGS (two-loop recursion, memory 10) with a strong-Wolfe line search and scipy's
stopping rules (projected-gradient ``gtol``, relative reduction ``ftol``, ``maxiter``). Small
problems run their restarts one after the other; large ones (``POOL_MIN_WORK``) spread them over a
thread pool (the kernel releases the GIL). Each restart is deterministic, so results do not depend
on the number of threads.

The reference path (scipy L-BFGS-B over the numpy :func:`~perfsift.operators.pursuit.projection.moment_index`)
stays available as ``optimizer="scipy"``; tests compare the two.
"""

from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
from numba import njit
from perfsift.operators import _numba  # noqa: F401  (sets the kernel cache directory)

# Distinct index triples a≤b≤c and quadruples a≤b≤c≤d of a symmetric 3-tensor, with the number of
# permutations of each (their multiplicity in a sum over the full tensor).
T3 = np.array([(a, b, c) for a in range(3) for b in range(a, 3) for c in range(b, 3)], dtype=np.int64)
T4 = np.array(
    [(a, b, c, d) for a in range(3) for b in range(a, 3) for c in range(b, 3) for d in range(c, 3)], dtype=np.int64
)
T2 = np.array([(a, b) for a in range(3) for b in range(a, 3)], dtype=np.int64)


def _multiplicity(rows: np.ndarray) -> np.ndarray:
    from math import factorial

    out = []
    for r in rows:
        counts = np.bincount(r, minlength=3)
        m = factorial(len(r))
        for c in counts:
            m //= factorial(int(c))
        out.append(m)
    return np.array(out, dtype=np.float64)


M3 = _multiplicity(T3)
M4 = _multiplicity(T4)
M2 = _multiplicity(T2)


def _index_of(table: np.ndarray) -> dict[tuple[int, ...], int]:
    return {tuple(int(v) for v in row): i for i, row in enumerate(table)}


# For the gradient: g_a = (c3/2)·Σ_bc k3_abc y_b y_c + (c4/6)·Σ_bcd k4_abcd y_b y_c y_d. Written on
# distinct monomials: G3[a, u] is the distinct k3 entry that multiplies quadratic monomial u in g_a,
# G4[a, u] the k4 entry that multiplies cubic monomial u.
def _gradient_maps() -> tuple[np.ndarray, np.ndarray]:
    i3 = _index_of(T3)
    i4 = _index_of(T4)
    g3 = np.zeros((3, len(T2)), dtype=np.int64)  # k3 entry (distinct index) per (a, quadratic monomial)
    g4 = np.zeros((3, len(T3)), dtype=np.int64)  # k4 entry per (a, cubic monomial)
    for a in range(3):
        for u, (b, c) in enumerate(T2):
            g3[a, u] = i3[tuple(sorted((a, int(b), int(c))))]
        for u, (b, c, d) in enumerate(T3):
            g4[a, u] = i4[tuple(sorted((a, int(b), int(c), int(d))))]
    return g3, g4


G3, G4 = _gradient_maps()
# Entries of the fourth-order δ term (δ_ab δ_cd + δ_ac δ_bd + δ_ad δ_bc) on distinct quadruples.
DELTA4 = np.array(
    [
        float((a == b) * (c == d) + (a == c) * (b == d) + (a == d) * (b == c))
        for a, b, c, d in (tuple(int(v) for v in r) for r in T4)
    ]
)


@njit(cache=True, fastmath=True)
def index_gradient(z, w, c3, c4, c4p, y, grad, consts):  # type: ignore[no-untyped-def]
    """Index I(W) of sphered rows z (N×d) along the frame w (d×3); writes ∇_W I into grad (d×3).
    y (N×3) is scratch. The monomials are written out: index tables in the row loop cost 3×."""
    _, _, _, m2, m3, m4, g3, g4, delta4 = consts
    n = z.shape[0]
    np.dot(z, w, y)  # into y: a slice assignment compiles numba's shape-error formatting
    s3 = np.zeros(10)
    s4 = np.zeros(15)
    for i in range(n):
        y0 = y[i, 0]
        y1 = y[i, 1]
        y2 = y[i, 2]
        q00 = y0 * y0
        q01 = y0 * y1
        q02 = y0 * y2
        q11 = y1 * y1
        q12 = y1 * y2
        q22 = y2 * y2
        s3[0] += q00 * y0
        s3[1] += q00 * y1
        s3[2] += q00 * y2
        s3[3] += q01 * y1
        s3[4] += q01 * y2
        s3[5] += q02 * y2
        s3[6] += q11 * y1
        s3[7] += q11 * y2
        s3[8] += q12 * y2
        s3[9] += q22 * y2
        s4[0] += q00 * q00
        s4[1] += q00 * q01
        s4[2] += q00 * q02
        s4[3] += q00 * q11
        s4[4] += q00 * q12
        s4[5] += q00 * q22
        s4[6] += q01 * q11
        s4[7] += q01 * q12
        s4[8] += q01 * q22
        s4[9] += q02 * q22
        s4[10] += q11 * q11
        s4[11] += q11 * q12
        s4[12] += q11 * q22
        s4[13] += q12 * q22
        s4[14] += q22 * q22
    k3 = c3 * s3
    k4 = c4 * s4 - c4p * delta4
    value = 0.0
    for u in range(10):
        value += m3[u] * k3[u] * k3[u] / 12.0
    for u in range(15):
        value += m4[u] * k4[u] * k4[u] / 48.0
    # g_a on the distinct quadratic (q) and cubic (r) monomials.
    q = np.zeros((3, 6))
    r = np.zeros((3, 10))
    for a in range(3):
        for u in range(6):
            q[a, u] = 0.5 * c3 * m2[u] * k3[g3[a, u]]
        for u in range(10):
            r[a, u] = c4 / 6.0 * m3[u] * k4[g4[a, u]]
    gy = np.empty((n, 3))
    for i in range(n):
        y0 = y[i, 0]
        y1 = y[i, 1]
        y2 = y[i, 2]
        q00 = y0 * y0
        q01 = y0 * y1
        q02 = y0 * y2
        q11 = y1 * y1
        q12 = y1 * y2
        q22 = y2 * y2
        c000 = q00 * y0
        c001 = q00 * y1
        c002 = q00 * y2
        c011 = q01 * y1
        c012 = q01 * y2
        c022 = q02 * y2
        c111 = q11 * y1
        c112 = q11 * y2
        c122 = q12 * y2
        c222 = q22 * y2
        for a in range(3):
            gy[i, a] = (
                q[a, 0] * q00
                + q[a, 1] * q01
                + q[a, 2] * q02
                + q[a, 3] * q11
                + q[a, 4] * q12
                + q[a, 5] * q22
                + r[a, 0] * c000
                + r[a, 1] * c001
                + r[a, 2] * c002
                + r[a, 3] * c011
                + r[a, 4] * c012
                + r[a, 5] * c022
                + r[a, 6] * c111
                + r[a, 7] * c112
                + r[a, 8] * c122
                + r[a, 9] * c222
            )
    np.dot(z.T, gy, grad)
    return value


@njit(cache=True)
def _objective(a, z, c3, c4, c4p, y, gw, ga, consts):  # type: ignore[no-untyped-def]
    """f(A) = −I(polar A) and its gradient into ga (d×3); returns (f, ok)."""
    ata = a.T @ a
    lam, vec = np.linalg.eigh(ata)
    if lam[0] <= 1e-14 * lam[2] or lam[0] <= 0.0:
        return 0.0, False
    inv_sqrt = (vec * (1.0 / np.sqrt(lam))) @ vec.T  # vec @ diag(·) @ vecᵀ, the same values
    w = a @ inv_sqrt
    value = index_gradient(z, w, c3, c4, c4p, y, gw, consts)
    proj = gw - w @ (w.T @ gw)
    np.dot(proj, inv_sqrt, ga)
    for i in range(ga.shape[0]):
        for j in range(ga.shape[1]):
            ga[i, j] = -ga[i, j]
    return -value, True


@njit(cache=True)
def _evaluate(x, d, z, c3, c4, c4p, y, gw, ga, consts):  # type: ignore[no-untyped-def]
    """(f, gradient copy) at the flat parameter x; f = +inf where polar(A) is undefined."""
    f, ok = _objective(x.reshape(d, 3), z, c3, c4, c4p, y, gw, ga, consts)
    if not ok:
        return np.inf, np.zeros(x.size)
    return f, ga.copy().reshape(x.size)


@njit(cache=True)
def _wolfe(x, f0, g0, p, d, z, c3, c4, c4p, y, gw, ga, consts, step):  # type: ignore[no-untyped-def]
    """Step along p meeting the strong Wolfe conditions (c1 = 1e-4, c2 = 0.9; Nocedal & Wright
    Algorithms 3.5–3.6 with safeguarded quadratic interpolation). Extrapolates when the slope is
    still steep, which is what lets the search leave the flat region around a minimum of the index.
    Returns (accepted, step, f, gradient, evaluations)."""
    c1 = 1e-4
    c2 = 0.9
    s0 = np.dot(g0, p)
    lo = 0.0
    f_lo = f0
    s_lo = s0
    hi = -1.0
    f_hi = 0.0
    evals = 0
    best_step = 0.0
    best_f = f0
    best_g = g0
    a = step
    for _ in range(30):
        if hi >= 0.0:  # zoom: interpolate between lo and hi
            delta = hi - lo
            denom = 2.0 * (f_hi - f_lo - s_lo * delta)
            a = lo - s_lo * delta * delta / denom if denom > 0.0 else lo + 0.5 * delta
            lower = min(lo, hi) + 0.1 * abs(delta)
            upper = max(lo, hi) - 0.1 * abs(delta)
            a = min(max(a, lower), upper)
        f_a, g_a = _evaluate(x + a * p, d, z, c3, c4, c4p, y, gw, ga, consts)
        evals += 1
        s_a = np.dot(g_a, p)
        if f_a <= f0 + c1 * a * s0 and f_a < best_f:
            best_step = a
            best_f = f_a
            best_g = g_a
        if f_a > f0 + c1 * a * s0 or f_a >= f_lo:
            hi = a
            f_hi = f_a
            continue
        if abs(s_a) <= -c2 * s0:
            return True, a, f_a, g_a, evals
        if hi < 0.0:  # still bracketing: the slope is steep, extrapolate
            if s_a >= 0.0:
                hi = lo
                f_hi = f_lo
                lo = a
                f_lo = f_a
                s_lo = s_a
            else:
                lo = a
                f_lo = f_a
                s_lo = s_a
                a *= 4.0
            continue
        if s_a * (hi - lo) >= 0.0:
            hi = lo
            f_hi = f_lo
        lo = a
        f_lo = f_a
        s_lo = s_a
    return best_step > 0.0, best_step, best_f, best_g, evals


@njit(cache=True, nogil=True)
def lbfgs(a0, z, c3, c4, c4p, consts, gtol, ftol, maxiter, memory):  # type: ignore[no-untyped-def]
    """Minimise f from a0 (d×3). Returns (A*, f*, iterations, evaluations, status) with status
    0 = gradient small, 1 = relative reduction small, 2 = iteration limit, 3 = line search failed."""
    n, d = z.shape
    nv = d * 3
    y = np.empty((n, 3))
    gw = np.empty((d, 3))
    ga = np.empty((d, 3))
    x = a0.copy().reshape(nv)
    f, g = _evaluate(x, d, z, c3, c4, c4p, y, gw, ga, consts)
    evals = 1
    s_hist = np.zeros((memory, nv))
    y_hist = np.zeros((memory, nv))
    rho = np.zeros(memory)
    alpha = np.zeros(memory)
    stored = 0
    head = 0
    status = 2
    it = 0
    while it < maxiter:
        if np.max(np.abs(g)) <= gtol:
            status = 0
            break
        # Two-loop recursion: p = −H g.
        p = -g.copy()
        for j in range(stored):
            k = (head - 1 - j + memory) % memory
            alpha[k] = rho[k] * np.dot(s_hist[k], p)
            p -= alpha[k] * y_hist[k]
        if stored > 0:
            k = (head - 1 + memory) % memory
            p *= np.dot(s_hist[k], y_hist[k]) / np.dot(y_hist[k], y_hist[k])
        for j in range(stored - 1, -1, -1):
            k = (head - 1 - j + memory) % memory
            beta = rho[k] * np.dot(y_hist[k], p)
            p += (alpha[k] - beta) * s_hist[k]
        if np.dot(g, p) >= 0.0:  # not a descent direction: forget the history
            stored = 0
            p = -g.copy()
        step = 1.0 if stored > 0 else 1.0 / max(np.sqrt(np.dot(g, g)), 1e-300)
        ok, step, f_new, g_new, used = _wolfe(x, f, g, p, d, z, c3, c4, c4p, y, gw, ga, consts, step)
        evals += used
        if not ok:
            status = 3
            break
        s = step * p
        yv = g_new - g
        sy = np.dot(s, yv)
        if sy > 1e-10 * np.sqrt(np.dot(s, s) * np.dot(yv, yv)):
            for q in range(nv):  # element by element: a row assignment compiles numba's shape-error text
                s_hist[head, q] = s[q]
                y_hist[head, q] = yv[q]
            rho[head] = 1.0 / sy
            head = (head + 1) % memory
            stored = min(stored + 1, memory)
        reduction = (f - f_new) / max(abs(f), abs(f_new), 1.0)
        x = x + s
        f = f_new
        g = g_new
        it += 1
        if reduction <= ftol:
            status = 1
            break
    return x.reshape(d, 3), f, it, evals, status


@njit(cache=True, nogil=True)
def lbfgs_all(starts, z, c3, c4, c4p, consts, gtol, ftol, maxiter, memory):  # type: ignore[no-untyped-def]
    """:func:`lbfgs` from every start (R×d×3) one after the other, in one call."""
    r, d, _ = starts.shape
    found = np.empty((r, d, 3))
    fs = np.empty(r)
    its = np.empty(r, dtype=np.int64)
    evs = np.empty(r, dtype=np.int64)
    sts = np.empty(r, dtype=np.int64)
    for i in range(r):
        a, f, it, ev, st = lbfgs(starts[i].copy(), z, c3, c4, c4p, consts, gtol, ftol, maxiter, memory)
        for j in range(d):
            for c in range(3):
                found[i, j, c] = a[j, c]
        fs[i] = f
        its[i] = it
        evs[i] = ev
        sts[i] = st
    return found, fs, its, evs, sts


@njit(cache=True)
def varimax_frame(x, eps, max_iter):  # type: ignore[no-untyped-def]
    """The orthogonal rotation T of varimax for the (row-normalised) loadings x (p×k): the iteration
    of :func:`~perfsift.operators.pursuit.projection.varimax`, compiled."""
    p, k = x.shape
    t = np.eye(k)
    d_old = 0.0
    for _ in range(max_iter):
        zr = x @ t
        m = x.T @ (zr**3 - zr * (zr**2).sum(axis=0) / p)
        u, s, vt = np.linalg.svd(m)
        t = u @ vt
        d_new = s.sum()
        if d_new < d_old * (1 + eps):
            break
        d_old = d_new
    return t


CONSTS = (T2, T3, T4, M2, M3, M4, G3, G4, DELTA4)
# Rows × sphered dimensions from which the restarts go to the thread pool. Below it a restart takes
# about a millisecond (P = n = 12: 120 × 11) and handing it to a pool thread and waking the caller
# cost more than they save: on 2 shared cores each hand-off waits for a time slice, and an update
# at P = n = 12 spent 9 of its 30 ms waiting on the pool (docs/benchmarks.md).
POOL_MIN_WORK = 20_000
_POOLS: dict[int, ThreadPoolExecutor] = {}
_POOLS_LOCK = threading.Lock()


def _pool(workers: int) -> ThreadPoolExecutor:
    """The process's thread pool of ``workers`` threads (made once; its threads idle between calls)."""
    with _POOLS_LOCK:
        pool = _POOLS.get(workers)
        if pool is None:
            pool = _POOLS[workers] = ThreadPoolExecutor(workers, thread_name_prefix="perfsift-pp")
        return pool


def run(
    starts: np.ndarray,
    z: np.ndarray,
    constants: tuple[float, float, float],
    gtol: float,
    maxiter: int,
    ftol: float = 1e7 * np.finfo(float).eps,
    memory: int = 10,
    threads: int | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """L-BFGS from every start (R×d×3) on the rows z, restarts spread over ``threads`` (default: the
    cores, for problems of ``POOL_MIN_WORK`` or more; one below). Returns (A* R×d×3, f* R,
    iterations R, evaluations R, status R), the same whatever the number of threads."""
    c3, c4, c4p = constants
    z = np.ascontiguousarray(z, dtype=np.float64)

    def one(a0: np.ndarray) -> tuple[np.ndarray, float, int, int, int]:
        a0 = np.ascontiguousarray(a0, dtype=np.float64)
        return lbfgs(a0, z, c3, c4, c4p, CONSTS, gtol, ftol, maxiter, memory)

    if threads is None:
        threads = (os.cpu_count() or 1) if z.shape[0] * z.shape[1] >= POOL_MIN_WORK else 1
    workers = min(len(starts), threads)
    if workers <= 1:  # one compiled call for every restart
        starts = np.ascontiguousarray(starts, dtype=np.float64)
        return lbfgs_all(starts, z, c3, c4, c4p, CONSTS, gtol, ftol, maxiter, memory)
    # one pool per process and size: starting threads for every period cost about 5 % of a stage
    found = list(_pool(workers).map(one, starts))
    return (
        np.array([f[0] for f in found]),
        np.array([f[1] for f in found]),
        np.array([f[2] for f in found]),
        np.array([f[3] for f in found]),
        np.array([f[4] for f in found]),
    )


def warm_up() -> None:
    """Compile (or load) both paths of :func:`run`: one call for every restart, and one restart per
    pool task (large problems)."""
    z = np.random.default_rng(0).normal(size=(24, 4))
    starts = np.random.default_rng(1).normal(size=(2, 4, 3))
    consts = (24 / (23 * 22), 24 * 25 / (23 * 22 * 21), 24 * 24 / (22 * 21))
    for threads in (1, 2):
        run(starts, z, consts, 1e-7, 5, threads=threads)
