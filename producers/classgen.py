"""A class of random job structures with planted truth, for judging what projection pursuit keeps
(issue #32; docs/pursuit.md, "Selections that carry evidence").

:func:`class_trace` draws one job: ``nodes`` nodes (4–128), 8–24 metrics sampled once a second,
of which 2–4 are **planted** -- their nodes really differ -- and the rest are not:

* planted kinds: ``bursty`` (one node bursts often, the others rarely), ``groups`` (two groups of
  nodes at different levels), ``phase`` (a per-node phase of a common cycle), ``drift`` (one node
  drifting away from the others), ``scale`` (a heavy-tailed metric whose scale differs per node);
* unplanted kinds: ``trend`` (one common trend with 0.1–10 % noise), ``constant``, ``noisy``
  (a constant plus noise), ``common_bursts`` (bursts that hit every node at once).

Metric names are shuffled (``m00``…), so a name says nothing about its kind. :func:`heldout_trace`
draws the same kinds of structure written differently -- AR(1) and Student-t noise, a diurnal
trend, square waves, a step instead of a drift, Pareto bursts -- for checking, on data the method
was not tuned on, that what is kept still differs. Both are seeded and return a
:class:`~perfsift.operators.batch.Batch` (job ``class``) and the truth.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from perfsift.operators.batch import Batch

PLANTED = ("bursty", "groups", "phase", "drift", "scale")
UNPLANTED = ("trend", "constant", "noisy", "common_bursts")
T0 = 1_700_000_040.0  # a multiple of 60 s: the first 30-s period is whole


@dataclass
class Truth:
    """What was planted: metric → kind for every metric, the planted metrics, the nodes that differ
    (for ``bursty``, ``drift``: the one node)."""

    kinds: dict[str, str]
    planted: set[str]
    nodes: dict[str, list[str]] = field(default_factory=dict)


def _layout(rng: np.random.Generator, metrics: int | None, planted: int | None) -> list[str]:
    n = int(rng.integers(8, 25)) if metrics is None else metrics
    k = int(rng.integers(2, 5)) if planted is None else planted
    kinds = list(rng.choice(PLANTED, size=k, replace=False)) + list(rng.choice(UNPLANTED, size=n - k))
    return [str(kinds[j]) for j in rng.permutation(n)]


def _batch(values: np.ndarray, names: list[str], t0: float) -> Batch:
    """values: time × nodes × metrics → a batch in time order, one row per (time, node)."""
    steps, nodes, n = values.shape
    ts = np.repeat(t0 + np.arange(steps, dtype=np.float64), nodes)
    return Batch(
        ts=ts,
        node_idx=np.tile(np.arange(nodes, dtype=np.int64), steps),
        values=values.reshape(steps * nodes, n),
        metrics=tuple(names),
        nodes=tuple(f"n{p:03d}" for p in range(nodes)),
        job_idx=np.zeros(steps * nodes, dtype=np.int64),
        jobs=("class",),
        seq=np.repeat(np.arange(steps, dtype=np.int64), nodes),
    )


def class_trace(
    seed: int, nodes: int = 16, duration: int = 300, metrics: int | None = None, planted: int | None = None
) -> tuple[Batch, Truth]:
    """One random job of the class (module docstring): a batch of ``duration`` seconds and its truth."""
    cube, names, truth = class_cube(seed, nodes, duration, metrics, planted)
    return _batch(cube, names, T0), truth


def class_cube(
    seed: int, nodes: int = 16, duration: int = 300, metrics: int | None = None, planted: int | None = None
) -> tuple[np.ndarray, list[str], Truth]:
    """:func:`class_trace` as (values: seconds × nodes × metrics, metric names, truth)."""
    rng = np.random.default_rng([seed, nodes, 32])
    kinds = _layout(rng, metrics, planted)
    t = np.arange(duration, dtype=np.float64)[:, None]
    node_names = [f"n{p:03d}" for p in range(nodes)]
    out = np.empty((duration, nodes, len(kinds)))
    truth = Truth({}, set())
    shape = (duration, nodes)
    for j, kind in enumerate(kinds):
        name = f"m{j:02d}"
        level = 10.0 ** rng.uniform(0, 4)
        if kind == "bursty":
            q = int(rng.integers(nodes))
            rate = np.full(nodes, 0.01)
            rate[q] = 0.15
            burst = rng.random(shape) < rate
            x = np.where(burst, level * (50 + rng.exponential(20, shape)), rng.exponential(level * 0.2, shape))
            truth.nodes[name] = [node_names[q]]
        elif kind == "groups":
            side = rng.permutation(nodes) < nodes // 2
            gap = rng.uniform(0.05, 0.2)
            trend = 1 + 0.3 * np.sin(2 * np.pi * t / rng.uniform(60, 300))
            x = level * trend * (1 + gap * side) + rng.normal(0, level * rng.uniform(0.01, 0.03), shape)
        elif kind == "phase":
            cycle = rng.uniform(30, 150)
            phi = rng.uniform(0, 2 * np.pi, nodes)
            x = level * (1 + 0.5 * np.sin(2 * np.pi * t / cycle + phi)) + rng.normal(0, level * 0.05, shape)
        elif kind == "drift":
            q = int(rng.integers(nodes))
            slope = np.zeros(nodes)
            slope[q] = rng.uniform(0.3, 1.0) * rng.choice([-1, 1]) / duration
            x = level * (1 + slope * t) + rng.normal(0, level * 0.02, shape)
            truth.nodes[name] = [node_names[q]]
        elif kind == "scale":
            s = rng.uniform(1.0, 4.0, nodes)
            x = level * s * rng.lognormal(0, 1, shape)
        elif kind == "trend":
            trend = 1 + 0.5 * np.sin(2 * np.pi * t / rng.uniform(60, 600)) + 0.3 * t / duration
            x = level * trend * (1 + rng.normal(0, 10 ** rng.uniform(-3, -1), shape))
        elif kind == "constant":
            x = np.full(shape, level)
        elif kind == "noisy":
            x = level + rng.normal(0, level * 10 ** rng.uniform(-3, -1), shape)
        else:  # common_bursts
            hit = rng.random((duration, 1)) < 0.03
            x = level + hit * level * 5 * (1 + rng.normal(0, 0.05, shape)) + rng.normal(0, level * 0.02, shape)
        out[:, :, j] = x
        truth.kinds[name] = kind
        if kind in PLANTED:
            truth.planted.add(name)
    return out, [f"m{j:02d}" for j in range(len(kinds))], truth


def _ar1(rng: np.random.Generator, shape: tuple[int, int], rho: float) -> np.ndarray:
    """Unit-variance AR(1) noise along time (axis 0)."""
    e = rng.normal(0, np.sqrt(1 - rho**2), shape)
    x = np.empty(shape)
    x[0] = rng.normal(0, 1, shape[1])
    for i in range(1, shape[0]):
        x[i] = rho * x[i - 1] + e[i]
    return x


def heldout_trace(seed: int, nodes: int = 16, duration: int = 300) -> tuple[Batch, Truth]:
    """The held-out class (module docstring): same kinds, other shapes and noise; never tuned on."""
    cube, names, truth = heldout_cube(seed, nodes, duration)
    return _batch(cube, names, T0), truth


def heldout_cube(seed: int, nodes: int = 16, duration: int = 300) -> tuple[np.ndarray, list[str], Truth]:
    """:func:`heldout_trace` as (values: seconds × nodes × metrics, metric names, truth)."""
    rng = np.random.default_rng([seed, nodes, 1032])
    kinds = _layout(rng, None, None)
    t = np.arange(duration, dtype=np.float64)[:, None]
    node_names = [f"n{p:03d}" for p in range(nodes)]
    shape = (duration, nodes)
    diurnal = 1 + 0.4 * np.sin(2 * np.pi * (t + rng.uniform(0, 86400)) / 86400 * 200) + 0.1 * np.sin(2 * np.pi * t / 37)
    out = np.empty((duration, nodes, len(kinds)))
    truth = Truth({}, set())
    for j, kind in enumerate(kinds):
        name = f"h{j:02d}"
        level = 10.0 ** rng.uniform(-1, 5)
        noise = (
            level
            * rng.uniform(0.01, 0.05)
            * (_ar1(rng, shape, rng.uniform(0.2, 0.6)) if rng.random() < 0.5 else rng.standard_t(4, shape) / np.sqrt(2))
        )
        if kind == "bursty":  # Pareto bursts on one node
            q = int(rng.integers(nodes))
            rate = np.full(nodes, 0.005)
            rate[q] = 0.1
            x = level * (1 + (rng.random(shape) < rate) * (20 + rng.pareto(1.5, shape))) + noise
            truth.nodes[name] = [node_names[q]]
        elif kind == "groups":  # three-to-one split, multiplicative
            side = rng.random(nodes) < 0.25
            side[int(rng.integers(nodes))] = True
            x = level * diurnal * np.where(side, 1 + rng.uniform(0.1, 0.3), 1.0) + noise
        elif kind == "phase":  # square waves, per-node phase
            cycle = rng.uniform(40, 120)
            phi = rng.uniform(0, 1, nodes)
            x = level * (1 + 0.6 * (((t / cycle + phi) % 1.0) < 0.5)) + noise
        elif kind == "drift":  # one node steps away and stays
            q = int(rng.integers(nodes))
            step = (np.arange(nodes) == q) * (t >= rng.uniform(0, duration / 3))
            x = level * (1 + rng.uniform(0.2, 0.5) * step) + noise
            truth.nodes[name] = [node_names[q]]
        elif kind == "scale":  # Student-t magnitudes, scale per node
            s = np.exp(rng.uniform(0, 1.5, nodes))
            x = level * s * np.abs(rng.standard_t(2, shape))
        elif kind == "trend":
            x = level * diurnal * (1 + 10 ** rng.uniform(-3, -1) * rng.standard_t(4, shape))
        elif kind == "constant":
            x = np.full(shape, level)
        elif kind == "noisy":
            x = level + noise
        else:  # common_bursts: Pareto, same moments on all nodes
            hit = rng.random((duration, 1)) < 0.05
            x = level * (1 + hit * (3 + rng.pareto(2.0, (duration, 1)))) + noise
        out[:, :, j] = x
        truth.kinds[name] = kind
        if kind in PLANTED:
            truth.planted.add(name)
    return out, [f"h{j:02d}" for j in range(len(kinds))], truth
