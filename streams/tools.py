"""Offline tools on archived traces: ``perfsift contract derive|check`` and ``perfsift forecast``."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import numpy as np
import orjson
import typer
from perfsift.operators import Batch, ContractMonitor, ForecastBank
from perfsift.operators.contract import (
    ContractError,
    baseline_capabilities,
    contract_records,
    derive_contract,
    job_summary,
    load_contract,
    parse_space,
)
from perfsift.operators.forecast import PRIMARIES, forecast_records
from perfsift.operators.fuzzy import DEFAULT_RULEBASE, Rulebase, RulebaseError
from perfsift.operators.selection import bucket_rows, reduce_metrics, refit_r2
from perfsift.producers.traces import iter_samples
from perfsift.schemas import RecordError, samples_to_batch
from perfsift.streams.config import ConfigError, parse_pairs
from perfsift.streams.ui import console, fail, out
from rich.table import Table

contract_app = typer.Typer(
    help="Derive performance contracts from a baseline run and check runs against them.", no_args_is_help=True
)


def read_trace(path: Path) -> Batch:
    """A trace (SDDF, CSV or JSONL, detected) as one column batch; bad records are reported
    (file:line or file@byte) and skipped."""
    errors: list[RecordError] = []
    with console.status(f"reading {path}"):
        try:
            batch = samples_to_batch(iter_samples(path, on_error=errors.append))
        except RecordError as exc:  # the file as a whole is unreadable (unknown format, bad header)
            raise fail(str(exc)) from None
    for e in errors[:5]:
        console.print(f"[yellow]skipped[/yellow] {e}")
    if len(errors) > 5:
        console.print(f"[yellow]skipped {len(errors) - 5} more bad lines[/yellow]")
    if len(batch) == 0:
        raise fail(f"{path}: no valid sample")
    return batch


def _write_jsonl(path: Path, records: list[dict[str, Any]]) -> None:
    with path.open("wb") as fh:
        for r in records:
            fh.write(orjson.dumps(r) + b"\n")


@contract_app.command("derive")
def derive(
    baseline: Annotated[Path, typer.Argument(help="Baseline run (SDDF, CSV or JSONL).", exists=True, dir_okay=False)],
    space: Annotated[
        list[str],
        typer.Option(
            "--space",
            "-s",
            help="NAME=DIM[,DIM...]; DIM is METRIC or METRIC/METRIC, optionally @UNIT for capability scaling.",
        ),
    ],
    output: Annotated[Path, typer.Option("--output", "-o", help="Contract file to write (JSON).")],
    max_distance: Annotated[float, typer.Option(help="Leader-clustering distance D in log10 units.")] = 0.1,
    k_sigma: Annotated[float, typer.Option(help="Tolerance = max(k_sigma * sd, D/sqrt(m)).")] = 2.0,
    min_size: Annotated[int, typer.Option(help="Drop classes with fewer baseline points.")] = 1,
    rulebase: Annotated[
        Path | None, typer.Option(help="Fuzzy rulebase file (default: the shipped one).", exists=True, dir_okay=False)
    ] = None,
    capabilities: Annotated[
        Path | None, typer.Option(help="JSON {node: {unit: capability}} for @UNIT dims.", exists=True, dir_okay=False)
    ] = None,
    capability: Annotated[
        list[str] | None,
        typer.Option(
            help="UNIT=METRIC: a node's capability in UNIT is its mean of METRIC in the baseline "
            "(repeatable; a --capabilities file wins where it has a value)."
        ),
    ] = None,
) -> None:
    """Derive a contract: equivalence classes and tolerances per metric space from a baseline run."""
    try:
        spaces = dict(parse_space(s) for s in space)
        baseline_batch = read_trace(baseline)
        caps: dict[str, dict[str, float]] = {}
        if capability:
            caps = baseline_capabilities(
                baseline_batch, parse_pairs(capability, "--capability", "UNIT=METRIC", need_value=True)
            )
        for node, units in (orjson.loads(capabilities.read_bytes()) if capabilities else {}).items():
            caps.setdefault(node, {}).update(units)
        rb_text = rulebase.read_text() if rulebase else DEFAULT_RULEBASE
        Rulebase.parse(rb_text, str(rulebase) if rulebase else "<default rulebase>")  # errors name the file
        doc = derive_contract(
            baseline_batch,
            {k: [d.expr for d in v] for k, v in spaces.items()},
            max_distance=max_distance,
            k_sigma=k_sigma,
            min_size=min_size,
            rulebase=rb_text,
            capabilities=caps or None,
        )
    except (ConfigError, ContractError, RulebaseError, orjson.JSONDecodeError) as exc:
        raise fail(str(exc)) from None
    output.write_bytes(orjson.dumps(doc, option=orjson.OPT_INDENT_2))
    t = Table(title=f"contract {output}")
    for col in ("space", "dimensions", "classes", "largest class", "tolerances (log10)"):
        t.add_column(col)
    for sp in doc["spaces"]:
        sizes = [c["size"] for c in sp["classes"]]
        tol = np.array([c["tolerance"] for c in sp["classes"]])
        t.add_row(
            sp["name"], ", ".join(sp["dims"]), str(len(sizes)), str(max(sizes)), f"{tol.min():.3f} .. {tol.max():.3f}"
        )
    out.print(t)


@contract_app.command("check")
def check(
    trace: Annotated[Path, typer.Argument(help="Run to check (SDDF, CSV or JSONL).", exists=True, dir_okay=False)],
    contract: Annotated[
        Path,
        typer.Option("--contract", "-c", help="Contract file from `contract derive`.", exists=True, dir_okay=False),
    ],
    json_out: Annotated[Path | None, typer.Option("--json", help="Write one JSON line per (ts, node).")] = None,
    plot: Annotated[
        Path | None, typer.Option(help="Write a PNG of violation levels over time per node and space.")
    ] = None,
    capability_forecast: Annotated[
        list[str] | None,
        typer.Option(
            help="UNIT=METRIC: capabilities in UNIT from the NWS forecast of METRIC, made before each "
            "sample, instead of the contract's fixed ones (repeatable)."
        ),
    ] = None,
) -> None:
    """Evaluate a run against a contract: violation level per sample, space and dimension."""
    try:
        forecasts = (
            parse_pairs(capability_forecast, "--capability-forecast", "UNIT=METRIC", need_value=True)
            if capability_forecast
            else None
        )
        monitor = ContractMonitor(load_contract(contract), capability_forecasts=forecasts)
        records = contract_records(monitor.update(read_trace(trace)))
    except (ConfigError, ContractError) as exc:
        raise fail(str(exc)) from None
    if json_out:
        _write_jsonl(json_out, records)
    summary = job_summary(records)
    t = Table(title=f"{trace.name} against {contract.name}")
    for col in ("node", "samples", "violated", "unknown", "mean level", "max level"):
        t.add_column(col, justify="right" if col != "node" else "left")
    for node, s in summary["nodes"].items():
        style = "red" if s["violated"] else ""
        fmt = _level
        t.add_row(
            node,
            str(s["rows"]),
            str(s["violated"]),
            str(s["unknown"]),
            fmt(s["mean_level"]),
            fmt(s["max_level"]),
            style=style,
        )
    out.print(t)
    for job, share in summary["max_share_violated"].items():
        out.print(f"job {job}: at most {share:.0%} of its nodes in violation at once")
    if plot:
        plot_violations(records, plot)
        out.print(f"plot written to {plot}")


def _level(v: float | None) -> str:
    return "-" if v is None else f"{v:.2f}"


def plot_violations(records: list[dict[str, Any]], path: Path) -> None:
    """Violation levels over time, one panel per metric space, one line per node (cf. Figure 5d)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

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
        _write_jsonl(json_out, records)
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


