"""What the commands share: the terminal (stderr console for progress and errors, stdout for
results), the options of the commands that talk to Kafka, the pipeline from ``--config`` and
``--set``, reading a trace and writing JSON lines, and stopping cleanly on SIGTERM and Ctrl-C."""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any

import orjson
import typer
from perfsift.operators import Batch
from perfsift.producers.traces import iter_samples
from perfsift.schemas import RecordError, samples_to_batch
from perfsift.streams.config import ConfigError, PipelineConfig, load_pipeline, parse_settings
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
    return Progress(
        SpinnerColumn(),
        TextColumn("{task.description}"),
        TextColumn("{task.completed:,} samples"),
        TimeElapsedColumn(),
        console=console,
        transient=True,
    )


# options shared by the commands that talk to Kafka
BootstrapOpt = Annotated[
    str | None,
    typer.Option(
        "--bootstrap",
        "-b",
        envvar="PERFSIFT_BOOTSTRAP",
        metavar="HOST:PORT,...",
        help="Kafka bootstrap servers (host:port,...). Without it, an embedded broker is started.",
    ),
]
#: --bootstrap of the commands that need a running cluster (no embedded fallback)
BootstrapNeededOpt = Annotated[
    str | None,
    typer.Option(
        "--bootstrap",
        "-b",
        envvar="PERFSIFT_BOOTSTRAP",
        metavar="HOST:PORT,...",
        help="Kafka bootstrap servers (host:port,...); required (`perfsift broker` starts one locally).",
    ),
]
PropsOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--kafka-prop",
        "-X",
        metavar="KEY=VALUE",
        help="librdkafka property (repeatable), e.g. for SASL/TLS; beats PERFSIFT_KAFKA_* and the pipeline file.",
    ),
]
ConfigOpt = Annotated[
    Path | None,
    typer.Option("--config", "-c", envvar="PERFSIFT_CONFIG", help="Pipeline YAML (default: the packaged one)."),
]
SetOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--set",
        metavar="KEY=VALUE",
        help="Override a pipeline setting, e.g. --set partitions=12 (beats YAML and PERFSIFT_*).",
    ),
]


def pipeline_from_flags(config: Path | None, settings: list[str] | None = None) -> PipelineConfig:
    """The pipeline of ``--config`` (default: the packaged one) with the ``--set`` overrides; a
    mistake in either ends the command with its message."""
    try:
        cfg = load_pipeline(config, overrides=parse_settings(settings))
    except ConfigError as exc:
        raise fail(str(exc)) from None
    cfg.codec.prepare()  # confluent-avro: the registry every codec of this process asks
    return cfg


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


@contextlib.contextmanager
def stop_on_signals(stop: threading.Event) -> Iterator[None]:
    """SIGTERM and SIGINT set ``stop`` (the loops drain and commit) instead of killing mid-batch."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)}

    def handler(signum: int, frame: Any) -> None:
        if stop.is_set():  # second Ctrl-C: give up at once
            raise KeyboardInterrupt
        stop.set()

    for s in old:
        signal.signal(s, handler)
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)


def write_jsonl(path: Path, records: list[dict[str, Any]]) -> None:
    """``records`` as one JSON object per line (the commands' ``--json`` files)."""
    with path.open("wb") as fh:
        for r in records:
            fh.write(orjson.dumps(r) + b"\n")
