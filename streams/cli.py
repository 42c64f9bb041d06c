"""The ``perfsift`` command line."""

from __future__ import annotations

import contextlib
import logging
import signal
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Annotated, Any

import orjson
import typer
from confluent_kafka import Consumer, KafkaError, KafkaException
from perfsift.producers import demo_trace_path, number_samples
from perfsift.producers.traces import iter_samples
from perfsift.schemas import RecordError
from perfsift.streams.broker import BrokerError, EmbeddedBroker, bootstrap_or_embedded
from perfsift.streams.clean_cli import analyze_command, clean_command, kb_app, quality_command
from perfsift.streams.config import (
    ConfigError,
    PipelineConfig,
    kafka_properties,
    load_pipeline,
    parse_props,
    parse_settings,
)
from perfsift.streams.http import HealthServer
from perfsift.streams.logs import LogFormat, LogLevel, current_logging, setup_logging
from perfsift.streams.model_cli import balance_command, predict_command
from perfsift.streams.procs import StageProcess
from perfsift.streams.producer_cli import replay_command, sample_command, synth_command
from perfsift.streams.publish import publish_samples
from perfsift.streams.pursuit_tool import pursuit as pursuit_command
from perfsift.streams.replay import replay
from perfsift.streams.report import report_command
from perfsift.streams.runner import (
    StageError,
    StageRunner,
    consumer_settings,
    merge_summaries,
    run_in_thread,
    wait_assigned,
)
from perfsift.streams.tools import contract_app
from perfsift.streams.tools import forecast as forecast_command
from perfsift.streams.tools import select_metrics as select_metrics_command
from perfsift.streams.topics import assign_from_start, create_pipeline_topics, pipeline_topics, require_topic
from perfsift.streams.ui import BootstrapOpt, ConfigOpt, PropsOpt, console, fail, out
from rich.live import Live
from rich.table import Table

from perfsift import __version__

