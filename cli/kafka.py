"""``perfsift broker``, ``perfsift topics``, ``perfsift produce`` and ``perfsift tail``: a broker to
try things on, the pipeline's topics, and records in and out of a topic."""

from __future__ import annotations

import sys
import threading
from pathlib import Path
from typing import Annotated, Any

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
from perfsift.schemas import RecordError
from perfsift.schemas.registry import use_registry
from perfsift.streams.tail import OFFSET_HELP


def broker(
    port: Annotated[int | None, typer.Option(help="Port on 127.0.0.1 (default: a free one).")] = None,
    config: ConfigOpt = None,
    create_topics: Annotated[bool, typer.Option(help="Create the pipeline's topics once it is up.")] = True,
    client_lib: Annotated[
        bool,
        typer.Option(
            "--client-lib",
            help="Print a folder with a librdkafka new enough for this broker, for "
            "LD_LIBRARY_PATH of kcat or collectd built on librdkafka < 2.2 (Debian 12's), and exit.",
        ),
    ] = False,
) -> None:
    """Run the embedded Kafka-protocol broker (Tansu, in memory) in the foreground until Ctrl-C."""
    from perfsift.streams.broker import BrokerError, EmbeddedBroker
    from perfsift.streams.clients import create_pipeline_topics

    if client_lib:
        from perfsift.streams.broker import client_library_dir

        try:
            typer.echo(str(client_library_dir()))
        except BrokerError as exc:
            raise fail(str(exc), 1) from None
        return
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
    from perfsift.streams.clients import create_pipeline_topics, kafka_properties, parse_props

    cfg = pipeline_from_flags(config, settings)
    if not bootstrap:
        raise fail("topics needs --bootstrap (or PERFSIFT_BOOTSTRAP)")
    created = create_pipeline_topics(cfg, kafka_properties(bootstrap, parse_props(kafka_prop), file=cfg.kafka))
    names, _ = cfg.topics()
    out.print(f"{len(created)} topics created, {len(names) - len(created)} existed: {', '.join(names)}")


def produce_raw(props: dict[str, str], topic: str, files: list[Path], key: str | None, whole: bool) -> int:
    """Publish bytes as they are, as ``kcat -P`` does: each FILE as one message, or standard input
    one message per line (``whole``: all of it as one message); keyed by ``key``."""
    from confluent_kafka import Producer
    from perfsift.streams.clients import producer_settings

    failed: list[str] = []

    def delivered(err: Any, msg: Any) -> None:
        if err is not None:
            failed.append(str(err))

    producer = Producer(producer_settings(props) | {"on_delivery": delivered})
    k = key.encode() if key is not None else None

    def send(value: bytes) -> None:
        while True:
            try:
                producer.produce(topic, value, k)
                producer.poll(0)
                return
            except BufferError:
                producer.poll(0.05)

    n = 0
    if files:
        for f in files:
            send(f.read_bytes())
            n += 1
    elif whole:
        send(sys.stdin.buffer.read())
        n = 1
    else:
        for line in sys.stdin.buffer:
            if line.strip():
                send(line.rstrip(b"\r\n"))
                n += 1
    left = producer.flush(60)
    if left or failed:
        raise fail(f"{left + len(failed)} of {n} messages not acknowledged" + (f": {failed[0]}" if failed else ""), 1)
    return n


def produce(
    files: Annotated[
        list[Path] | None,
        typer.Argument(
            help="Trace: SDDF, CSV or JSONL (.gz accepted); with --raw: files, each one message.",
            exists=True,
            dir_okay=False,
        ),
    ] = None,
    demo: Annotated[bool, typer.Option("--demo", help="Publish the bundled demo trace instead of FILE.")] = False,
    topic: Annotated[str, typer.Option("--topic", "-t", help="Topic to publish to.")] = "perf.raw",
    bootstrap: BootstrapNeededOpt = None,
    kafka_prop: PropsOpt = None,
    job: Annotated[str | None, typer.Option(help="Set this job on every sample.")] = None,
    config: ConfigOpt = None,
    raw: Annotated[
        bool,
        typer.Option(
            "--raw",
            help="Publish bytes as they are, like kcat -P: each FILE as one message, or "
            "standard input one message per line (--whole: as one message).",
        ),
    ] = False,
    key: Annotated[
        str | None, typer.Option("--key", "-k", help="With --raw: the messages' key (e.g. the node).")
    ] = None,
    whole: Annotated[bool, typer.Option("--whole", help="With --raw: standard input as one message.")] = False,
) -> None:
    """Publish a trace's samples to a topic as fast as possible, keyed by node, in the pipeline's
    encoding (--config; JSON by default); seq is numbered per (job, node) where absent. `perfsift
    replay` keeps the trace's timing. With --raw, any bytes (a scrape, Telegraf lines, collectd
    JSON) for `perfsift ingest`: works with every broker perfsift works with, the embedded one
    included (Debian 12's kcat cannot talk to it, docs/ingest.md)."""
    from perfsift.producers import demo_trace_path, number_samples
    from perfsift.producers.publish import publish_samples
    from perfsift.producers.traces import iter_samples
    from perfsift.streams.clients import kafka_properties, parse_props, require_topic

    if not bootstrap:
        raise fail("produce needs --bootstrap (or PERFSIFT_BOOTSTRAP); start one with `perfsift broker`")
    if raw:
        if demo or job:
            raise fail("--raw publishes bytes: --demo and --job are for samples")
        cfg = pipeline_from_flags(config)
        props = kafka_properties(bootstrap, parse_props(kafka_prop), file=cfg.kafka)
        try:
            require_topic(props, topic)
        except ValueError as exc:
            raise fail(f"{exc}; `perfsift ingest --topic {topic} ...` creates its input topic") from None
        n = produce_raw(props, topic, list(files or []), key, whole)
        out.print(f"published {n} messages to {topic}")
        return
    if key is not None or whole:
        raise fail("--key and --whole go with --raw")
    if files and len(files) > 1:
        raise fail("give one trace FILE (several files: --raw)")
    file = files[0] if files else None
    if (file is None) == (not demo):
        raise fail("give a FILE or --demo (not both)")
    path = demo_trace_path() if demo else file
    assert path is not None
    cfg = pipeline_from_flags(config)
    props = kafka_properties(bootstrap, parse_props(kafka_prop), file=cfg.kafka)
    try:
        require_topic(props, topic)
    except ValueError as exc:
        raise fail(f"{exc}; `perfsift topics -b {bootstrap}` creates the pipeline's topics") from None
    errors: list[RecordError] = []
    samples = number_samples(iter_samples(path, on_error=errors.append), job)
    n = publish_samples(props, topic, samples, console=console, pipeline=cfg)
    out.print(f"published {n} samples to {topic}; {len(errors)} lines rejected")
    for e in errors[:10]:
        console.print(f"  [yellow]{e}[/yellow]")
    if errors:
        raise typer.Exit(1)


