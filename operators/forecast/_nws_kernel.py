"""Compiled per-series step of the NWS forecaster bank (numba), the fast path of
:class:`perfsift.operators.forecast.forecast.ForecastBank`.

Same semantics as the numpy reference ``ForecastBank._step_quietly`` (tests compare the two), but
faster on four counts:

- each series keeps its newest values sorted in five windows (:mod:`~perfsift.operators.forecast._nws_windows`):
  medians, sliding and trimmed means are read off them, and the adaptive median's candidates are a
  few order statistics away instead of a scan;
- the 16 selectors take their minima in branch-free loops LLVM vectorises (``llvm.minnum``, then an
  integer minimum for the first index within TIE), MSE and MAE of a window in one loop;
- no row views in the loop: a numba view of a shared array updates its reference count with an
  atomic operation, which both threads contend for; rows are indexed instead;
- the items of one series in a batch run back to back while its state is in cache, and series run
  in parallel.

Throughput: ``bench/bench_contract_forecast.py``, ``docs/benchmarks.md``; compare a change with
``python -m bench.ab_forecast REV`` (same process, alternating). The kernel writes each
item's outputs straight into the caller's flat output cells (no scatter afterwards). The error-ring
rows the next series will read are prefetched while the current one runs. Where the time went
before the comparison-only candidates (one thread, per update, by taking parts out): the adaptive
median of window 21-51 (step 5) about a third, the selectors about a quarter; the candidates then
cost one binary search per leaving or joining value, and dropping those searches gave 1.18x.
Tried and dropped (no gain, measured in one process, alternating): a branch-free binary search,
and counting over the whole window instead of binary searches for the candidates.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from llvmlite import ir
from numba import njit, prange, types
from numba.core import cgutils
from numba.extending import intrinsic
from perfsift.operators import _numba  # noqa: F401  (sets the kernel cache directory)
from perfsift.operators.forecast._nws_constants import HISTORY, PRECISE, RING, TIE
from perfsift.operators.forecast._nws_windows import (
    CAPS,
    F5,
    F31,
    F51,
    N_FIXED,
    OFFSETS,
    back,
    candidate,
    insert,
    mean_of,
    median_of,
    rebuild,
    replace,
    resize,
    trimmed_of,
)


@intrinsic
def prefetch(typingctx: Any, arr: Any, i: Any, j: Any, off: Any) -> Any:
    """Hint the cache to load the line holding byte ``off`` from &arr[i, j, 0...] (no effect on results)."""
    if not isinstance(arr, types.Array) or arr.ndim < 2:
        return None
    sig = types.void(arr, i, j, off)

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        aryty = signature.args[0]
        ary = context.make_array(aryty)(context, builder, args[0])
        zero = context.get_constant(types.intp, 0)
        inds = [
            context.cast(builder, args[1], signature.args[1], types.intp),
            context.cast(builder, args[2], signature.args[2], types.intp),
        ] + [zero] * (aryty.ndim - 2)
        ptr = cgutils.get_item_pointer(context, builder, aryty, ary, inds, wraparound=False)
        i8p = ir.IntType(8).as_pointer()
        p = builder.gep(builder.bitcast(ptr, i8p), [context.cast(builder, args[3], signature.args[3], types.intp)])
        i32 = ir.IntType(32)
        fnty = ir.FunctionType(ir.VoidType(), [i8p, i32, i32, i32])
        fn = cgutils.get_or_insert_function(builder.module, fnty, "llvm.prefetch.p0")
        builder.call(fn, [p, i32(0), i32(3), i32(1)])
        return context.get_dummy_value()

    return sig, codegen


@njit(cache=True, inline="always", error_model="numpy")
def _prefetch_slots(ring: np.ndarray, sid: int, first: int, count: int) -> None:
    """Prefetch ring rows first .. first + count - 1 (modulo RING) of series sid."""
    a = first % RING
    row = ring.shape[2] * 8
    head = min(count, RING - a)
    for off in range(0, head * row + 63, 64):
        prefetch(ring, sid, a, off)  # type: ignore[call-arg]
    for off in range(0, (count - head) * row + 63 if count > head else 0, 64):
        prefetch(ring, sid, 0, off)  # type: ignore[call-arg]


@njit(cache=True, inline="always", error_model="numpy")
def _prefetch_series(
    ring_se: np.ndarray, ring_ae: np.ndarray, windows: np.ndarray, sid: int, k: int, steps: int
) -> None:
    """Prefetch the error-ring rows the next ``steps`` updates of series sid (k scores so far) will
    write and read (the windows' old rows, 5 to 100 scores back, are otherwise cache misses). The
    gain measured in one process, alternating, was small and noisy: 0 to 7 %."""
    steps = min(steps, 16)
    for ring in (ring_se, ring_ae):
        _prefetch_slots(ring, sid, k, steps + 1)  # window 1 and the rows written
        for q in range(1, windows.shape[0]):
            _prefetch_slots(ring, sid, k + 1 - windows[q], steps)


@njit(cache=True, inline="always", error_model="numpy")
def _direct(each: np.ndarray, sid: int, k: int, weff: int, inv: float, out: np.ndarray) -> None:
    """out[f] = the mean of the last ``weff`` scores' own errors of primary f, newest first (the
    numpy reference's ``window_sums`` adds in the same order)."""
    for f in range(out.shape[0]):
        out[f] = 0.0
    for j in range(weff):
        r = (k - j) % RING
        for f in range(out.shape[0]):
            out[f] += each[sid, r, f]
    for f in range(out.shape[0]):
        out[f] *= inv


@njit(cache=True, error_model="numpy")
def _errors(
    run: np.ndarray, ring: np.ndarray, cum: np.ndarray, each: np.ndarray, sid: int, k: int, w: int, out: np.ndarray
) -> None:
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
    low = np.inf
    big = 0.0
    for f in range(out.shape[0]):
        out[f] = (run[sid, f] - ring[sid, slot, f]) * inv
        low = min(low, out[f])
        big = max(big, run[sid, f])
    if big > 0 and low <= big * PRECISE * inv:  # the prefix difference lost precision: sum directly
        _direct(each, sid, k, weff, inv, out)


@njit(cache=True, inline="always", error_model="numpy")
def _argmin(v: np.ndarray) -> int:
    """Lowest index within TIE (relative) of the minimum, as ``_nws_rows.first_min``."""
    low = v[0]
    for i in range(1, v.shape[0]):
        if v[i] < low:
            low = v[i]
    for i in range(v.shape[0]):
        if v[i] <= low + TIE * abs(low):
            return i
    return 0


@njit(cache=True, inline="always", error_model="numpy")
def _argmin_row(v: np.ndarray, r: int) -> int:
    """``_argmin`` of row r of v (no row view: see ``_select``)."""
    low = v[r, 0]
    for i in range(1, v.shape[1]):
        if v[r, i] < low:
            low = v[r, i]
    for i in range(v.shape[1]):
        if v[r, i] <= low + TIE * abs(low):
            return i
    return 0


@intrinsic
def _fmin(typingctx: Any, a: Any, b: Any) -> Any:
    """llvm.minnum: the smaller of two numbers (a NaN loses), in a form LLVM vectorises as a reduction
    (numba's own min and compare-and-select stay scalar)."""
    if a != types.float64 or b != types.float64:
        return None
    sig = types.float64(types.float64, types.float64)

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        d = ir.DoubleType()
        fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(d, [d, d]), "llvm.minnum.f64")
        return builder.call(fn, args, fastmath=("nsz", "reassoc"))

    return sig, codegen