app = typer.Typer(
    help="perfsift: reduce performance-monitoring data in flight (streaming operators on Kafka).",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

SetOpt = Annotated[
    list[str] | None,
    typer.Option("--set", help="Override a pipeline setting, e.g. --set partitions=12 (beats YAML and PERFSIFT_*)."),
]


def _pipeline(config: Path | None, settings: list[str] | None = None) -> PipelineConfig:
    try:
        return load_pipeline(config, overrides=parse_settings(settings))
    except ConfigError as exc:
        raise fail(str(exc)) from None


@contextlib.contextmanager
def _stop_on_signals(stop: threading.Event) -> Iterator[None]:
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


@app.command()
def broker(
    port: Annotated[int | None, typer.Option(help="Port on 127.0.0.1 (default: a free one).")] = None,
    config: ConfigOpt = None,
    create_topics: Annotated[bool, typer.Option(help="Create the pipeline's topics once it is up.")] = True,
) -> None:
    """Run the embedded Kafka-protocol broker (Tansu, in memory) in the foreground until Ctrl-C."""
    cfg = _pipeline(config)
    stop = threading.Event()
    try:
        with EmbeddedBroker(port=port) as b, _stop_on_signals(stop):
            if create_topics:
                create_pipeline_topics(cfg, {"bootstrap.servers": b.bootstrap})
            out.print(f"broker listening on [bold]{b.bootstrap}[/bold] (in-memory; data is lost when it stops)")
            out.print(f"use: perfsift ... --bootstrap {b.bootstrap}    stop: Ctrl-C")
            while not stop.wait(0.5):
                if b.proc is not None and b.proc.poll() is not None:
                    raise fail(f"the broker exited with code {b.proc.returncode}; log: {b.log_file}", 1)
    except BrokerError as exc:
        raise fail(str(exc), 1) from None


@app.command()
def topics(
    bootstrap: BootstrapOpt = None,
    kafka_prop: PropsOpt = None,
    config: ConfigOpt = None,
    settings: SetOpt = None,
) -> None:
    """Create the pipeline's topics that do not exist yet (partitions, retention, compaction)."""
    cfg = _pipeline(config, settings)
    if not bootstrap:
        raise fail("topics needs --bootstrap (or PERFSIFT_BOOTSTRAP)")
    created = create_pipeline_topics(cfg, kafka_properties(bootstrap, parse_props(kafka_prop)))
    names, _ = pipeline_topics(cfg)
    out.print(f"{len(created)} topics created, {len(names) - len(created)} existed: {', '.join(names)}")


@app.command()
def produce(
    file: Annotated[
        Path | None, typer.Argument(help="Trace: SDDF, CSV or JSONL (.gz accepted).", exists=True, dir_okay=False)
    ] = None,
    demo: Annotated[bool, typer.Option("--demo", help="Publish the bundled demo trace instead of FILE.")] = False,
    topic: Annotated[str, typer.Option("--topic", "-t", help="Topic to publish to.")] = "perf.raw",
    bootstrap: BootstrapOpt = None,
    kafka_prop: PropsOpt = None,
    job: Annotated[str | None, typer.Option(help="Set this job on every sample.")] = None,
) -> None:
    """Publish a trace's samples to a topic as fast as possible, keyed by node; seq is numbered per
    (job, node) where absent. `perfsift replay` keeps the trace's timing."""
    if not bootstrap:
        raise fail("produce needs --bootstrap (or PERFSIFT_BOOTSTRAP); start one with `perfsift broker`")
    if (file is None) == (not demo):
        raise fail("give a FILE or --demo (not both)")
    path = demo_trace_path() if demo else file
    assert path is not None
    props = kafka_properties(bootstrap, parse_props(kafka_prop))
    try:
        require_topic(props, topic)
    except ValueError as exc:
        raise fail(f"{exc}; `perfsift topics -b {bootstrap}` creates the pipeline's topics") from None
    errors: list[RecordError] = []
    samples = number_samples(iter_samples(path, on_error=errors.append), job)
    n = publish_samples(props, topic, samples, console=console)
    out.print(f"published {n} samples to {topic}; {len(errors)} lines rejected")
    for e in errors[:10]:
        console.print(f"  [yellow]{e}[/yellow]")
    if errors:
        raise typer.Exit(1)


@app.command()
def worker(
    stage: Annotated[str, typer.Argument(help="Name of the stage in the pipeline file.")],
    config: ConfigOpt = None,
    bootstrap: BootstrapOpt = None,
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
) -> None:
    """Run one stage of the pipeline until SIGTERM/Ctrl-C (drains, commits, exits 0)."""
    cfg = _pipeline(config, settings)
    st = cfg.stage(stage) if stage in cfg.stages else None
    if st is None:
        raise fail(f"{cfg.source}: no stage {stage!r}; stages are: {', '.join(cfg.stages)}")
    if not bootstrap:
        raise fail("worker needs --bootstrap (or PERFSIFT_BOOTSTRAP); `perfsift run` runs everything embedded")
    props = kafka_properties(bootstrap, parse_props(kafka_prop))
    runner = StageRunner(st, cfg, props)
    try:  # bound before Kafka is asked anything: a local mistake fails at once
        health = HealthServer(runner, http_port, http_host) if http_port else None
    except OSError as exc:
        raise fail(
            f"cannot serve /healthz and /metrics on {http_host}:{http_port}: {exc.strerror or exc}; "
            "choose another --http-port (0 turns the endpoints off)"
        ) from None
    if create_topics:
        create_pipeline_topics(cfg, props)
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
    with _stop_on_signals(runner.stop_event):
        try:
            stats = runner.run(idle_exit)
        except StageError as exc:
            raise fail(str(exc), 1) from None
        finally:
            if health is not None:
                health.stop()
    typer.echo(orjson.dumps(stats.as_dict()).decode(), err=True)


@app.command()
def tail(
    topic: Annotated[str, typer.Argument(help="Topic to read.")],
    bootstrap: BootstrapOpt = None,
    kafka_prop: PropsOpt = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print raw JSON lines.")] = False,
    from_beginning: Annotated[bool, typer.Option("--from-beginning/--from-end")] = True,
    max_records: Annotated[int | None, typer.Option("--max", "-n", help="Stop after this many records.")] = None,
    idle: Annotated[float | None, typer.Option(help="Stop after this many seconds without a record.")] = None,
) -> None:
    """Print the records of a topic (pretty, or --json for one JSON line each)."""
    from confluent_kafka import Consumer

    if not bootstrap:
        raise fail("tail needs --bootstrap (or PERFSIFT_BOOTSTRAP)")
    props = kafka_properties(bootstrap, parse_props(kafka_prop))
    try:
        require_topic(props, topic)
    except ValueError as exc:
        raise fail(str(exc)) from None
    settings = consumer_settings(props, f"perfsift.tail.{time.time_ns()}")
    c = Consumer({**settings, "auto.offset.reset": "earliest" if from_beginning else "latest"})
    c.subscribe([topic])
    stop = threading.Event()
    n, last = 0, time.monotonic()
    try:
        with _stop_on_signals(stop):
            while not stop.is_set() and (max_records is None or n < max_records):
                m = c.poll(0.2)
                if m is None or m.error() is not None:
                    if idle is not None and time.monotonic() - last > idle:
                        break
                    continue
                last = time.monotonic()
                n += 1
                value = m.value() or b""
                if as_json:
                    sys.stdout.write(value.decode("utf-8", "replace") + "\n")
                    continue
                try:
                    rec = orjson.loads(value)
                except orjson.JSONDecodeError:
                    rec = value.decode("utf-8", "replace")
                key = (m.key() or b"").decode(errors="replace")
                out.print(f"[dim]{m.topic()}:{m.partition()}:{m.offset()} key={key}[/dim]")
                out.print_json(data=rec) if isinstance(rec, dict | list) else out.print(rec)
    finally:
        c.close()


def _stats_table(runners: list[StageRunner], published: int, elapsed: float) -> Table:
    t = Table(title=f"perfsift run - {published} samples published, {elapsed:.1f} s", caption=_selections(runners))
    for col in ("stage", "in", "out", "dead", "MB in", "MB out", "rec/s"):
        t.add_column(col, justify="right" if col != "stage" else "left")
    for r in runners:
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


def _selections(runners: list[StageRunner]) -> str | None:
    """One line per job: the metrics the reduced stream keeps now and the share of values sent,
    and the nodes in violation of the contract when a contract stage runs."""
    lines = []
    for job, j in sorted(merge_summaries(r.job_summaries() for r in runners).items()):
        parts = []
        if "kept" in j:
            kept = ", ".join(j["kept"]) if j["kept"] else "everything (no selection yet)"
            share = j["values_out"] / j["values_in"] if j["values_in"] else 0.0
            parts.append(f"keeps {kept} (selection v{j['selection_version']}); {share:.0%} of the values sent")
        if "contract_nodes" in j:
            states = j["contract_nodes"]
            bad = sorted(n for n, s in states.items() if s == "violated")
            names = f" ({', '.join(bad[:8])}{', ...' if len(bad) > 8 else ''})" if bad else ""
            parts.append(f"contract violated on {len(bad)} of {len(states)} nodes{names}")
        if parts:
            lines.append(f"{job}: " + "; ".join(parts))
    return "\n".join(lines[:10]) or None


#: where ``perfsift run`` on the embedded broker writes its report unless told otherwise
DEFAULT_REPORT = Path("perfsift-report")


@app.command()
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
    timeout: Annotated[float, typer.Option(help="Give up waiting for the pipeline after this many seconds.")] = 300.0,
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
        typer.Option(help="Replay at this many trace seconds per second (default: as fast as possible)."),
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
    follow: Annotated[
        bool,
        typer.Option(
            "--follow",
            help="Keep running on live input on perf.raw until Ctrl-C, after the replay of --trace if one is given "
            "(no demo replay).",
        ),
    ] = False,
) -> None:
    """Run the whole pipeline and replay a trace through it, then print a summary.

    With no --bootstrap: starts the embedded broker, creates the topics, runs every stage of the
    pipeline, replays the bundled demo trace into perf.raw and waits until every stage has
    processed every record. With --follow: keeps running, with the live view, on whatever
    producers publish to perf.raw, until Ctrl-C or SIGTERM. Ends with a summary and, on the
    embedded broker, a report folder (./perfsift-report: the outputs and report.html).
    """
    from perfsift.streams.analyze import with_options

    cfg = with_options(_pipeline(config, settings), perf_metric, contract)
    trace_path = trace or (None if follow else demo_trace_path())
    stop = threading.Event()
    failures: list[BaseException] = []
    try:
        with bootstrap_or_embedded(bootstrap) as (bs, embedded), _stop_on_signals(stop):
            if embedded is not None:
                console.print(f"embedded broker on {bs} (in memory)")
            props = kafka_properties(bs, parse_props(kafka_prop))
            create_pipeline_topics(cfg, props)
            runners, join_all = start_stages(cfg, props, embedded is not None, processes, failures)
            # Start replaying once every stage owns its partitions: otherwise the first stages would
            # meet a backlog and later ones see nodes in bursts, partition by partition.
            with console.status("waiting for the stages to join their consumer groups"):
                wait_assigned(runners, abort=lambda: bool(failures) or any(_failed(r) for r in runners))
            t0 = time.monotonic()
            errors: list[RecordError] = []
            if trace_path is None:
                published = 0
                console.print(
                    f"following {cfg.topic('perf.raw')} on {bs}; publish samples there, e.g. "
                    f"perfsift produce FILE -b {bs}. Ctrl-C stops."
                )
            elif speed:  # paced: event time advances evenly over the nodes, as from live producers
                rstats = replay(props, cfg.topic("perf.raw"), trace_path, speed=speed, console=console, stop=stop)
                published, errors = rstats.published, rstats.errors
            else:
                samples = number_samples(iter_samples(trace_path, on_error=errors.append))
                published = publish_samples(
                    props, cfg.topic("perf.raw"), samples, console=console, label=f"replaying {trace_path.name}"
                )
            expected = _expected_inputs(cfg, runners, published)
            with Live(
                _stats_table(runners, published, 0.0), console=console, refresh_per_second=4, transient=True
            ) as live:
                while not stop.is_set() and not failures:
                    failures += [RuntimeError(e) for r in runners if (e := _failed(r))]
                    live.update(_stats_table(runners, published, time.monotonic() - t0))
                    if not follow and all(r.stats.records_in >= expected(r) for r in runners):
                        break
                    if not follow and time.monotonic() - t0 > timeout:
                        raise fail(f"the pipeline did not process every record within {timeout:.0f} s", 1)
                    time.sleep(0.1)
                elapsed = time.monotonic() - t0
                jobs = merge_summaries(r.job_summaries() for r in runners)  # before the chains go
                caption = _selections(runners)
                for r in runners:
                    r.stop()
                join_all()
            if failures:
                raise fail(f"a stage failed: {failures[0]}", 1)
            summary = {
                "published": published,
                "rejected_lines": len(errors),
                "elapsed_s": round(elapsed, 3),
                "guarantee": runners[0].guarantee if runners else None,
                "stages": [r.stats.as_dict() for r in runners],
                "jobs": jobs,
            }
            final = _stats_table(runners, published, elapsed)
            final.caption = caption
            out.print(final)
            dead = sum(r.stats.dead_letters for r in runners)
            if follow:  # live input: no count to check against
                first = [r for r in runners if r.stage.input == "perf.raw"]
                out.print(
                    f"followed for {elapsed:.0f} s: {sum(r.stats.records_in for r in first):,} samples read from "
                    f"perf.raw ({published:,} replayed), {dead:,} dead letters, {len(errors)} rejected lines"
                )
            else:
                processed = all(r.stats.records_in == expected(r) for r in runners)
                out.print(
                    f"{'every' if processed else 'NOT every'} sample processed: {published:,} published, "
                    f"{dead:,} dead letters, {len(errors)} rejected lines"
                )
            if summary_json:
                summary_json.write_bytes(orjson.dumps(summary, option=orjson.OPT_INDENT_2))
            if report is None and embedded is not None:
                report = DEFAULT_REPORT
            if report is not None and not no_report:
                page = _write_report(props, cfg, runners, report)
                out.print(f"report: {page}")
    except BrokerError as exc:
        raise fail(str(exc), 1) from None