def tail(
    topic: Annotated[str, typer.Argument(help="Topic to read.")],
    bootstrap: BootstrapNeededOpt = None,
    kafka_prop: PropsOpt = None,
    config: ConfigOpt = None,
    partition: Annotated[
        list[int] | None, typer.Option("--partition", "-p", help="Read only this partition (repeatable).")
    ] = None,
    offset: Annotated[str, typer.Option("--offset", "-o", help=f"Where to start: {OFFSET_HELP}.")] = "beginning",
    key: Annotated[str | None, typer.Option("--key", "-k", help="Only records with this message key.")] = None,
    fmt: Annotated[
        str | None,
        typer.Option(
            "--format",
            "-f",
            help="kcat-style template per record: %s value (decoded, JSON on one line), %k key, %t topic, "
            "%p partition, %o offset, %T timestamp (ms), %S / %K value / key bytes, %E encoding, %% a "
            "percent sign; \\n \\t escapes; no newline is added (like kcat), e.g. -f '%p %o %k %s\\n'.",
        ),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON line per record (the decoded value).")] = False,
    group: Annotated[
        str | None, typer.Option("--group", "-G", help="Consume as a member of this consumer group (default: none).")
    ] = None,
    max_records: Annotated[int | None, typer.Option("--max", "-n", help="Stop after this many records.")] = None,
    exit_at_end: Annotated[
        bool, typer.Option("--exit", "-e", help="Stop at the end of the partitions (as kcat -e).")
    ] = False,
    idle: Annotated[float | None, typer.Option(help="Stop after this many seconds without a record.")] = None,
) -> None:
    """Print the records of a topic, decoded whatever their encoding: JSON, Avro single-object,
    Schema Registry Avro (the registry of the --config file's schema_registry: section or
    PERFSIFT_SR_URL) or OTLP protobuf metrics. Without --group no consumer group is joined (the
    partitions are assigned, nothing is committed). The embedded broker can report a partition's
    end short by its last batch, so -o -N and -e are approximate there."""
    from perfsift.streams.clients import kafka_properties, parse_props, require_topic
    from perfsift.streams.tail import decode_message, parse_offset, render, value_text
    from perfsift.streams.tail import read as read_topic

    if not bootstrap:
        raise fail("tail needs --bootstrap (or PERFSIFT_BOOTSTRAP)")
    try:
        at = parse_offset(offset)
    except ValueError as exc:
        raise fail(str(exc)) from None
    cfg = pipeline_from_flags(config)
    if cfg.schema_registry.get("url"):
        use_registry(cfg.schema_registry)
    props = kafka_properties(bootstrap, parse_props(kafka_prop), file=cfg.kafka)
    try:
        require_topic(props, topic)
    except ValueError as exc:
        raise fail(str(exc)) from None
    template = "%s\\n" if as_json and fmt is None else fmt
    stop = threading.Event()
    n = 0
    messages = read_topic(
        props, topic, partition, at, key.encode() if key is not None else None, group, exit_at_end, idle, stop
    )
    try:
        with stop_on_signals(stop):
            for m in messages:
                n += 1
                decoded, why = decode_message(m)
                if template is not None:
                    sys.stdout.write(render(template, m, decoded))
                else:
                    k = (m.key() or b"").decode(errors="replace")
                    what = decoded.encoding if decoded is not None else f"undecodable: {why}"
                    out.print(f"[dim]{m.topic()}:{m.partition()}:{m.offset()} key={k} ({what})[/dim]")
                    rec = decoded.record if decoded is not None else value_text(None, m.value())
                    out.print_json(data=rec, default=str) if isinstance(rec, dict | list) else out.print(rec)
                if max_records is not None and n >= max_records:
                    break
    except ValueError as exc:
        raise fail(str(exc)) from None
    finally:
        messages.close()
        sys.stdout.flush()
