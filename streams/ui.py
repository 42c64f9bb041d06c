"""Terminal output shared by the commands: stderr console for progress and errors, stdout for results."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

console = Console(stderr=True)
out = Console(soft_wrap=True)  # result lines stay whole when piped or grepped


def fail(msg: str, code: int = 2) -> typer.Exit:
    """Print ``error: msg`` (unwrapped, no markup) and return the Exit to raise (2 = usage/input)."""
    console.print("[red]error:[/red]", escape(msg), soft_wrap=True)
    return typer.Exit(code)


def counting_progress() -> Progress:
    """A transient spinner line with a description, a count and the elapsed time (long commands)."""
    return Progress(SpinnerColumn(), TextColumn("{task.description}"), TextColumn("{task.completed:,} samples"),
                    TimeElapsedColumn(), console=console, transient=True)  # fmt: skip


# options shared by the commands that talk to Kafka
BootstrapOpt = Annotated[
    str | None,
    typer.Option(
        "--bootstrap",
        "-b",
        envvar="PERFSIFT_BOOTSTRAP",
        help="Kafka bootstrap servers (host:port,...). Without it, an embedded broker is started.",
    ),
]
PropsOpt = Annotated[
    list[str] | None,
    typer.Option("--kafka-prop", "-X", help="librdkafka property key=value (repeatable), e.g. for SASL/TLS."),
]
ConfigOpt = Annotated[
    Path | None,
    typer.Option("--config", "-c", envvar="PERFSIFT_CONFIG", help="Pipeline YAML (default: the packaged one)."),
]
