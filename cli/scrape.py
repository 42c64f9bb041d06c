"""``perfsift scrape``: Prometheus exporters into a topic (for ``perfsift ingest --format
prometheus_text``) or, decoded in process, straight into perf.raw (:mod:`perfsift.producers.scrape`)."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Annotated, Any

import orjson
import typer
from perfsift.cli.producers import parse_duration
from perfsift.cli.ui import (
    BootstrapNeededOpt,
    ConfigOpt,
    PropsOpt,
    console,
    fail,
    pipeline_from_flags,
    stop_on_signals,
)
from perfsift.producers.scrape import Target


def _raw_emitter(props: dict[str, str], topic: str, map_file: Path | None, cfg: Any) -> tuple[Any, Any]:
    """emit(target, body, time) decoding each scrape into samples published to ``topic``, and the
    publisher (flushed at the end)."""
    from perfsift.formats import Assembler, IngestSettings, decoder_for, load_map
    from perfsift.producers.publish import SamplePublisher
    from perfsift.schemas.batches import batch_to_samples

    asm = Assembler(IngestSettings("prometheus_text", load_map("prometheus_text", map_file), 0.0))
    asm.max_metrics = cfg.limits.max_metrics_per_sample  # as the ingest stage does
    decode = decoder_for(asm)
    pub = SamplePublisher(props, topic, pipeline=cfg)
    lock = threading.Lock()

    def emit(target: Target, body: bytes, when: float) -> None:
        from perfsift.formats import IngestError

        with lock:  # one assembler: counters' previous points per (node, series)
            try:
                decode(body, target.node.encode(), when)
            except IngestError as exc:
                console.print(f"[yellow]{target.url}[/yellow]: {exc.reason}")
                return
            for _, reason in asm.take_problems():
                console.print(f"[yellow]{target.url}[/yellow]: {reason}")
            rows = asm.due(0.0, everything=True)  # a scrape is whole: nothing to wait for
            if rows:
                for sample in batch_to_samples(asm.to_batch(rows)):
                    pub.send(sample)
                pub.producer.poll(0)

    return emit, pub


def scrape_command(
    targets: Annotated[
        list[str],
        typer.Argument(
            help="Exporters: [NODE=]URL; host:port means http://host:port/metrics; the node defaults "
            "to the URL's host (without the port)."
        ),
    ],
    topic: Annotated[
        str, typer.Option("--topic", "-t", help="Topic of the scrapes (one message each, keyed by node).")
    ] = "scrapes",
    samples: Annotated[
        bool,
        typer.Option(
            "--samples",
            help="Decode here and publish perfsift samples to --topic (default perf.raw) instead of the scrape texts.",
        ),
    ] = False,
    interval: Annotated[str, typer.Option(help="Time between scrapes of a target (5s, 1m, ...).")] = "15s",
    timeout: Annotated[str, typer.Option(help="Time a scrape may take before it counts as failed.")] = "10s",
    rounds: Annotated[int | None, typer.Option(help="Stop after this many scrapes of each target.")] = None,
    map_file: Annotated[
        Path | None,
        typer.Option(
            "--map", help="With --samples: the prometheus_text mapping (docs/ingest.md).", exists=True, dir_okay=False
        ),
    ] = None,
    bootstrap: BootstrapNeededOpt = None,
    kafka_prop: PropsOpt = None,
    config: ConfigOpt = None,
) -> None:
    """Scrape Prometheus exporters every --interval into a topic, for `perfsift ingest --format
    prometheus_text`, or with --samples straight into perf.raw. Each target has its own schedule,
    timeout and back-off: one that fails is retried later and does not stop the others. Stops
    cleanly on SIGTERM/Ctrl-C."""
    from perfsift.producers.scrape import Scraper, parse_target
    from perfsift.streams.clients import kafka_properties, parse_props, producer_settings, require_topic

    if not bootstrap:
        raise fail("scrape needs --bootstrap (or PERFSIFT_BOOTSTRAP); `perfsift broker` starts one locally")
    try:
        parsed = [parse_target(t) for t in targets]
        every, limit = parse_duration(interval), parse_duration(timeout)
    except (ValueError, typer.BadParameter) as exc:
        raise fail(str(exc)) from None
    if every <= 0 or limit <= 0:
        raise fail("--interval and --timeout must be positive")
    cfg = pipeline_from_flags(config)
    props = kafka_properties(bootstrap, parse_props(kafka_prop), file=cfg.kafka)
    out_topic = "perf.raw" if samples and topic == "scrapes" else topic
    try:
        require_topic(props, out_topic)
    except ValueError as exc:
        raise fail(
            f"{exc}; `perfsift topics -b {bootstrap}` creates the pipeline's topics (perf.raw), `perfsift "
            f"ingest --topic {out_topic} ...` its input topic"
        ) from None
    if samples:
        emit, pub = _raw_emitter(props, out_topic, map_file, cfg)
        producer = pub.producer
    else:
        from confluent_kafka import Producer

        producer, pub = Producer(producer_settings(props, negotiate=True)), None

        def emit(target: Target, body: bytes, when: float) -> None:
            producer.produce(out_topic, body, target.node.encode(), timestamp=int(when * 1000))
            producer.poll(0)

    scraper = Scraper(parsed, every, limit, emit, rounds=rounds)
    console.print(
        f"scraping {len(parsed)} targets every {every:g} s into {out_topic}"
        f"{' as samples' if samples else ''}; Ctrl-C stops"
    )
    started = time.monotonic()
    with stop_on_signals(scraper.stop):
        scraper.run()
    left = producer.flush(30)
    report = {t.url: {"node": t.node, **vars(scraper.stats[t.url])} for t in parsed}
    summary = {"seconds": round(time.monotonic() - started, 1), "unsent": left, "targets": report}
    typer.echo(orjson.dumps(summary).decode(), err=True)
    if left:
        raise fail(f"{left} messages not acknowledged by the broker", 1)
