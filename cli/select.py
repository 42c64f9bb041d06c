"""``perfsift select-metrics`` and ``perfsift forecast`` on archived traces: which metrics to keep
(statistical data reduction, evaluated against baselines in :mod:`perfsift.analysis.evaluation`),
and what comes next (the NWS forecaster bank)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import numpy as np
import orjson
import typer
from perfsift.analysis.evaluation import RegressionTable, evaluate_reduction, not_better_than_chance
from perfsift.analysis.plots import plot_sweep
from perfsift.cli.ui import fail, out, read_trace, write_jsonl
from perfsift.operators import ForecastBank
from perfsift.operators.forecast.forecast import PRIMARIES
from perfsift.operators.forecast.records import forecast_records
from perfsift.operators.reduction.buckets import bucket_rows
from perfsift.operators.reduction.regression import expand_predictors
from rich.table import Table


def forecast(
    trace: Annotated[Path, typer.Argument(help="Trace (SDDF, CSV or JSONL).", exists=True, dir_okay=False)],
    metric: Annotated[list[str], typer.Option("--metric", "-m", help="Metric(s) to forecast.")],
    json_out: Annotated[Path | None, typer.Option("--json", help="Write one JSON line per forecast.")] = None,
    mode: Annotated[str, typer.Option(help="nws (three-level selection) or flat.")] = "nws",
) -> None:
    """Run the NWS forecaster bank over a trace: next-value forecasts with ±2σ bounds."""
    batch = read_trace(trace)
    missing = [m for m in metric if m not in batch.metrics]
    if missing:
        raise fail(f"{trace}: no metric {missing}; the trace has {', '.join(batch.metrics)}")
    try:
        bank = ForecastBank(metrics=list(metric), mode=mode)
        result = bank.update(batch)
    except ValueError as exc:
        raise fail(str(exc)) from None
    records = forecast_records(result)
    if json_out:
        write_jsonl(json_out, records)
    t = Table(title=f"forecasts of {', '.join(metric)} over {trace.name}")
    for col in ("node", "metric", "series", "coverage of ±2σ", "RMSE", "last forecast", "method"):
        t.add_column(col)
    nodes = result.node_names()
    vals = batch.values[:, [batch.metrics.index(m) for m in result.metrics]]
    for j, m in enumerate(result.metrics):
        for node in sorted(set(nodes)):
            rows = np.array([i for i, n in enumerate(nodes) if n == node])
            x, f, s = vals[rows, j], result.values[rows, j], result.extra["sigma"][rows, j]
            ok = ~np.isnan(x[1:]) & ~np.isnan(f[:-1]) & ~np.isnan(s[:-1])
            err = x[1:][ok] - f[:-1][ok]
            cover = float(np.mean(np.abs(err) <= 2 * s[:-1][ok])) if ok.any() else float("nan")
            rmse = float(np.sqrt(np.mean(err**2))) if ok.any() else float("nan")
            last = int(result.extra["method"][rows[-1], j])
            t.add_row(
                node,
                m,
                str(len(rows)),
                f"{cover:.1%}",
                f"{rmse:.4g}",
                f"{f[-1]:.4g}",
                PRIMARIES[last] if last >= 0 else "-",
            )
    out.print(t)


def _table_of(path: Path, perf_metric: str, interval: float, lags: int = 0, smooth: int = 1) -> RegressionTable:
    """A trace as a regression table: one row per ``interval`` seconds, the performance metric
    apart, the features smoothed over ``smooth`` buckets and with ``lags`` earlier buckets as
    extra features (:func:`~perfsift.operators.reduction.regression.expand_predictors`)."""
    batch = read_trace(path)
    if perf_metric not in batch.metrics:
        raise fail(f"{path}: no performance metric {perf_metric!r}; the trace has {', '.join(batch.metrics)}")
    buckets, x, y, names = bucket_rows(batch, interval, perf_metric)
    x, names = expand_predictors(x, names, lags, smooth, buckets)
    return x, y, names


def select_metrics(
    train: Annotated[Path, typer.Argument(help="Training trace (SDDF, CSV or JSONL).", exists=True, dir_okay=False)],
    perf_metric: Annotated[str, typer.Option("--perf-metric", "-p", help="The application performance metric.")],
    verify: Annotated[
        list[Path] | None, typer.Option("--verify", "-V", help="Verification trace(s).", exists=True, dir_okay=False)
    ] = None,
    threshold: Annotated[float, typer.Option(help="Correlation threshold t of the redundancy test.")] = 0.9,
    sweep: Annotated[bool, typer.Option(help="Evaluate thresholds 0.05..1.0 step 0.05 (R² and RD each).")] = False,
    quadratic: Annotated[bool, typer.Option(help="Offer (x - c)² terms to backward elimination.")] = False,
    f_out: Annotated[float, typer.Option(help="F-to-remove of backward elimination.")] = 2.0,
    interval: Annotated[float, typer.Option(help="Bucket length in seconds (one regression row each).")] = 1.0,
    lags: Annotated[
        int,
        typer.Option(
            min=0, help="Also offer each feature's value 1..LAGS buckets earlier (features named node/metric@t-k)."
        ),
    ] = 0,
    smooth: Annotated[
        int, typer.Option(min=1, help="Smooth each feature by a trailing mean over this many buckets (1 = none).")
    ] = 1,
    main_metrics: Annotated[
        str | None,
        typer.Option(
            "--main", help="Comma-separated 'usual' features to compare (MAIN), e.g. srv1/cpu_user,srv1/net_in."
        ),
    ] = None,
    rand_seeds: Annotated[
        int, typer.Option(help="Random subsets of the selection's size for RAND (mean and empirical p-value).")
    ] = 50,
    json_out: Annotated[Path | None, typer.Option("--json", help="Write the result as JSON.")] = None,
    plot: Annotated[Path | None, typer.Option(help="With --sweep: PNG of R² and RD against the threshold.")] = None,
) -> None:
    """Statistical data reduction of a trace (Yang et al.): drop redundant metrics by correlation
    clustering, keep those that predict the performance metric by backward elimination."""
    table = _table_of(train, perf_metric, interval, lags, smooth)
    names = table[2]
    verify_tables = [_table_of(v, perf_metric, interval, lags, smooth) for v in verify or []]
    main = [m.strip() for m in main_metrics.split(",") if m.strip()] if main_metrics and verify_tables else None
    unknown = [m for m in main or [] if m not in names]
    if unknown:
        raise fail(f"--main names unknown features {unknown}; features look like {names[0]}")
    result = evaluate_reduction(
        table, verify_tables, threshold, quadratic, f_out, main=main, rand_seeds=rand_seeds, sweep=sweep
    )
    title = f"data reduction of {train.name} against {perf_metric} (t = {threshold}, F_out = {f_out})"
    out.print(_selection_table(result, title))
    fmt = _fmt
    if result["reason"]:
        out.print(
            f"{len(names)} features, {len(result['zero_variation'])} constant, {len(result['clusters'])} clusters; "
            f"[bold yellow]the regression did not run: {result['reason']}[/bold yellow] (no R², no reduction degree)"
        )
    else:
        out.print(
            f"{len(names)} features, {len(result['zero_variation'])} constant, {len(result['clusters'])} clusters, "
            f"{len(result['selected'])} selected; R² (train) {fmt(result['r2_train'])}, "
            f"adjusted {fmt(result['adj_r2_train'])}, reduction degree {result['reduction_degree']:.2f}"
        )
    for i, r2 in enumerate(result["r2_verify"]):
        extra = f", adjusted {fmt(result['adj_r2_verify'][i])}"
        if "rand" in result:
            extra += f", RAND mean {fmt(result['rand'][i]['mean'])} (adjusted {fmt(result['rand'][i]['adj_mean'])})"
        if "main_r2_verify" in result:
            extra += f", MAIN {fmt(result['main_r2_verify'][i])} (adjusted {fmt(result['main_adj_r2_verify'][i])})"
        if "all_r2_verify" in result:
            extra += (
                f", all features (ceiling) {fmt(result['all_r2_verify'][i])}"
                f" (adjusted {fmt(result['all_adj_r2_verify'][i])})"
            )
        out.print(f"verify {verify[i].name if verify else i}: R² {fmt(r2)}{extra}")
    for i, rand in enumerate(result.get("rand", [])):
        where = verify[i].name if verify else f"{train.name} (training trace: no --verify given)"
        share = "-" if rand["p_value"] is None else f"{rand['p_value']:.0%}"
        line = (
            f"RAND on {where}: {rand['subsets']} random subsets of {len(result['selected'])} features, "
            f"mean R² {fmt(rand['mean'])}; {share} of them score at least as well as the selection"
        )
        if not_better_than_chance(rand):
            out.print(f"[bold red]warning: the selection is not better than chance[/bold red] - {line}")
        else:
            out.print(line)
    if sweep:
        out.print(_sweep_table(result["sweep"]))
        if plot:
            plot_sweep(result["sweep"], plot)
            out.print(f"plot written to {plot}")
    if json_out:
        json_out.write_bytes(orjson.dumps(result, option=orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY))


def _fmt(v: float | None) -> str:
    return "-" if v is None else f"{v:.3f}"


def _selection_table(result: dict[str, Any], title: str) -> Table:
    """The selected features with their terms, coefficients and the redundant ones of their cluster."""
    t = Table(title=title)
    for col in ("selected feature", "term(s)", "coefficient", "cluster (removed as redundant)"):
        t.add_column(col)
    cluster_of = {c[0]: c[1:] for c in result["clusters"]}
    for m in result["selected"]:
        term_coefs = [
            (tm, co)
            for tm, co in zip(result["terms"], result["coefficients"], strict=True)
            if tm.removesuffix("^2") == m
        ]
        t.add_row(
            m,
            ", ".join(tm for tm, _ in term_coefs),
            ", ".join(f"{co:.4g}" for _, co in term_coefs),
            ", ".join(cluster_of.get(m, [])) or "-",
        )
    return t


def _sweep_table(rows: list[dict[str, Any]]) -> Table:
    st = Table(title="threshold sweep")
    for col in ("t", "selected", "RD", "R² train", "R² verify"):
        st.add_column(col, justify="right")
    for r in rows:
        st.add_row(
            f"{r['threshold']:.2f}",
            str(r["selected"]),
            "-" if r["reduction_degree"] is None else f"{r['reduction_degree']:.2f}",
            _fmt(r["r2_train"]),
            "-" if r["r2_verify"] is None else f"{r['r2_verify']:.3f}",
        )
    return st
