"""``perfsift pursuit TRACE``: dynamic projection pursuit over an archived trace, offline.

Smooths the trace (sliding mean over ``--window`` samples per node and metric, as the pipeline's
node stage does), runs :class:`~perfsift.operators.pursuit.pursuit.ProjectionPursuit` period by period and
writes one selection record per period; prints a compact timeline and can draw the selection
matrix of Vetter & Reed's Figure 8 (metrics × periods, marks where selected).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import numpy as np
import typer
from perfsift.analysis.plots import plot_selection
from perfsift.cli.ui import console, fail, out, read_trace, write_jsonl
from rich.progress import Progress
from rich.table import Table

if TYPE_CHECKING:  # the operators load numba: imported by the functions that use them
    from perfsift.operators import Batch, ProjectionPursuit


def run_pursuit(batch: Batch, op: ProjectionPursuit, window: int, show_progress: bool = True) -> list[dict[str, Any]]:
    """Smooth ``batch`` and feed it to ``op`` in event-time order, a few periods at a time (so the
    progress bar moves); closes the last period at the end."""
    from perfsift.operators import SlidingMean

    smoothed = SlidingMean(window=window).update(batch.take(np.argsort(batch.ts, kind="stable")))
    ts = smoothed.ts
    first, last = np.floor(ts.min() / op.period), np.floor(ts.max() / op.period)
    edges = np.arange(first, last + 2, 5) * op.period  # five periods per step
    cuts = np.searchsorted(ts, edges[1:-1], side="left")
    records: list[dict[str, Any]] = []
    with Progress(console=console, transient=True, disable=not show_progress) as bar:
        task = bar.add_task("projection pursuit", total=int(last - first + 1))
        for chunk in np.split(np.arange(len(ts)), cuts):
            if len(chunk):
                records += op.update(smoothed.take(chunk))
            bar.update(task, completed=len(records))
        records += op.flush()
        bar.update(task, completed=len(records))
    return records


def timeline_table(records: list[dict[str, Any]], title: str) -> Table:
    """One row per period: start (s from the first), index, selected metrics, rows and d, or why skipped."""
    t = Table(title=title)
    many = len({r["job"] for r in records}) > 1
    for col in ("job", "period (s)", "index", "selected", "stand apart", "rows", "d", "note"):
        if col != "job" or many:
            t.add_column(col, no_wrap=col not in ("note", "selected", "stand apart"))
    t0 = min((r["period_start"] for r in records), default=0.0)
    for r in records:
        d = r["diagnostics"]
        fresh = r["skipped"] is None
        t.add_row(
            *([r["job"]] if many else []),
            f"{r['period_start'] - t0:.0f}–{r['period_end'] - t0:.0f}",
            f"{r['index']:.3f}" if fresh and r["index"] is not None else "-",
            ", ".join(r["selected"]) if fresh else "[dim](" + ", ".join(r["selected"]) + ")[/dim]",
            apart_text(r),
            str(d.get("rows", "-")),
            str(d.get("d", "-")),
            ("[yellow]skipped:[/yellow] " + r["skipped"]) if not fresh else _note(r, d),
        )
    return t


def apart_text(record: dict[str, Any]) -> str:
    """The nodes of a selection record that stand apart: ``n05 z=7.6 (disk_pwrite +846)``, one per line."""
    lines = []
    for d in record.get("deviant_nodes") or []:  # named on this period's own rows (name_nodes)
        why = ", ".join(f"{m['metric']} {m['kind']} z={m['z']:+.1f}" for m in d["metrics"][:2])
        lines.append(f"{d['node']} named ({why})")
    for d in record.get("deviants") or []:
        top = ", ".join(f"{m['metric']} {m['deviation']:+.1f}" for m in d["metrics"][:2])
        lines.append(f"{d['node']} z={d['z']:.1f}" + (f" ({top})" if top else ""))
    return "\n".join(lines)


def _note(r: dict[str, Any], d: dict[str, Any]) -> str:
    """A fresh period's flags, and when it kept nothing, why (with its p-value)."""
    flags = _flags(d)
    if r.get("reason") and not r["selected"]:
        return (flags + "; " if flags else "") + r["reason"]
    return flags


def _flags(d: dict[str, Any]) -> str:
    notes = [k for k in ("low_power", "truncated", "unstable_optimum") if d.get(k)]
    if d.get("trimmed_rows"):
        notes.append(f"{d['trimmed_rows']} rows trimmed")
    return ", ".join(notes)


