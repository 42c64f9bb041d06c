"""Terminal output shared by the commands: stderr console for progress and errors, stdout for results."""

from __future__ import annotations

import typer
from rich.console import Console
from rich.markup import escape

console = Console(stderr=True)
out = Console(soft_wrap=True)  # result lines stay whole when piped or grepped


def fail(msg: str, code: int = 2) -> typer.Exit:
    """Print ``error: msg`` (unwrapped, no markup) and return the Exit to raise (2 = usage/input)."""
    console.print("[red]error:[/red]", escape(msg), soft_wrap=True)
    return typer.Exit(code)
