"""Jobs in which one node deviates for a while: the class the per-period naming of
:func:`~perfsift.operators.pursuit.deviants.name_nodes` is tested on (issue #32), not one trace.

A job of ``nodes`` exchangeable nodes and ``metrics`` metrics sampled every ``dt`` seconds. Calm
metrics, drawn per seed: a common trend (sine or random walk, the same on every node) times a
level, with per-node noise of 0.1–10 % of the level; constants; constants plus noise; a heavy-tailed
metric with bursts common to every node (at the same samples); small persistent per-node offsets
(0–0.5 noise sd). Episodes: one node, from a start drawn uniformly inside a period, for a whole
number of periods, deviates in one of three ways:

- ``level``: one metric shifts by ``amp`` × its noise sd;
- ``pair``: two metrics shift together, each by ``amp`` × its noise sd;
- ``noise``: one metric's noise grows ``amp``-fold (a variance burst).

:func:`episode_job` returns raw values (node × sample × metric); :func:`trailing_mean` smooths them
as the pipeline's sliding mean does; :func:`to_samples` makes producer-shaped samples of them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

KINDS = ("level", "pair", "noise")


@dataclass(frozen=True)
class Episode:
    """Node ``node`` deviates (``kind``) in ``metrics`` during [start, stop) seconds."""

    node: int
    kind: str
    metrics: tuple[int, ...]
    start: float
    stop: float


@dataclass
class EpisodeJob:
    values: np.ndarray  # node × sample × metric, raw
    ts: np.ndarray  # sample times (s), the same on every node
    metrics: list[str]
    episodes: list[Episode]


def episode_job(
    nodes: int,
    seed: int,
    episodes: list[tuple[str, float, float]] = (),  # type: ignore[assignment]
    metrics: int = 12,
    samples: int = 600,
    dt: float = 1.0,
    amp: float | None = None,
) -> EpisodeJob:
    """A job with the given episodes ``(kind, start_s, length_s)``, each on its own random node and
    metric(s); ``amp`` (default: drawn per episode, 5–8 for level/pair shifts in noise sds and 5–8
    for the noise factor) sets their strength."""
    rng = np.random.default_rng(seed)
    t = np.arange(samples) * dt
    x = np.empty((nodes, samples, metrics))
    noise_sd = np.zeros(metrics)
    for j in range(metrics):
        kind = rng.choice(["trend", "trend", "walk", "const", "const_noise", "bursty"])
        level = 10 ** rng.uniform(0, 4)
        if kind == "const":
            x[:, :, j] = level
            continue
        rel = 10 ** rng.uniform(-3, -1)  # noise 0.1–10 % of the level
        sd = rel * level
        if kind == "trend":
            common = level * (1 + 0.3 * np.sin(2 * np.pi * t / rng.uniform(60, 300) + rng.uniform(0, 6.3)))
        elif kind == "walk":
            common = level + np.cumsum(rng.normal(0, sd, samples))
        elif kind == "bursty":  # heavy tail, bursts at the same samples on every node
            common = level + np.where(rng.random(samples) < 0.03, rng.exponential(20 * sd, samples), 0.0)
        else:
            common = np.full(samples, level)
        offsets = rng.uniform(0, 0.5) * sd * rng.normal(size=nodes)
        x[:, :, j] = common[None, :] + offsets[:, None] + rng.normal(0, sd, (nodes, samples))
        noise_sd[j] = sd
    noisy = np.flatnonzero(noise_sd > 0)
    out: list[Episode] = []
    for kind, start, length in episodes:
        node = int(rng.integers(nodes))
        which = tuple(int(j) for j in rng.choice(noisy, 2 if kind == "pair" else 1, replace=False))
        a = float(amp) if amp is not None else float(rng.uniform(5, 8))
        sel = (t >= start) & (t < start + length)
        for j in which:
            if kind == "noise":
                x[node, sel, j] += (a - 1) * rng.normal(0, noise_sd[j], int(sel.sum()))
            else:
                x[node, sel, j] += a * noise_sd[j] * rng.choice([-1.0, 1.0])
        out.append(Episode(node, kind, which, float(start), float(start + length)))
    return EpisodeJob(x, t, [f"m{j:02d}" for j in range(metrics)], out)


def trailing_mean(values: np.ndarray, window: int) -> np.ndarray:
    """The mean of the last ``window`` samples (fewer at the start) along axis 1."""
    c = np.cumsum(values, axis=1)
    out = c.copy()
    out[:, window:] = c[:, window:] - c[:, :-window]
    n = np.minimum(np.arange(values.shape[1]) + 1, window)
    return out / n[None, :, None]


def to_samples(job: EpisodeJob, t0: float = 1.7e9, name: str = "episodes") -> list[dict[str, Any]]:
    """Producer-shaped samples (``ts``, ``node``, ``job``, ``seq``, ``metrics``) of the raw values."""
    return [
        {
            "ts": t0 + float(job.ts[i]),
            "node": f"n{k:02d}",
            "job": name,
            "seq": i,
            "metrics": dict(zip(job.metrics, job.values[k, i].tolist(), strict=True)),
        }
        for i in range(len(job.ts))
        for k in range(job.values.shape[0])
    ]
