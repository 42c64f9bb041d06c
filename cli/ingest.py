"""``perfsift ingest`` (long records from a topic into perf.raw, as a consumer-group stage) and
``perfsift convert`` (an archived export into a trace file)."""

from __future__ import annotations

import enum
from dataclasses import replace
from pathlib import Path
from typing import Annotated

import orjson
import typer
from perfsift.cli.ui import (
    BootstrapNeededOpt,
    ConfigOpt,
    PropsOpt,
    SetOpt,
    console,
    fail,
    out,
    pipeline_from_flags,
    stop_on_signals,
)
from perfsift.formats import IngestSettings
from perfsift.formats.settings import FORMATS
from rich.markup import escape

Format = enum.Enum("Format", {f: f for f in FORMATS}, type=str)  # type: ignore[misc]
FORMAT_HELP = (
    "otlp_proto / otlp_json (OpenTelemetry Collector kafka exporter), telegraf_json, influx_line "
    "(InfluxDB line protocol), ldms_json, prometheus_text (one scrape per message), remote_write "
    "(Prometheus; POST /api/v1/write on --http-port), collectd_json (write_kafka/write_http JSON), "
    "graphite (collectd write_graphite), perfsift (samples, passed through)"
)
MapOpt = Annotated[
    Path | None,
    typer.Option(
        "--map",
        help="YAML mapping over the format's defaults: node, job, attributes, quantiles, "
        "rates, align, rename, include, exclude (docs/ingest.md).",
        exists=True,
        dir_okay=False,
    ),
]


def _settings(fmt: str, map_file: Path | None, max_delay: float) -> IngestSettings:
    from perfsift.formats import load_map
    from perfsift.formats.settings import IngestConfigError

    try:
        return IngestSettings(fmt, load_map(fmt, map_file), max_delay)
    except IngestConfigError as exc:
        raise fail(str(exc)) from None


def ingest(
    topic: Annotated[str, typer.Option("--topic", "-t", help="Topic of the long records (topic_prefix added).")],
    fmt: Annotated[Format, typer.Option("--format", "-f", help=FORMAT_HELP)],
    bootstrap: BootstrapNeededOpt = None,
    map_file: MapOpt = None,
    max_delay: Annotated[
        float,
        typer.Option(help="Seconds (wall clock) a sample waits for more points after its first one; then it goes."),
    ] = 5.0,
    output: Annotated[str, typer.Option(help="Topic of the samples (logical name, prefixed).")] = "perf.raw",
    config: ConfigOpt = None,
    kafka_prop: PropsOpt = None,
    settings: SetOpt = None,
    http_port: Annotated[
        int, typer.Option(envvar="PERFSIFT_HTTP_PORT", help="Port of /healthz, /readyz and /metrics (0 = off).")
    ] = 8080,
    http_host: Annotated[str, typer.Option(envvar="PERFSIFT_HTTP_HOST", help="Address of the HTTP endpoints.")] = (
        "0.0.0.0"
    ),
    idle_exit: Annotated[
        float | None, typer.Option("--idle-exit", help="Drain and exit after this many seconds without input.")
    ] = None,
) -> None:
    """Read OTLP, Telegraf, LDMS, Prometheus, collectd or Graphite records from a topic and publish
    perfsift samples (one per job, node and timestamp) to perf.raw: a consumer-group stage with
    checkpoints, dead letters (malformed, unmapped, late, collision) and /metrics, until
    SIGTERM/Ctrl-C. With --format remote_write, Prometheus posts to /api/v1/write on --http-port
    and the requests go through the topic."""
    from perfsift.streams.clients import create_pipeline_topics, kafka_properties, parse_props
    from perfsift.streams.config import StageConfig
    from perfsift.streams.http import HealthServer
    from perfsift.streams.ingest_stage import IngestRunner, http_routes
    from perfsift.streams.stage import StageError

    cfg = pipeline_from_flags(config, settings)
    if not bootstrap:
        raise fail("ingest needs --bootstrap (or PERFSIFT_BOOTSTRAP); `perfsift broker` starts one locally")
    ing = _settings(fmt.value, map_file, max_delay)
    name = topic
    st = StageConfig("ingest", name, (output,), (), ing)
    cfg = replace(cfg, stages={"ingest": st})
    props = kafka_properties(bootstrap, parse_props(kafka_prop), file=cfg.kafka)
    runner = IngestRunner(st, cfg, props)
    try:
        health = HealthServer(runner, http_port, http_host, post=http_routes(runner)) if http_port else None
    except OSError as exc:
        raise fail(
            f"cannot serve /metrics on {http_host}:{http_port}: {exc.strerror or exc}; choose another "
            "--http-port (0 turns the endpoints off)"
        ) from None
    create_pipeline_topics(cfg, props)
    runner.resolve_guarantee()
    if health is not None:
        health.start()
    console.print(
        f"ingest {fmt.value}: {cfg.topic(name)} -> {cfg.topic(output)} ({runner.guarantee}, "
        f"group {runner.group_id}, max-delay {max_delay:g} s)"
    )
    with stop_on_signals(runner.stop_event):
        try:
            stats = runner.run(idle_exit)
        except StageError as exc:
            raise fail(str(exc), 1) from None
        finally:
            if health is not None:
                health.stop()
    typer.echo(orjson.dumps({**stats.as_dict(), "points_in": runner.points_in}).decode(), err=True)


def convert_command(
    src: Annotated[list[Path], typer.Argument(help="The exported files.", exists=True, dir_okay=False)],
    fmt: Annotated[Format, typer.Option("--format", "-f", help=FORMAT_HELP)],
    output: Annotated[Path, typer.Option("--output", "-o", help="Trace to write: .jsonl, .csv or .sddf (.gz too).")],
    map_file: MapOpt = None,
    node: Annotated[
        str | None,
        typer.Option(
            help="Node of records that name none (default: the file's stem without a trailing counter "
            "or time: node-1.003.prom -> node-1)."
        ),
    ] = None,
    interval: Annotated[
        float | None,
        typer.Option(
            help="Seconds between concatenated scrapes without timestamps (the last one is the file's "
            "modification time)."
        ),
    ] = None,
) -> None:
    """Convert archived exports (Collector file exporter OTLP JSON lines or proto, Telegraf or
    LDMS JSON lines, line protocol, collectd JSON or Graphite lines, Prometheus scrapes: several
    files or several scrapes in one) into one perfsift trace, as `perfsift ingest` would."""
    from perfsift.formats.settings import IngestConfigError
    from perfsift.producers.convert import convert

    try:
        res = convert(src, output, _settings(fmt.value, map_file, 0.0), node=node, interval=interval)
    except IngestConfigError as exc:
        raise fail(str(exc)) from None
    for p in res["first_problems"][:5]:
        console.print(f"[yellow]skipped[/yellow] {escape(p)}", soft_wrap=True)  # file:line stays on one line
    what = src[0] if len(src) == 1 else f"{len(src)} files"
    if not res["samples"]:
        raise fail(f"{what}: no sample ({res['records']} records, {res['problems']} problems)")
    out.print(
        f"{output}: {res['samples']} samples of {res['metrics']} metrics from {res['records']} records "
        f"({res['points']} points, {res['problems']} problems)",
        soft_wrap=True,
    )
