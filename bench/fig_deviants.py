"""The figure of docs/pursuit.md, "Naming a node as it starts": every node's score per period on a
12-node job of producers/episodes.py with a level episode of 1 period, a shift in two metrics of 2
periods and a variance burst of 5 periods, the episodes shaded. ``python -m bench.fig_deviants``."""

from __future__ import annotations

from pathlib import Path

import matplotlib
import numpy as np
from perfsift.operators.pursuit.deviants import MEMORY, name_nodes
from perfsift.producers.episodes import episode_job, trailing_mean

matplotlib.use("Agg")
import matplotlib.pyplot as plt

TAU, W, SAMPLES = 20.0, 5, 480
OUT = Path(__file__).resolve().parent.parent / "docs" / "figures" / "deviant_naming.png"


def main() -> None:
    job = episode_job(
        12, 5, [("level", 90.0, TAU), ("pair", 190.0, 2 * TAU), ("noise", 305.0, 5 * TAU)], samples=SAMPLES
    )
    sm = trailing_mean(job.values, W)
    ts = np.broadcast_to(job.ts, sm.shape[:2])
    names = [f"n{k:02d}" for k in range(sm.shape[0])]
    ends, scores, thr = [], [], []
    for p in range(int(SAMPLES // TAU)):
        rows = slice(max(0, int((p + 1 - MEMORY) * TAU)), int((p + 1) * TAU))
        r = name_nodes(sm[:, rows], ts[:, rows], names, job.metrics, TAU, TAU * (p + 1))
        ends.append(TAU * (p + 1))
        scores.append([r["deviant_scores"].get(n, np.nan) for n in names])
        thr.append(r["deviant_threshold"] if r["deviant_threshold"] is not None else np.nan)
    s = np.array(scores)
    fig, ax = plt.subplots(figsize=(9, 4))
    colours = plt.get_cmap("tab10")
    for i, ep in enumerate(job.episodes):
        ax.axvspan(ep.start, ep.stop, color=colours(i), alpha=0.15)
        ax.text(
            ep.start, 0.97, f"{ep.kind}\n{names[ep.node]}", transform=ax.get_xaxis_transform(), va="top", fontsize=8
        )
    deviants = {ep.node: i for i, ep in enumerate(job.episodes)}
    for k in range(len(names)):
        c = colours(deviants[k]) if k in deviants else "0.6"
        ax.step(
            ends,
            s[:, k],
            where="pre",
            color=c,
            lw=2 if k in deviants else 0.8,
            label=names[k] if k in deviants else None,
        )
    ax.step(ends, thr, where="pre", color="k", ls="--", lw=1, label="threshold")
    ax.set_yscale("log")
    ax.set_xlabel("time (s); each step is the score of the period ending there")
    ax.set_ylabel("node score (largest z)")
    ax.set_title(f"name_nodes: 12 nodes, period {TAU:g} s, sliding mean of {W} samples")
    ax.legend(loc="upper right", fontsize=8)
    fig.tight_layout()
    OUT.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(OUT, dpi=110)
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
