"""The report of an analysis folder (``perfsift analyze`` or ``perfsift run --report``): an HTML
page with the stages' counts and PNG plots (:mod:`perfsift.streams.plots`), which opens from disk,
without a server. ``perfsift report DIR`` writes it."""

from __future__ import annotations

import html
from pathlib import Path
from typing import Any

import orjson
from perfsift.streams.plots import plot_r2, plot_reduction, plot_selection, plot_traces, plot_violations
from perfsift.streams.volume import bytes_table

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


def bytes_section(volume: dict[str, Any]) -> str:
    """The bytes each topic was written, payload and zstd-compressed, as a ratio to perf.raw's."""
    rows = "".join(f"<tr><td>{html.escape(r[0])}</td>" + "".join(f"<td>{c}</td>" for c in r[1:]) + "</tr>"
                   for r in bytes_table(volume))  # fmt: skip
    return (
        "<h2>Bytes written</h2><table><tr><th>topic</th><th>MB</th><th>× raw</th><th>MB zstd</th>"
        f'<th>× raw zstd</th></tr>{rows}</table><p class="note">Payload: the message values; zstd: '
        "each topic's messages of a micro-batch compressed together, as a producer compresses a record batch.</p>"
    )


def build_report(folder: Path, target: Path | None = None) -> Path:
    """Write ``report.html`` and its PNGs into ``folder``; returns the page's path."""
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
            + (f"<p>The reduced stream carries <b>{ratio:.1%}</b> of the smoothed metric values.</p>" if ratio else "")
        )
    if summary.get("bytes"):
        parts.append(bytes_section(summary["bytes"]))
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
    if any(s["kind"] == "reduction" for s in selections):
        plot_r2(selections, folder / "r2.png")
        parts.append('<h2>Data reduction: R² and reduction degree</h2><img src="r2.png" alt="R2 and RD">')
    if contracts:
        plot_violations(contracts, folder / "violations.png")
        parts.append('<h2>Contract violations</h2><img src="violations.png" alt="contract violations">')
    parts.append(f'<p class="note">Made by perfsift from {html.escape(str(folder))}.</p>')
    page = target or folder / "report.html"
    page.write_text(PAGE.format(title=html.escape(folder.name), body="\n".join(parts)))
    return page
