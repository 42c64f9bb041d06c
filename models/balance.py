"""Time balancing with a structural model (Berman & Wolski; METHODS.md §5.3): how much work each
node gets so that they finish together, with the mean and the conservative strategy."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
from perfsift.models.expressions import ModelError
from perfsift.models.structural import StructuralModel


def allocate(a: np.ndarray, b: np.ndarray, total: float, integer: bool = True) -> np.ndarray:
    """Work per node so that ``a·n + b`` is equal on every node that gets work and ``Σ n = total``
    (nodes whose fixed cost b alone exceeds that time get none)."""
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if (a <= 0).any():
        raise ValueError("time per unit of work must be positive on every node")
    active = np.ones(len(a), dtype=bool)
    while True:
        t = (total + (b[active] / a[active]).sum()) / (1 / a[active]).sum()
        n = np.where(active, (t - b) / a, 0.0)
        if (n >= 0).all():
            break
        active &= n > 0
    if not integer:
        return n
    base = np.floor(n)
    short = round(total - base.sum())
    order = np.argsort(-(n - base), kind="stable")
    base[order[:short]] += 1  # largest remainders
    return base


def balance(
    model: StructuralModel,
    total: float,
    inputs: Mapping[str, Mapping[str, Any]] | None = None,
    runs: int = 4000,
    seed: int = 0,
    nodes: int | None = None,
) -> dict[str, Any]:
    """Solve the time-balancing problem ``T(p) = A(p)·work(p) + B(p)`` equal for all p with
    ``Σ work = total``, with the *mean* strategy (A, B at their means) and the *conservative* one
    (mean + 2 sigma: less work to high-variance nodes), and predict each allocation's completion
    time (the slowest node) over ``runs`` simulated runs."""
    if model.balance is None:
        raise ModelError("the model has no balance: section (work: PARAMETER, time: COMPONENT)", model.source)
    inputs = inputs or {}
    work, comp = str(model.balance["work"]), str(model.balance["time"])
    p_count = model.node_count(inputs, nodes)
    if p_count < 2:
        raise ModelError("balancing needs a job of two or more nodes", model.source)

    def times(env: dict[str, np.ndarray], w: float) -> np.ndarray:
        """The time component per draw and node with ``w`` units of work on every node."""
        e = dict(env)
        e[work] = np.full((1, p_count), w)
        return np.broadcast_to(model.evaluate(e, [comp])[comp], (runs, p_count))

    env = model.draw(inputs, runs, seed, p_count)
    b_s = times(env, 0.0)
    a_s = times(env, 1.0) - b_s
    linear = np.allclose(times(env, 2.0) - b_s, 2 * a_s, rtol=1e-6, atol=1e-12)
    sim = model.draw(inputs, runs, np.random.default_rng(seed + 1), p_count)  # independent simulated runs
    b_run = times(sim, 0.0)
    a_run = times(sim, 1.0) - b_run
    out: dict[str, Any] = {"model": model.name, "total": total, "nodes": p_count, "linear": bool(linear), "runs": runs}
    for strategy, k in (("mean", 0.0), ("conservative", 2.0)):
        a = a_s.mean(axis=0) + k * a_s.std(axis=0)
        b = b_s.mean(axis=0) + k * b_s.std(axis=0)
        n = allocate(a, b, total)
        planned = a * n + b
        completion = (a_run * n + b_run).max(axis=1)
        mu, sd = float(completion.mean()), float(completion.std(ddof=1))
        out[strategy] = {
            "work": n.tolist(),
            "planned_time": planned.tolist(),
            "completion_mean": mu,
            "completion_sigma": sd,
            "completion_interval": [mu - 2 * sd, mu + 2 * sd],
            "completion_p95": float(np.quantile(completion, 0.95)),
        }
    return out
