"""``perfsift predict`` and ``perfsift balance``: structural performance models on archived traces."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import numpy as np
import typer
from perfsift.cli.ui import console, fail, out, read_trace, write_jsonl
from perfsift.models.expressions import ModelError
from perfsift.models.structural import METHODS, StructuralModel
from rich.table import Table

ModelArg = Annotated[str, typer.Argument(help="Model file (YAML) or the name of a bundled model (sor).")]


def _model(name: str) -> StructuralModel:
    from perfsift.operators.predict import load_model

    try:
        return load_model(name)
    except ModelError as exc:
        raise fail(str(exc)) from None


def predict_command(
    model: ModelArg,
    trace: Annotated[Path, typer.Option(help="Trace (SDDF, CSV or JSONL) with the model's metrics.", exists=True)],
    json_out: Annotated[Path | None, typer.Option("--json", help="Write one JSON line per prediction.")] = None,
    method: Annotated[str, typer.Option(help=f"{' | '.join(METHODS)}.")] = "auto",
    samples: Annotated[int, typer.Option(help="Monte Carlo draws per prediction.")] = 2000,
    seed: Annotated[int, typer.Option(help="Random seed (Monte Carlo).")] = 0,
    tolerance_sigma: Annotated[
        float, typer.Option(help="Deviation in sigmas that is distance 1 for the contract.")
    ] = 2.0,
    plot: Annotated[Path | None, typer.Option(help="PNG: observed against the predicted ±2σ band.")] = None,
) -> None:
    """Predict a structural model's outputs at every timestamp of a trace from the forecasts of
    its metrics made before it; compare with the observed values where the model names them."""
    from perfsift.analysis.plots import plot_predictions
    from perfsift.operators.predict import ModelPredictor, summarize

    m = _model(model)
    if method not in METHODS:
        raise fail(f"--method is one of {', '.join(METHODS)}, got {method!r}")
    batch = read_trace(trace)
    missing = [x for x in m.metrics() if x not in batch.metrics]
    params = {p.metric for p in m.parameters.values() if p.metric}
    if params & set(missing):
        raise fail(
            f"{trace}: the model needs metric(s) {sorted(params & set(missing))}; the trace has "
            f"{', '.join(batch.metrics)}"
        )
    op = ModelPredictor(m.source, method=method, samples=samples, seed=seed, tolerance_sigma=tolerance_sigma)
    # chunks of about 50 timestamps, cut where the time changes (a timestamp is never split)
    order = np.argsort(batch.ts, kind="stable")
    starts = np.flatnonzero(np.r_[True, np.diff(batch.ts[order]) != 0])
    cuts = starts[50::50]
    records: list[dict[str, Any]] = []
    with console.status("predicting") as status:
        for i, chunk in enumerate(np.split(order, cuts)):
            try:
                records += op.update(batch.take(chunk))
            except ModelError as exc:
                raise fail(str(exc)) from None
            status.update(f"predicting: {min((i + 1) * 50, len(starts)):,} of {len(starts):,} timestamps")
    if json_out:
        write_jsonl(json_out, records)
    summary = summarize(records)
    t = Table(title=f"{m.name}: predictions over {trace.name}")
    for col in ("output", "node", "predictions", "coverage of ±2σ", "mean |z|", "rows violated", "method"):
        t.add_column(col)
    for s in summary.values():
        cov = "-" if s["coverage"] is None else f"{s['coverage']:.1%}"
        z = "-" if s["mean_abs_z"] is None else f"{s['mean_abs_z']:.2f}"
        meth = ", ".join(f"{k} {v}" for k, v in s["methods"].items())
        t.add_row(s["output"], s["node"], str(s["predictions"]), cov, z, str(s["violated"]), meth)
    out.print(t)
    if not records:
        out.print(f"no prediction: every node needs two values of {', '.join(sorted(params))} first")
    if plot and records:
        plot_predictions(records, plot)
        out.print(f"wrote {plot}")


def balance_command(
    model: ModelArg,
    total: Annotated[float | None, typer.Option(help="Work to share (default: the sum of the model's work).")] = None,
    trace: Annotated[
        Path | None, typer.Option(help="Take the metric parameters from the forecasts at the end of this trace.")
    ] = None,
    runs: Annotated[int, typer.Option(help="Simulated runs per strategy.")] = 4000,
    seed: Annotated[int, typer.Option(help="Random seed.")] = 0,
    json_out: Annotated[Path | None, typer.Option("--json", help="Write the result as JSON.")] = None,
) -> None:
    """Share work so every node is predicted to finish together: T(p) = A(p)·work(p) + B(p)
    equal for all p, with the mean strategy and the conservative one (mean + 2σ), and each
    allocation's predicted completion time over simulated runs."""
    from perfsift.models.balance import balance
    from perfsift.operators.predict import ModelPredictor

    m = _model(model)
    if m.balance is None:
        raise fail(f"{m.source}: the model has no balance: section (work: PARAMETER, time: COMPONENT)")
    inputs: dict[str, dict[str, Any]] = {}
    nodes = None
    if trace is not None:
        op = ModelPredictor(m.source)
        op.update(read_trace(trace))
        job = next(iter(op.nodes_), None)
        got = op.inputs_for(job) if job is not None else None
        if got is None:
            raise fail(f"{trace}: no forecasts for every node of {', '.join(m.metrics())} yet")
        inputs, nodes = got, len(op.nodes_[str(job)])
    work = m.parameters[str(m.balance["work"])].value or (0.0,)
    try:
        p_count = m.node_count(inputs, nodes)
        share = float(total if total is not None else (sum(work) if len(work) > 1 else work[0] * p_count))
        res = balance(m, share, inputs, runs=runs, seed=seed, nodes=p_count)
    except (ModelError, ValueError) as exc:
        raise fail(str(exc)) from None
    if json_out:
        json_out.write_text(json.dumps(res, indent=2) + "\n")
    t = Table(title=f"{m.name}: {share:,.0f} units of {m.balance['work']} over {p_count} nodes")
    t.add_column("node")
    for strategy in ("mean", "conservative"):
        t.add_column(f"{strategy}: work")
        t.add_column("planned time")
    for p in range(p_count):
        row = [str(p)]
        for strategy in ("mean", "conservative"):
            row += [f"{res[strategy]['work'][p]:,.0f}", f"{res[strategy]['planned_time'][p]:.4g}"]
        t.add_row(*row)
    out.print(t)
    for strategy in ("mean", "conservative"):
        r = res[strategy]
        lo, hi = r["completion_interval"]
        out.print(
            f"{strategy:>12}: completion {r['completion_mean']:.4g} s (±2σ {lo:.4g} .. {hi:.4g}), "
            f"95th percentile {r['completion_p95']:.4g} s over {runs:,} simulated runs"
        )
    if not res["linear"]:
        out.print("[yellow]the time is not linear in the work: the allocation is a first-order one[/yellow]")
