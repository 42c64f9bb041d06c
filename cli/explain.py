"""``perfsift explain DIR``: what a run or an analysis found, in words (:mod:`perfsift.analysis.explain`)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from perfsift.analysis.explain import explain
from perfsift.cli.ui import fail, out


def explain_command(
    folder: Annotated[
        Path,
        typer.Argument(help="Folder written by perfsift run --report or perfsift analyze --out.", file_okay=False),
    ],
    period: Annotated[
        float | None,
        typer.Option(
            "--period",
            help="Only the period containing this time (event time, or seconds after the first period's start).",
        ),
    ] = None,
    node: Annotated[str | None, typer.Option("--node", help="Only this node.")] = None,
) -> None:
    """What was kept and why, which nodes stood apart when, which contracts were violated on which
    nodes, and how forecasts and predictions compared with what was measured."""
    if not folder.is_dir():
        raise fail(f"{folder}: no such folder (perfsift run --report DIR or perfsift analyze --out DIR writes one)")
    try:
        lines = explain(folder, period, node)
    except FileNotFoundError as exc:
        raise fail(str(exc)) from None
    for line in lines:
        out.print(line, markup=False, highlight=False, soft_wrap=True)
