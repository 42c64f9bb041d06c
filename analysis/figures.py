"""The report's figures that answer an analyst's questions (issue #23), as PNG bytes: the nodes on
the projection, forecast bands against what was measured, contract violation levels per node over
time, and the bytes before and after reduction. The older figures are in
:mod:`perfsift.analysis.plots`; :func:`png` turns any of them into bytes."""

from __future__ import annotations

import io
from collections.abc import Callable
from typing import Any

import numpy as np
from perfsift.analysis.findings import Band
from perfsift.analysis.plots import _pyplot


def png(draw: Callable[..., None], *args: Any, **kw: Any) -> bytes:
    """The PNG a ``plot_*(..., path, ...)`` function of :mod:`perfsift.analysis.plots` draws, as bytes
    (``args`` come before the path, ``kw`` after)."""
    buf = io.BytesIO()
    draw(*args, buf, **kw)
    return buf.getvalue()


def _save(fig: Any, dpi: int = 100) -> bytes:
    plt = _pyplot()
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, dpi=dpi)
    plt.close(fig)
    return buf.getvalue()


def projection_scatter(records: list[tuple[dict[str, Any], str]]) -> bytes:
    """The nodes of one or more periods on their projection (robust z per axis, ``node_position``),
    a row per (record, title): axis 1 against axis 2 (and against axis 3 when there is one); the
    nodes that stand apart in red and labelled (cf. Vetter & Reed's projected processors)."""
    plt = _pyplot()
    fig, grid = plt.subplots(len(records), 2, figsize=(10.4, 4.4 * len(records)), squeeze=False)
    for row, (record, title) in zip(grid, records, strict=True):
        _scatter_row(row, record, title)
    return _save(fig)


def _scatter_row(row: Any, record: dict[str, Any], title: str) -> None:
    pos = record["node_position"]
    nodes = sorted(pos)
    xy = np.array([pos[n] for n in nodes], dtype=float)
    apart = {d["node"] for d in record.get("deviants") or []}
    pairs = [(0, 1), (0, 2)] if xy.shape[1] >= 3 else [(0, min(1, xy.shape[1] - 1))] * 2
    out = np.array([n in apart for n in nodes])
    row[0].set_title(title, fontsize=9, loc="left")
    for ax, (a, b) in zip(row, pairs, strict=True):
        ax.scatter(xy[~out, a], xy[~out, b], s=22, color="#4a6fa5", label="nodes")
        if out.any():
            ax.scatter(xy[out, a], xy[out, b], s=60, color="#c00000", marker="D", label="stands apart")
        for i in np.flatnonzero(out):
            ax.annotate(nodes[i], (xy[i, a], xy[i, b]), xytext=(6, 4), textcoords="offset points", color="#c00000")
        ax.axhline(0, color="0.8", lw=0.8)
        ax.axvline(0, color="0.8", lw=0.8)
        ax.set_xlabel(f"projection axis {a + 1} (robust z)")
        ax.set_ylabel(f"projection axis {b + 1} (robust z)")
        ax.grid(alpha=0.3)
    row[0].legend(fontsize=8, loc="best")


def _broken(ts: np.ndarray, *cols: np.ndarray) -> list[np.ndarray]:
    """``ts`` and ``cols`` with a NaN row inserted wherever consecutive times lie more than 1.5
    median steps apart, so lines and bands break at gaps instead of bridging them."""
    if len(ts) < 3:
        return [ts, *cols]
    step = np.median(np.diff(ts))
    cut = np.flatnonzero(np.diff(ts) > 1.5 * step) + 1 if step > 0 else np.zeros(0, dtype=int)
    return [np.insert(ts, cut, ts[cut - 1] + step), *(np.insert(c.astype(float), cut, np.nan) for c in cols)]


