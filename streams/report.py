"""``perfsift report DIR``: an HTML page with PNG plots of an analysis folder (``perfsift analyze``
or ``perfsift run --report``). It opens from disk, without a server."""

from __future__ import annotations

import html
from pathlib import Path
from typing import Annotated, Any

import numpy as np
import orjson
import typer
from perfsift.streams.ui import fail, out

PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>perfsift report</title>
<style>
body {{ font-family: system-ui, sans-serif; margin: 2em auto; max-width: 1100px; color: #222; }}
h1 {{ font-size: 1.5em; }} h2 {{ font-size: 1.15em; margin-top: 2em; }}
table {{ border-collapse: collapse; }} td, th {{ border: 1px solid #ccc; padding: 0.25em 0.6em; text-align: right; }}
th:first-child, td:first-child {{ text-align: left; }} img {{ max-width: 100%; border: 1px solid #eee; }}
p.note {{ color: #555; }}
</style></head>
<body data-images="pending">
<h1>perfsift report: {title}</h1>
{body}
<script>
window.addEventListener("load", () => {{
  const imgs = [...document.images];
  document.body.dataset.images = imgs.length && imgs.every(i => i.complete && i.naturalWidth > 0) ? "loaded" : "broken";
}});
</script>
</body></html>
"""


def _jsonl(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [orjson.loads(line) for line in path.read_bytes().splitlines() if line.strip()]


def _plt() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_traces(reduced: list[dict[str, Any]], path: Path, max_metrics: int = 6) -> None:
    """Metric values per node over time (from the reduced stream: full samples and kept metrics)."""
    plt = _plt()
    counts: dict[str, int] = {}
    for r in reduced:
        for m in r["metrics"]:
            counts[m] = counts.get(m, 0) + 1
    metrics = sorted(counts, key=lambda m: -counts[m])[:max_metrics]
    t0 = min(r["ts"] for r in reduced)
    fig, axes = plt.subplots(len(metrics), 1, figsize=(10, 1.8 * len(metrics) + 0.6), sharex=True, squeeze=False)
    nodes = sorted({r["node"] for r in reduced})
    for ax, m in zip(axes[:, 0], metrics, strict=True):
        for node in nodes[:16]:
            pts = [
                (r["ts"] - t0, r["metrics"][m])
                for r in reduced
                if r["node"] == node and r["metrics"].get(m) is not None
            ]
            if pts:
                xs, ys = zip(*pts, strict=True)
                ax.plot(xs, ys, lw=0.7)
        ax.set_ylabel(m, fontsize=8)
        ax.grid(alpha=0.3)
    axes[-1, 0].set_xlabel(f"time (s); {min(len(nodes), 16)} of {len(nodes)} nodes")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def plot_reduction(reduced: list[dict[str, Any]], path: Path) -> None:
    """Cumulative metric values sent on perf.reduced against sending every metric (cf. Figure 18)."""
    plt = _plt()
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


def plot_r2(selections: list[dict[str, Any]], path: Path) -> None:
    """R² and reduction degree of the data-reduction selections over time."""
    plt = _plt()
    recs = [s for s in selections if s["kind"] == "reduction" and s.get("r2") is not None]
    t0 = recs[0]["period_end"]
    fig, ax = plt.subplots(figsize=(7, 3.2))
    ax.plot([r["period_end"] - t0 for r in recs], [r["r2"] for r in recs], marker="o", label="R²")
    ax.plot(
        [r["period_end"] - t0 for r in recs],
        [r["reduction_degree"] for r in recs],
        marker="s",
        label="reduction degree",
    )
    ax.set_ylim(0, 1.05)
    ax.set_xlabel("time (s)")
    ax.legend()
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def build_report(folder: Path, target: Path | None = None) -> Path:
    """Write ``report.html`` and its PNGs into ``folder``; returns the page's path."""
    from perfsift.streams.pursuit_tool import plot_selection
    from perfsift.streams.tools import plot_violations

    summary = orjson.loads((folder / "summary.json").read_bytes()) if (folder / "summary.json").exists() else {}
    selections = _jsonl(folder / "selection.jsonl")
    reduced = _jsonl(folder / "reduced.jsonl")
    contracts = _jsonl(folder / "contract.jsonl")
    if not (selections or reduced or contracts):
        raise FileNotFoundError(f"{folder}: no selection.jsonl, reduced.jsonl or contract.jsonl to report on")
    parts: list[str] = []
    if summary.get("stages"):
        rows = "".join(
            f"<tr><td>{html.escape(name)}</td><td>{s['records_in']:,}</td><td>{s['records_out']:,}</td>"
            f"<td>{s['bytes_in'] / 1e6:.2f}</td><td>{s['bytes_out'] / 1e6:.2f}</td>"
            f"<td>{s.get('dead_letters', 0)}</td></tr>"
            for name, s in summary["stages"].items()
        )
        ratio = summary.get("reduction_ratio")
        parts.append(
            "<h2>Stages</h2><table><tr><th>stage</th><th>records in</th><th>records out</th><th>MB in</th>"
            f"<th>MB out</th><th>dead letters</th></tr>{rows}</table>"
            + (f"<p>The reduced stream carries <b>{ratio:.1%}</b> of the smoothed bytes.</p>" if ratio else "")
        )
    if reduced:
        plot_traces(reduced, folder / "traces.png")
        parts.append('<h2>Metric traces per node</h2><img src="traces.png" alt="metric traces">')
        plot_reduction(reduced, folder / "reduction.png")
        parts.append('<h2>Cumulative data reduction</h2><img src="reduction.png" alt="cumulative data reduction">')
    pursuit = [s for s in selections if s["kind"] == "pursuit"]
    for job in sorted({s["job"] for s in pursuit}):
        name = f"selection-{job}.png".replace("/", "_")
        plot_selection(pursuit, folder / name, job)
        parts.append(
            f'<h2>Projection pursuit selections: {html.escape(job)}</h2><img src="{name}" alt="selection map">'
        )
    if any(s["kind"] == "reduction" and s.get("r2") is not None for s in selections):
        plot_r2(selections, folder / "r2.png")
        parts.append('<h2>Data reduction: R² and reduction degree</h2><img src="r2.png" alt="R2 and RD">')
    if contracts:
        plot_violations(contracts, folder / "violations.png")
        parts.append('<h2>Contract violations</h2><img src="violations.png" alt="contract violations">')
    parts.append(f'<p class="note">Made by perfsift from {html.escape(str(folder))}.</p>')
    page = target or folder / "report.html"
    page.write_text(PAGE.format(title=html.escape(folder.name), body="\n".join(parts)))
    return page


def report_command(
    folder: Annotated[
        Path,
        typer.Argument(
            help="Folder written by perfsift analyze or perfsift run --report.", exists=True, file_okay=False
        ),
    ],
) -> None:
    """An HTML report with plots (traces, selection map, data reduction, contract violations)."""  # fmt: skip
    try:
        page = build_report(folder)
    except FileNotFoundError as exc:
        raise fail(str(exc)) from None
    out.print(f"report written to {page} (open it in a browser)")
