"""``perfsift broker``, ``perfsift topics``, ``perfsift produce`` and ``perfsift tail``: a broker to
try things on, the pipeline's topics, and records in and out of a topic."""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path
from typing import Annotated

import orjson
import typer
from confluent_kafka import Consumer
from perfsift.producers import demo_trace_path, number_samples
from perfsift.producers.traces import iter_samples
from perfsift.schemas import RecordError
from perfsift.schemas.frames import is_frame
from perfsift.schemas.messages import decode_message
from perfsift.streams.broker import BrokerError, EmbeddedBroker
from perfsift.streams.cli.ui import (
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
from perfsift.streams.clients import (
    consumer_settings,
    create_pipeline_topics,
    kafka_properties,
    parse_props,
    require_topic,
)
from perfsift.streams.publish import publish_samples


def broker(
    port: Annotated[int | None, typer.Option(help="Port on 127.0.0.1 (default: a free one).")] = None,
    config: ConfigOpt = None,
    create_topics: Annotated[bool, typer.Option(help="Create the pipeline's topics once it is up.")] = True,
) -> None:
    """Run the embedded Kafka-protocol broker (Tansu, in memory) in the foreground until Ctrl-C."""
    cfg = pipeline_from_flags(config)
    stop = threading.Event()
    try:
        with EmbeddedBroker(port=port) as b, stop_on_signals(stop):
            if create_topics:
                create_pipeline_topics(cfg, {"bootstrap.servers": b.bootstrap})
            out.print(f"broker listening on [bold]{b.bootstrap}[/bold] (in-memory; data is lost when it stops)")
            out.print(f"use: perfsift ... --bootstrap {b.bootstrap}    stop: Ctrl-C")
            while not stop.wait(0.5):
                if b.proc is not None and b.proc.poll() is not None:
                    raise fail(f"the broker exited with code {b.proc.returncode}; log: {b.log_file}", 1)
    except BrokerError as exc:
        raise fail(str(exc), 1) from None


def topics(
    bootstrap: BootstrapNeededOpt = None,
    kafka_prop: PropsOpt = None,
    config: ConfigOpt = None,
    settings: SetOpt = None,
) -> None:
    """Create the pipeline's topics that do not exist yet (partitions, retention, compaction)."""
    cfg = pipeline_from_flags(config, settings)
    if not bootstrap:
        raise fail("topics needs --bootstrap (or PERFSIFT_BOOTSTRAP)")
    created = create_pipeline_topics(cfg, kafka_properties(bootstrap, parse_props(kafka_prop), file=cfg.kafka))
    names, _ = cfg.topics()
    out.print(f"{len(created)} topics created, {len(names) - len(created)} existed: {', '.join(names)}")


def produce(
    file: Annotated[
        Path | None, typer.Argument(help="Trace: SDDF, CSV or JSONL (.gz accepted).", exists=True, dir_okay=False)
    ] = None,
    demo: Annotated[bool, typer.Option("--demo", help="Publish the bundled demo trace instead of FILE.")] = False,
    topic: Annotated[str, typer.Option("--topic", "-t", help="Topic to publish to.")] = "perf.raw",
    bootstrap: BootstrapNeededOpt = None,
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


def tail(
    topic: Annotated[str, typer.Argument(help="Topic to read.")],
    bootstrap: BootstrapNeededOpt = None,
    kafka_prop: PropsOpt = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print raw JSON lines.")] = False,
    from_beginning: Annotated[bool, typer.Option("--from-beginning/--from-end")] = True,
    max_records: Annotated[int | None, typer.Option("--max", "-n", help="Stop after this many records.")] = None,
    idle: Annotated[float | None, typer.Option(help="Stop after this many seconds without a record.")] = None,
) -> None:
    """Print the records of a topic (pretty, or --json for one JSON line each)."""

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
        with stop_on_signals(stop):
            while not stop.is_set() and (max_records is None or n < max_records):
                m = c.poll(0.2)
                if m is None or m.error() is not None:
                    if idle is not None and time.monotonic() - last > idle:
                        break
                    continue
                last = time.monotonic()
                n += 1
                value = m.value() or b""
                if as_json and not is_frame(value):
                    sys.stdout.write(value.decode("utf-8", "replace") + "\n")
                    continue
                rec = decode_message(value)  # a column frame: its samples; Avro, JSON: the record
                if as_json:
                    sys.stdout.write("".join(orjson.dumps(r).decode() + "\n" for r in rec))
                    continue
                key = (m.key() or b"").decode(errors="replace")
                out.print(f"[dim]{m.topic()}:{m.partition()}:{m.offset()} key={key}[/dim]")
                out.print_json(data=rec) if isinstance(rec, dict | list) else out.print(rec)
    finally:
        c.close()