def _table_of(path: Path, perf_metric: str, interval: float) -> tuple[np.ndarray, np.ndarray, list[str]]:
    batch = read_trace(path)
    if perf_metric not in batch.metrics:
        raise fail(f"{path}: no performance metric {perf_metric!r}; the trace has {', '.join(batch.metrics)}")
    _, x, y, names = bucket_rows(batch, interval, perf_metric)
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
    main_metrics: Annotated[
        str | None,
        typer.Option(
            "--main", help="Comma-separated 'usual' features to compare (MAIN), e.g. srv1/cpu_user,srv1/net_in."
        ),
    ] = None,
    rand_seeds: Annotated[int, typer.Option(help="Random subsets averaged for RAND.")] = 20,
    json_out: Annotated[Path | None, typer.Option("--json", help="Write the result as JSON.")] = None,
    plot: Annotated[Path | None, typer.Option(help="With --sweep: PNG of R² and RD against the threshold.")] = None,
) -> None:
    """Statistical data reduction of a trace (Yang et al.): drop redundant metrics by correlation
    clustering, keep those that predict the performance metric by backward elimination."""
    x, y, names = _table_of(train, perf_metric, interval)
    verify_tables = [_table_of(v, perf_metric, interval) for v in verify or []]

    def evaluate(t: float) -> dict[str, Any]:
        res = reduce_metrics(x, y, names, threshold=t, quadratic=quadratic, f_out=f_out)
        res.pop("clustering")
        res["r2_verify"] = [refit_r2(xv, yv, nv, res["terms"], res["centers"]) for xv, yv, nv in verify_tables]
        return res

    result = evaluate(threshold)
    rng = np.random.default_rng(0)
    live = [n for n in names if n not in result["zero_variation"]]
    k = len(result["selected"])
    if verify_tables and 0 < k <= len(live):
        rand = []
        for _ in range(rand_seeds):
            pick = [str(p) for p in rng.choice(live, size=k, replace=False)]
            terms = pick + ([p + "^2" for p in pick] if quadratic else [])
            centers = {p: float(np.nanmean(x[:, names.index(p)])) for p in pick}
            rand.append([refit_r2(xv, yv, nv, terms, centers) for xv, yv, nv in verify_tables])
        result["rand_r2_verify"] = np.nanmean(np.array(rand), axis=0).tolist()
    if main_metrics and verify_tables:
        main = [m.strip() for m in main_metrics.split(",") if m.strip()]
        unknown = [m for m in main if m not in names]
        if unknown:
            raise fail(f"--main names unknown features {unknown}; features look like {names[0]}")
        result["main"] = main
        result["main_r2_verify"] = [refit_r2(xv, yv, nv, main, {}) for xv, yv, nv in verify_tables]
    if sweep:
        rows = []
        for t in np.round(np.arange(0.05, 1.0001, 0.05), 2):
            r = evaluate(float(min(t, 0.999)))
            rows.append(
                {
                    "threshold": float(t),
                    "selected": len(r["selected"]),
                    "reduction_degree": r["reduction_degree"],
                    "r2_train": r["r2_train"],
                    "r2_verify": float(np.mean(r["r2_verify"])) if r["r2_verify"] else None,
                }
            )
        result["sweep"] = rows
    result["history"] = [[t, f] for t, f in result["history"]]

    t = Table(title=f"data reduction of {train.name} against {perf_metric} (t = {threshold}, F_out = {f_out})")
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
    out.print(t)
    out.print(
        f"{len(names)} features, {len(result['zero_variation'])} constant, {len(result['clusters'])} clusters, "
        f"{len(result['selected'])} selected; R² (train) {result['r2_train']:.3f}, "
        f"reduction degree {result['reduction_degree']:.2f}"
    )
    for i, r2 in enumerate(result["r2_verify"]):
        extra = ""
        if "rand_r2_verify" in result:
            extra += f", RAND {result['rand_r2_verify'][i]:.3f}"
        if "main_r2_verify" in result:
            extra += f", MAIN {result['main_r2_verify'][i]:.3f}"
        out.print(f"verify {verify[i].name if verify else i}: R² {r2:.3f}{extra}")
    if sweep:
        st = Table(title="threshold sweep")
        for col in ("t", "selected", "RD", "R² train", "R² verify"):
            st.add_column(col, justify="right")
        for r in result["sweep"]:
            st.add_row(
                f"{r['threshold']:.2f}",
                str(r["selected"]),
                f"{r['reduction_degree']:.2f}",
                f"{r['r2_train']:.3f}",
                "-" if r["r2_verify"] is None else f"{r['r2_verify']:.3f}",
            )
        out.print(st)
        if plot:
            plot_sweep(result["sweep"], plot)
            out.print(f"plot written to {plot}")
    if json_out:
        json_out.write_bytes(orjson.dumps(result, option=orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY))


def plot_sweep(rows: list[dict[str, Any]], path: Path) -> None:
    """R² and reduction degree against the correlation threshold (the paper's Figures 2 and 4)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    t = [r["threshold"] for r in rows]
    fig, ax = plt.subplots(figsize=(7, 3.8))
    ax.plot(t, [r["r2_train"] for r in rows], "o-", label="R² (train)")
    if rows[0]["r2_verify"] is not None:
        ax.plot(t, [r["r2_verify"] for r in rows], "s-", label="R² (verify, mean)")
    ax.plot(t, [r["reduction_degree"] for r in rows], "^-", label="reduction degree")
    ax.set_xlabel("correlation threshold t")
    ax.set_ylim(-0.05, 1.05)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