@njit(cache=True, inline="always", error_model="numpy")
def _select(
    se: np.ndarray, ae: np.ndarray, ring_se: np.ndarray, ring_ae: np.ndarray, sid: int, slot: int, inv: float
) -> tuple[int, int, float, float]:
    """``_argmin`` of the windowed squared and absolute errors, (se[sid] - ring_se[sid, slot])·inv
    and the same for ae, or of se[sid]·inv and ae[sid]·inv when slot < 0 (the cumulative errors).
    Two branch-free passes that LLVM vectorises: the minima, then the lowest indexes within TIE of
    them. Indexes, not row views: a view costs a reference-count update on the shared array, an
    atomic operation."""
    n = se.shape[1]
    low_s = low_a = np.inf
    if slot < 0:
        for f in range(n):
            low_s = _fmin(low_s, se[sid, f] * inv)  # type: ignore[call-arg]
            low_a = _fmin(low_a, ae[sid, f] * inv)
        lim_s, lim_a = low_s + TIE * abs(low_s), low_a + TIE * abs(low_a)
        idx_s = idx_a = n
        for f in range(n):
            idx_s = min(idx_s, f if se[sid, f] * inv <= lim_s else n)
            idx_a = min(idx_a, f if ae[sid, f] * inv <= lim_a else n)
    else:
        for f in range(n):
            low_s = _fmin(low_s, (se[sid, f] - ring_se[sid, slot, f]) * inv)  # type: ignore[call-arg]
            low_a = _fmin(low_a, (ae[sid, f] - ring_ae[sid, slot, f]) * inv)
        lim_s, lim_a = low_s + TIE * abs(low_s), low_a + TIE * abs(low_a)
        idx_s = idx_a = n
        for f in range(n):
            idx_s = min(idx_s, f if (se[sid, f] - ring_se[sid, slot, f]) * inv <= lim_s else n)
            idx_a = min(idx_a, f if (ae[sid, f] - ring_ae[sid, slot, f]) * inv <= lim_a else n)
    return (idx_s if idx_s < n else 0), (idx_a if idx_a < n else 0), low_s, low_a