def start_stages(
    cfg: PipelineConfig, props: dict[str, str], embedded: bool, processes: bool, failures: list[BaseException]
) -> tuple[list[Any], Callable[[], None]]:
    """Every stage of the pipeline started, as child processes (:class:`StageProcess`) or as threads
    of this process; returns them and a function that waits for them after ``stop()``."""
    if processes:
        procs = [StageProcess(st, cfg, props, embedded) for st in cfg.stages.values()]

        def join_procs() -> None:
            for p in procs:
                p.join(60)

        return procs, join_procs
    runners = [StageRunner(st, cfg, props, embedded=embedded) for st in cfg.stages.values()]
    threads = [run_in_thread(r, on_error=failures.append) for r in runners]

    def join_threads() -> None:
        for th in threads:
            th.join(30)

    return runners, join_threads


def _failed(r: Any) -> str | None:
    return getattr(r, "error", None)


def read_topic_to_end(props: dict[str, str], topic: str, timeout: float = 60.0) -> list[bytes]:
    """Every record value of a topic, read without a consumer group (all partitions assigned from
    the beginning until each reports its end), so it takes no group join."""
    c = Consumer(consumer_settings(props, f"perfsift-reader-{uuid.uuid4().hex[:8]}") | {"enable.partition.eof": True})
    try:
        parts = assign_from_start(c, topic)
        done: set[int] = set()
        values: list[bytes] = []
        deadline = time.monotonic() + timeout
        while len(done) < len(parts) and time.monotonic() < deadline:
            for m in c.consume(5000, 0.2):
                err = m.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        done.add(m.partition())  # type: ignore[arg-type]
                    continue
                v = m.value()
                if v is not None:
                    values.append(v)
        return values
    finally:
        c.close()


