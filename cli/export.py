"""``perfsift export``: the latest reduced values, forecasts (with bounds) and contract levels on a
Prometheus endpoint, and optionally pushed by remote_write (:mod:`perfsift.streams.export`)."""

from __future__ import annotations

import threading
from typing import Annotated

import typer
from perfsift.cli.producers import parse_duration
from perfsift.cli.ui import BootstrapNeededOpt, ConfigOpt, PropsOpt, console, fail, pipeline_from_flags, stop_on_signals
from perfsift.schemas.registry import use_registry


def export_command(
    port: Annotated[
        int, typer.Option(envvar="PERFSIFT_EXPORT_PORT", help="Port of /metrics (0: any free one).")
    ] = 9464,
    host: Annotated[
        str, typer.Option(envvar="PERFSIFT_EXPORT_HOST", help="Address /metrics listens on (0.0.0.0 in a pod).")
    ] = "127.0.0.1",
    max_series: Annotated[
        int, typer.Option(help="Cap on exported series; new ones beyond it are dropped and counted.")
    ] = 10_000,
    expire: Annotated[
        str, typer.Option(help="A series no record updated for this long is removed (5m, 30s, ...).")
    ] = "5m",
    since: Annotated[
        str,
        typer.Option(
            help="Start with the records of this long ago (a duration), 'beginning' (every record kept) or "
            "'end' (only new ones). Default: the --expire window."
        ),
    ] = "",
    timestamps: Annotated[
        bool, typer.Option(help="Write each record's time on its value (default: Prometheus stamps the scrape).")
    ] = False,
    remote_write: Annotated[
        list[str] | None,
        typer.Option(
            "--remote-write",
            metavar="URL",
            help="Also push to this remote_write receiver (repeatable), e.g. "
            "http://prometheus:9090/api/v1/write; values carry their records' time.",
        ),
    ] = None,
    remote_write_interval: Annotated[str, typer.Option(help="Time between remote_write pushes.")] = "15s",
    bootstrap: BootstrapNeededOpt = None,
    kafka_prop: PropsOpt = None,
    config: ConfigOpt = None,
) -> None:
    """Serve the pipeline's results to Prometheus: the latest value of every selected metric on
    perf.reduced (perfsift_reduced{job,node,metric}), every forecast with its bounds on
    perf.forecast (perfsift_forecast, _lower, _upper, _sigma; the MAE bound perfsift_forecast_mae_forecast,
    _lower_mae, _upper_mae, _mae) and every node's contract level and state on
    perf.contract, on http://HOST:PORT/metrics. Reads every partition (no consumer group), so one
    target has every series; docs/export.md has the scrape config and a Grafana dashboard. Stops
    cleanly on SIGTERM/Ctrl-C."""
    from perfsift.formats.prom_out import LatestValues
    from perfsift.streams.clients import kafka_properties, parse_props
    from perfsift.streams.export import EXPORTED, Exporter, ExportServer, RemoteWriter

    if not bootstrap:
        raise fail("export needs --bootstrap (or PERFSIFT_BOOTSTRAP); `perfsift broker` starts one locally")
    try:
        expire_s = parse_duration(expire)
        every = parse_duration(remote_write_interval)
        since_s = (
            {"beginning": None, "end": 0.0}[since]
            if since in ("beginning", "end")
            else (parse_duration(since) if since else expire_s)
        )
    except typer.BadParameter as exc:
        raise fail(str(exc)) from None
    if max_series < 1:
        raise fail("--max-series must be at least 1")
    cfg = pipeline_from_flags(config)
    if cfg.schema_registry.get("url"):
        use_registry(cfg.schema_registry)
    props = kafka_properties(bootstrap, parse_props(kafka_prop), file=cfg.kafka)
    values = LatestValues(max_series=max_series, expire_s=expire_s, timestamps=timestamps)
    exporter = Exporter(props, {cfg.topic(t): kind for t, kind in EXPORTED.items()}, values, since_s)
    writers = [RemoteWriter(url, values, every) for url in remote_write or []]
    try:
        server = ExportServer(values, exporter, port, host, writers).start()
    except OSError as exc:
        raise fail(f"cannot listen on {host}:{port}: {exc}") from None
    threads = [threading.Thread(target=w.run, name="remote-write", daemon=True) for w in writers]
    for t in threads:
        t.start()
    console.print(
        f"exporting {', '.join(cfg.topic(t) for t in EXPORTED)} on http://{host}:{server.port}/metrics"
        f"{''.join(f'; remote_write to {u}' for u in remote_write or [])}; Ctrl-C stops"
    )
    try:
        with stop_on_signals(exporter.stop_event):
            exporter.run()
    except ValueError as exc:
        raise fail(str(exc)) from None
    finally:
        for w in writers:
            w.stop()
        for t in threads:
            t.join(30)
        server.stop()