def pursuit(
    trace: Annotated[Path, typer.Argument(help="Trace (SDDF, CSV or JSONL).", exists=True, dir_okay=False)],
    window: Annotated[int, typer.Option("--window", "-w", help="Smoothing window w (samples).")] = 5,
    period: Annotated[float, typer.Option("--period", "-p", help="Update period τ (seconds of event time).")] = 30.0,
    restarts: Annotated[int, typer.Option(help="Random restarts per period (plus one warm start).")] = 10,
    rows: Annotated[str, typer.Option(help="stacked (h snapshots per node) or processors (the paper).")] = "stacked",
    dims: Annotated[int, typer.Option(help="Projection dimension: 1, 2 or 3.")] = 3,
    rounds: Annotated[
        int, typer.Option(help="Repeated PP: remove the winners (and metrics with |r| > 0.95 to them), run again.")
    ] = 1,
    trim: Annotated[str, typer.Option(help="auto, none, log, sqrt or remove.")] = "auto",
    seed: Annotated[int, typer.Option(help="Seed of the random restarts.")] = 0,
    z_threshold: Annotated[
        float, typer.Option("--z-threshold", help="Robust z at which a node stands apart on the projection.")
    ] = 3.0,
    alpha: Annotated[
        float,
        typer.Option(
            help="Keep a metric only when its nodes differ beyond their own noise at this level (1: no evidence)."
        ),
    ] = 0.01,
    norm: Annotated[
        str,
        typer.Option(
            "--norm", help="Snapshots relative to the nodes: noise (default), centre, scale (the paper), none."
        ),
    ] = "noise",
    json_out: Annotated[Path | None, typer.Option("--json", help="Write one selection record per line.")] = None,
    plot: Annotated[Path | None, typer.Option("--plot", help="Draw the selection matrix (PNG).")] = None,
) -> None:
    """Dynamic projection pursuit over a trace: which metrics differ interestingly across nodes,
    period by period (METHODS.md §1)."""
    from perfsift.operators import ProjectionPursuit

    try:
        op = ProjectionPursuit(
            period=period,
            window=window,
            row_mode=rows,
            restarts=restarts,
            dims=dims,
            rounds=rounds,
            trim=trim,
            seed=seed,
            z_threshold=z_threshold,
            alpha=alpha,
            snapshot_norm=norm,
        )  # the parameters are checked as the state is first set up, at construction
    except ValueError as exc:
        raise fail(str(exc)) from None
    batch = read_trace(trace)
    records = run_pursuit(batch, op, window)
    if json_out:
        write_jsonl(json_out, records)
    out.print(timeline_table(records, f"projection pursuit over {trace.name} (w={window}, τ={period:g} s)"))
    done = [r for r in records if r["skipped"] is None]
    counts: dict[str, int] = {}
    for r in done:
        for m in r["selected"]:
            counts[m] = counts.get(m, 0) + 1
    top = sorted(counts.items(), key=lambda kv: -kv[1])[:6]
    apart: dict[str, int] = {}
    for r in done:
        for d in r.get("deviants") or []:
            apart[d["node"]] = apart.get(d["node"], 0) + 1
    named: dict[str, int] = {}
    for r in records:
        for d in r.get("deviant_nodes") or []:
            named[d["node"]] = named.get(d["node"], 0) + 1
    out.print(
        f"{len(records)} periods, {len(done)} analysed, {len(records) - len(done)} skipped; most often selected: "
        + (", ".join(f"{m} ({c})" for m, c in top) or "nothing")
        + f"; nothing differed in {sum(not r['selected'] for r in done)}"
        + "; nodes that stood apart: "
        + (", ".join(f"{n} ({c} period{'s' if c > 1 else ''})" for n, c in sorted(apart.items())) or "none")
        + "; nodes named as they deviated (most often first): "
        + (", ".join(f"{n} ({c})" for n, c in sorted(named.items(), key=lambda kv: -kv[1])[:8]) or "none")
    )
    if plot:
        for job in sorted({r["job"] for r in records}):
            target = (
                plot if len({r["job"] for r in records}) == 1 else plot.with_name(f"{plot.stem}-{job}{plot.suffix}")
            )
            plot_selection(records, target, job)
            out.print(f"plot written to {target}")
