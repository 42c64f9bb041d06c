"""NWS-style adaptive forecasting with stochastic bounds (METHODS.md §5), vectorised across series.

Every (job, node, metric) is a series. On each new value the bank

1. scores the pending forecast of each of the 18 primary forecasters (§5.1) and of each of the 16
   selectors (§5.2), then
2. updates the primaries, lets every selector pick the primary with the lowest (cumulative or
   windowed) MSE or MAE, and
3. reports the *MSE forecast* - the output of the selector with the lowest cumulative squared
   error - with the stochastic bounds ``forecast ± 2·sqrt(MSE)`` (§5.3), MSE being the realised
   mean squared error of those final forecasts so far; beside it the *MAE forecast* with
   ``mae_forecast ± 2·sqrt(π/2)·MAE``.

All series that receive a value at the same step are updated in one set of numpy operations.
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import numpy.typing as npt
from perfsift.operators._keyed import KeyedColumns, group_rows, grow
from perfsift.operators.base import Decider, warm_batch
from perfsift.operators.batch import Batch
from perfsift.operators.forecast._nws_constants import (
    ADAPTIVE,
    GAINS,
    HISTORY,
    N_PRIMARY,
    PRECISE,
    PRIMARIES,
    RING,
    SORTED_WINDOWS,
)
from perfsift.operators.forecast._nws_rows import (
    first_min,
    last_values,
    median_last,
    row_mean,
    row_median,
    trimmed_mean,
    window_sums,
)
from perfsift.operators.forecast.records import bank_output, forecast_records
from perfsift.operators.forecast.threads import kernel_threads

__all__ = ["PRIMARIES", "ForecastBank", "forecast_records"]  # PRIMARIES: the names of the method indices

WINDOWS = (1, 5, 10, 20, 30, 50, 100)
#: selectors in forc.c order: (error kind, window); window 0 = cumulative
SELECTORS = (("mse", 0), ("mae", 0), *(("mse", w) for w in WINDOWS), *(("mae", w) for w in WINDOWS))
N_SELECTOR = len(SELECTORS)  # 16
_WIN = sum(SORTED_WINDOWS)  # sorted-window cells per series
_GAINS = np.array(GAINS)
_ADAPTIVE = np.array(ADAPTIVE, dtype=np.int64)
_WINDOWS = np.array(WINDOWS, dtype=np.int64)


#: input rows after which a configured metric never met is reported (ForecastBank.missing_metrics)
MISSING_AFTER_ROWS = 100


class ForecastBank(Decider):
    """The NWS forecaster bank with dynamic selection, per (job, node, metric) series.

    Output: a batch with the same rows and metric columns, whose values are the MSE forecasts of
    each series' *next* value, with extra 2-D columns ``sigma`` (sqrt of the realised MSE of the
    final forecasts; NaN before the first score), ``lower``/``upper`` (forecast ∓ 2σ), ``method``
    (index into :data:`PRIMARIES` of the primary used, -1 where the metric was missing),
    ``mae_forecast``, ``mae`` (realised MAE of the final MAE forecasts) and ``lower_mae``/``upper_mae``
    (mae_forecast ∓ 2·sqrt(π/2)·mae, METHODS.md §5.3).

    Parameters
    ----------
    metrics : list of str, optional
        Forecast only these metrics (default: every metric). The output keeps only these columns.
    mode : str
        ``"nws"`` (the three-level hierarchy of ``forc.c``) or ``"flat"`` (the primary with the
        lowest cumulative - or ``sel_window``-windowed - MSE).
    sel_window : int
        Window for ``mode="flat"``; 0 = cumulative.
    nws_compat : bool
        Reproduce the C code's warm-up: exponential smoothers forecast 0 before any data and are
        charged ``x_1²``.
    engine : str
        ``"compiled"`` (numba kernel, series in parallel; the default) or ``"numpy"`` (the vectorised
        reference the tests hold the kernel to).

    Examples
    --------
    >>> from perfsift.operators import Batch
    >>> bank = ForecastBank()
    >>> out = bank.update(Batch.from_columns(ts=range(20), nodes=["a"] * 20, metrics=["x"],
    ...                                      values=[[float(v)] for v in range(1, 21)]))
    >>> float(out.values[-1, 0]), PRIMARIES[int(out.extra["method"][-1, 0])]
    (20.0, 'last_value')
    """

    output = "forecast"

    def records(self, out: Batch | list[dict[str, Any]]) -> list[dict[str, Any]]:
        return forecast_records(out) if isinstance(out, Batch) else out

    def __init__(
        self,
        metrics: list[str] | None = None,
        mode: str = "nws",
        sel_window: int = 0,
        nws_compat: bool = False,
        engine: str = "compiled",
    ) -> None:
        self.metrics = metrics
        self.mode = mode
        self.sel_window = sel_window
        self.nws_compat = nws_compat
        self.engine = engine

    # -- state ------------------------------------------------------------------------------------
    def warm_up(self) -> None:
        op = self.clone()
        op.update(warm_batch(tuple(self.metrics or ("x",))))

    def reset(self) -> None:
        if self.mode not in ("nws", "flat"):
            raise ValueError(f"mode must be 'nws' or 'flat', got {self.mode!r}")
        if self.engine not in ("compiled", "numpy"):
            raise ValueError(f"engine must be 'compiled' or 'numpy', got {self.engine!r}")
        if not 0 <= int(self.sel_window) <= HISTORY:
            raise ValueError(f"sel_window must be in [0, {HISTORY}], got {self.sel_window!r}")
        self.cols_ = KeyedColumns()
        self.series_of_ = np.full((0, 0), -1, dtype=np.int64)  # [key, metric] -> series id
        self._rows_in = 0  # input rows and metric names met: diagnostics (missing_metrics), not state
        self._names_in: dict[str, None] = {}
        self.n_series_ = 0
        self._alloc(0)

    STATE_VERSION = 2  # 2: each score's own errors (err_se, err_ae) beside the running sums
    _ARRAYS = (
        "hist",
        "pos",
        "count",
        "mean",
        "exp",
        "adapt_w",
        "pending",
        "cum_se",
        "cum_ae",
        "run_se",
        "run_ae",
        "ring_se",
        "ring_ae",
        "err_se",
        "err_ae",
        "scores",
        "sel_pending",
        "sel_se",
        "sel_ae",
        "sel_choice",
        "fin_se",
        "fin_ae",
        "fin_n",
        "fin_mse_f",
        "fin_mae_f",
    )

    def _alloc(self, n: int) -> None:
        def full(shape: tuple[int, ...], fill: float, dtype: Any = np.float64) -> np.ndarray:
            return np.full(shape, fill, dtype=dtype)

        self.hist_ = full((n, HISTORY), np.nan)
        self.pos_ = full((n,), 0, np.int64)  # next write position in hist
        self.count_ = full((n,), 0, np.int64)  # values seen
        self.mean_ = full((n,), 0.0)
        self.exp_ = full((n, len(GAINS)), np.nan)
        self.adapt_w_ = np.tile(np.array([a[0] for a in ADAPTIVE], dtype=np.int64), (n, 1))
        self.pending_ = full((n, N_PRIMARY), np.nan)  # forecasts of the next value
        self.cum_se_ = full((n, N_PRIMARY), 0.0)
        self.cum_ae_ = full((n, N_PRIMARY), 0.0)
        self.run_se_ = full((n, N_PRIMARY), 0.0)
        self.run_ae_ = full((n, N_PRIMARY), 0.0)
        # windowed errors: running sums (re-based every 1000 scores) and, [series, slot, primary], after each score
        self.ring_se_ = full((n, RING, N_PRIMARY), 0.0)
        self.ring_ae_ = full((n, RING, N_PRIMARY), 0.0)
        # each score's own errors by slot: windows whose prefix difference loses precision sum these
        self.err_se_ = full((n, RING, N_PRIMARY), 0.0)
        self.err_ae_ = full((n, RING, N_PRIMARY), 0.0)
        self.scores_ = full((n,), 0, np.int64)
        self.sel_pending_ = full((n, N_SELECTOR), np.nan)
        self.sel_se_ = full((n, N_SELECTOR), 0.0)
        self.sel_ae_ = full((n, N_SELECTOR), 0.0)
        self.sel_choice_ = full((n, N_SELECTOR), 0, np.int64)
        self.fin_se_ = full((n,), 0.0)
        self.fin_ae_ = full((n,), 0.0)
        self.fin_n_ = full((n,), 0, np.int64)
        self.fin_mse_f_ = full((n,), np.nan)
        self.fin_mae_f_ = full((n,), np.nan)
        # the compiled kernel's sorted window of each series' newest values: a cache rebuilt from
        # hist_ whenever win_n_ (the count it reflects) is stale, so it is never part of the state
        self.win_v_ = full((n, _WIN), np.nan)
        self.win_n_ = full((n,), -1, np.int64)

    def _grow_series(self, n: int) -> None:
        cur = self.hist_.shape[0]
        if n <= cur:
            return
        new = max(n, 2 * cur, 16)
        old = {name: getattr(self, name + "_") for name in self._ARRAYS}
        self._alloc(new)
        for name, arr in old.items():  # the kernel's sorted windows are not copied: _alloc marks them stale
            getattr(self, name + "_")[:cur] = arr

    def _series(self, keys: npt.NDArray[np.int64], cols: npt.NDArray[np.int64]) -> np.ndarray:
        """Series ids for (key, metric column) pairs, registering new ones."""
        nk, nm = len(self.cols_.keys), len(self.cols_.metrics)
        self.series_of_ = grow(grow(self.series_of_, 0, nk, -1), 1, nm, -1)
        sid = self.series_of_[keys, cols]
        new = sid < 0
        if new.any():
            pairs = np.unique(np.stack([keys[new], cols[new]], axis=1), axis=0)
            ids = np.arange(self.n_series_, self.n_series_ + len(pairs))
            self.series_of_[pairs[:, 0], pairs[:, 1]] = ids
            self.n_series_ += len(pairs)
            self._grow_series(self.n_series_)
            sid = self.series_of_[keys, cols]
        return sid

    # -- one step for many series -------------------------------------------------------------------
    def _step_compiled(self, s: np.ndarray, values: np.ndarray, cell: np.ndarray, outs: tuple[np.ndarray, ...]) -> None:
        """Feed values[cell[i]] to series s[i] (series may repeat; arrival order = item order). The
        kernel writes item i's primary behind the final forecast, MSE and MAE forecasts, sigma and
        MAE straight into cell[i] of the flat arrays ``outs`` (in that order)."""
        from perfsift.operators.forecast import _nws_kernel

        order = np.argsort(s, kind="stable")
        ss = np.ascontiguousarray(s[order], dtype=np.int64)
        seg = np.flatnonzero(np.r_[True, ss[1:] != ss[:-1], True]).astype(np.int64)
        dest = np.ascontiguousarray(cell[order], dtype=np.int64)
        with kernel_threads(len(s)):  # one thread for a small call (threads.py)
            _nws_kernel.step(
                ss,
                values[dest],  # one gather, in series order
                dest,
                seg,
                self.hist_,
                self.pos_,
                self.count_,
                self.mean_,
                self.exp_,
                self.adapt_w_,
                self.pending_,
                self.cum_se_,
                self.cum_ae_,
                self.run_se_,
                self.run_ae_,
                self.ring_se_,
                self.ring_ae_,
                self.err_se_,
                self.err_ae_,
                self.scores_,
                self.sel_pending_,
                self.sel_se_,
                self.sel_ae_,
                self.sel_choice_,
                self.fin_se_,
                self.fin_ae_,
                self.fin_n_,
                self.fin_mse_f_,
                self.fin_mae_f_,
                self.win_v_,
                self.win_n_,
                _GAINS,
                _ADAPTIVE,
                _WINDOWS,
                self.mode == "flat",
                int(self.sel_window),
                bool(self.nws_compat),
                *outs,
            )

    def _step(self, s: np.ndarray, x: np.ndarray) -> np.ndarray:
        """numpy reference: feed x[i] to series s[i] (distinct series); return the primary behind
        each final forecast."""
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # medians of windows with no value yet
            return self._step_quietly(s, x)

    def _step_quietly(self, s: np.ndarray, x: np.ndarray) -> np.ndarray:
        # 1. score pending forecasts (primaries that have seen >= 1 value; NaN = cannot forecast)
        if self.nws_compat:  # the C exponential smoothers forecast 0 before any data
            fresh = self.count_[s] == 0
            if fresh.any():
                self.pending_[s[fresh], 2:10] = 0.0
        pend = self.pending_[s]
        can = ~np.isnan(pend)
        err = np.where(can, pend - x[:, None], 0.0)
        scored = can.any(axis=1)
        self.cum_se_[s] += err * err
        self.cum_ae_[s] += np.abs(err)
        self.run_se_[s] += err * err
        self.run_ae_[s] += np.abs(err)
        k = self.scores_[s] + scored
        self.scores_[s] = k
        slot = k % RING
        self.ring_se_[s, slot] = self.run_se_[s]
        self.ring_ae_[s, slot] = self.run_ae_[s]
        self.err_se_[s[scored], slot[scored]] = (err * err)[scored]
        self.err_ae_[s[scored], slot[scored]] = np.abs(err)[scored]
        sel = self.sel_pending_[s]
        sel_ok = ~np.isnan(sel)
        sel_err = np.where(sel_ok, sel - x[:, None], 0.0)
        self.sel_se_[s] += sel_err * sel_err
        self.sel_ae_[s] += np.abs(sel_err)
        fin = self.fin_mse_f_[s]
        fin_ok = ~np.isnan(fin)
        self.fin_se_[s] += np.where(fin_ok, (fin - x) ** 2, 0.0)
        self.fin_ae_[s] += np.where(fin_ok, np.abs(self.fin_mae_f_[s] - x), 0.0)
        self.fin_n_[s] += fin_ok

        # 2. adaptive-median window moves use the history *before* x is inserted
        n_before = self.count_[s]
        prev = last_values(self.hist_, s, self.pos_[s], n_before, 56)
        adapt_w = self.adapt_w_[s]
        for j, (_, lo, hi, step) in enumerate(ADAPTIVE):
            w = adapt_w[:, j]
            cands = np.stack([w, w - step, w + step], axis=1)
            if len(w) and (n_before > 0).any():
                meds = np.stack([median_last(prev, np.minimum(c, n_before)) for c in cands.T], axis=1)
                errs = (x[:, None] - meds) ** 2
                errs[np.isnan(errs)] = np.inf
                best = first_min(errs)  # ties keep w
                moved = np.clip(cands[np.arange(len(w)), best], lo, hi)
                adapt_w[:, j] = np.where(n_before > 0, moved, w)
        self.adapt_w_[s] = adapt_w

        # 3. insert x and update every primary
        self.hist_[s, self.pos_[s]] = x
        self.pos_[s] = (self.pos_[s] + 1) % HISTORY
        n = n_before + 1
        self.count_[s] = n
        mean = self.mean_[s] + (x - self.mean_[s]) / n
        self.mean_[s] = mean
        e = self.exp_[s]
        e = np.where(np.isnan(e), x[:, None], e + np.array(GAINS)[None, :] * (x[:, None] - e))
        self.exp_[s] = e
        last = last_values(self.hist_, s, self.pos_[s], n, 51)
        f = np.empty((len(s), N_PRIMARY))
        f[:, 0] = x
        f[:, 1] = mean
        f[:, 2:10] = e
        f[:, 10] = row_median(last[:, -31:])
        f[:, 11] = row_median(last[:, -5:])
        f[:, 12] = row_mean(last[:, -31:])
        f[:, 13] = row_mean(last[:, -5:])
        f[:, 14] = trimmed_mean(last[:, -31:])
        f[:, 15] = trimmed_mean(last)
        f[:, 16] = median_last(last, np.minimum(adapt_w[:, 0], n))
        f[:, 17] = median_last(last, np.minimum(adapt_w[:, 1], n))
        self.pending_[s] = f

        # 4. selectors pick a primary by windowed error
        kk = self.scores_[s]
        errors = self._errors(s, kk)
        choice = np.zeros((len(s), N_SELECTOR), dtype=np.int64)
        for j, key in enumerate(SELECTORS):
            choice[:, j] = first_min(errors[key])  # ties -> lowest index
        sel_out = np.take_along_axis(f, choice, axis=1)
        self.sel_choice_[s] = choice
        self.sel_pending_[s] = sel_out

        # 5. final MSE and MAE forecasts
        rows = np.arange(len(s))
        if self.mode == "flat":
            primary = first_min(errors[("mse", int(self.sel_window))])
            mse_f = f[rows, primary]
            mae_f = f[rows, first_min(errors[("mae", int(self.sel_window))])]
        else:
            best_mse = first_min(self.sel_se_[s])  # ties -> first selector
            best_mae = first_min(self.sel_ae_[s])
            mse_f = sel_out[rows, best_mse]
            mae_f = sel_out[rows, best_mae]
            primary = choice[rows, best_mse]
        self.fin_mse_f_[s] = mse_f
        self.fin_mae_f_[s] = mae_f
        rebase = scored & (kk % 1000 == 0)
        if rebase.any():
            self._rebase(s[rebase])
        return primary

    def _errors(self, s: np.ndarray, k: np.ndarray) -> dict[tuple[str, int], np.ndarray]:
        """Per (kind, window) the error of every primary (inf where it cannot forecast or has no
        score yet): window 0 = cumulative mean, w = mean of the last min(w, k) scores."""
        cannot = np.isnan(self.pending_[s])
        out = {}
        with np.errstate(all="ignore"):
            for kind, cum, run, ring, each in (
                ("mse", self.cum_se_, self.run_se_, self.ring_se_, self.err_se_),
                ("mae", self.cum_ae_, self.run_ae_, self.ring_ae_, self.err_ae_),
            ):
                out[(kind, 0)] = cum[s] / k[:, None]
                now = run[s]
                big = now.max(axis=1)
                for w in WINDOWS:
                    weff = np.minimum(w, k)
                    total = now - ring[s, (k - weff) % RING]
                    # a window sum far below its prefix lost precision to it (1e9 jumps): sum its own errors
                    direct = (big > 0) & (total.min(axis=1) <= big * PRECISE)
                    if direct.any():
                        total[direct] = window_sums(each, s[direct], k[direct], weff[direct])
                    out[(kind, w)] = total / weff[:, None]
        for err in out.values():
            err[np.isnan(err) | cannot] = np.inf
        return out

    def _rebase(self, s: np.ndarray) -> None:
        """Subtract the oldest running sum kept in the ring from the ring and the running sums, so
        window differences are taken between small numbers on long streams."""
        k = self.scores_[s]
        base_se, base_ae = self.ring_se_[s, (k + 1) % RING], self.ring_ae_[s, (k + 1) % RING]
        self.ring_se_[s] -= base_se[:, None, :]
        self.ring_ae_[s] -= base_ae[:, None, :]
        self.run_se_[s] -= base_se
        self.run_ae_[s] -= base_ae

    # -- batches ------------------------------------------------------------------------------------
    def missing_metrics(self) -> list[str]:
        """Configured ``metrics`` no input row carried, once :data:`MISSING_AFTER_ROWS` came."""
        if self.metrics is None or self._rows_in < MISSING_AFTER_ROWS:
            return []
        return [m for m in self.metrics if m not in self._names_in]

    def seen_names(self) -> list[str]:
        return list(self._names_in)  # the metric names met so far (the message about missing ones)

    def update(self, batch: Batch) -> Batch:
        if self.metrics is not None:
            self._rows_in += len(batch)
            if len(self._names_in) < 10_000:
                self._names_in.update(dict.fromkeys(batch.metrics))
            wanted = [j for j, m in enumerate(batch.metrics) if m in set(self.metrics)]
            batch = batch.with_values(batch.values[:, wanted], [batch.metrics[j] for j in wanted])
        k, n = len(batch), len(batch.metrics)
        out = np.full((k, n), np.nan)
        sigma = np.full((k, n), np.nan)
        mae_f = np.full((k, n), np.nan)
        mae = np.full((k, n), np.nan)
        method = np.full((k, n), -1, dtype=np.int64)
        if k and self.engine == "compiled":
            cols = self.cols_.metric_columns(batch.metrics)
            keys = self.cols_.row_keys(batch)
            values = np.ascontiguousarray(batch.values, dtype=np.float64).reshape(-1)
            cell = np.flatnonzero(~np.isnan(values))  # row-major: arrival order per series
            if len(cell):
                sid = self._series(keys[cell // n], cols[cell % n])
                outs = tuple(a.reshape(-1) for a in (method, out, mae_f, sigma, mae))  # views: written in place
                self._step_compiled(sid, values, cell, outs)
        elif k:
            cols = self.cols_.metric_columns(batch.metrics)
            keys = self.cols_.row_keys(batch)
            order, _, _, rank = group_rows(keys)
            for r in range(int(rank.max()) + 1):
                rows = order[rank == r]
                vals = batch.values[rows]
                present = ~np.isnan(vals)
                ri, ci = np.nonzero(present)
                if len(ri) == 0:
                    continue
                sid = self._series(keys[rows][ri], cols[ci])
                primary = self._step(sid, vals[ri, ci])
                out[rows[ri], ci] = self.fin_mse_f_[sid]
                mae_f[rows[ri], ci] = self.fin_mae_f_[sid]
                with np.errstate(all="ignore"):
                    sigma[rows[ri], ci] = np.sqrt(self.fin_se_[sid] / self.fin_n_[sid])
                    mae[rows[ri], ci] = self.fin_ae_[sid] / self.fin_n_[sid]
                method[rows[ri], ci] = primary
        return bank_output(batch, out, sigma, mae_f, mae, method)

    def _state(self) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        n = self.n_series_
        arrays = {name: getattr(self, name + "_")[:n] for name in self._ARRAYS}
        arrays["series_of"] = self.series_of_[: len(self.cols_.keys), : len(self.cols_.metrics)]
        return {"keys": self.cols_.keys, "metrics": self.cols_.metrics, "n_series": n}, arrays

    def _load_state(self, meta: dict[str, Any], arrays: dict[str, np.ndarray]) -> None:
        self.cols_.load(meta["keys"], meta["metrics"])
        self.n_series_ = int(meta["n_series"])
        self._grow_series(self.n_series_)
        for name in self._ARRAYS:
            getattr(self, name + "_")[: self.n_series_] = arrays[name]
        self.win_n_[:] = -1
        self.series_of_ = arrays["series_of"].astype(np.int64).copy()
