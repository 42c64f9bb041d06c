"""Windowed forecast errors stay exact after huge errors (issue #33, item 3): after a 1e9 level
jump the running sums are ~1e18, and a window's error taken as a difference of two of them would
read 0. Both engines must choose the methods a direct-window bank chooses (every window summed
from the scores' own errors with math.fsum), and give its forecasts to 1e-9."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from perfsift.operators import Batch
from perfsift.operators.forecast.forecast import WINDOWS, ForecastBank


class DirectBank(ForecastBank):
    """The slow oracle: the numpy engine with every windowed error summed exactly from a list of
    each score's errors, nothing taken from running sums."""

    def __init__(self, **kw: Any) -> None:
        super().__init__(engine="numpy", **kw)
        self.scored: dict[int, list[tuple[np.ndarray, np.ndarray]]] = {}

    def _step_quietly(self, s: np.ndarray, x: np.ndarray) -> np.ndarray:
        pend = self.pending_[s].copy()
        if self.nws_compat:
            pend[self.count_[s] == 0, 2:10] = 0.0
        for i, sid in enumerate(s.tolist()):
            can = ~np.isnan(pend[i])
            if can.any():
                e = np.where(can, pend[i] - x[i], 0.0)
                self.scored.setdefault(sid, []).append((e * e, np.abs(e)))
        return super()._step_quietly(s, x)

    def _errors(self, s: np.ndarray, k: np.ndarray) -> dict[tuple[str, int], np.ndarray]:
        """Window 0 (the cumulative mean) as the engines take it; every window w from the list
        of scores alone (the numpy engine's own windowed errors are not computed: they would be
        overwritten, and took a third of the oracle's time)."""
        cannot = np.isnan(self.pending_[s])
        with np.errstate(all="ignore"):
            out = {("mse", 0): self.cum_se_[s] / k[:, None], ("mae", 0): self.cum_ae_[s] / k[:, None]}
        n_primary = self.pending_.shape[1]
        for i, sid in enumerate(s.tolist()):
            hist = self.scored.get(sid, [])[-max(WINDOWS) :]
            # per kind, each primary's errors as a list of floats, oldest first (fsum of a list,
            # not of numpy scalars one by one: the same sums, much faster)
            cols = [np.array([e[q] for e in hist]).T.tolist() if hist else [] for q in (0, 1)]
            for w in WINDOWS:
                m = min(w, len(hist))
                for q, kind in enumerate(("mse", "mae")):
                    row = out.setdefault((kind, w), np.empty((len(s), n_primary)))[i]
                    for f in range(n_primary):
                        row[f] = math.fsum(cols[q][f][-m:]) / m if m else np.inf
        for err in out.values():
            err[np.isnan(err) | cannot] = np.inf
        return out


def series(seed: int, n: int, nodes: int = 2) -> Batch:
    """Noise around levels that jump by 1e9 (and back), gaps, repeated values, skewed node clocks."""
    rng = np.random.default_rng(seed)
    level = np.cumsum(np.where(rng.random((n, nodes)) < 0.01, rng.choice([-1e9, 1e9], (n, nodes)), 0.0), axis=0)
    v = level + 1e9 + rng.normal(0, 0.3, (n, nodes))
    v[rng.random((n, nodes)) < 0.05] = np.nan
    v[rng.random((n, nodes)) < 0.05] = 1e9  # repeated values
    ts = np.repeat(np.arange(n, dtype=float), nodes) + np.tile(rng.uniform(0, 0.9, nodes), n)
    return Batch.from_columns(ts=ts, nodes=[f"n{i}" for _ in range(n) for i in range(nodes)], metrics=["x"],
                              values=v.reshape(-1, 1))  # fmt: skip


def test_the_issue_case_one_jump_then_small_noise() -> None:
    rng = np.random.default_rng(3)
    x = np.r_[rng.normal(0, 0.2, 200), 1e9 + rng.normal(0, 0.2, 1000)]
    b = Batch.from_columns(ts=np.arange(len(x), dtype=float), nodes=["a"] * len(x), metrics=["x"], values=x[:, None])
    ref = DirectBank().update(b)
    for engine in ("compiled", "numpy"):
        got = ForecastBank(engine=engine).update(b)
        np.testing.assert_array_equal(got.extra["method"], ref.extra["method"])
        np.testing.assert_allclose(got.values, ref.values, rtol=1e-9)


@settings(max_examples=6, deadline=None)
@given(seed=st.integers(0, 2**31 - 1))
def test_both_engines_choose_as_the_direct_window_bank(seed: int) -> None:
    """Forecasts to 1e-9. Methods may differ only between near-equal primaries (running mean and
    the mean of 31 before 31 values: equal up to rounding, a tie within TIE = 1e-12 that the
    running sums' last bits may break either way), so their forecasts are what is compared."""
    b = series(seed, 400)
    ref = DirectBank().update(b)
    for engine in ("compiled", "numpy"):
        got = ForecastBank(engine=engine).update(b)
        np.testing.assert_allclose(got.values, ref.values, rtol=1e-9)
        assert (got.extra["method"] == ref.extra["method"]).mean() >= 0.95
