"""The figures perfsift draws, as PNG files: metric traces, the data reduction over time, R² and
reduction degree, the projection pursuit selection map, contract violation levels, the threshold
sweep of statistical data reduction, and predictions against their ±2σ bands.

``perfsift report`` puts the first five on its page; the offline commands draw them with ``--plot``.
matplotlib is imported on the first figure (it takes a while), with the Agg backend (no display).
"""

from __future__ import annotations

from pathlib import Path
from typing import IO, Any

import numpy as np


def _pyplot() -> Any:
    try:
        import matplotlib
    except ImportError:  # the worker image leaves it out
        raise RuntimeError("figures need matplotlib: pip install matplotlib") from None

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _series(rows: list[dict[str, Any]], metric: str) -> tuple[np.ndarray, np.ndarray]:
    """(times, values) of one node's metric with NaN where a record lacks it and between samples
    further apart than 1.5 sampling intervals, so a line breaks at every gap."""
    t = np.array([r["ts"] for r in rows], dtype=float)
    v = np.array([np.nan if (x := r["metrics"].get(metric)) is None else x for r in rows], dtype=float)
    if len(t) > 2:
        step = np.median(np.diff(t))
        cut = np.flatnonzero(np.diff(t) > 1.5 * step) + 1 if step > 0 else np.zeros(0, dtype=int)
        t = np.insert(t, cut, (t[cut - 1] + t[cut]) / 2)
        v = np.insert(v, cut, np.nan)
    return t, v


def kept_spans(reduced: list[dict[str, Any]], metric: str, every: bool = True) -> list[tuple[float, float]]:
    """Time spans in which the reduced stream carried ``metric`` from every node that reported
    then (``every=False``: from at least one)."""
    ts = np.array([r["ts"] for r in reduced], dtype=float)
    has = np.array([r["metrics"].get(metric) is not None for r in reduced])
    times, idx = np.unique(ts, return_inverse=True)
    sent = np.bincount(idx, weights=has, minlength=len(times))
    total = np.bincount(idx, minlength=len(times))
    on = sent >= total if every else sent > 0
    edges = np.flatnonzero(np.diff(np.r_[0, on.astype(int), 0]))
    return [(float(times[a]), float(times[b - 1])) for a, b in zip(edges[::2], edges[1::2], strict=True)]