@njit(cache=True, parallel=True, error_model="numpy")
def step(  # type: ignore[no-untyped-def]
    s,
    x,
    dest,
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
    err_se,
    err_ae,
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
    mae_err_out,
) -> None:
    """Feed x[i] to series s[i]. Items come in segments ``seg[q] .. seg[q + 1] - 1`` of one series
    each, in arrival order, so a series' successive values are handled while its state is in cache;
    segments (distinct series) run in parallel. Per item: the primary behind the final forecast,
    the MSE and MAE forecasts of the next value, sigma = sqrt(realised MSE) and the realised MAE
    (of the final MAE forecasts), written at index dest[i] of the output arrays (the caller's flat
    cell of the item, so no scatter follows)."""
    n_primary = pending.shape[1]
    n_sel = sel_pending.shape[1]
    n_seg = seg.shape[0] - 1
    n_adapt = adaptive.shape[0]
    n_chunks = min(n_seg, 256)
    for chunk in prange(n_chunks):  # scratch buffers once per chunk, not per series
        f = np.empty(n_primary)
        err = np.empty(n_primary)
        direct = np.empty(n_primary)
        choice = np.empty(n_sel, dtype=np.int64)
        vals = np.empty(8)  # the few values that join or leave an adaptive window
        w_before = np.empty(n_adapt, dtype=np.int64)
        errs = np.empty(3)
        q0, q1 = chunk * n_seg // n_chunks, (chunk + 1) * n_seg // n_chunks
        for q in range(q0, q1):
            if q + 1 < q1:  # while this series runs, fetch the rows the next one will need
                nxt = s[seg[q + 1]]
                _prefetch_series(ring_se, ring_ae, windows, nxt, scores[nxt], seg[q + 2] - seg[q + 1])
            sid = s[seg[q]]
            for i in range(seg[q], seg[q + 1]):
                xv = x[i]
                # 1. score the pending forecasts
                if nws_compat and count[sid] == 0:
                    for g in range(2, 10):
                        pending[sid, g] = 0.0
                scored = False
                nslot = (scores[sid] + 1) % RING  # the slot of this score, if any (never read otherwise)
                for g in range(n_primary):
                    p = pending[sid, g]
                    err_se[sid, nslot, g] = 0.0
                    err_ae[sid, nslot, g] = 0.0
                    if p == p:
                        e = p - xv
                        cum_se[sid, g] += e * e
                        cum_ae[sid, g] += abs(e)
                        run_se[sid, g] += e * e
                        run_ae[sid, g] += abs(e)
                        err_se[sid, nslot, g] = e * e
                        err_ae[sid, nslot, g] = abs(e)
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
                    rebuild(win_v, hist, adapt_w, sid, p0, n_before)
                # 2. adaptive windows move on the history before xv. The window of series sid for
                # adaptive median a holds its newest min(w, n_before) values; the candidates w - step
                # and w + step differ from it by at most step values.
                for a in range(n_adapt):
                    w = adapt_w[sid, a]
                    w_before[a] = w
                    if n_before > 0:
                        lo, hi, stp = adaptive[a, 1], adaptive[a, 2], adaptive[a, 3]
                        o, m = OFFSETS[N_FIXED + a], min(w, n_before)
                        # tried in the order w, w - step, w + step; ties keep the first
                        errs[0] = (xv - median_of(win_v, sid, o, m)) ** 2
                        errs[1] = (xv - candidate(win_v, hist, sid, p0, o, m, min(w - stp, n_before), vals)) ** 2
                        errs[2] = (xv - candidate(win_v, hist, sid, p0, o, m, min(w + stp, n_before), vals)) ** 2
                        c = _argmin(errs)
                        best = w if c == 0 else (w - stp if c == 1 else w + stp)
                        adapt_w[sid, a] = min(max(best, lo), hi)
                # 3. insert xv and update the primaries
                n = n_before + 1
                for q in range(N_FIXED):
                    cap, o = CAPS[q], OFFSETS[q]
                    if n_before < cap:
                        insert(win_v, sid, o, n_before, xv)
                    else:
                        replace(win_v, sid, o, cap, hist[sid, back(p0, cap - 1)], xv)
                for a in range(n_adapt):
                    o = OFFSETS[N_FIXED + a]
                    resize(win_v, hist, sid, p0, o, min(w_before[a], n_before), min(adapt_w[sid, a], n), xv, vals)
                hist[sid, p0] = xv
                pos[sid] = (p0 + 1) % HISTORY
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
                f[13] = mean_of(win_v, sid, F5, min(5, n))
                f[12] = mean_of(win_v, sid, F31, min(31, n))
                f[11] = median_of(win_v, sid, F5, min(5, n))
                f[10] = median_of(win_v, sid, F31, min(31, n))
                f[14] = trimmed_of(win_v, sid, F31, min(31, n))
                f[15] = trimmed_of(win_v, sid, F51, min(51, n))
                for a in range(n_adapt):
                    f[16 + a] = median_of(win_v, sid, OFFSETS[N_FIXED + a], min(adapt_w[sid, a], n))
                for g in range(n_primary):
                    pending[sid, g] = f[g]
                # 4. selectors
                nw = windows.shape[0]
                if k == 0:  # nothing scored yet: every error is infinite, the first primary wins
                    for j in range(n_sel):
                        choice[j] = 0
                else:
                    # cumulative, then windows 1 .. 100: MSE and MAE of each
                    choice[0], choice[1], _, _ = _select(cum_se, cum_ae, ring_se, ring_ae, sid, -1, 1.0 / k)
                    big_s = big_a = 0.0
                    for g in range(n_primary):
                        big_s = max(big_s, run_se[sid, g])
                        big_a = max(big_a, run_ae[sid, g])
                    for q in range(nw):
                        weff = min(windows[q], k)
                        slot = (k - weff) % RING
                        inv = 1.0 / weff
                        cs, ca, low_s, low_a = _select(run_se, run_ae, ring_se, ring_ae, sid, slot, inv)
                        # a window sum far below the running sum it is a difference of lost its
                        # precision to the prefix (a 1e9 level jump): its own errors, summed
                        if big_s > 0 and low_s <= big_s * PRECISE * inv:
                            _direct(err_se, sid, k, weff, inv, direct)
                            cs = _argmin(direct)
                        if big_a > 0 and low_a <= big_a * PRECISE * inv:
                            _direct(err_ae, sid, k, weff, inv, direct)
                            ca = _argmin(direct)
                        choice[2 + q], choice[2 + nw + q] = cs, ca
                for j in range(n_sel):
                    sel_choice[sid, j] = choice[j]
                    sel_pending[sid, j] = f[choice[j]]
                # 5. final forecasts
                if flat:
                    _errors(run_se, ring_se, cum_se, err_se, sid, k, sel_window, err)
                    prim = _argmin(err)
                    mse_f = f[prim]
                    _errors(run_ae, ring_ae, cum_ae, err_ae, sid, k, sel_window, err)
                    mae_f = f[_argmin(err)]
                else:
                    bm = _argmin_row(sel_se, sid)
                    ba = _argmin_row(sel_ae, sid)
                    mse_f = f[choice[bm]]
                    mae_f = f[choice[ba]]
                    prim = choice[bm]
                fin_mse_f[sid] = mse_f
                fin_mae_f[sid] = mae_f
                primary_out[dest[i]] = prim
                mse_out[dest[i]] = mse_f
                mae_out[dest[i]] = mae_f
                sigma_out[dest[i]] = np.sqrt(fin_se[sid] / fin_n[sid]) if fin_n[sid] > 0 else np.nan
                mae_err_out[dest[i]] = fin_ae[sid] / fin_n[sid] if fin_n[sid] > 0 else np.nan
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
