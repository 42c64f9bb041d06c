"""``perfsift replay``, ``perfsift sample`` and ``perfsift synth``: the producers' commands."""

from __future__ import annotations

import json
import re
import threading
import time
from pathlib import Path
from typing import Annotated, Any

import orjson
import typer
from perfsift.cli.ui import BootstrapOpt, ConfigOpt, PropsOpt, console, fail, out, pipeline_from_flags
from perfsift.producers import synth as synthetic
from perfsift.producers.traces import FORMATS
from perfsift.schemas import RecordError


def parse_duration(text: str) -> float:
    """``1s``, ``500ms``, ``2m``, ``1.5`` (seconds) -> seconds."""
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*(ms|s|m|h)?\s*", text)
    if not m:
        raise typer.BadParameter(f"{text!r} is not a duration (e.g. 1s, 500ms, 2m)")
    v = float(m.group(1)) * {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}[m.group(2) or "s"]
    if v <= 0:
        raise typer.BadParameter("a duration must be positive")
    return v


def replay_command(
    trace: Annotated[
        Path, typer.Argument(help="Trace: SDDF (ASCII or binary), CSV or JSONL.", exists=True, dir_okay=False)
    ],
    speed: Annotated[float, typer.Option(help="Trace seconds per wall-clock second (2 = twice as fast).")] = 1.0,
    max_speed: Annotated[
        bool, typer.Option("--max-speed", help="Ignore the trace's timing; publish as fast as possible.")
    ] = False,
    job: Annotated[str | None, typer.Option(help="Set this job on every sample.")] = None,
    loop: Annotated[int, typer.Option(min=1, help="Replay the trace N times (event time keeps growing).")] = 1,
    fmt: Annotated[
        str | None, typer.Option("--format", help=f"One of {', '.join(FORMATS)} (default: detected).")
    ] = None,
    mapping: Annotated[
        str | None,
        typer.Option("--map", help="SDDF fields, e.g. 'record=node sample,ts=timestamp,node=node,metrics=values'."),
    ] = None,
    topic: Annotated[str, typer.Option("--topic", "-t", help="Topic (before the pipeline's prefix).")] = "perf.raw",
    adaptive: Annotated[
        bool, typer.Option("--adaptive", help="Follow perf.control: send only the selected metrics.")
    ] = False,
    summary_json: Annotated[Path | None, typer.Option("--summary-json", help="Write the counts here.")] = None,
    bootstrap: BootstrapOpt = None,
    kafka_prop: PropsOpt = None,
    config: ConfigOpt = None,
) -> None:
    """Replay a trace into perf.raw keyed by node, seq numbered per (job, node), with the trace's
    own timing scaled by --speed (event time stays the trace's)."""
    from perfsift.producers.publish import PublishError
    from perfsift.producers.replay import AdaptiveControl, replay
    from perfsift.producers.traces import SddfMapping
    from perfsift.streams.broker import BrokerError, bootstrap_or_embedded
    from perfsift.streams.clients import create_pipeline_topics, kafka_properties, parse_props

    if fmt is not None and fmt not in FORMATS:
        raise fail(f"--format must be one of {', '.join(FORMATS)}")
    if speed <= 0:
        raise fail("--speed must be positive")
    try:
        sddf_map = SddfMapping.parse(mapping) if mapping else None
    except ValueError as exc:
        raise fail(str(exc)) from None
    cfg = pipeline_from_flags(config)
    stop = threading.Event()
    try:
        with bootstrap_or_embedded(bootstrap) as (bs, embedded):
            if embedded is not None:
                console.print(f"embedded broker on {bs} (in memory: the samples are gone when replay ends)")
            props = kafka_properties(bs, parse_props(kafka_prop), file=cfg.kafka)
            create_pipeline_topics(cfg, props)
            control = None
            if adaptive:
                control = AdaptiveControl(props, cfg.topic("perf.control"))
                if not control.wait_ready():
                    console.print("[yellow]perf.control not assigned yet; starting with full samples[/yellow]")
            try:
                stats = replay(
                    props,
                    cfg.topic(topic),
                    trace,
                    speed=None if max_speed else speed,
                    fmt=fmt,
                    mapping=sddf_map,
                    job=job,
                    loop=loop,
                    adaptive=control,
                    console=console,
                    stop=stop,
                    pipeline=cfg,
                )
            except RecordError as exc:
                raise fail(str(exc)) from None
            finally:
                if control is not None:
                    control.close()
    except (BrokerError, PublishError) as exc:
        raise fail(str(exc), 1) from None
    out.print(
        f"published {stats.published:,} samples to {cfg.topic(topic)} in {stats.elapsed_s:.1f} s "
        f"({stats.rate:,.0f} samples/s); {stats.rejected} bad records skipped"
    )
    for e in stats.errors[:5]:
        console.print(f"  [yellow]{e}[/yellow]")
    if adaptive:
        share = stats.bytes_saved / stats.bytes_full if stats.bytes_full else 0.0
        out.print(
            f"adaptive: {stats.reduced:,} samples reduced; {stats.bytes_sent:,} bytes sent of {stats.bytes_full:,} "
            f"({share:.1%} saved)"
        )
    if summary_json:
        summary_json.write_bytes(orjson.dumps(stats.as_dict(), option=orjson.OPT_INDENT_2))