def _write_report(props: dict[str, str], cfg: PipelineConfig, runners: list[StageRunner], folder: Path) -> Path:
    """The run's outputs read back from their topics into ``folder`` (the layout of perfsift analyze),
    a summary, and the HTML report."""
    from perfsift.streams.analyze import FILES
    from perfsift.streams.report import build_report

    folder.mkdir(parents=True, exist_ok=True)
    produced = {o for r in runners for o in r.stage.written}
    with console.status("collecting the outputs for the report"):
        for topic, name in FILES.items():
            if topic not in produced:
                continue
            values = read_topic_to_end(props, cfg.topic(topic))
            seen = dict.fromkeys(values)  # at-least-once duplicates are identical: keep one of each
            (folder / name).write_bytes(b"".join(v + b"\n" for v in seen))
    stages = {r.stage.name: r.stats.as_dict() for r in runners}
    summary = {"stages": stages}
    smoothed = sum(s["bytes_in"] for n, s in stages.items() if cfg.stage(n).input == "perf.smoothed.byjob")
    reduced = sum(s["bytes_out"] for n, s in stages.items() if "perf.reduced" in cfg.stage(n).outputs)
    summary["reduction_ratio"] = reduced / smoothed if smoothed else None  # type: ignore[assignment]
    (folder / "summary.json").write_bytes(orjson.dumps(summary, option=orjson.OPT_INDENT_2))
    return build_report(folder)


