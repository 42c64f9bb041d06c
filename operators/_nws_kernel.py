"""Compiled per-series step of the NWS forecaster bank (numba), the fast path of
:class:`perfsift.operators.forecast.ForecastBank`.

Same semantics as the numpy reference ``ForecastBank._step_numpy`` (tests compare the two), but
each series' windows are sorted by insertion from the newest value backwards, so the medians and
trimmed means of nested windows (5 ⊂ 31 ⊂ 51, and w − δ ⊂ w ⊂ w + δ for the adaptive medians)
come out of one pass, and series run in parallel.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange
from perfsift.operators import _numba  # noqa: F401  (sets the kernel cache directory)

HISTORY = 100
RING = 101
TRIM = 0.3


@njit(cache=True, inline="always")
def _insert(buf: np.ndarray, size: int, v: float) -> None:
    i = size
    while i > 0 and buf[i - 1] > v:
        buf[i] = buf[i - 1]
        i -= 1
    buf[i] = v


@njit(cache=True, inline="always")
def _back(p: int, size: int) -> int:
    """Ring index of the value ``size`` places before position p (no modulo: it is slow)."""
    j = p - 1 - size
    return j + HISTORY if j < 0 else j


@njit(cache=True, inline="always")
def _median(buf: np.ndarray, size: int) -> float:
    return 0.5 * (buf[(size - 1) // 2] + buf[size // 2])


@njit(cache=True, inline="always")
def _trimmed(buf: np.ndarray, size: int) -> float:
    t = int(np.floor(TRIM * size))
    total = 0.0
    for i in range(t, size - t):
        total += buf[i]
    return total / (size - 2 * t)


@njit(cache=True, inline="always")
def _errors(run: np.ndarray, ring: np.ndarray, cum: np.ndarray, sid: int, k: int, w: int, out: np.ndarray) -> None:
    if k == 0:
        for f in range(out.shape[0]):
            out[f] = np.inf
        return
    if w == 0:
        inv = 1.0 / k
        for f in range(out.shape[0]):
            out[f] = cum[sid, f] * inv
        return
    weff = min(w, k)
    slot = (k - weff) % RING
    inv = 1.0 / weff
    for f in range(out.shape[0]):
        out[f] = (run[sid, f] - ring[sid, slot, f]) * inv


TIE = 1e-12


@njit(cache=True, inline="always")
def _argmin(v: np.ndarray) -> int:
    """Lowest index within TIE (relative) of the minimum, as ``forecast._first_min``."""
    low = v[0]
    for i in range(1, v.shape[0]):
        if v[i] < low:
            low = v[i]
    for i in range(v.shape[0]):
        if v[i] <= low + TIE * abs(low):
            return i
    return 0


@njit(cache=True, parallel=True)
def step(  # type: ignore[no-untyped-def]
    s,
    x,
    hist,
    pos,
    count,
    mean,
    exp,
    adapt_w,
    pending,
    cum_se,
    cum_ae,
    run_se,
    run_ae,
    ring_se,
    ring_ae,
    scores,
    sel_pending,
    sel_se,
    sel_ae,
    sel_choice,
    fin_se,
    fin_ae,
    fin_n,
    fin_mse_f,
    fin_mae_f,
    gains,
    adaptive,
    windows,
    flat,
    sel_window,
    nws_compat,
    primary_out,
) -> None:
    n_primary = pending.shape[1]
    n_sel = sel_pending.shape[1]
    n_items = s.shape[0]
    n_chunks = min(n_items, 256)
    for chunk in prange(n_chunks):  # scratch buffers once per chunk, not per series
        buf = np.empty(64)
        f = np.empty(n_primary)
        err = np.empty(n_primary)
        choice = np.empty(n_sel, dtype=np.int64)
        meds = np.empty(3)
        errs = np.empty(3)
        for i in range(chunk * n_items // n_chunks, (chunk + 1) * n_items // n_chunks):
            sid = s[i]
            xv = x[i]
            # 1. score the pending forecasts
            if nws_compat and count[sid] == 0:
                for g in range(2, 10):
                    pending[sid, g] = 0.0
            scored = False
            for g in range(n_primary):
                p = pending[sid, g]
                if p == p:
                    e = p - xv
                    cum_se[sid, g] += e * e
                    cum_ae[sid, g] += abs(e)
                    run_se[sid, g] += e * e
                    run_ae[sid, g] += abs(e)
                    scored = True
            k = scores[sid] + (1 if scored else 0)
            scores[sid] = k
            slot = k % RING
            for g in range(n_primary):
                ring_se[sid, slot, g] = run_se[sid, g]
                ring_ae[sid, slot, g] = run_ae[sid, g]
            for j in range(n_sel):
                gv = sel_pending[sid, j]
                if gv == gv:
                    e = gv - xv
                    sel_se[sid, j] += e * e
                    sel_ae[sid, j] += abs(e)
            fin = fin_mse_f[sid]
            if fin == fin:
                fin_se[sid] += (fin - xv) ** 2
                fin_ae[sid] += abs(fin_mae_f[sid] - xv)
                fin_n[sid] += 1
            # 2. adaptive windows move on the history before xv
            n_before = count[sid]
            p0 = pos[sid]
            if n_before > 0:
                for a in range(adaptive.shape[0]):
                    lo, hi, stp = adaptive[a, 1], adaptive[a, 2], adaptive[a, 3]
                    w = adapt_w[sid, a]
                    sizes = (min(w - stp, n_before), min(w, n_before), min(w + stp, n_before))
                    size = 0
                    for c in (0, 1, 2):  # nested windows: keep inserting older values
                        while size < sizes[c]:
                            _insert(buf, size, hist[sid, _back(p0, size)])
                            size += 1
                        meds[c] = _median(buf, size)
                    order = (1, 0, 2)  # candidates are tried in the order w, w - step, w + step
                    cand = (w, w - stp, w + stp)
                    for c in range(3):
                        errs[c] = (xv - meds[order[c]]) ** 2
                    best = cand[_argmin(errs)]
                    adapt_w[sid, a] = min(max(best, lo), hi)
            # 3. insert xv and update the primaries
            hist[sid, p0] = xv
            p1 = (p0 + 1) % HISTORY
            pos[sid] = p1
            n = n_before + 1
            count[sid] = n
            mean[sid] += (xv - mean[sid]) / n
            for g in range(gains.shape[0]):
                ev = exp[sid, g]
                exp[sid, g] = xv if ev != ev else ev + gains[g] * (xv - ev)
            f[0] = xv
            f[1] = mean[sid]
            for g in range(gains.shape[0]):
                f[2 + g] = exp[sid, g]
            size = 0
            total = 0.0
            for target in (5, 31, 51):  # nested windows, newest value first
                lim = min(target, n)
                while size < lim:
                    v = hist[sid, _back(p1, size)]
                    _insert(buf, size, v)
                    total += v
                    size += 1
                if target == 5:
                    f[11] = _median(buf, size)
                    f[13] = total / size
                elif target == 31:
                    f[10] = _median(buf, size)
                    f[12] = total / size
                    f[14] = _trimmed(buf, size)
                else:
                    f[15] = _trimmed(buf, size)
            for a in range(adaptive.shape[0]):
                lim = min(adapt_w[sid, a], n)
                size = 0
                while size < lim:
                    _insert(buf, size, hist[sid, _back(p1, size)])
                    size += 1
                f[16 + a] = _median(buf, size)
            for g in range(n_primary):
                pending[sid, g] = f[g]
            # 4. selectors
            for j in range(n_sel):
                kind_se = j == 0 or (2 <= j < 2 + windows.shape[0])
                w = 0 if j < 2 else windows[(j - 2) % windows.shape[0]]
                if kind_se:
                    _errors(run_se, ring_se, cum_se, sid, k, w, err)
                else:
                    _errors(run_ae, ring_ae, cum_ae, sid, k, w, err)
                choice[j] = _argmin(err)
                sel_choice[sid, j] = choice[j]
                sel_pending[sid, j] = f[choice[j]]
            # 5. final forecasts
            if flat:
                _errors(run_se, ring_se, cum_se, sid, k, sel_window, err)
                prim = _argmin(err)
                mse_f = f[prim]
                _errors(run_ae, ring_ae, cum_ae, sid, k, sel_window, err)
                mae_f = f[_argmin(err)]
            else:
                bm = _argmin(sel_se[sid])
                ba = _argmin(sel_ae[sid])
                mse_f = f[choice[bm]]
                mae_f = f[choice[ba]]
                prim = choice[bm]
            fin_mse_f[sid] = mse_f
            fin_mae_f[sid] = mae_f
            primary_out[i] = prim
            # 6. re-base the running sums every 1000 scores
            if scored and k % 1000 == 0:
                bslot = (k + 1) % RING
                for g in range(n_primary):
                    bse = ring_se[sid, bslot, g]
                    bae = ring_ae[sid, bslot, g]
                    for r in range(RING):
                        ring_se[sid, r, g] -= bse
                        ring_ae[sid, r, g] -= bae
                    run_se[sid, g] -= bse
                    run_ae[sid, g] -= bae