def sample_command(
    interval: Annotated[str, typer.Option(help="Sampling interval, e.g. 1s, 500ms.")] = "1s",
    duration: Annotated[str | None, typer.Option(help="Stop after this long (default: until Ctrl-C).")] = None,
    node: Annotated[str | None, typer.Option(help="Node name (default: the host name).")] = None,
    job: Annotated[str, typer.Option(help="Job name of the samples.")] = "host",
    pid: Annotated[int | None, typer.Option(help="Hardware counters of this process (default: whole machine).")] = None,
    perf: Annotated[bool, typer.Option(help="Try hardware counters (Linux perf).")] = True,
    out_file: Annotated[Path | None, typer.Option("--out", help="Write a trace file instead of publishing.")] = None,
    topic: Annotated[str, typer.Option("--topic", "-t", help="Topic (before the pipeline's prefix).")] = "perf.raw",
    adaptive: Annotated[
        bool, typer.Option("--adaptive", help="Follow perf.control: send only the selected metrics.")
    ] = False,
    bootstrap: BootstrapOpt = None,
    kafka_prop: PropsOpt = None,
    config: ConfigOpt = None,
) -> None:
    """Sample this machine every interval and publish rates: Vetter & Reed's Table 1 metrics,
    memory and paging, and hardware counters where the kernel allows."""
    from perfsift.producers.publish import PublishError, SamplePublisher
    from perfsift.producers.replay import AdaptiveControl
    from perfsift.producers.sampler import HostSampler
    from perfsift.producers.traces import TraceWriter
    from perfsift.streams.broker import BrokerError, bootstrap_or_embedded
    from perfsift.streams.clients import create_pipeline_topics, kafka_properties, parse_props

    step = parse_duration(interval)
    until = time.monotonic() + parse_duration(duration) if duration else float("inf")
    sampler = HostSampler(node=node, job=job, perf=perf, pid=pid)
    if sampler.perf_note:
        console.print(f"[yellow]{sampler.perf_note}[/yellow]")
    stop = threading.Event()

    def loop(emit: Any) -> int:
        n = 0
        nxt = time.monotonic() + step
        while not stop.is_set() and time.monotonic() < until:
            if stop.wait(max(nxt - time.monotonic(), 0)):
                break
            nxt += step
            emit(sampler.sample())
            n += 1
            console.print(f"\r{n} samples", end="")
        console.print()
        return n

    try:
        if out_file is not None:
            with TraceWriter(out_file) as w:
                n = loop(w.write)
            out.print(f"wrote {n} samples to {out_file}")
            return
        cfg = pipeline_from_flags(config)
        with bootstrap_or_embedded(bootstrap) as (bs, embedded):
            if embedded is not None:
                console.print(f"embedded broker on {bs} (in memory)")
            props = kafka_properties(bs, parse_props(kafka_prop), file=cfg.kafka)
            create_pipeline_topics(cfg, props)
            control = AdaptiveControl(props, cfg.topic("perf.control")) if adaptive else None
            if control is not None and not control.wait_ready():
                console.print("[yellow]perf.control not read yet; starting with full samples[/yellow]")
            pub = SamplePublisher(props, cfg.topic(topic), control, cfg)
            try:
                n = loop(pub.send)
                pub.flush()
            finally:
                if control is not None:
                    control.close()
        out.print(f"published {n} samples of {sampler.node} to {cfg.topic(topic)}")
        if adaptive:
            out.print(f"adaptive: {pub.stats.bytes_saved:,} of {pub.stats.bytes_full:,} bytes saved")
    except KeyboardInterrupt:
        stop.set()
    except (BrokerError, PublishError) as exc:
        raise fail(str(exc), 1) from None
    finally:
        sampler.close()


