"""``perfsift contract derive|check``: performance contracts (Vraalsen et al.) derived from a baseline
run, and runs checked against them, offline."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import numpy as np
import orjson
import typer
from perfsift.analysis.plots import plot_violations
from perfsift.cli.ui import fail, out, read_trace, write_jsonl
from perfsift.operators.contract import (
    ContractError,
    ContractMonitor,
    baseline_capabilities,
    contract_records,
    derive_contract,
    job_summary,
    load_contract,
    parse_space,
)
from perfsift.operators.contract.rules import DEFAULT_RULEBASE, Rulebase, RulebaseError
from perfsift.streams.config import ConfigError, parse_pairs
from rich.table import Table

contract_app = typer.Typer(
    help="Derive performance contracts from a baseline run and check runs against them.", no_args_is_help=True
)


@contract_app.command("derive")
def derive(
    baseline: Annotated[Path, typer.Argument(help="Baseline run (SDDF, CSV or JSONL).", exists=True, dir_okay=False)],
    space: Annotated[
        list[str],
        typer.Option(
            "--space",
            "-s",
            help="NAME=DIM[,DIM...]; DIM is METRIC or a ratio 'METRIC / METRIC' (a slash between spaces; "
            "a slash inside a name such as NET_ib0-read-KB/s is part of it), optionally @UNIT for capability "
            "scaling; \"quote\" a name holding ' / ', a comma or @.",
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
        write_jsonl(json_out, records)
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
