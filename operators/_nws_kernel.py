"""Compiled per-series step of the NWS forecaster bank (numba), the fast path of
:class:`perfsift.operators.forecast.ForecastBank`.

Same semantics as the numpy reference ``ForecastBank._step_quietly`` (tests compare the two), but
faster on three counts:

- each series keeps its newest values sorted, with their arrival indexes, in five windows (5, 22,
  31, 51, 56). A new value costs one binary search and one shift per window (the oldest leaves,
  the newest enters); fixed-window medians, sliding and trimmed means are then read off directly
  (sliding means summed in ascending order: equal to the reference's to rounding), and the
  adaptive medians' candidates w ± step come from one pass over a window that stops as soon as
  they are known (a value belongs to the newest s when its age is below s).
  The candidate w itself is the pending forecast;
- the 16 selectors take their minima four at a time (MSE and MAE of two windows), so the compare
  chains overlap;
- the items of one series in a batch run back to back while its state is in cache, and series run
  in parallel.

Throughput: ``bench/bench_contract_forecast.py``, ``docs/benchmarks.md``. Where the time goes now (2 cores,
per update, wall): window shifts 0.35 µs, adaptive-median scans 0.3 µs, selector minima 0.4 µs, scoring
and bookkeeping 0.3 µs. Next steps, untried: keep a sorted window of exactly the adaptive size w (the
candidates w ± step then differ by a few values), and drop the 22 and 51 windows in favour of age filters.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange
from perfsift.operators import _numba  # noqa: F401  (sets the kernel cache directory)
from perfsift.operators.forecast import _TRIM as TRIM
from perfsift.operators.forecast import HISTORY, RING, SORTED_WINDOWS, TIE


@njit(cache=True, inline="always", error_model="numpy")
def _back(p: int, size: int) -> int:
    """Ring index of the value ``size`` places before position p (no modulo: it is slow)."""
    j = p - 1 - size
    return j + HISTORY if j < 0 else j


@njit(cache=True, inline="always", error_model="numpy")
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


@njit(cache=True, inline="always", error_model="numpy")
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


@njit(cache=True, inline="always", error_model="numpy")
def _first_within(a: np.ndarray, b: np.ndarray, inv: float, low: float) -> int:
    lim = low + TIE * abs(low)
    for f in range(a.shape[0]):
        if (a[f] - b[f]) * inv <= lim:
            return f
    return 0


@njit(cache=True, inline="always", error_model="numpy")
def _choose_quad(
    a1: np.ndarray,
    b1: np.ndarray,
    a2: np.ndarray,
    b2: np.ndarray,
    inv12: float,
    a3: np.ndarray,
    b3: np.ndarray,
    a4: np.ndarray,
    b4: np.ndarray,
    inv34: float,
) -> tuple[int, int, int, int]:
    """``_argmin`` of four error vectors (a - b)·inv - the MSE and MAE selectors of two windows - in
    one loop, so their four compare chains overlap."""
    low1 = low2 = low3 = low4 = np.inf
    for f in range(a1.shape[0]):
        v1 = (a1[f] - b1[f]) * inv12
        v2 = (a2[f] - b2[f]) * inv12
        v3 = (a3[f] - b3[f]) * inv34
        v4 = (a4[f] - b4[f]) * inv34
        low1 = v1 if v1 < low1 else low1
        low2 = v2 if v2 < low2 else low2
        low3 = v3 if v3 < low3 else low3
        low4 = v4 if v4 < low4 else low4
    return (
        _first_within(a1, b1, inv12, low1),
        _first_within(a2, b2, inv12, low2),
        _first_within(a3, b3, inv34, low3),
        _first_within(a4, b4, inv34, low4),
    )


#: sorted windows kept per series (forecast.SORTED_WINDOWS), and where each starts in win_v/win_s
CAPS = np.array(SORTED_WINDOWS, dtype=np.int64)
OFFSETS = np.concatenate([[0], np.cumsum(CAPS)]).astype(np.int64)
WIN_TOTAL = int(OFFSETS[-1])
#: per adaptive median: the window its candidates (before the new value) and its forecast (after)
#: are read from
ADAPT_BEFORE = np.array([1, 4], dtype=np.int64)
ADAPT_AFTER = np.array([1, 3], dtype=np.int64)


@njit(cache=True, inline="always", error_model="numpy")
def _insert(wv: np.ndarray, ws: np.ndarray, sid: int, o: int, m: int, v: float, stamp: int) -> None:
    """Insert value v (arrival index ``stamp``) into the sorted window at offset o holding m values
    (fewer than its capacity)."""
    i = o + m
    while i > o and wv[sid, i - 1] > v:
        wv[sid, i] = wv[sid, i - 1]
        ws[sid, i] = ws[sid, i - 1]
        i -= 1
    wv[sid, i] = v
    ws[sid, i] = stamp


@njit(cache=True, inline="always", error_model="numpy")
def _rebuild(wv: np.ndarray, ws: np.ndarray, hist: np.ndarray, sid: int, p: int, n: int) -> None:
    """Sort the newest values of series sid (next ring write at p) into every window, with their
    stamps (0-based arrival index)."""
    for q in range(CAPS.shape[0]):
        for age in range(min(n, CAPS[q])):
            _insert(wv, ws, sid, OFFSETS[q], age, hist[sid, _back(p, age)], n - 1 - age)


@njit(cache=True, inline="always", error_model="numpy")
def _push(wv: np.ndarray, ws: np.ndarray, sid: int, o: int, m: int, cap: int, v: float, stamp: int, old: float) -> None:
    """Insert value v (arrival index ``stamp``) into the sorted window at offset o holding m values;
    when it is full (m == cap) the value ``old`` of arrival index ``stamp - cap`` leaves it."""
    if m < cap:
        _insert(wv, ws, sid, o, m, v, stamp)
        return
    lo, hi = o, o + m  # first entry >= old, then the one with its stamp among equal values
    while lo < hi:
        mid = (lo + hi) >> 1
        if wv[sid, mid] < old:
            lo = mid + 1
        else:
            hi = mid
    r = lo
    gone = stamp - cap
    while ws[sid, r] != gone:
        r += 1
    end = o + m
    if v >= wv[sid, r]:  # the slot of the leaving value moves right to where v belongs
        while r + 1 < end and wv[sid, r + 1] < v:
            wv[sid, r] = wv[sid, r + 1]
            ws[sid, r] = ws[sid, r + 1]
            r += 1
    else:
        while r > o and wv[sid, r - 1] > v:
            wv[sid, r] = wv[sid, r - 1]
            ws[sid, r] = ws[sid, r - 1]
            r -= 1
    wv[sid, r] = v
    ws[sid, r] = stamp


@njit(cache=True, inline="always", error_model="numpy")
def _median_of(wv: np.ndarray, sid: int, o: int, m: int) -> float:
    return 0.5 * (wv[sid, o + (m - 1) // 2] + wv[sid, o + m // 2])


@njit(cache=True, inline="always", error_model="numpy")
def _mean_of(wv: np.ndarray, sid: int, o: int, m: int) -> float:
    """Mean of a window, summed in ascending order (the reference sums in arrival order: the two
    agree to rounding)."""
    total = 0.0
    for i in range(o, o + m):
        total += wv[sid, i]
    return total / m


@njit(cache=True, inline="always", error_model="numpy")
def _trimmed_of(wv: np.ndarray, sid: int, o: int, m: int) -> float:
    """Mean of the sorted window without its floor(0.3 m) smallest and largest values (summed in
    ascending order, as a sort followed by a sum would)."""
    t = int(np.floor(TRIM * m))
    total = 0.0
    for i in range(o + t, o + m - t):
        total += wv[sid, i]
    return total / (m - 2 * t)


@njit(cache=True, inline="always", error_model="numpy")
def _medians(
    wv: np.ndarray,
    ws: np.ndarray,
    sid: int,
    o: int,
    m: int,
    newest: int,
    sizes: np.ndarray,
    k: int,
    out: np.ndarray,
    lo: np.ndarray,
    cnt: np.ndarray,
) -> None:
    """Medians of the newest sizes[c] values (sizes[c] <= m), c < k, into out[c], from one pass over
    the sorted window at offset o (a value is in the window of size s when its age is below s) that
    stops once every median is known."""
    todo = 0
    for c in range(k):
        if sizes[c] == m:  # the whole window
            out[c] = _median_of(wv, sid, o, m)
            cnt[c] = -1
        else:
            cnt[c] = 0
            todo += 1
    j = o
    while todo > 0:
        age = newest - ws[sid, j]
        v = wv[sid, j]
        for c in range(k):
            size = sizes[c]
            r = cnt[c]
            if r >= 0 and age < size:
                if r == (size - 1) // 2:
                    lo[c] = v
                if r == size // 2:
                    out[c] = 0.5 * (lo[c] + v)
                    todo -= 1
                    r = -2
                cnt[c] = r + 1
        j += 1


@njit(cache=True, parallel=True, error_model="numpy")
def step(  # type: ignore[no-untyped-def]
    s,
    x,
    seg,
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
    win_v,
    win_s,
    win_n,
    gains,
    adaptive,
    windows,
    flat,
    sel_window,
    nws_compat,
    primary_out,
    mse_out,
    mae_out,
    sigma_out,
) -> None:
    """Feed x[i] to series s[i]. Items come in segments ``seg[q] .. seg[q + 1] - 1`` of one series
    each, in arrival order, so a series' successive values are handled while its state is in cache;
    segments (distinct series) run in parallel. Per item: the primary behind the final forecast,
    the MSE and MAE forecasts of the next value and sigma = sqrt(realised MSE)."""
    n_primary = pending.shape[1]
    n_sel = sel_pending.shape[1]
    n_seg = seg.shape[0] - 1
    n_adapt = adaptive.shape[0]
    n_chunks = min(n_seg, 256)
    for chunk in prange(n_chunks):  # scratch buffers once per chunk, not per series
        f = np.empty(n_primary)
        err = np.empty(n_primary)
        choice = np.empty(n_sel, dtype=np.int64)
        zeros = np.zeros(n_primary)
        sizes = np.empty(4, dtype=np.int64)
        med = np.empty(4)
        mlo = np.empty(4)
        cnt = np.empty(4, dtype=np.int64)
        errs = np.empty(3)
        first = seg[chunk * n_seg // n_chunks]
        for i in range(first, seg[(chunk + 1) * n_seg // n_chunks]):
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
            # the sorted windows of the newest values (rebuilt from the ring after a restore)
            n_before = count[sid]
            p0 = pos[sid]
            if win_n[sid] != n_before:
                _rebuild(win_v, win_s, hist, sid, p0, n_before)
            # 2. adaptive windows move on the history before xv. The median of the current window w
            # is the pending forecast; those of w - step and w + step come from one sorted window.
            if n_before > 0:
                for a in range(n_adapt):
                    lo, hi, stp = adaptive[a, 1], adaptive[a, 2], adaptive[a, 3]
                    w = adapt_w[sid, a]
                    q = ADAPT_BEFORE[a]
                    sizes[0] = min(w - stp, n_before)
                    sizes[1] = min(w + stp, n_before)
                    m_q = min(n_before, CAPS[q])
                    _medians(win_v, win_s, sid, OFFSETS[q], m_q, n_before - 1, sizes, 2, med, mlo, cnt)
                    # tried in the order w, w - step, w + step; ties keep the first
                    errs[0] = (xv - pending[sid, 16 + a]) ** 2
                    errs[1] = (xv - med[0]) ** 2
                    errs[2] = (xv - med[1]) ** 2
                    c = _argmin(errs)
                    best = w if c == 0 else (w - stp if c == 1 else w + stp)
                    adapt_w[sid, a] = min(max(best, lo), hi)
            # 3. insert xv and update the primaries
            for q in range(CAPS.shape[0]):
                cap = CAPS[q]
                old = hist[sid, _back(p0, cap - 1)]  # leaves the window when it is full
                _push(win_v, win_s, sid, OFFSETS[q], min(n_before, cap), cap, xv, n_before, old)
            hist[sid, p0] = xv
            p1 = (p0 + 1) % HISTORY
            pos[sid] = p1
            n = n_before + 1
            count[sid] = n
            win_n[sid] = n
            mean[sid] += (xv - mean[sid]) / n
            for g in range(gains.shape[0]):
                ev = exp[sid, g]
                exp[sid, g] = xv if ev != ev else ev + gains[g] * (xv - ev)
            f[0] = xv
            f[1] = mean[sid]
            for g in range(gains.shape[0]):
                f[2 + g] = exp[sid, g]
            f[13] = _mean_of(win_v, sid, OFFSETS[0], min(5, n))
            f[12] = _mean_of(win_v, sid, OFFSETS[2], min(31, n))
            f[11] = _median_of(win_v, sid, OFFSETS[0], min(5, n))
            f[10] = _median_of(win_v, sid, OFFSETS[2], min(31, n))
            f[14] = _trimmed_of(win_v, sid, OFFSETS[2], min(31, n))
            f[15] = _trimmed_of(win_v, sid, OFFSETS[3], min(51, n))
            for a in range(n_adapt):
                q = ADAPT_AFTER[a]
                sizes[0] = min(adapt_w[sid, a], n)
                _medians(win_v, win_s, sid, OFFSETS[q], min(n, CAPS[q]), n - 1, sizes, 1, med, mlo, cnt)
                f[16 + a] = med[0]
            for g in range(n_primary):
                pending[sid, g] = f[g]
            # 4. selectors
            nw = windows.shape[0]
            if k == 0:  # nothing scored yet: every error is infinite, the first primary wins
                for j in range(n_sel):
                    choice[j] = 0
            else:
                # (cumulative, window 1), (5, 10), (20, 30), (50, 100): MSE and MAE of each
                rs, ra = run_se[sid], run_ae[sid]
                for q in range(-1, nw, 2):
                    if q < 0:
                        a1, b1, a2, b2, inv12 = cum_se[sid], zeros, cum_ae[sid], zeros, 1.0 / k
                    else:
                        weff = min(windows[q], k)
                        slot = (k - weff) % RING
                        a1, b1, a2, b2, inv12 = rs, ring_se[sid, slot], ra, ring_ae[sid, slot], 1.0 / weff
                    weff = min(windows[q + 1], k)
                    slot = (k - weff) % RING
                    c1, c2, c3, c4 = _choose_quad(
                        a1, b1, a2, b2, inv12, rs, ring_se[sid, slot], ra, ring_ae[sid, slot], 1.0 / weff
                    )
                    if q < 0:
                        choice[0], choice[1] = c1, c2
                    else:
                        choice[2 + q], choice[2 + nw + q] = c1, c2
                    choice[3 + q], choice[3 + nw + q] = c3, c4
            for j in range(n_sel):
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
            mse_out[i] = mse_f
            mae_out[i] = mae_f
            sigma_out[i] = np.sqrt(fin_se[sid] / fin_n[sid]) if fin_n[sid] > 0 else np.nan
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
