"""The ``perfsift`` command line: the typer app, its global options, and every command group.

One module per group: :mod:`~perfsift.cli.kafka` (broker, topics, produce, tail),
:mod:`~perfsift.cli.pipeline` (worker, run), :mod:`~perfsift.cli.ingest` (ingest, convert),
:mod:`~perfsift.cli.producers`
(replay, sample, synth), :mod:`~perfsift.cli.clean` (clean, quality, kb),
:mod:`~perfsift.cli.analyze` (analyze, report), :mod:`~perfsift.cli.contract`
(contract derive|check), :mod:`~perfsift.cli.select` (select-metrics, forecast),
:mod:`~perfsift.cli.model` (predict, balance), :mod:`~perfsift.cli.pursuit`,
:mod:`~perfsift.cli.explain`, :mod:`~perfsift.cli.export`;
what they share is in :mod:`~perfsift.cli.ui`.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Annotated

import typer
from confluent_kafka import KafkaError, KafkaException
from perfsift.cli.analyze import analyze_command, report_command
from perfsift.cli.clean import clean_command, kb_app, quality_command
from perfsift.cli.contract import contract_app
from perfsift.cli.explain import explain_command
from perfsift.cli.export import export_command
from perfsift.cli.ingest import convert_command, ingest
from perfsift.cli.kafka import broker, produce, tail, topics
from perfsift.cli.model import balance_command, predict_command
from perfsift.cli.pipeline import run, validate, worker
from perfsift.cli.producers import replay_command, sample_command, synth_command
from perfsift.cli.pursuit import pursuit
from perfsift.cli.scrape import scrape_command
from perfsift.cli.select import forecast, select_metrics
from perfsift.cli.shell import cli_command, run_cli
from perfsift.cli.ui import fail, out
from perfsift.schemas.registry import RegistryError
from perfsift.streams.logs import LogFormat, LogLevel, setup_logging

from perfsift import __version__

app = typer.Typer(
    help="perfsift: reduce performance-monitoring data in flight (streaming operators on Kafka).",
    no_args_is_help=True,
    add_completion=True,  # --install-completion / --show-completion (bash, zsh, fish, PowerShell)
    pretty_exceptions_enable=False,
)


def version_callback(value: bool) -> None:
    if value:
        out.print(f"perfsift {__version__}")
        raise typer.Exit()


@app.callback()
def main_options(
    verbose: Annotated[
        bool, typer.Option("--verbose", "-v", help="Log progress and client messages (--log-level info).")
    ] = False,
    log_level: Annotated[
        LogLevel | None,
        typer.Option(
            envvar="PERFSIFT_LOG_LEVEL",
            case_sensitive=False,
            help="Threshold of the log (default: warning; info with -v).",
            show_default=False,
        ),
    ] = None,
    log_format: Annotated[
        LogFormat,
        typer.Option(
            envvar="PERFSIFT_LOG_FORMAT",
            case_sensitive=False,
            help="json: one JSON object per line on stderr (time, level, logger, message, stage, ...).",
        ),
    ] = LogFormat.text,
    version: Annotated[
        bool | None,
        typer.Option("--version", callback=version_callback, is_eager=True, help="Print the version and exit."),
    ] = None,
) -> None:
    setup_logging(log_level or (LogLevel.info if verbose else LogLevel.warning), log_format)


# in the order `perfsift --help` lists them, before the groups contract and kb
COMMANDS: dict[str, Callable[..., None]] = {
    "broker": broker,
    "topics": topics,
    "produce": produce,
    "worker": worker,
    "tail": tail,
    "ingest": ingest,
    "convert": convert_command,
    "scrape": scrape_command,
    "export": export_command,
    "run": run,
    "validate": validate,
    "forecast": forecast,
    "predict": predict_command,
    "balance": balance_command,
    "select-metrics": select_metrics,
    "pursuit": pursuit,
    "replay": replay_command,
    "sample": sample_command,
    "synth": synth_command,
    "clean": clean_command,
    "analyze": analyze_command,
    "report": report_command,
    "explain": explain_command,
    "quality": quality_command,
}
for name, command in COMMANDS.items():
    app.command(name)(command)
app.add_typer(contract_app, name="contract")
app.add_typer(kb_app, name="kb")


def main() -> None:
    try:
        sys.exit(run_cli(cli_command(app)))
    except KafkaException as exc:  # e.g. no broker at --bootstrap: one line, not a traceback
        err = exc.args[0] if exc.args else None
        what = err.str() if isinstance(err, KafkaError) else str(exc)
        fail(f"Kafka: {what} (check --bootstrap / PERFSIFT_BOOTSTRAP and the -X client settings)")
        sys.exit(1)
    except RegistryError as exc:  # encoding: confluent-avro and the registry is not there
        fail(f"{exc} (check schema_registry.url / PERFSIFT_SR_URL and PERFSIFT_SR_*)")
        sys.exit(1)


__all__ = ["app", "main"]