SCENARIOS = (*synthetic.SPMD_SCENARIOS, "master-worker", "gridftp", "sor")


def synth_command(
    scenario: Annotated[str, typer.Option(help=f"One of {', '.join(SCENARIOS)}.")],
    out_file: Annotated[Path, typer.Option("--out", "-o", help="Trace to write: .sddf, .sddfb, .csv or .jsonl (.gz).")],
    nodes: Annotated[int, typer.Option(help="Processors (SPMD, master-worker, sor).")] = 12,
    metrics: Annotated[int, typer.Option(help="Metrics per sample (SPMD: at least 12).")] = 12,
    duration: Annotated[int, typer.Option(help="Seconds of trace (one sample per node and second).")] = 600,
    seed: Annotated[int, typer.Option(help="Random seed.")] = 0,
    outliers: Annotated[float, typer.Option(help="Share of values made outliers (SPMD).")] = 0.0,
    missing: Annotated[float, typer.Option(help="Share of values left out (SPMD, gridftp).")] = 0.0,
    load_node: Annotated[int | None, typer.Option(help="master-worker: node with an external CPU load.")] = None,
    fewer_flops: Annotated[str | None, typer.Option(help="master-worker: nodes doing fewer FLOPs, e.g. 6-11.")] = None,
    mode_node: Annotated[int | None, typer.Option(help="sor: node whose CPU switches between two modes.")] = None,
    slowdown: Annotated[
        str | None, typer.Option(help="sor: NODE:START:END:FACTOR, a slowdown the parameters do not show.")
    ] = None,
    truth: Annotated[Path | None, typer.Option(help="Ground truth JSON (default: OUT with .truth.json).")] = None,
) -> None:
    """Write a synthetic trace with known structure and its ground truth (which metrics are
    interesting, redundant, predictive, constant; where anomalies were put)."""
    from perfsift.producers.traces import TraceWriter

    try:
        fmt = TraceWriter.format_of(out_file)
        if scenario in synthetic.SPMD_SCENARIOS:
            samples, gt = synthetic.spmd(
                scenario, nodes=nodes, metrics=metrics, duration=duration, seed=seed, outliers=outliers, missing=missing
            )
        elif scenario == "master-worker":
            slow = _node_range(fewer_flops) if fewer_flops else ()
            samples, gt = synthetic.master_worker(
                nodes=nodes,
                duration=duration,
                seed=seed,
                fewer_flops=slow,
                load_node=load_node,
                load_start=duration / 3,
                load_end=2 * duration / 3,
            )
        elif scenario == "gridftp":
            samples, gt = synthetic.gridftp(duration=duration, seed=seed, missing=missing)
        elif scenario == "sor":
            slowed = None
            if slowdown:
                parts = slowdown.split(":")
                if len(parts) != 4:
                    raise ValueError(f"--slowdown is NODE:START:END:FACTOR, got {slowdown!r}")
                slowed = (int(parts[0]), int(parts[1]), int(parts[2]), float(parts[3]))
            samples, gt = synthetic.sor(nodes=nodes, steps=duration, seed=seed, mode_node=mode_node, slowdown=slowed)
            gt = {k: v.tolist() if hasattr(v, "tolist") else v for k, v in gt.items()}
        else:
            raise ValueError(f"unknown scenario {scenario!r}; known: {', '.join(SCENARIOS)}")
    except ValueError as exc:
        raise fail(str(exc)) from None
    names = sorted({m for s in samples for m in s["metrics"]}, key=lambda m: (m not in synthetic.TABLE1, m))
    with TraceWriter(out_file, fmt, metrics=names, attributes={"scenario": scenario, "seed": str(seed)}) as w:
        for s in samples:
            w.write(s)
    truth_path = truth or out_file.with_name(out_file.name.split(".")[0] + ".truth.json")
    truth_path.write_text(json.dumps(gt, indent=2) + "\n")
    out.print(f"wrote {len(samples):,} samples to {out_file} ({fmt}) and the ground truth to {truth_path}")


def _node_range(text: str) -> list[int]:
    nodes: list[int] = []
    for part in text.split(","):
        a, _, b = part.partition("-")
        nodes += list(range(int(a), int(b or a) + 1))
    return nodes
