"""``perfsift worker`` and ``perfsift run``: one stage of the pipeline (a Deployment's pod), or the
whole pipeline on one machine with a live view of the stages and a summary at the end."""

from __future__ import annotations

import logging
import sys
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import orjson
import typer
from confluent_kafka import KafkaException
from perfsift.cli.ui import (
    BootstrapNeededOpt,
    BootstrapOpt,
    ConfigOpt,
    PropsOpt,
    SetOpt,
    console,
    fail,
    out,
    pipeline_from_flags,
    stop_on_signals,
)
from perfsift.streams.logs import LogFormat
from rich.live import Live
from rich.markup import escape
from rich.table import Table

if TYPE_CHECKING:  # it imports the whole runtime: `perfsift run` imports it as it starts
    from perfsift.cli.local import LocalRun

#: trace seconds per wall second of the bundled demo's replay in ``perfsift run`` without --speed
#: (its 600 s in 15 s): paced like live producers (``--speed 0`` replays it at once; the stages
#: then read that backlog in event-time order, ``event_time_skew_s``, and pursuit still sees every node)
DEMO_SPEED = 40.0


def worker(
    stage: Annotated[str, typer.Argument(help="Name of the stage in the pipeline file.")],
    config: ConfigOpt = None,
    bootstrap: BootstrapNeededOpt = None,
    kafka_prop: PropsOpt = None,
    settings: SetOpt = None,
    create_topics: Annotated[bool, typer.Option(help="Create missing topics at start.")] = True,
    http_port: Annotated[
        int, typer.Option(envvar="PERFSIFT_HTTP_PORT", help="Port of /healthz, /readyz and /metrics (0 = off).")
    ] = 8080,
    http_host: Annotated[
        str,
        typer.Option(
            envvar="PERFSIFT_HTTP_HOST", help="Address the HTTP endpoints listen on (127.0.0.1 keeps them local)."
        ),
    ] = "0.0.0.0",
    idle_exit: Annotated[
        float | None, typer.Option("--idle-exit", help="Drain and exit after this many seconds without input.")
    ] = None,
    instance: Annotated[
        str | None,
        typer.Option(
            envvar="PERFSIFT_INSTANCE",
            help="A name of this worker that stays across its restarts and no other worker of the stage has "
            "(a pod's name): its exactly-once transactional id, so a restart fences the killed worker's open "
            "transaction at once instead of after transaction.timeout.ms. Default: random per start.",
        ),
    ] = None,
) -> None:
    """Run one stage of the pipeline until SIGTERM/Ctrl-C (drains, commits, exits 0)."""
    from perfsift.streams.access import AccessError, check_access, refused
    from perfsift.streams.clients import create_pipeline_topics, kafka_properties, parse_props
    from perfsift.streams.http import HealthServer
    from perfsift.streams.ingest_stage import http_routes, stage_runner
    from perfsift.streams.logs import current_logging
    from perfsift.streams.stage import StageError

    cfg = pipeline_from_flags(config, settings)
    st = cfg.stage(stage) if stage in cfg.stages else None
    if st is None:
        raise fail(f"{cfg.source}: no stage {stage!r}; stages are: {', '.join(cfg.stages)}")
    if not bootstrap:
        raise fail("worker needs --bootstrap (or PERFSIFT_BOOTSTRAP); `perfsift run` runs everything embedded")
    props = kafka_properties(bootstrap, parse_props(kafka_prop), file=cfg.kafka)
    runner = stage_runner(st, cfg, props, instance=instance)
    try:  # bound before Kafka is asked anything: a local mistake fails at once
        health = HealthServer(runner, http_port, http_host, post=http_routes(runner)) if http_port else None
    except OSError as exc:
        raise fail(
            f"cannot serve /healthz and /metrics on {http_host}:{http_port}: {exc.strerror or exc}; "
            "choose another --http-port (0 turns the endpoints off)"
        ) from None
    try:  # refused credentials, a wrong protocol, missing ACLs: one line, nothing written
        check_access(props)
        if create_topics:
            create_pipeline_topics(cfg, props)
    except AccessError as exc:
        raise fail(str(exc), 1) from None
    except KafkaException as exc:
        if (line := refused(exc, props, "creating the pipeline's topics")) is None:
            raise
        raise fail(line, 1) from None
    runner.resolve_guarantee()
    if health is not None:
        health.start()
    if current_logging()[1] is LogFormat.text:  # with JSON logs, stderr stays JSON: the runner logs its start
        console.print(
            f"stage [bold]{stage}[/bold]: {cfg.topic(st.input)} -> {', '.join(cfg.topic(o) for o in st.outputs)}"
            f" ({runner.guarantee}, group {runner.group_id})"
        )
        if health is not None:
            console.print(f"health and metrics on :{health.port} (/healthz /readyz /metrics)")
    if health is not None:
        logging.getLogger("perfsift.worker").info(
            "stage %s: /healthz /readyz /metrics on %s:%d",
            stage,
            http_host,
            health.port,
            extra={"stage": stage, "http_host": http_host, "http_port": health.port},
        )
    with stop_on_signals(runner.stop_event):
        try:
            stats = runner.run(idle_exit)
        except StageError as exc:
            raise fail(str(exc), 1) from None
        finally:
            if health is not None:
                health.stop()
    typer.echo(orjson.dumps(stats.as_dict()).decode(), err=True)


