"""The report of an analysis folder (``perfsift analyze`` or ``perfsift run --report``): one
self-contained HTML page (the PNG figures inlined), which opens from disk without a server.
``perfsift report DIR`` writes it; ``perfsift run --follow --report DIR`` rewrites it every few
seconds with ``live=True`` (the page then reloads itself).

One section per question an analyst opens it with, each a figure first and a short table under
it, or a one-line reason when the folder has no data for it (:data:`SECTIONS`). Files are written
atomically (a temporary file renamed over the old one), so a browser or a reader never sees half a
page.
"""

from __future__ import annotations

import base64
import html
import os
import re
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from perfsift.analysis.figures import band_panels, bytes_bars, heat_strip, png, projection_scatter
from perfsift.analysis.findings import (
    Folder,
    bytes_before_after,
    contract_levels,
    forecast_bands,
    load_folder,
    prediction_stats,
    stood_apart,
)
from perfsift.analysis.plots import kept_spans, plot_predictions, plot_r2, plot_reduction, plot_selection, plot_traces
from perfsift.streams.volume import bytes_table

PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>perfsift report</title>{refresh}
<style>
body {{ font-family: system-ui, sans-serif; margin: 2em auto; max-width: 1100px; color: #222; }}
h1 {{ font-size: 1.5em; }} h2 {{ font-size: 1.15em; margin-top: 2em; }}
table {{ border-collapse: collapse; margin-top: 0.6em; }}
td, th {{ border: 1px solid #ccc; padding: 0.25em 0.6em; text-align: right; }}
th:first-child, td:first-child {{ text-align: left; }} img {{ max-width: 100%; border: 1px solid #eee; }}
td.t {{ text-align: left; }} p.note, p.absent {{ color: #555; }} p.absent {{ font-style: italic; }}
nav a {{ margin-right: 1em; }}
</style></head>
<body data-images="pending">
<h1>perfsift report: {title}</h1>
<p class="note">{subtitle}</p>
<nav>{nav}</nav>
{body}
<script>
window.addEventListener("load", () => {{
  const imgs = [...document.images];
  document.body.dataset.images = imgs.length && imgs.every(i => i.complete && i.naturalWidth > 0) ? "loaded" : "broken";
  for (const s of document.querySelectorAll("section")) {{
    const img = s.querySelector("img");
    s.dataset.figure = !img ? "absent" : img.complete && img.naturalWidth > 0 ? "drawn" : "broken";
  }}
}});
</script>
</body></html>
"""

LIVE_REFRESH = '\n<meta http-equiv="refresh" content="5">'  # live mode only: the page reloads every 5 s
Section = tuple[str, str, str, Callable[[Folder], tuple[bytes, str] | str]]


def _img(data: bytes, alt: str) -> str:
    return f'<img src="data:image/png;base64,{base64.b64encode(data).decode()}" alt="{html.escape(alt)}">'


_NUMBER = re.compile(r"^[-+]?[\d,.–]+\s*%?$|^-$")


def _table(head: list[str], rows: list[list[Any]]) -> str:
    """A table; cells that are not numbers are left-aligned."""
    th = "".join(f"<th>{html.escape(h)}</th>" for h in head)

    def td(c: Any) -> str:
        text = str(c)
        left = "" if isinstance(c, (int, float)) or _NUMBER.match(text) else ' class="t"'
        return f"<td{left}>{html.escape(text)}</td>"

    body = "".join("<tr>" + "".join(td(c) for c in r) + "</tr>" for r in rows)
    return f"<table><tr>{th}</tr>{body}</table>"


def _few(names: list[str], n: int = 4) -> str:
    return ", ".join(names) if len(names) <= n else f"{len(names)}: " + ", ".join(names[:n]) + ", …"


def _t0(f: Folder) -> float:
    starts = [s["period_start"] for s in f.selections] + [r["ts"] for r in f.reduced[:1]]
    starts += [c["ts"] for c in f.contracts[:1]] + [p["ts"] for p in f.forecasts[:1]]
    return min(starts, default=0.0)


def _num(v: float | None, fmt: str = ".3f") -> str:
    return "-" if v is None else format(v, fmt)


# -- the sections: each returns (figure, table html) or the reason it is absent ----------------------
def kept_section(f: Folder) -> tuple[bytes, str] | str:
    pursuit = f.pursuit
    if not pursuit:
        return "No projection-pursuit selections in this folder (no select stage ran)."
    jobs = sorted({r["job"] for r in pursuit})
    fig = png(plot_selection, pursuit, job=jobs[0])
    counts: dict[str, int] = {}
    for r in pursuit:
        for m in r["selected"] if not r.get("skipped") else []:
            counts[m] = counts.get(m, 0) + 1
    rows = [[m, c, f"{c / len(pursuit):.0%}"] for m, c in sorted(counts.items(), key=lambda kv: -kv[1])[:6]]
    empty = [r for r in pursuit if not r.get("skipped") and not r["selected"] and r.get("reason")]
    if empty:
        worst = (
            min(r["p_value"] for r in empty if r.get("p_value") is not None)
            if any(r.get("p_value") is not None for r in empty)
            else None
        )
        rows.append(["(nothing)", len(empty), f"{len(empty) / len(pursuit):.0%}"])
        nothing = (
            f" Nothing was kept in {len(empty)} periods: no metric differed across nodes beyond its own noise"
            + (f" (smallest p = {worst:.2g})" if worst is not None else "")
            + "."
        )
    else:
        nothing = ""
    note = (
        f"<p class='note'>Job {html.escape(jobs[0])}"
        + (f" (of {len(jobs)})" if len(jobs) > 1 else "")
        + html.escape(nothing)
        + "</p>"
    )
    return fig, note + _table(["metric", "periods selected", "share"], rows)


def apart_section(f: Folder) -> tuple[bytes, str] | str:
    with_pos = [r for r in f.pursuit if r.get("node_position") and not r.get("skipped")]
    if not with_pos:
        return "No analysed projection-pursuit period with node positions (records of an older perfsift, or none)."
    best = max(with_pos, key=lambda r: r.get("index") or 0.0)
    t0 = _t0(f)
    rows = []
    for node, periods in list(stood_apart(f.pursuit).items())[:8]:
        when = ", ".join(f"{p['start'] - t0:.0f}" for p in periods[:6]) + (" ..." if len(periods) > 6 else "")
        top = max(periods, key=lambda p: p["z"])
        metrics = ", ".join(f"{m['metric']} {m['deviation']:+.1f}" for m in top["metrics"])
        rows.append([node, len(periods), when, f"{top['z']:.1f}", metrics])
    shown = [
        (
            best,
            f"{best['job']}: the period with the highest index ({best.get('index') or 0:.2f}), "
            f"starting at {best['period_start'] - t0:.0f} s",
        )
    ]
    marked = [r for r in with_pos if r.get("deviants")]
    if marked and not best.get("deviants"):
        worst = max(marked, key=lambda r: r["deviants"][0]["z"])
        shown.append(
            (
                worst,
                f"{worst['job']}: the period in which a node stood apart most, "
                f"starting at {worst['period_start'] - t0:.0f} s",
            )
        )
    caption = "<p class='note'>No node stood apart in any period.</p>" if not rows else ""
    named: dict[str, int] = {}  # named on each period's own rows (deviant_nodes, issue #32)
    for r in f.pursuit:
        for d in r.get("deviant_nodes") or []:
            named[d["node"]] = named.get(d["node"], 0) + 1
    if named:
        most = sorted(named.items(), key=lambda kv: (-kv[1], kv[0]))[:12]
        caption += "<p>Named as they deviated (periods): " + ", ".join(f"{n} ({c})" for n, c in most) + "</p>"
    table = _table(["node", "periods apart", "period starts (s)", "largest z", "differs most in"], rows) if rows else ""
    return projection_scatter(shown), caption + table


def traces_section(f: Folder) -> tuple[bytes, str] | str:
    if not f.reduced:
        return "No reduced stream in this folder."
    fig = png(plot_traces, f.reduced)
    times = sorted({r["ts"] for r in f.reduced})
    span = (times[-1] - times[0]) or 1.0
    metrics = sorted({m for r in f.reduced for m in r["metrics"]})
    share = {m: sum(b - a for a, b in kept_spans(f.reduced, m)) / span for m in metrics}
    some = {m: sum(b - a for a, b in kept_spans(f.reduced, m, every=False)) / span for m in metrics}
    rows = [
        [m, f"{min(share[m], 1.0):.0%}", f"{min(some[m], 1.0):.0%}"] for m in sorted(metrics, key=lambda m: -share[m])
    ]
    return fig, _table(["metric", "time sent by every node", "by some node"], rows)


def forecast_section(f: Folder) -> tuple[bytes, str] | str:
    if not f.forecasts:
        return "No forecasts in this folder (no forecast operator ran)."
    bands = [b for b in forecast_bands(f) if b.scored]
    if not bands:
        return "Forecasts were made, but none of their series was measured in the reduced stream."
    top = bands[:3]
    rows = [[b.node, b.metric, b.scored, b.outside, f"{b.outside / b.scored:.1%}"] for b in bands[:6]]
    total, out = sum(b.scored for b in bands), sum(b.outside for b in bands)
    note = f"<p class='note'>All {len(bands)} series: {out:,} of {total:,} measured values outside ±2σ.</p>"
    return band_panels(top, _t0(f)), _table(["node", "metric", "values with a band", "outside", "share"], rows) + note


def contract_section(f: Folder) -> tuple[bytes, str] | str:
    if not f.contracts:
        return "No contract ran (run or analyze with --contract FILE)."
    levels = contract_levels(f.contracts)
    t0 = _t0(f)
    bad = sorted(((n, v) for n, v in levels.items() if v["violated"]), key=lambda kv: -kv[1]["violated"])
    rows = [
        [n, v["violated"], v["evaluations"], f"{v['first'] - t0:.0f}–{v['last'] - t0:.0f}", v["driver"] or "-"]
        for n, v in bad[:8]
    ]
    note = f"<p class='note'>{len(bad)} of {len(levels)} nodes violated the contract at some time.</p>"
    return heat_strip(levels, t0), note + _table(["node", "violated", "evaluations", "when (s)", "driver"], rows)


def prediction_section(f: Folder) -> tuple[bytes, str] | str:
    if not f.predictions:
        return "No structural model ran (a pipeline stage with a predict operator writes prediction.jsonl)."
    stats = prediction_stats(f.predictions)
    rows = [
        [
            s["output"],
            s["node"],
            s["predictions"],
            _num(s["coverage"], ".0%"),
            _num(s["mean_abs_z"], ".2f"),
            s["violated"],
        ]
        for s in sorted(stats, key=lambda s: -s["violated"])[:8]
    ]
    return png(plot_predictions, f.predictions), _table(
        ["output", "node", "predictions", "inside ±2σ", "mean |z|", "violated"], rows
    )


def reduction_section(f: Folder) -> tuple[bytes, str] | str:
    reds = f.reductions
    if not reds:
        return "No data reduction ran (give a performance metric: --perf-metric M)."
    if not any(r.get("r2_train") is not None for r in reds):
        return f"Data reduction ran but never fitted: {reds[-1].get('skipped') or 'no regression'}."
    t0 = _t0(f)
    main = any((r.get("diagnostics") or {}).get("main_r2") is not None for r in reds)
    rows = [
        [
            f"{r['period_end'] - t0:.0f}",
            _few(r["selected"]),
            _num(r.get("r2_train")),
            _num(r.get("r2_holdout")),
            _num(r.get("rand_r2_mean")),
            _num(r.get("rand_p_value")),
        ]
        + ([_num((r.get("diagnostics") or {}).get("main_r2"))] if main else [])
        for r in reds[-4:]
    ]
    head = ["at (s)", "selected", "R²", "R² held out", "RAND mean R²", "RAND p"] + (["MAIN R²"] if main else [])
    note = (
        ""
        if main
        else "<p class='note'>MAIN (the named main metrics as a baseline) is computed offline only "
        "(perfsift select-metrics --main); the streaming records carry none.</p>"
    )
    return png(plot_r2, f.selections), _table(head, rows) + note


def bytes_section(f: Folder) -> tuple[bytes, str] | str:
    sizes = bytes_before_after(f.summary)
    if sizes is None:
        return "summary.json says nothing about bytes (no summary.json in this folder)."
    stages = f.summary.get("stages") or {}
    rows = [
        [
            n,
            f"{s.get('records_in', 0):,}",
            f"{s.get('records_out', 0):,}",
            f"{s.get('bytes_in', 0) / 1e6:.2f}",
            f"{s.get('bytes_out', 0) / 1e6:.2f}",
            s.get("dead_letters", 0),
        ]
        for n, s in (stages.items() if isinstance(stages, dict) else [])
    ]
    table = _table(["stage", "records in", "records out", "MB in", "MB out", "dead letters"], rows) if rows else ""
    volume = f.summary.get("bytes")
    if isinstance(volume, dict) and volume.get(
        "topics"
    ):  # every topic written, payload and zstd (perfsift run, analyze)
        table += _table(["topic", "MB", "× raw", "MB zstd", "× raw zstd"], [list(r) for r in bytes_table(volume)])
        table += (
            '<p class="note">Payload: the message values; zstd: each topic\'s messages of a micro-batch '
            "compressed together, as a producer compresses a record batch.</p>"
        )
    extra = ""
    if f.reduced:
        extra = _img(png(plot_reduction, f.reduced), "cumulative metric values sent")
    return bytes_bars(sizes), table + extra


#: (anchor, link text, heading, section) in page order
SECTIONS: list[Section] = [
    ("kept", "kept metrics", "Which metrics were kept, and when nodes stood apart", kept_section),
    ("apart", "nodes apart", "Which nodes stand apart on the projection", apart_section),
    ("traces", "traces", "Metric traces per node", traces_section),
    ("forecast", "forecasts", "What comes next: forecasts against what was measured", forecast_section),
    ("contract", "contract", "Is the application meeting its contract", contract_section),
    ("predictions", "predictions", "Model predictions against what was observed", prediction_section),
    ("reduction", "data reduction", "Data reduction: R², RAND and MAIN", reduction_section),
    ("bytes", "bytes", "Bytes before and after", bytes_section),
]


def render(folder: Path, live: bool = False) -> str:
    """The page for ``folder`` as HTML text."""
    f = load_folder(folder)
    if f.empty() and live:
        return PAGE.format(
            title=html.escape(folder.name),
            refresh=LIVE_REFRESH,
            subtitle="Live: waiting for the pipeline's first outputs; this page reloads itself.",
            nav="",
            body="",
        )
    if f.empty():
        raise FileNotFoundError(f"{folder}: no selection.jsonl, reduced.jsonl or contract.jsonl to report on")
    parts = []
    for anchor, _, heading, make in SECTIONS:
        got = make(f)
        inner = f'<p class="absent">{html.escape(got)}</p>' if isinstance(got, str) else _img(got[0], heading) + got[1]
        parts.append(f'<section id="{anchor}"><h2>{html.escape(heading)}</h2>{inner}</section>')
    nav = "".join(f'<a href="#{a}">{html.escape(link)}</a>' for a, link, _, _ in SECTIONS)
    subtitle = f"Made by perfsift from {html.escape(str(folder))}" + (
        "; live: rewritten every few seconds while the pipeline runs, this page reloads itself." if live else "."
    )
    return PAGE.format(
        title=html.escape(folder.name),
        refresh=LIVE_REFRESH if live else "",
        subtitle=subtitle,
        nav=nav,
        body="\n".join(parts),
    )


def write_atomic(path: Path, data: bytes) -> None:
    """Write ``path`` by renaming a finished temporary file over it (readers see old or new)."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def build_report(folder: Path, target: Path | None = None, live: bool = False) -> Path:
    """Write the self-contained ``report.html`` of ``folder`` (atomically); returns its path."""
    page = target or folder / "report.html"
    write_atomic(page, render(folder, live).encode())
    return page