def _expected_inputs(cfg: PipelineConfig, runners: list[StageRunner], published: int) -> Any:
    """How many records each stage should see: the replayed count for stages reading perf.raw,
    and the upstream stage's outputs for the others."""
    producers = {o: r for r in runners for o in r.stage.written}

    def expected(r: StageRunner) -> int:
        if r.stage.input == "perf.raw":
            return published
        up = producers.get(r.stage.input)
        return up.stats.by_topic.get(r.stage.input, 0) if up is not None else 0

    return expected


app.add_typer(contract_app, name="contract")
app.command("forecast")(forecast_command)
app.command("predict")(predict_command)
app.command("balance")(balance_command)
app.command("select-metrics")(select_metrics_command)
app.command("pursuit")(pursuit_command)
app.command("replay")(replay_command)
app.command("sample")(sample_command)
app.command("synth")(synth_command)
app.command("clean")(clean_command)
app.command("analyze")(analyze_command)
app.command("report")(report_command)
app.command("quality")(quality_command)
app.add_typer(kb_app, name="kb")


def main() -> None:
    try:
        app()
    except KafkaException as exc:  # e.g. no broker at --bootstrap: one line, not a traceback
        err = exc.args[0] if exc.args else None
        what = err.str() if isinstance(err, KafkaError) else str(exc)
        fail(f"Kafka: {what} (check --bootstrap / PERFSIFT_BOOTSTRAP and the -X client settings)")
        sys.exit(1)


__all__ = ["app", "main"]