def validate(
    pipeline: Annotated[
        Path | None, typer.Argument(help="Pipeline file to check.", exists=True, dir_okay=False, show_default=False)
    ] = None,
    settings: SetOpt = None,
    schema: Annotated[
        bool, typer.Option("--schema", help="Print the pipeline file's JSON Schema (from the operators' signatures).")
    ] = False,
) -> None:
    """Check a pipeline file as a worker would read it (settings, PERFSIFT_* variables, --set,
    stages, operators and their parameters, limits, the kafka section) without contacting Kafka:
    first against the JSON Schema (each mistake as file:line, with "did you mean"), then as the
    stages are built. Exit 0 with a summary, or 2 with what is wrong."""
    from perfsift.streams.config import ConfigError, load_pipeline, parse_settings
    from perfsift.streams.pipeline_schema import config_error_line, pipeline_schema, schema_errors

    if schema:
        sys.stdout.write(orjson.dumps(pipeline_schema(), option=orjson.OPT_INDENT_2).decode() + "\n")
        return
    if pipeline is None:
        raise fail("validate needs a PIPELINE file (or --schema)")
    errors = schema_errors(pipeline)
    if errors:
        for line in errors:
            console.print("[red]error:[/red]", escape(line), soft_wrap=True)
        raise typer.Exit(2)
    try:
        cfg = load_pipeline(pipeline, overrides=parse_settings(settings))
    except ConfigError as exc:
        raise fail(config_error_line(pipeline, str(exc))) from None
    names, _ = cfg.topics()
    out.print(f"{pipeline}: ok - {len(cfg.stages)} stages ({', '.join(cfg.stages) or 'none'}), {len(names)} topics")
    for st in cfg.stages.values():
        steps = ([f"ingest {st.ingest.format}"] if st.ingest else []) + [op.type for op in st.operators]
        ops = " -> ".join(steps) or "(passes samples)"
        out.print(f"  {st.name}: {cfg.topic(st.input)} -> {ops} -> {', '.join(cfg.topic(o) for o in st.written)}")


