"""``perfsift analyze`` and ``perfsift report``: the whole pipeline over an archived trace in one
process, its outputs as files, and the HTML report of such a folder."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import orjson
import typer
from perfsift.cli.ui import counting_progress, fail, out, pipeline_from_flags
from perfsift.schemas import RecordError
from perfsift.streams.presets import with_options
from rich.table import Table


def analyze_command(
    trace: Annotated[Path, typer.Argument(help="Trace: SDDF, CSV or JSONL.", exists=True, dir_okay=False)],
    out_dir: Annotated[Path, typer.Option("--out", "-o", help="Folder for the outputs and summary.json.")],
    config: Annotated[
        Path | None, typer.Option("--config", "-c", help="Pipeline YAML (default: the packaged one).")
    ] = None,
    perf_metric: Annotated[str | None, typer.Option(help="Also run statistical data reduction on this metric.")] = None,
    contract: Annotated[
        Path | None,
        typer.Option(help="Also check this contract (perfsift contract derive).", exists=True, dir_okay=False),
    ] = None,
    sddf: Annotated[bool, typer.Option("--sddf", help="Write the reduced stream as SDDF too (reduced.sddf).")] = False,
) -> None:
    """Run the whole pipeline over an archived trace in one process (no broker): the same records a
    streaming run publishes, as files in OUT, plus a summary."""
    from perfsift.analysis.analyze import analyze

    cfg = with_options(pipeline_from_flags(config), perf_metric, contract)
    progress = counting_progress()
    try:
        with progress:
            task = progress.add_task(f"analysing {trace.name}", total=None)
            summary = analyze(trace, cfg, out_dir, sddf=sddf, on_chunk=lambda n: progress.update(task, completed=n))
    except (RecordError, ValueError) as exc:
        raise fail(str(exc)) from None
    t = Table(title=f"perfsift analyze {trace.name}: {summary['samples']:,} samples in {summary['elapsed_s']:.1f} s")
    for col in ("stage", "in", "out", "MB in", "MB out", "s"):
        t.add_column(col, justify="left" if col == "stage" else "right")
    for name, s in summary["stages"].items():
        t.add_row(
            name,
            f"{s['records_in']:,}",
            f"{s['records_out']:,}",
            f"{s['bytes_in'] / 1e6:.2f}",
            f"{s['bytes_out'] / 1e6:.2f}",
            f"{s['seconds']:.2f}",
        )
    out.print(t)
    if summary["reduction_ratio"] is not None:
        out.print(
            f"reduced stream: {summary['reduction_ratio']:.1%} of the smoothed metric values, "
            f"{summary['reduction_ratio_vs_raw']:.1%} of the raw bytes"
        )
    b = summary["bytes"]
    out.print(
        f"bytes written (state snapshots not included offline): {b['bytes_written_ratio']:.3f} x raw, "
        f"{b['bytes_written_compressed_ratio']:.3f} x raw zstd-compressed"
    )
    for job, j in summary["jobs"].items():
        kept = ", ".join(j["kept"] or ["everything"])
        out.print(
            f"  {job}: kept {kept} (selection version {j['selection_version']}); "
            f"{j['values_out']:,} of {j['values_in']:,} values"
        )
    for job, named in named_nodes(out_dir / "selection.jsonl").items():
        out.print(f"  {job}: nodes named as they deviated (periods): " + ", ".join(f"{n} ({c})" for n, c in named[:8]))
    out.print(f"outputs in {out_dir}: " + ", ".join(sorted(p.name for p in out_dir.iterdir())))


def named_nodes(selections: Path) -> dict[str, list[tuple[str, int]]]:
    """Per job, the nodes the pursuit records name as deviating (``deviant_nodes``) and in how many
    periods, most often first."""
    counts: dict[str, dict[str, int]] = {}
    if selections.exists():
        for line in selections.read_bytes().splitlines():
            r = orjson.loads(line)
            for d in r.get("deviant_nodes") or []:
                job = counts.setdefault(r["job"], {})
                job[d["node"]] = job.get(d["node"], 0) + 1
    return {job: sorted(c.items(), key=lambda kv: (-kv[1], kv[0])) for job, c in counts.items()}


def report_command(
    folder: Annotated[
        Path,
        typer.Argument(
            help="Folder written by perfsift analyze or perfsift run --report.", exists=True, file_okay=False
        ),
    ],
) -> None:
    """One self-contained HTML page: kept metrics, nodes that stand apart, traces, forecasts,
    contract, predictions, data reduction, bytes (a figure and a table each)."""
    from perfsift.analysis.report import build_report

    try:
        page = build_report(folder)
    except FileNotFoundError as exc:
        raise fail(str(exc)) from None
    out.print(f"report written to {page} (open it in a browser)")
