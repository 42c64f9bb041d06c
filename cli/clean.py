"""``perfsift clean``, ``perfsift quality`` and ``perfsift kb``: cleaning archived traces, measuring
the effect with DTW, and the knowledge base."""

from __future__ import annotations

import itertools
import os
from collections import Counter
from pathlib import Path
from typing import Annotated, Any

import numpy as np
import typer
from perfsift.cli.ui import console, counting_progress, fail, out, pipeline_from_flags
from perfsift.producers.traces import iter_samples
from perfsift.schemas import RecordError, encode_batch, samples_to_batch
from perfsift.streams.knowledge import KnowledgeBase, clean_params
from rich.table import Table


def default_kb() -> str:
    base = Path(os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share") / "perfsift"
    return str(base / "kb.sqlite")


KbOpt = Annotated[
    str | None,
    typer.Option("--db", envvar="PERFSIFT_KB", help="Knowledge base: SQLite path or postgresql:// DSN."),
]


def _kb_location(db: str | None) -> str:
    loc = db or default_kb()
    if "://" not in loc:
        Path(loc).parent.mkdir(parents=True, exist_ok=True)
    return loc


def _clean_params(config: Path | None) -> dict[str, Any]:
    """The clean operator's parameters from the pipeline file (the first ``clean`` operator)."""
    cfg = pipeline_from_flags(config)
    for st in cfg.stages.values():
        for op in st.operators:
            if op.type == "clean":
                return dict(op.params)
    return {}


def clean_command(
    trace: Annotated[Path, typer.Argument(help="Trace: SDDF, CSV or JSONL.", exists=True, dir_okay=False)],
    out_file: Annotated[Path, typer.Option("--out", "-o", help="Clean records, one JSON line per sample.")],
    config: Annotated[
        Path | None, typer.Option("--config", "-c", help="Pipeline YAML whose clean settings to use.")
    ] = None,
    mode: Annotated[str | None, typer.Option(help="predict (default), window, hampel, ewma or none.")] = None,
    hampel_mode: Annotated[
        str | None,
        typer.Option(help="Hampel window: causal (default) or centred on the value (reads the whole trace at once)."),
    ] = None,
    action: Annotated[str | None, typer.Option(help="flag, clip, replace, drop, trim_log or trim_sqrt.")] = None,
    impute: Annotated[str | None, typer.Option(help="knn, last, mean or none.")] = None,
    k: Annotated[
        float | None, typer.Option(help="Threshold in (robust) standard deviations (default 4.5 predict, 3 others).")
    ] = None,
    kb: Annotated[str | None, typer.Option(help="Knowledge base with historical maxima and training data.")] = None,
    app: Annotated[str | None, typer.Option(help="Application name in the knowledge base.")] = None,
    platform: Annotated[str | None, typer.Option(help="Knowledge-base key: platform (default '').")] = None,
    workload: Annotated[str | None, typer.Option(help="Knowledge-base key: workload class (default '').")] = None,
    interval: Annotated[
        float | None, typer.Option(help="Knowledge-base key: sampling interval, s (default: any).")
    ] = None,
) -> None:
    """Clean an archived trace with the pipeline's clean operator: outliers handled, gaps imputed,
    every change reported in the record's flags; prints what was flagged per metric."""
    params = _clean_params(config)
    given = {
        "mode": mode,
        "hampel_mode": hampel_mode,
        "action": action,
        "impute": impute,
        "k": k,
        "kb": kb,
        "app": app,
        "platform": platform,
        "workload": workload,
        "interval": interval,
    }
    for name, value in given.items():
        if value is not None:
            params[name] = value
    try:
        from perfsift.operators import Clean  # here: it loads numba

        op = Clean(**clean_params(params))
    except (TypeError, ValueError, RuntimeError) as exc:
        raise fail(f"clean settings: {exc}") from None
    errors: list[RecordError] = []
    counts: Counter[tuple[str, str]] = Counter()
    seen: Counter[str] = Counter()
    n = 0
    samples = iter_samples(trace, on_error=errors.append)
    progress = counting_progress()
    try:
        with out_file.open("wb") as fh, progress:
            task = progress.add_task(f"cleaning {trace.name}", total=None)
            # the centred Hampel window needs each value's successors: the whole trace in one batch
            size = None if op.mode == "hampel" and op.hampel_mode == "centred" else 5000
            while chunk := list(itertools.islice(samples, size)):
                batch = op.update(samples_to_batch(chunk))
                for line in encode_batch(batch):
                    fh.write(line + b"\n")
                for flags in batch.extra["flags"]:
                    for f in flags or ():
                        counts[(f["metric"], f["rule"])] += 1
                for j, m in enumerate(batch.metrics):
                    seen[m] += int((~np.isnan(batch.values[:, j])).sum())
                n += len(batch)
                progress.update(task, completed=n)
    except RecordError as exc:
        raise fail(str(exc)) from None
    table = Table(title=f"{trace.name}: {n:,} samples cleaned → {out_file}")
    rules = sorted({r for _, r in counts})
    table.add_column("metric")
    for r in rules:
        table.add_column(r, justify="right")
    for m in sorted({m for m, _ in counts}):
        table.add_row(m, *(f"{counts[(m, r)]:,}" if counts[(m, r)] else "" for r in rules))
    out.print(table if counts else f"{n:,} samples cleaned → {out_file}; nothing flagged")
    if errors:
        out.print(f"{len(errors)} bad records skipped, e.g. {errors[0]}")


def _series(path: Path) -> dict[tuple[str, str], np.ndarray]:
    """(node, metric) -> values in time order."""
    batch = samples_to_batch(iter_samples(path))
    order = np.lexsort((batch.ts, batch.node_idx))
    nodes = batch.node_names()
    out: dict[tuple[str, str], np.ndarray] = {}
    for node in sorted(set(nodes)):
        rows = order[[nodes[i] == node for i in order]]
        for j, m in enumerate(batch.metrics):
            v = batch.values[rows, j]
            out[(node, m)] = v[~np.isnan(v)]
    return out


def quality_command(
    test: Annotated[Path, typer.Argument(help="The processed (e.g. cleaned) trace.", exists=True, dir_okay=False)],
    ref1: Annotated[Path, typer.Argument(help="Reference trace (clean).", exists=True, dir_okay=False)],
    ref2: Annotated[
        Path, typer.Argument(help="An independent clean repeat of the reference.", exists=True, dir_okay=False)
    ],
    metric: Annotated[list[str] | None, typer.Option("--metric", "-m", help="Only these metrics.")] = None,
    band: Annotated[int | None, typer.Option(help="Sakoe–Chiba band (samples).")] = None,
    zscore: Annotated[bool, typer.Option(help="Normalise each series first.")] = False,
) -> None:
    """Zhu's quality measure per (node, metric): Diff = (DTW(TEST, REF1) − DTW(REF1, REF2)) /
    DTW(REF1, REF2); smaller is better, 0 = as close as two clean runs."""
    from perfsift.analysis.quality import diff, dtw  # here: they load numba

    try:
        a, r1, r2 = _series(test), _series(ref1), _series(ref2)
    except RecordError as exc:
        raise fail(str(exc)) from None
    keys = sorted(k for k in a if k in r1 and k in r2 and (not metric or k[1] in metric))
    if not keys:
        raise fail("no (node, metric) series in common between the three traces")
    table = Table(title=f"DTW quality of {test.name} against {ref1.name} (reference pair: {ref2.name})")
    for col in ("node", "metric", "D_test", "D_ref", "Diff"):
        table.add_column(col, justify="left" if col in ("node", "metric") else "right")
    diffs = []
    norm = "zscore" if zscore else "none"
    for node, m in keys:
        d_test = dtw(a[(node, m)], r1[(node, m)], band=band, normalize=norm)
        d_ref = dtw(r2[(node, m)], r1[(node, m)], band=band, normalize=norm)
        d = diff(d_test, d_ref)
        diffs.append(d)
        table.add_row(node, m, f"{d_test:.4g}", f"{d_ref:.4g}", f"{d:+.3f}")
    out.print(table)
    finite = [d for d in diffs if np.isfinite(d)]
    out.print(f"median Diff {np.median(finite):+.3f} over {len(finite)} series" if finite else "no finite Diff")


KB_COLUMNS = ("run", "app", "platform", "workload", "interval", "samples", "events", "start", "end", "source")
kb_app = typer.Typer(help="The knowledge base: recorded runs, their events' statistics and data.", no_args_is_help=True)


@kb_app.command("add")
def kb_add(
    trace: Annotated[
        Path, typer.Argument(help="A validated clean run: SDDF, CSV or JSONL.", exists=True, dir_okay=False)
    ],
    app: Annotated[str, typer.Option(help="Application (workload) name.")],
    db: KbOpt = None,
    platform: Annotated[str, typer.Option(help="Platform the run was measured on (part of the key).")] = "",
    workload: Annotated[str, typer.Option(help="Workload class (part of the key).")] = "",
    interval: Annotated[
        float | None, typer.Option(help="Sampling interval in s (part of the key; default: from the samples).")
    ] = None,
) -> None:
    """Record a run under its key (application, platform, workload class, interval): its events'
    min/max/mean/sd (the primary table) and its samples."""
    loc = _kb_location(db)
    try:
        with KnowledgeBase(loc) as kb, console.status(f"adding {trace.name}"):
            run = kb.add_run(app, iter_samples(trace), str(trace), platform, workload, interval)
            events = kb.events(run)
    except (RecordError, RuntimeError) as exc:
        raise fail(str(exc)) from None
    out.print(f"run {run} of {app}: {len(events)} events recorded in {loc}")


@kb_app.command("list")
def kb_list(db: KbOpt = None) -> None:
    """The recorded runs."""
    with KnowledgeBase(_kb_location(db)) as kb:
        runs = kb.runs()
    t = Table(title="knowledge base runs")
    for col in KB_COLUMNS:  # the key's columns keep their width; the rest folds on a narrow terminal
        key = col in ("app", "platform", "workload", "interval")
        t.add_column(col, min_width=max([len(col), *(len(str(r[col])) for r in runs)]) if key else None)
    for r in runs:
        t.add_row(
            *(
                str(r[c]) if r[c] is not None else "-"
                for c in (
                    "run",
                    "app",
                    "platform",
                    "workload",
                    "interval",
                    "samples",
                    "events",
                    "start",
                    "end",
                    "source",
                )
            )
        )
    out.print(t)


@kb_app.command("show")
def kb_show(run: Annotated[int, typer.Argument(help="Run id (see kb list).")], db: KbOpt = None) -> None:
    """One run's events: count, min, max, mean, sd."""
    with KnowledgeBase(_kb_location(db)) as kb:
        events = kb.events(run)
    if not events:
        raise fail(f"no run {run}")
    t = Table(title=f"run {run}")
    for col in ("event", "n", "min", "max", "mean", "sd"):
        t.add_column(col, justify="left" if col == "event" else "right")
    for e in events:
        t.add_row(e["event"], str(e["n"]), *(f"{e[c]:.6g}" for c in ("min", "max", "mean", "sd")))
    out.print(t)
