"""Cleaning: counter and multiplexing conversion, outlier filtering, missing-value imputation
(METHODS.md §3, Zhu; §0.4 Hampel; the trimming maps of §1.2 step 5, Vetter & Reed).

Per (job, node) and metric, in this order:

1. **Counters** (``counters``): cumulative values become per-second rates from consecutive
   samples; a counter that goes backwards wrapped (``counter_width`` bits: add 2^width once) or was
   reset (missing value, rule ``counter_reset``). **Multiplexed PMU events** (``multiplexed``):
   columns ``E``, ``E:enabled``, ``E:running`` (cumulative) give ``E`` = Δcount · Δt_enabled /
   Δt_running per interval; zero running time gives a missing value, coverage below
   ``low_coverage`` is flagged (rule ``low_coverage``). The ``:enabled``/``:running`` columns are
   consumed.
2. **Outliers** (``mode``): ``predict`` (default: the residual of a one-step prediction - a
   least-squares line through the last ``fit`` accepted values - against k × a robust scale of
   recent residuals, their mean absolute value winsorised at the threshold; flagged values never
   enter the fit, and a run of ``accept_after`` flags is a new level), ``window`` (METHODS.md
   §3.6: mean + k·σ of the last ``window`` accepted values; same rules), ``hampel`` (causal
   window of the last 2·half originals and the value, median ± k·1.4826·MAD; ``hampel_mode``
   ``centred``: the window [t−half, t+half], offline), ``ewma`` (EW
   mean and variance, winsorised at flags), or ``none``;
   plus knowledge-base maxima (``history``: flag x > γ·max) and ``nonnegative`` metrics
   (negative values are impossible). A flagged value is, by ``action``: kept (``flag``), clipped to
   the threshold (``clip``), replaced by the local estimate (``replace``: the prediction, the Hampel
   median, the window or EW mean), dropped to missing (``drop``) or shrunk towards the estimate with Vetter &
   Reed's ``trim_log`` / ``trim_sqrt`` distance maps.
3. **Imputation** (``impute``): missing values (absent, dropped, reset counters) by KNN regression
   on co-monitored metrics (§3.4) trained on the node's recent samples, partial ones too (a
   reference needs the missing metric and enough of the sample's present ones: the features all
   references share when there are ``f_min`` of them, else each reference's own) — or on the
   knowledge base's samples of the application when the node has fewer than ``knn_k`` — falling
   back to the node's last value (rule ``last_value``) when nothing is trainable; ``last`` and
   ``mean`` are the simple alternatives.

The output batch has the same rows and metrics, cleaned, and an ``extra["flags"]`` column: per row
None or a list of ``{metric, rule, action, original, threshold}`` (``schemas/sample.avsc``), one
entry for every value that was changed, flagged or imputed.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from perfsift.operators._keyed import KeyedColumns, group_rows, grow
from perfsift.operators.base import Transformer, warm_batch
from perfsift.operators.batch import Batch
from perfsift.operators.clean._counters import add_flag, counter_columns, to_rates
from perfsift.operators.clean._hampel import apply_centred
from perfsift.operators.clean._impute import causal_fallbacks, key_references, knn_row
from perfsift.operators.clean._knowledge import KnowledgeHistory

__all__ = ["Clean", "KnowledgeHistory"]

MODES = {"none": 0, "hampel": 1, "window": 2, "ewma": 3, "predict": 4}
ACTIONS = {"flag": 0, "clip": 1, "replace": 2, "drop": 3, "trim_log": 4, "trim_sqrt": 5}
IMPUTE = ("knn", "last", "mean", "none")
STAT_RULE = {"hampel": "hampel", "window": "nsigma", "ewma": "ewma", "predict": "residual", "none": "none"}
#: k when none is given: the spec's 3 for its modes; predict mode's residuals are one-step
#: prediction errors, so its threshold is tuned on the cyclic generator (docs/cleaning.md)
K_DEFAULT = {"predict": 4.5}


class Clean(Transformer):
    """Clean samples per (job, node) and metric; see the module docstring for the steps.

    Parameters
    ----------
    mode : str
        ``predict`` (default), ``window``, ``hampel``, ``ewma`` or ``none``. A window mean or
        median lags any trend or cycle, so those modes flag clean values on such metrics
        (measured on ``producers.synth.cyclic``: precision 0.14 for ``window``, 0.11 for
        ``hampel``, 0.99 for ``predict``; docs/cleaning.md).
    k : float or None
        Threshold in (robust) standard deviations; None = 4.5 in predict mode (its residuals are
        prediction errors; tuned on the cyclic generator), the spec's 3 otherwise.
    fit : int
        Predict mode: the number of newest accepted values the local line is fitted to.
    half : int
        Hampel half-width: the causal window is the last 2·half values and the current one.
    hampel_mode : str
        ``causal`` (default) or ``centred``: the window [t−half, t+half] (METHODS.md §0.4), offline
        only - the whole trace in one batch (``perfsift clean --hampel-mode centred``; _hampel.py).
    window, n_min, accept_after, alpha, two_sided
        Window and EWMA modes (METHODS.md §3.6); no value is flagged before ``n_min`` values.
        ``accept_after`` applies in predict mode too; ``alpha`` is its residual scale's weight;
        ``two_sided`` None = both directions in predict mode, upwards only in the others.
    action : str
        ``flag``, ``clip``, ``replace`` (default), ``drop``, ``trim_log`` or ``trim_sqrt``.
    history, gamma : KnowledgeHistory or None, float
        What the knowledge base knows of the application: its historical maxima, times γ, are
        thresholds too; its samples train the imputation when a node has too few. (A pipeline
        file gives ``kb`` and ``app`` instead, see ``perfsift.streams.knowledge.clean_params``.)
    nonnegative : tuple of str
        Metrics that cannot be negative (``"*"`` = all).
    counters, counter_width : tuple of str, int or None
        Cumulative counters to turn into per-second rates; the counter width in bits (None = a
        decrease is a reset).
    multiplexed, low_coverage
        PMU events scaled by Δt_enabled/Δt_running; coverage below which values are flagged.
    impute, knn_k, knn_window, f_min, weights, target_transform
        Imputation (METHODS.md §3.4).

    Examples
    --------
    A spike of 90 in a series that alternates 10 and 11 is replaced by the Hampel window's median,
    and the flag says what was there:

    >>> from perfsift.operators import Batch
    >>> op = Clean(mode="hampel", half=3, action="replace", impute="none")
    >>> out = op.update(Batch.from_columns(ts=range(8), nodes=["a"] * 8, metrics=["cpu"],
    ...                                     values=[[10.0], [11.0], [10.0], [11.0], [10.0], [11.0], [90.0], [10.0]]))
    >>> out.values[:, 0].tolist()
    [10.0, 11.0, 10.0, 11.0, 10.0, 11.0, 11.0, 10.0]
    >>> out.extra["flags"][6]
    [{'metric': 'cpu', 'rule': 'hampel', 'action': 'replace', 'original': 90.0, 'threshold': 15.4478}]
    >>> rates = Clean(mode="none", counters=("ctx",), impute="none")
    >>> rates.update(Batch.from_columns(ts=[0, 1, 2, 3], nodes=["a"] * 4, metrics=["ctx"],
    ...                                 values=[[100.0], [110.0], [130.0], [135.0]])).values[:, 0]
    array([nan, 10., 20.,  5.])
    """

    STATE_VERSION = 2

    def __init__(
        self,
        mode: str = "predict",
        k: float | None = None,
        fit: int = 8,
        half: int = 5,
        hampel_mode: str = "causal",
        window: int = 100,
        n_min: int = 10,
        accept_after: int = 10,
        alpha: float = 0.05,
        two_sided: bool | None = None,
        action: str = "replace",
        history: KnowledgeHistory | None = None,
        gamma: float = 1.0,
        nonnegative: tuple[str, ...] = (),
        counters: tuple[str, ...] = (),
        counter_width: int | None = None,
        multiplexed: tuple[str, ...] = (),
        low_coverage: float = 0.05,
        impute: str = "knn",
        knn_k: int = 5,
        knn_window: int = 200,
        f_min: int = 2,
        weights: str = "distance",
        target_transform: str = "none",
    ) -> None:
        self.mode = mode
        self.k = k
        self.fit = fit
        self.half = half
        self.hampel_mode = hampel_mode
        self.window = window
        self.n_min = n_min
        self.accept_after = accept_after
        self.alpha = alpha
        self.two_sided = two_sided
        self.action = action
        self.history = history
        self.gamma = gamma
        self.nonnegative = nonnegative
        self.counters = counters
        self.counter_width = counter_width
        self.multiplexed = multiplexed
        self.low_coverage = low_coverage
        self.impute = impute
        self.knn_k = knn_k
        self.knn_window = knn_window
        self.f_min = f_min
        self.weights = weights
        self.target_transform = target_transform

    # -- state -----------------------------------------------------------------------------------
    def warm_up(self) -> None:
        # a copy without the application's history cleans a synthetic batch
        op = type(self)(**{**self.get_params(), "history": None})
        op.update(warm_batch())

    def reset(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"mode must be one of {', '.join(MODES)}, got {self.mode!r}")
        if self.action not in ACTIONS:
            raise ValueError(f"action must be one of {', '.join(ACTIONS)}, got {self.action!r}")
        if self.impute not in IMPUTE:
            raise ValueError(f"impute must be one of {', '.join(IMPUTE)}, got {self.impute!r}")
        if self.hampel_mode not in ("causal", "centred"):
            raise ValueError(f"hampel_mode must be causal or centred, got {self.hampel_mode!r}")
        self.batches_ = 0  # centred Hampel: the whole trace must come as one batch
        if self.weights not in ("distance", "uniform") or self.target_transform not in ("none", "log1p"):
            raise ValueError("weights must be distance|uniform and target_transform none|log1p")
        bad = self.k is not None and not self.k > 0
        if (
            bad
            or self.f_min < 1
            or self.half < 1
            or self.window < 2
            or self.fit < 2
            or self.n_min < 1
            or self.accept_after < 1
        ):
            raise ValueError("k must be > 0; f_min, half, n_min, accept_after >= 1; window, fit >= 2")
        self.cols_ = KeyedColumns()
        self.hcap_ = {"hampel": 2 * self.half, "predict": self.fit}.get(self.mode, self.window)
        k0, m0 = 0, 0
        self.hist_ = np.zeros((k0, m0, self.hcap_))
        self.hpos_ = np.zeros((k0, m0), dtype=np.int64)
        self.hn_ = np.zeros((k0, m0), dtype=np.int64)
        self.accepted_ = np.zeros((k0, m0), dtype=np.int64)
        self.em_ = np.zeros((k0, m0))
        self.ev_ = np.zeros((k0, m0))
        self.run_n_ = np.zeros((k0, m0), dtype=np.int64)
        self.runbuf_ = np.zeros((k0, m0, self.accept_after))
        self.scale_ = np.zeros((k0, m0))  # predict: mean absolute residual, and residuals counted
        self.nres_ = np.zeros((k0, m0), dtype=np.int64)
        self.last_ = np.full((k0, m0), np.nan)  # last clean value (imputation fallback)
        self.sum_ = np.zeros((k0, m0))  # running sum and count of clean values (impute="mean")
        self.cnt_ = np.zeros((k0, m0))
        self.raw_last_ = np.full((k0, m0), np.nan)  # counters: last raw value and its time
        self.raw_ts_ = np.full((k0, m0), np.nan)
        self.refs_ = np.full((k0, self.knn_window, m0), np.nan)  # recent rows per key (partial ones too)
        self.ref_n_ = np.zeros(k0, dtype=np.int64)
        self.ref_pos_ = np.zeros(k0, dtype=np.int64)

    def _grow(self, n_keys: int, n_metrics: int) -> None:
        for name, fill in (
            ("hpos_", 0),
            ("hn_", 0),
            ("accepted_", 0),
            ("em_", 0.0),
            ("ev_", 0.0),
            ("run_n_", 0),
            ("scale_", 0.0),
            ("nres_", 0),
            ("last_", np.nan),
            ("sum_", 0.0),
            ("cnt_", 0.0),
            ("raw_last_", np.nan),
            ("raw_ts_", np.nan),
        ):
            arr = grow(grow(getattr(self, name), 0, n_keys, fill), 1, n_metrics, fill)
            setattr(self, name, arr)
        self.hist_ = grow(grow(self.hist_, 0, n_keys, 0.0), 1, n_metrics, 0.0)
        self.runbuf_ = grow(grow(self.runbuf_, 0, n_keys, 0.0), 1, n_metrics, 0.0)
        self.refs_ = grow(grow(self.refs_, 0, n_keys, np.nan), 2, n_metrics, np.nan)
        self.ref_n_ = grow(self.ref_n_, 0, n_keys, 0)
        self.ref_pos_ = grow(self.ref_pos_, 0, n_keys, 0)

    @property
    def k_used(self) -> float:
        """The threshold in force: ``k``, or the mode's default when ``k`` is None."""
        return float(self.k) if self.k is not None else K_DEFAULT.get(self.mode, 3.0)

    @property
    def two_sided_used(self) -> bool:
        """Whether values below the estimate are flagged: ``two_sided``, or by default only in
        predict mode (the spec's window and EWMA filters are one-sided)."""
        return self.two_sided if self.two_sided is not None else self.mode == "predict"

    # -- streaming ----------------------------------------------------------------------------------
    def update(self, batch: Batch) -> Batch:
        from perfsift.operators.clean import _clean_kernel as kern
        from perfsift.operators.clean import _impute_kernel as imp

        centred = self.mode == "hampel" and self.hampel_mode == "centred"
        if centred and self.batches_:
            raise RuntimeError("hampel_mode centred needs the whole trace in one batch (offline only)")
        self.batches_ += 1
        flags = np.full(len(batch), None, dtype=object)  # per row: None or its list of flags
        batch = self._convert_counters(batch, flags)
        keys = self.cols_.row_keys(batch)
        cols = self.cols_.metric_columns(batch.metrics)
        self._grow(len(self.cols_.keys), len(self.cols_.metrics))
        names = self.cols_.metrics
        maxima = self.history.maxima if self.history is not None else {}
        kbmax = np.array([maxima.get(m, np.nan) for m in names])
        star = "*" in self.nonnegative
        nonneg = np.array([star or m in self.nonnegative for m in names])
        vals = np.ascontiguousarray(batch.values, dtype=np.float64)
        out = np.empty_like(vals)
        rule = np.zeros(vals.shape, dtype=np.int8)
        thr = np.empty_like(vals)
        kern.filter_values(
            vals,
            keys,
            cols,
            self.hist_,
            self.hpos_,
            self.hn_,
            self.accepted_,
            self.em_,
            self.ev_,
            self.run_n_,
            self.runbuf_,
            self.scale_,
            self.nres_,
            kbmax,
            nonneg,
            out,
            rule,
            thr,
            MODES["none" if centred else self.mode],
            float(self.k_used),
            int(self.n_min),
            int(self.accept_after),
            float(self.alpha),
            ACTIONS[self.action],
            bool(self.two_sided_used),
            float(self.gamma),
        )
        if centred:
            apply_centred(vals, keys, self.half, float(self.k_used), self.action, out, rule, thr)
        self._flag(flags, batch.metrics, rule, vals, thr)
        if self.impute != "none":
            observed = out.copy()  # imputation learns from observed values only, never its own output
            self._impute(out, observed, keys, cols, batch.metrics, flags)
            if self.impute == "knn":
                imp.remember_rows(self.refs_, self.ref_pos_, self.ref_n_, self.knn_window, observed, keys, cols)
            imp.track_values(self.last_, self.sum_, self.cnt_, observed, keys, cols)
        return batch.with_values(out, flags=flags)

    def _flag(
        self, flags: np.ndarray, metrics: tuple[str, ...], rule: np.ndarray, vals: np.ndarray, thr: np.ndarray
    ) -> None:
        """The filter's flags (``rule`` non-zero) after the row's earlier ones, one column per
        field built at once and each row's run of flags sliced off (np.nonzero gives them row by row)."""
        rows, jcols = np.nonzero(rule)
        if not len(rows):
            return
        names = np.array([None, STAT_RULE[self.mode], "kb_max", "negative"], dtype=object)
        action = self.action
        made = [
            {"metric": m, "rule": r, "action": action, "original": o, "threshold": t}
            for m, r, o, t in zip(
                np.array(metrics, dtype=object)[jcols].tolist(),
                names[rule[rows, jcols]].tolist(),
                vals[rows, jcols].tolist(),
                thr[rows, jcols].tolist(),
                strict=True,
            )
        ]
        starts = np.flatnonzero(np.r_[True, rows[1:] != rows[:-1]]).tolist()
        for i, a, b in zip(rows[starts].tolist(), starts, [*starts[1:], len(rows)], strict=True):
            had = flags[i]
            flags[i] = made[a:b] if had is None else [*had, *made[a:b]]

    # -- counters and multiplexing -------------------------------------------------------------------
    def _convert_counters(self, batch: Batch, flags: np.ndarray) -> Batch:
        """Step 1 (``_counters.py``): the state columns the batch's counters and multiplexed events
        need, registered, then their rates."""
        ctr, mux, wanted = counter_columns(batch.metrics, self.counters, self.multiplexed)
        if not wanted:
            return batch
        keys = self.cols_.row_keys(batch)
        cols = self.cols_.metric_columns(wanted)
        self._grow(len(self.cols_.keys), len(self.cols_.metrics))
        state_col = dict(zip(wanted, cols.tolist(), strict=True))
        width, low = self.counter_width, self.low_coverage
        return to_rates(batch, flags, keys, state_col, self.raw_last_, self.raw_ts_, ctr, mux, width, low)

    # -- imputation ----------------------------------------------------------------------------------
    def _impute(
        self,
        out: np.ndarray,
        observed: np.ndarray,
        keys: np.ndarray,
        cols: np.ndarray,
        metrics: tuple[str, ...],
        flags: np.ndarray,
    ) -> None:
        """Fill the missing cells of ``out`` causally: row r learns only from what its key observed
        before r (earlier batches and earlier rows of this batch), so splitting a stream into other
        batches changes nothing."""
        missing_rows = np.flatnonzero(np.isnan(out).any(axis=1))
        if len(missing_rows) == 0:
            return
        order, _, counts, _rank = group_rows(keys)
        pos_in_sorted = np.empty(len(keys), dtype=np.int64)
        pos_in_sorted[order] = np.arange(len(keys))
        start_of = (np.cumsum(counts) - counts)[np.repeat(np.arange(len(counts)), counts)]  # per sorted row
        last_val, mean_val = causal_fallbacks(self.last_, self.sum_, self.cnt_, observed, keys, cols, order, start_of)
        usable = ~np.isnan(observed).all(axis=1)  # reference rows: partial ones too (§3.4)
        # per key, once: its references in time order (ring, then this batch's rows), and
        # for each of its rows how many of them came before it
        key_refs: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        fallback = None  # the knowledge base's samples, for keys with too few references
        if self.impute == "knn" and self.history is not None and len(self.history.rows):
            fallback = self.history.rows_for(metrics)
        uniform, log1p = self.weights == "uniform", self.target_transform == "log1p"
        for r in missing_rows.tolist():
            key = int(keys[r])
            miss = np.flatnonzero(np.isnan(out[r]))
            done = np.zeros(len(miss), dtype=bool)
            if self.impute == "knn":
                if key not in key_refs:
                    p0 = pos_in_sorted[r]
                    mine = order[start_of[p0] : start_of[p0] + counts[np.searchsorted(np.cumsum(counts), p0, "right")]]
                    ring, n, pos = self.refs_[key][:, cols], int(self.ref_n_[key]), int(self.ref_pos_[key])
                    key_refs[key] = key_references(ring, n, pos, self.knn_window, observed, mine, usable)
                refs_all, before = key_refs[key]
                n_before = before[pos_in_sorted[r] - start_of[pos_in_sorted[r]]]
                refs = refs_all[max(n_before - self.knn_window, 0) : n_before]
                done = knn_row(out, r, miss, refs, fallback, self.knn_k, uniform, log1p, self.f_min)
            rules = ["knn_impute" if d else "" for d in done]
            for q, jb in enumerate(miss.tolist()):
                if done[q]:
                    continue
                if self.impute == "mean" and mean_val[r, jb] == mean_val[r, jb]:
                    out[r, jb], rules[q] = mean_val[r, jb], "mean"
                elif last_val[r, jb] == last_val[r, jb]:
                    out[r, jb], rules[q] = last_val[r, jb], "last_value"
                else:
                    rules[q] = "no_reference"
            for q, jb in enumerate(miss.tolist()):
                act = "impute" if rules[q] != "no_reference" else "flag"
                f = {"metric": metrics[jb], "rule": rules[q], "action": act, "original": None, "threshold": None}
                add_flag(flags, r, f)

    # -- snapshots -------------------------------------------------------------------------------------
    _ARRAYS: tuple[str, ...] = ("hist_", "hpos_", "hn_", "accepted_", "em_", "ev_", "run_n_", "runbuf_", "scale_")
    _ARRAYS += ("nres_", "last_", "sum_", "cnt_", "raw_last_", "raw_ts_", "refs_", "ref_n_", "ref_pos_")

    def _state(self) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        meta = {"keys": self.cols_.keys, "metrics": self.cols_.metrics}
        nk = len(self.cols_.keys)  # the keys' rows only, not the spare capacity (fill values)
        return meta, {name: getattr(self, name)[:nk] for name in self._ARRAYS}

    def _load_state(self, meta: dict[str, Any], arrays: dict[str, np.ndarray]) -> None:
        self.cols_.load(meta["keys"], meta["metrics"])
        for name in self._ARRAYS:
            setattr(self, name, arrays[name].copy())