def band_panels(bands: list[Band], t0: float) -> bytes:
    """One panel per forecast series: the ±2σ band in force and the forecast, the measured values,
    those outside the band in red; all break where the series was not measured."""
    plt = _pyplot()
    fig, axes = plt.subplots(len(bands), 1, figsize=(10, 2.4 * len(bands) + 0.4), sharex=True, squeeze=False)
    for ax, b in zip(axes[:, 0], bands, strict=True):
        t, lower, upper, forecast = _broken(b.ts - t0, b.lower, b.upper, b.forecast)
        ax.fill_between(t, lower, upper, step="post", alpha=0.3, color="#6baed6", label="forecast ± 2σ", lw=0)
        ax.step(t, forecast, where="post", lw=0.8, color="#2171b5", label="forecast")
        t = b.ts - t0
        ax.plot(t, b.value, ".", ms=2.5, color="k", label="measured")
        bad = (b.value < b.lower) | (b.value > b.upper)
        if bad.any():
            ax.plot(t[bad], b.value[bad], "o", ms=4, mfc="none", color="#c00000", label="outside the band")
        ax.set_ylabel(f"{b.node}\n{b.metric}", fontsize=8)
        ax.grid(alpha=0.3)
    axes[0, 0].legend(ncol=4, fontsize=8, loc="upper left")
    axes[-1, 0].set_xlabel("time (s)")
    return _save(fig)


def heat_strip(levels: dict[str, dict[str, Any]], t0: float, bins: int = 200) -> bytes:
    """Nodes (rows) × time (columns): the contract violation level in [0, 1] (darker = worse, grey =
    unknown), the mean of each time bin."""
    plt = _pyplot()
    nodes = sorted(levels)
    t_min = min(float(v["ts"].min()) for v in levels.values())
    t_max = max(float(v["ts"].max()) for v in levels.values())
    edges = np.linspace(t_min, t_max + 1e-9, bins + 1)
    grid = np.full((len(nodes), bins), np.nan)
    for i, n in enumerate(nodes):
        idx = np.clip(np.searchsorted(edges, levels[n]["ts"], side="right") - 1, 0, bins - 1)
        lv = levels[n]["level"]
        ok = ~np.isnan(lv)
        total = np.bincount(idx[ok], weights=lv[ok], minlength=bins)
        count = np.bincount(idx[ok], minlength=bins)
        grid[i] = np.where(count > 0, total / np.maximum(count, 1), np.nan)
    fig, ax = plt.subplots(figsize=(10, 0.28 * len(nodes) + 1.4))
    cmap = plt.get_cmap("Reds").with_extremes(bad="0.85")  # a copy: the registered map stays as it is
    im = ax.imshow(
        np.ma.masked_invalid(grid),
        aspect="auto",
        cmap=cmap,
        vmin=0,
        vmax=1,
        extent=(t_min - t0, t_max - t0, len(nodes) - 0.5, -0.5),
        interpolation="nearest",
    )
    ax.set_yticks(range(len(nodes)), nodes, fontsize=7)
    ax.set_xlabel("time (s)")
    fig.colorbar(im, ax=ax, label="violation level", fraction=0.03, pad=0.01)
    return _save(fig)


def bytes_bars(sizes: dict[str, float]) -> bytes:
    """The bytes of each stream (raw, smoothed, reduced) as bars, with the share of the first."""
    plt = _pyplot()
    names = list(sizes)
    vals = np.array([sizes[n] for n in names]) / 1e6
    fig, ax = plt.subplots(figsize=(7, 0.5 * len(names) + 1.2))
    ax.barh(names, vals, color=["#9ecae1", "#6baed6", "#2171b5"][: len(names)])
    for i, v in enumerate(vals):
        ax.text(v, i, f" {v:.2f} MB ({v / vals[0]:.0%})", va="center", fontsize=8)
    ax.invert_yaxis()
    ax.set_xlim(0, vals.max() * 1.35)
    ax.set_xlabel("MB")
    ax.grid(axis="x", alpha=0.3)
    return _save(fig)
