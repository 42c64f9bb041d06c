"""Compiled per-value outlier filter (numba), the hot path of :class:`perfsift.operators.clean.clean.Clean`.

Rows are visited in batch order; every (key, metric) series has its own state, so interleaved keys
do not interact and one pass gives exactly the sequential semantics of METHODS.md §3.1/§0.4:
statistics are taken *before* a value is incorporated, and flagged values never enter the
accepted-value window (window and EWMA modes), while Hampel windows hold the original inputs.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit
from perfsift.operators import _numba  # noqa: F401  (sets the kernel cache directory)

NONE, HAMPEL, WINDOW, EWMA, PREDICT = 0, 1, 2, 3, 4
NORMAL_MAD = 1.2533141373155  # sigma / mean absolute deviation of a normal distribution
A_FLAG, A_CLIP, A_REPLACE, A_DROP, A_TRIM_LOG, A_TRIM_SQRT = 0, 1, 2, 3, 4, 5
R_NONE, R_STAT, R_KB, R_NEGATIVE = 0, 1, 2, 3
EPS_REL = 1e-9


@njit(cache=True, inline="always")
def _sort(buf: np.ndarray, n: int) -> None:
    for i in range(1, n):
        v = buf[i]
        j = i - 1
        while j >= 0 and buf[j] > v:
            buf[j + 1] = buf[j]
            j -= 1
        buf[j + 1] = v


@njit(cache=True, inline="always")
def _median_sorted(buf: np.ndarray, n: int) -> float:
    return 0.5 * (buf[(n - 1) // 2] + buf[n // 2])


@njit(cache=True, inline="always")
def _predict_next(hist: np.ndarray, k: int, j: int, n: int, pos: int, cap: int) -> float:
    """One-step prediction of a least-squares line through the n newest accepted values (the ring
    ``hist[k, j]``, next write at ``pos``); the last value when n < 3. (The ring's indexes wrap by
    one comparison, not a modulo: this runs for every value the cleaner sees.)"""
    if n < 3:
        return hist[k, j, pos - 1 if pos > 0 else cap - 1]
    first = pos - n if pos >= n else pos - n + cap
    mean_i = 0.5 * (n - 1)
    mean_y = 0.0
    p = first
    for _ in range(n):
        mean_y += hist[k, j, p]
        p = p + 1 if p + 1 < cap else 0
    mean_y /= n
    sxy = 0.0
    sxx = 0.0
    p = first
    for q in range(n):
        d = q - mean_i
        sxy += d * (hist[k, j, p] - mean_y)
        sxx += d * d
        p = p + 1 if p + 1 < cap else 0
    return mean_y + (sxy / sxx) * (n - mean_i)


@njit(cache=True)
def filter_values(  # type: ignore[no-untyped-def]
    vals,
    keys,
    cols,
    hist,
    hpos,
    hn,
    accepted,
    em,
    ev,
    run_n,
    runbuf,
    scale,
    nres,
    kbmax,
    nonneg,
    out,
    rule,
    thr,
    mode,
    nsig,
    n_min,
    accept_after,
    alpha,
    action,
    two_sided,
    gamma,
):
    """Filter vals (R×m) into out; column jb of vals is state column cols[jb]; rule/thr say which
    values were flagged and at what threshold."""
    n_rows, n_metrics = vals.shape
    cap = hist.shape[2]
    buf = np.empty(cap + 1)
    dev = np.empty(cap + 1)
    for i in range(n_rows):
        k = keys[i]
        for jb in range(n_metrics):
            j = cols[jb]
            x = vals[i, jb]
            rule[i, jb] = R_NONE
            thr[i, jb] = np.nan
            if x != x:  # missing: nothing to filter, state untouched
                out[i, jb] = x
                continue
            flagged = False
            estimate = np.nan
            center = np.nan
            sigma = np.nan
            threshold = np.nan
            n = hn[k, j]
            if mode == HAMPEL:
                if n >= min(n_min, cap):
                    for q in range(n):
                        buf[q] = hist[k, j, q]
                    buf[n] = x
                    _sort(buf, n + 1)
                    center = _median_sorted(buf, n + 1)
                    for q in range(n + 1):
                        dev[q] = abs(buf[q] - center)
                    _sort(dev, n + 1)
                    sigma = max(1.4826 * _median_sorted(dev, n + 1), EPS_REL * abs(center), 1e-300)
                    estimate = center
                    if abs(x - center) > nsig * sigma:
                        flagged = True
                        threshold = center + nsig * sigma if x > center else center - nsig * sigma
            elif mode == WINDOW:
                if accepted[k, j] >= n_min and n > 0:
                    total = 0.0
                    for q in range(n):
                        total += hist[k, j, q]
                    mu = total / n
                    ss = 0.0
                    for q in range(n):
                        d = hist[k, j, q] - mu
                        ss += d * d
                    center = mu
                    sigma = max(math.sqrt(ss / n), EPS_REL * abs(mu), 1e-12)
                    estimate = mu
                    if x - mu > nsig * sigma or (two_sided and mu - x > nsig * sigma):
                        flagged = True
                        threshold = mu + nsig * sigma if x > mu else mu - nsig * sigma
            elif mode == PREDICT and n > 0:
                center = _predict_next(hist, k, j, n, hpos[k, j], cap)
                estimate = center
                if accepted[k, j] >= n_min and nres[k, j] > 0:
                    sigma = max(NORMAL_MAD * scale[k, j], EPS_REL * abs(center), 1e-12)
                    if abs(x - center) > nsig * sigma and (two_sided or x > center):
                        flagged = True
                        threshold = center + nsig * sigma if x > center else center - nsig * sigma
            elif mode == EWMA and accepted[k, j] >= n_min:
                m = em[k, j]
                center = m
                sigma = max(math.sqrt(ev[k, j]), EPS_REL * abs(m), 1e-12)
                estimate = m
                if x - m > nsig * sigma or (two_sided and m - x > nsig * sigma):
                    flagged = True
                    threshold = m + nsig * sigma if x > m else m - nsig * sigma
            r = R_STAT if flagged else R_NONE
            if not flagged and kbmax[j] == kbmax[j] and x > gamma * kbmax[j]:
                r = R_KB
                threshold = gamma * kbmax[j]
            if not flagged and r == R_NONE and nonneg[j] and x < 0.0:
                r = R_NEGATIVE
                threshold = 0.0
            # window and predict modes: a long run of flags is a new level, not outliers (accept_after)
            if r == R_STAT and mode in (WINDOW, PREDICT):
                c = run_n[k, j]
                runbuf[k, j, c] = x
                run_n[k, j] = c + 1
                if c + 1 >= accept_after:
                    m0 = max(c + 1 - cap, 0)  # the newest values of the run that fit the ring
                    for q in range(m0, c + 1):
                        hist[k, j, q - m0] = runbuf[k, j, q]
                    hn[k, j] = c + 1 - m0
                    hpos[k, j] = (c + 1 - m0) % cap
                    run_n[k, j] = 0
                    r = R_NONE
                    accepted[k, j] += 1
                    out[i, jb] = x
                    continue
            elif mode in (WINDOW, PREDICT):
                run_n[k, j] = 0
            y = x
            if r != R_NONE:
                rule[i, jb] = r
                thr[i, jb] = threshold
                if action == A_CLIP:
                    y = threshold
                elif action == A_REPLACE:
                    y = estimate if (r == R_STAT and estimate == estimate) else threshold
                elif action == A_DROP:
                    y = np.nan
                elif action in (A_TRIM_LOG, A_TRIM_SQRT):
                    if r == R_STAT:
                        dist = abs(x - center) / sigma
                        lim = nsig
                        if action == A_TRIM_LOG:
                            rho = lim * (1.0 + math.log(dist / lim))
                        else:
                            rho = lim * (3.0 - 2.0 / math.sqrt(dist / lim))
                        y = center + rho * sigma if x > center else center - rho * sigma
                    else:
                        y = threshold
            out[i, jb] = y
            # update the state (Hampel: original inputs; window, predict: accepted values only; EWMA:
            # the output). Predict: the residual, winsorised at the threshold, enters the scale (its
            # mean absolute value, averaged plainly over the first 1/alpha residuals, then
            # exponentially with weight alpha), so a noisier regime widens the threshold while a
            # single spike moves it little; the flagged value itself never enters the fit.
            if mode == PREDICT and r != R_KB and r != R_NEGATIVE and n > 0:
                c = nres[k, j] + 1
                nres[k, j] = c
                res = abs(x - center)
                if sigma == sigma:
                    res = min(res, nsig * sigma)  # winsorised at the threshold
                scale[k, j] += max(alpha, 1.0 / c) * (res - scale[k, j])
            if mode == HAMPEL or (mode in (WINDOW, PREDICT) and r == R_NONE):
                p = hpos[k, j]
                hist[k, j, p] = x
                hpos[k, j] = (p + 1) % cap
                if n < cap:
                    hn[k, j] = n + 1
                if r == R_NONE:
                    accepted[k, j] += 1
            elif mode == EWMA:
                # flagged: the winsorised value. (Updating with the mean itself, as "the replacement",
                # shrinks the variance at every flag, so after a level change everything is flagged.)
                upd = threshold if r != R_NONE else x
                if accepted[k, j] == 0 and hn[k, j] == 0:
                    em[k, j] = upd
                    ev[k, j] = 0.0
                    hn[k, j] = 1
                else:
                    d = upd - em[k, j]
                    em[k, j] += alpha * d
                    ev[k, j] = (1.0 - alpha) * (ev[k, j] + alpha * d * d)
                if r == R_NONE:
                    accepted[k, j] += 1
            elif r == R_NONE:
                accepted[k, j] += 1


@njit(cache=True)
def knn_impute(refs, row, e, k, uniform, log_target, f_min):  # type: ignore[no-untyped-def]
    """KNN regression of cell e of ``row`` on the reference rows (METHODS.md §3.4), which may be
    partial. Candidates: the references with a value for e. Features: the metrics the row has
    that every candidate has, when there are at least ``f_min`` of them; otherwise each
    candidate's own features (those the row and it both have), and a candidate is usable only
    with at least min(f_min, the row's present metrics) of them. log1p when every feature value is
    non-negative; each feature standardised over the candidates that have it; distances RMS over
    the candidate's features; the k nearest (ties: lower index) with inverse-distance weights, or
    the plain mean of all exact matches. NaN when nothing is trainable."""
    n, m = refs.shape
    cand = np.empty(n, dtype=np.int64)
    nc = 0
    for i in range(n):
        if refs[i, e] == refs[i, e]:
            cand[nc] = i
            nc += 1
    if nc == 0:
        return np.nan
    feats = np.empty(m, dtype=np.int64)
    everyone = np.zeros(m, dtype=np.bool_)
    nf = 0
    n_common = 0
    nonneg = True
    for f in range(m):
        if f == e or row[f] != row[f]:
            continue
        feats[nf] = f
        nf += 1
        if row[f] < 0:
            nonneg = False
        common = True
        for q in range(nc):
            v = refs[cand[q], f]
            if v != v:
                common = False
            elif v < 0:
                nonneg = False
        everyone[f] = common
        n_common += common
    if nf == 0:
        return np.nan
    shared = n_common >= f_min  # the spec's common feature set F, else per-candidate sets F_c
    need = n_common if shared else max(1, min(f_min, nf))
    dist = np.zeros(nc)
    used = np.zeros(nc, dtype=np.int64)
    tv = np.empty(nc)  # one feature's (transformed) values over the candidates
    for a in range(nf):
        f = feats[a]
        if shared and not everyone[f]:
            continue
        mu = 0.0
        cnt = 0
        for q in range(nc):
            v = refs[cand[q], f]
            if v == v and nonneg:
                v = math.log1p(v)
            tv[q] = v
            if v == v:
                mu += v
                cnt += 1
        if cnt == 0:
            continue
        mu /= cnt
        ss = 0.0
        for q in range(nc):
            if tv[q] == tv[q]:
                ss += (tv[q] - mu) * (tv[q] - mu)
        sd = max(math.sqrt(ss / cnt), EPS_REL * abs(mu), 1e-12)
        t = (math.log1p(row[f]) if nonneg else row[f]) - mu
        for q in range(nc):
            if tv[q] == tv[q]:
                d = (tv[q] - mu - t) / sd
                dist[q] += d * d
                used[q] += 1
    # keep the usable candidates, in index order
    nu = 0
    for q in range(nc):
        if used[q] >= need:
            cand[nu] = cand[q]
            dist[nu] = math.sqrt(dist[q] / used[q])
            nu += 1
    if nu == 0:
        return np.nan
    target_log = log_target
    if target_log:
        for q in range(nu):
            if refs[cand[q], e] < 0:
                target_log = False
    yt = np.empty(nu)
    for q in range(nu):
        y = refs[cand[q], e]
        yt[q] = math.log1p(y) if target_log else y
    exact_sum = 0.0
    exact_n = 0
    for q in range(nu):
        if dist[q] == 0.0:
            exact_sum += yt[q]
            exact_n += 1
    if exact_n > 0:
        pred = exact_sum / exact_n
    else:
        kk = min(k, nu)
        num = 0.0
        den = 0.0
        taken = np.zeros(nu, dtype=np.bool_)
        for _ in range(kk):  # the kk nearest by selection; ties keep the lower (older) index
            best = -1
            for q in range(nu):
                if not taken[q] and (best < 0 or dist[q] < dist[best]):
                    best = q
            taken[best] = True
            w = 1.0 if uniform else 1.0 / (dist[best] + 1e-12)
            num += w * yt[best]
            den += w
        pred = num / den
    return math.expm1(pred) if target_log else pred