def run(
    bootstrap: BootstrapOpt = None,
    kafka_prop: PropsOpt = None,
    config: ConfigOpt = None,
    trace: Annotated[
        Path | None,
        typer.Option(
            help="Trace to replay: SDDF, CSV or JSONL (default: the bundled demo).", exists=True, dir_okay=False
        ),
    ] = None,
    timeout: Annotated[
        float,
        typer.Option(
            help="Give up waiting for the pipeline after this many seconds (a first run compiles the kernels: on a "
            "busy machine that alone took over 300 s)."
        ),
    ] = 900.0,
    summary_json: Annotated[Path | None, typer.Option("--summary-json", help="Also write the summary here.")] = None,
    report: Annotated[
        Path | None,
        typer.Option(
            "--report",
            help="Folder for the outputs (selection, reduced, ...) and an HTML report. Default with the embedded "
            "broker: ./perfsift-report; with --bootstrap none (it reads the output topics back).",
        ),
    ] = None,
    no_report: Annotated[bool, typer.Option("--no-report", help="Write no report folder.")] = False,
    speed: Annotated[
        float | None,
        typer.Option(
            help="Replay at this many trace seconds per second (default: as fast as possible; the bundled "
            f"demo: {DEMO_SPEED:g}); 0: as fast as possible."
        ),
    ] = None,
    settings: SetOpt = None,
    processes: Annotated[
        bool,
        typer.Option(
            "--processes/--threads",
            help="Run each stage in its own process (default: the stages' Python work then uses every core) "
            "or all as threads of this one.",
        ),
    ] = True,
    contract: Annotated[
        Path | None,
        typer.Option(
            help="Contract file (perfsift contract derive): adds a contract stage perf.smoothed -> perf.contract, "
            "and the live view shows each job's nodes in violation.",
            exists=True,
            dir_okay=False,
        ),
    ] = None,
    perf_metric: Annotated[
        str | None,
        typer.Option("--perf-metric", help="Application performance metric: data reduction joins the selection."),
    ] = None,
    adaptive: Annotated[
        bool,
        typer.Option(
            "--adaptive",
            help="Close the loop: the replay follows the select stage's perf.control and sends only the kept "
            "metrics to perf.raw (paced: --speed, default 20).",
        ),
    ] = False,
    sample_host: Annotated[
        float | None,
        typer.Option(
            "--sample-host",
            help="With --adaptive: also sample this machine every SECONDS into perf.raw (job host) while the trace "
            "replays, following perf.control too (its selection needs data reduction: --perf-metric).",
        ),
    ] = None,
    follow: Annotated[
        bool,
        typer.Option(
            "--follow",
            help="Keep running on live input on perf.raw until Ctrl-C, after the replay of --trace if one is given "
            "(no demo replay).",
        ),
    ] = False,
    live_every: Annotated[
        float,
        typer.Option(
            "--live-every",
            help="With --follow and a report folder: rewrite the folder every this many seconds while the pipeline "
            "runs (report.html then reloads itself); 0 writes it only at the end.",
        ),
    ] = 5.0,
    grace: Annotated[
        float,
        typer.Option(
            "--grace",
            help="On SIGTERM or Ctrl-C: seconds the stages get to drain and commit before their processes are "
            "killed (then the summary and the report follow; a second Ctrl-C quits at once).",
        ),
    ] = 20.0,
) -> None:
    """Run the whole pipeline and replay a trace through it, then print a summary.

    With no --bootstrap: starts the embedded broker, creates the topics, runs every stage of the
    pipeline, replays the bundled demo trace into perf.raw and waits until every stage has
    processed every record; for the demo (no --trace, --config, --contract or --perf-metric) it
    adds a contract, a model's predictions and data reduction on the demo's iter_time. With --follow:
    keeps running, with the live view, on whatever
    producers publish to perf.raw, until Ctrl-C or SIGTERM, and rewrites the report folder every
    --live-every seconds (open report.html: it reloads itself). Ends with a summary and, on the
    embedded broker, a report folder (./perfsift-report: the outputs and report.html).
    """
    from perfsift.cli.live import LiveReport
    from perfsift.cli.local import DEFAULT_REPORT, LocalRun
    from perfsift.producers import demo_trace_path
    from perfsift.streams.broker import BrokerError, bootstrap_or_embedded
    from perfsift.streams.clients import create_pipeline_topics, kafka_properties, parse_props
    from perfsift.streams.config import with_overrides
    from perfsift.streams.presets import with_demo, with_options

    if live_every < 0:
        raise fail(f"--live-every must be >= 0 seconds, got {live_every:g}")
    if grace <= 0:
        raise fail(f"--grace must be > 0 seconds, got {grace:g}")
    if sample_host is not None and not adaptive:
        raise fail("--sample-host needs --adaptive (the sampler follows perf.control alongside the replay)")
    cfg = with_options(pipeline_from_flags(config, settings), perf_metric, contract)
    if trace is None and not follow and config is None and contract is None and not perf_metric:
        cfg = with_demo(cfg)  # the bundled demo: its contract, model and data reduction on iter_time
    trace_path = trace or (None if follow else demo_trace_path())
    if trace is None and not follow and speed is None:
        # The bundled demo replays paced, as live producers publish: as fast as possible, the
        # replay outruns the node stage, which then reads one perf.raw partition's whole backlog
        # before the next, and pursuit's periods close by `slack` with one partition's nodes
        # (docs/pursuit.md, "In the pipeline"). --speed 0: as fast as possible.
        speed = DEMO_SPEED
    if adaptive and trace_path is None:
        raise fail("--adaptive makes the replay follow perf.control: give --trace with --follow")
    if sample_host is not None:
        # this machine's samples carry today's clock, the replayed trace its own: the stages'
        # event-time alignment across partitions (streams/align.py) would hold the host's partition
        # until the replay caught up with today, so it is off for such a mixed run
        cfg = with_overrides(cfg, event_time_skew_s=float("inf"))
    stop = threading.Event()
    try:
        with bootstrap_or_embedded(bootstrap) as (bs, embedded), stop_on_signals(stop):
            if embedded is not None:
                console.print(f"embedded broker on {bs} (in memory)")
            props = kafka_properties(bs, parse_props(kafka_prop), file=cfg.kafka)
            create_pipeline_topics(cfg, props)
            # with --bootstrap the runners ask the broker what it is, as `perfsift worker` does: the
            # group's assignment strategy then agrees with any worker's (streams/group.py)
            local = LocalRun(cfg, props, True if embedded is not None else None, processes, grace)
            with console.status("waiting for the stages to join their consumer groups"):
                local.wait_assigned(stop)
            if report is None and embedded is not None:
                report = DEFAULT_REPORT
            live = LiveReport(local, report, live_every) if follow and report and live_every and not no_report else None
            if live is not None:
                console.print(f"live report: {live.start().folder / 'report.html'} (rewritten every {live_every:g} s)")
            local.publish(trace_path, speed, stop, console, adaptive, sample_host)

            if trace_path is None:
                console.print(
                    f"following {cfg.topic('perf.raw')} on {bs}; publish samples there, e.g. "
                    f"perfsift produce FILE -b {bs}. Ctrl-C stops."
                )
            try:
                elapsed, jobs, caption = _watch(local, stop, follow, timeout)
            finally:
                if live is not None:
                    live.stop()
                local.stop()  # also on a failure: the stages stop (within --grace) before the broker does
            if local.failures:
                raise fail(f"a stage failed: {local.failures[0]}", 1)
            _print_summary(local, elapsed, caption, follow)
            if local.publish_stats is not None:  # --adaptive
                p = local.publish_stats
                out.print(
                    f"adaptive: {p.bytes_sent:,} bytes sent to perf.raw of {p.bytes_full:,} ({p.reduced:,} reduced)"
                )
            if summary_json:
                summary_json.write_bytes(orjson.dumps(local.summary(elapsed, jobs), option=orjson.OPT_INDENT_2))
            if report is not None and not no_report:
                with console.status("collecting the outputs for the report"):
                    local.write_outputs(report)
                out.print(f"report: {local.write_report(report)}")
    except BrokerError as exc:
        raise fail(str(exc), 1) from None