def plot_traces(reduced: list[dict[str, Any]], path: Path | IO[bytes], max_metrics: int = 6) -> None:
    """Metric values per node over time (from the reduced stream: full samples and kept metrics).
    Lines break where a value is missing; the spans in which a metric was sent are shaded."""
    plt = _pyplot()
    counts: dict[str, int] = {}
    for r in reduced:
        for m in r["metrics"]:
            counts[m] = counts.get(m, 0) + 1
    metrics = sorted(counts, key=lambda m: -counts[m])[:max_metrics]
    t0 = min(r["ts"] for r in reduced)
    fig, axes = plt.subplots(len(metrics), 1, figsize=(10, 1.8 * len(metrics) + 0.6), sharex=True, squeeze=False)
    by_node: dict[str, list[dict[str, Any]]] = {}
    for r in sorted(reduced, key=lambda r: r["ts"]):
        by_node.setdefault(r["node"], []).append(r)
    nodes = sorted(by_node)
    for ax, m in zip(axes[:, 0], metrics, strict=True):
        for every, alpha in ((False, 0.07), (True, 0.12)):  # darker where every node sent it
            for a, b in kept_spans(reduced, m, every):
                ax.axvspan(a - t0, b - t0, color="#2ca02c", alpha=alpha, lw=0)
        for node in nodes[:16]:
            t, v = _series(by_node[node], m)
            if np.isfinite(v).any():
                ax.plot(t - t0, v, lw=0.7)
        ax.set_ylabel(m, fontsize=8)
        ax.grid(alpha=0.3)
    axes[-1, 0].set_xlabel(
        f"time (s); {min(len(nodes), 16)} of {len(nodes)} nodes; shaded: the metric was sent (darker: by every node); "
        "gaps: it was not"
    )
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def plot_reduction(reduced: list[dict[str, Any]], path: Path | IO[bytes]) -> None:
    """Cumulative metric values sent on perf.reduced against sending every metric (cf. Figure 18)."""
    plt = _pyplot()
    rows = sorted(reduced, key=lambda r: r["ts"])
    width = max((len(r["metrics"]) for r in rows if r.get("full")), default=max(len(r["metrics"]) for r in rows))
    t0 = rows[0]["ts"]
    t = np.array([r["ts"] - t0 for r in rows])
    sent = np.cumsum([len(r["metrics"]) for r in rows])
    full = np.arange(1, len(rows) + 1) * width
    fig, ax = plt.subplots(figsize=(7, 3.6))
    ax.plot(t, full / 1e3, label="every metric")
    ax.plot(t, sent / 1e3, label="reduced stream")
    ax.set_xlabel("time (s)")
    ax.set_ylabel("metric values sent (thousands)")
    ax.set_title(f"{sent[-1] / full[-1]:.0%} of the metric values sent")
    ax.legend()
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def plot_r2(selections: list[dict[str, Any]], path: Path | IO[bytes]) -> None:
    """R² (in-sample and held out, with RAND's held-out mean) and reduction degree of the
    data-reduction selections over time; a selection whose regression did not run is a marked
    line with its reason, not a point."""
    plt = _pyplot()
    reds = [s for s in selections if s["kind"] == "reduction"]
    t0 = reds[0]["period_end"]
    recs = [s for s in reds if s.get("r2_train") is not None]
    fig, ax = plt.subplots(figsize=(7, 3.2))
    t = [r["period_end"] - t0 for r in recs]
    ax.plot(t, [r["r2_train"] for r in recs], marker="o", label="R² (train)")
    for key, label, mark in (("r2_holdout", "R² (newest rows, held out)", "^"), ("rand_r2_mean", "RAND mean", "x")):
        pts = [(r["period_end"] - t0, r[key]) for r in recs if r.get(key) is not None]
        if pts:
            ax.plot(*zip(*pts, strict=True), marker=mark, linestyle=":", label=label)
    ax.plot(t, [r["reduction_degree"] for r in recs], marker="s", label="reduction degree")
    for r in reds:
        if r.get("r2_train") is None:
            ax.axvline(r["period_end"] - t0, color="grey", linestyle="--")
            ax.annotate(str(r.get("skipped") or "not run"), (r["period_end"] - t0, 0.5), rotation=90, fontsize=7)
    ax.set_ylim(0, 1.05)
    ax.set_xlabel("time (s)")
    ax.legend()
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def plot_selection(records: list[dict[str, Any]], path: Path | IO[bytes], job: str | None = None) -> None:
    """Metrics (rows) × periods (columns), a mark where the metric was selected, darker for a higher
    rank; skipped periods hatched (cf. Vetter & Reed, SC'99, Figure 8). Periods in which nodes stood
    apart on the projection name them in red under the map."""
    plt = _pyplot()
    recs = [r for r in records if job is None or r["job"] == job]
    if not recs:
        raise ValueError("no selection record to plot")
    metrics = sorted({m for r in recs for m in r["scores"]} | {m for r in recs for m in r["selected"]})
    row = {m: i for i, m in enumerate(metrics)}
    t0 = recs[0]["period_start"]
    fig, ax = plt.subplots(figsize=(max(6, 0.25 * len(recs) + 3), 0.32 * len(metrics) + 1.8))
    shades = ["#08306b", "#2171b5", "#6baed6", "#c6dbef"]
    for r in recs:
        x0, width = r["period_start"] - t0, r["period_end"] - r["period_start"]
        if r["skipped"] is not None:
            ax.axvspan(x0, x0 + width, color="0.9", hatch="//", lw=0)
            continue
        for rank, m in enumerate(r["selected"]):
            ax.add_patch(plt.Rectangle((x0, row[m] - 0.4), width, 0.8, color=shades[min(rank, 3)]))
    apart = [r for r in recs if r.get("deviants")]
    for r in apart:
        names = "\n".join(d["node"] for d in r["deviants"][:3])
        x = r["period_start"] - t0 + (r["period_end"] - r["period_start"]) / 2
        ax.text(x, len(metrics) + 0.1, names, color="#c00000", fontsize=7, ha="center", va="top")
    ax.set_yticks(range(len(metrics) + bool(apart)), metrics + (["stood apart"] if apart else []))
    ax.set_ylim(-0.6, len(metrics) - 0.4 + (1.6 if apart else 0))
    ax.set_xlim(0, recs[-1]["period_end"] - t0)
    ax.invert_yaxis()
    ax.set_xlabel("time (s)")
    ax.set_title(f"metrics selected by projection pursuit — {recs[0]['job']}")
    handles = [plt.Rectangle((0, 0), 1, 1, color=shades[i]) for i in range(3)]
    ax.legend(handles, ["1st", "2nd", "3rd"], ncol=3, fontsize=8, loc="upper right", bbox_to_anchor=(1, 1.12))
    ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_violations(records: list[dict[str, Any]], path: Path | IO[bytes]) -> None:
    """Violation levels over time, one panel per metric space, one line per node (cf. Figure 5d)."""
    plt = _pyplot()
    spaces = sorted({s for r in records for s in r["spaces"]})
    nodes = sorted({r["node"] for r in records})
    t0 = min(r["ts"] for r in records)
    fig, axes = plt.subplots(len(spaces), 1, figsize=(10, 2.6 * len(spaces)), sharex=True, squeeze=False)
    for ax, space in zip(axes[:, 0], spaces, strict=True):
        for node in nodes:
            rs = [r for r in records if r["node"] == node]
            lv = [np.nan if r["spaces"][space]["violation"] is None else r["spaces"][space]["violation"] for r in rs]
            ax.plot([r["ts"] - t0 for r in rs], lv, lw=1, label=node)
        ax.set_ylabel(f"{space}\nviolation")
        ax.set_ylim(-0.05, 1.05)
        ax.grid(alpha=0.3)
    axes[-1, 0].set_xlabel("time (s)")
    axes[0, 0].legend(ncol=min(len(nodes), 8), fontsize=7, loc="upper left", bbox_to_anchor=(0, 1.35))
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_sweep(rows: list[dict[str, Any]], path: Path) -> None:
    """R² and reduction degree against the correlation threshold (the paper's Figures 2 and 4)."""
    plt = _pyplot()
    t = [r["threshold"] for r in rows]
    fig, ax = plt.subplots(figsize=(7, 3.8))
    ax.plot(t, [np.nan if r["r2_train"] is None else r["r2_train"] for r in rows], "o-", label="R² (train)")

    def nan(v: float | None) -> float:
        return np.nan if v is None else v

    if any(r["r2_verify"] is not None for r in rows):
        ax.plot(t, [nan(r["r2_verify"]) for r in rows], "s-", label="R² (verify, mean)")
    ax.plot(t, [nan(r["reduction_degree"]) for r in rows], "^-", label="reduction degree")
    ax.set_xlabel("correlation threshold t")
    ax.set_ylim(-0.05, 1.05)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_predictions(records: list[dict[str, Any]], path: Path | IO[bytes]) -> None:
    """One panel per output (job-wide outputs, or the node with the most violated rows): observed
    values over the predicted mean ± 2σ band, violated rows marked."""
    plt = _pyplot()
    outputs = sorted({r["output"] for r in records})
    fig, axes = plt.subplots(len(outputs), 1, figsize=(10, 2.8 * len(outputs)), sharex=True, squeeze=False)
    t0 = min(r["ts"] for r in records)
    for ax, output in zip(axes[:, 0], outputs, strict=True):
        rs = [r for r in records if r["output"] == output]
        node = max(
            sorted({r["node"] for r in rs}), key=lambda n: sum(r["node"] == n and r["state"] == "violated" for r in rs)
        )
        rs = [r for r in rs if r["node"] == node]
        t = np.array([r["ts"] - t0 for r in rs])
        ax.fill_between(t, [r["lower"] for r in rs], [r["upper"] for r in rs], alpha=0.3, label="mean ± 2σ")
        ax.plot(t, [r["mean"] for r in rs], lw=1, label="predicted mean")
        obs = [np.nan if r["observed"] is None else r["observed"] for r in rs]
        ax.plot(t, obs, ".", ms=3, color="k", label="observed")
        bad = [i for i, r in enumerate(rs) if r["state"] == "violated"]
        if bad:
            ax.plot(t[bad], np.array(obs)[bad], "x", color="red", ms=5, label="violated")
        ax.set_ylabel(f"{output}\n({'job' if node == '*' else node})")
        ax.grid(alpha=0.3)
    axes[0, 0].legend(ncol=4, fontsize=8, loc="upper left")
    axes[-1, 0].set_xlabel("time (s)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