def _watch(
    local: LocalRun, stop: threading.Event, follow: bool, timeout: float
) -> tuple[float, dict[str, dict[str, Any]], str | None]:
    """The live view of the stages until each has seen every record (with ``follow``: until
    ``stop``) or one fails, at most ``timeout`` seconds; then the stages are stopped. Returns the
    seconds since the first publish, and the jobs' summaries and their caption as they were before
    the stages stopped (their chains go with them)."""
    with Live(
        _stats_table(local, 0.0, _selections(local.jobs())), console=console, refresh_per_second=4, transient=True
    ) as live:
        while not stop.is_set() and not local.failures:
            local.collect_failures()
            live.update(_stats_table(local, local.elapsed(), _selections(local.jobs())))
            if not follow and local.caught_up():
                break
            if not follow and local.elapsed() > timeout:
                raise fail(f"the pipeline did not process every record within {timeout:.0f} s (--timeout)", 1)
            time.sleep(0.1)
        elapsed = local.elapsed()
        jobs = local.jobs()
        local.stop()
    return elapsed, jobs, _selections(jobs)


def _print_summary(local: LocalRun, elapsed: float, caption: str | None, follow: bool) -> None:
    """The stages' table and a line: with ``follow`` how much was read, otherwise whether every
    stage processed every record."""
    out.print(_stats_table(local, elapsed, caption))
    out.print(_bytes_table(local.volume()))
    dead = sum(r.stats.dead_letters for r in local.runners)
    if follow:  # live input: no count to check against
        first = [r for r in local.runners if r.stage.input == "perf.raw"]
        out.print(
            f"followed for {elapsed:.0f} s: {sum(r.stats.records_in for r in first):,} samples read from "
            f"perf.raw ({local.published:,} replayed), {dead:,} dead letters, {len(local.errors)} rejected lines"
        )
    else:
        processed = all(r.stats.records_in == local.expected(r) for r in local.runners)
        out.print(
            f"{'every' if processed else 'NOT every'} sample processed: {local.published:,} published, "
            f"{dead:,} dead letters, {len(local.errors)} rejected lines"
        )


def _stats_table(local: LocalRun, elapsed: float, caption: str | None) -> Table:
    t = Table(title=f"perfsift run - {local.published} samples published, {elapsed:.1f} s", caption=caption)
    for col in ("stage", "in", "out", "dead", "MB in", "MB out", "rec/s"):
        t.add_column(col, justify="right" if col != "stage" else "left")
    for r in local.runners:
        s = r.stats
        rate = s.records_in / elapsed if elapsed > 0 else 0.0
        t.add_row(
            r.stage.name,
            f"{s.records_in:,}",
            f"{s.records_out:,}",
            f"{s.dead_letters:,}",
            f"{s.bytes_in / 1e6:,.2f}",
            f"{s.bytes_out / 1e6:,.2f}",
            f"{rate:,.0f}",
        )
    return t


def _bytes_table(volume: dict[str, Any]) -> Table:
    """Bytes per topic written by the pipeline (state snapshots included), payload and zstd
    compressed, and as a ratio to what was read from perf.raw (:mod:`perfsift.streams.volume`)."""
    from perfsift.streams.volume import bytes_table

    t = Table(title="bytes written (payload and zstd-compressed, × perf.raw's)")
    for col in ("topic", "MB", "× raw", "MB zstd", "× raw zstd"):
        t.add_column(col, justify="right" if col != "topic" else "left")
    for row in bytes_table(volume):
        t.add_row(*row)
    return t


def nodes_apart(counts: dict[str, int], shown: int = 6) -> str:
    """``n12 (4 periods), n00 (2), ...``: the nodes named most often first, at most ``shown``."""
    most = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    text = ", ".join(
        f"{n} ({c}{(' period' if c == 1 else ' periods') if i == 0 else ''})" for i, (n, c) in enumerate(most[:shown])
    )
    return text + (f", ... ({len(most) - shown} more)" if len(most) > shown else "")


def _selections(jobs: dict[str, dict[str, Any]]) -> str | None:
    """One line per job: the metrics the reduced stream keeps now and the share of values sent,
    the nodes pursuit named as standing apart (most often first, with the number of periods), and
    the nodes in violation of the contract when a contract stage runs."""
    lines = []
    for job, j in sorted(jobs.items()):
        parts = []
        if "kept" in j:
            kept = ", ".join(j["kept"]) if j["kept"] else "everything (no selection yet)"
            share = j["values_out"] / j["values_in"] if j["values_in"] else 0.0
            parts.append(f"keeps {kept} (selection v{j['selection_version']}); {share:.0%} of the values sent")
        if j.get("nodes_apart"):  # reduce's pursuit named nodes as standing apart (#32)
            parts.append("nodes apart: " + nodes_apart(j["nodes_apart"]))
        seen, fewest = j.get("nodes_seen"), j.get("fewest_nodes")
        if seen is not None and fewest is not None and fewest < seen:  # the selection missed nodes
            parts.append(
                f"pursuit analysed only {fewest} of {seen} nodes in some periods (the others' samples came "
                "after those periods closed: replay with --speed, or perfsift analyze)"
            )
        if "contract_nodes" in j:
            states = j["contract_nodes"]
            bad = sorted(n for n, s in states.items() if s == "violated")
            names = f" ({', '.join(bad[:8])}{', ...' if len(bad) > 8 else ''})" if bad else ""
            parts.append(f"contract violated on {len(bad)} of {len(states)} nodes{names}")
        if parts:
            lines.append(f"{job}: " + "; ".join(parts))
    return "\n".join(lines[:10]) or None
