"""The closed adaptive-instrumentation loop on one machine (``perfsift run --adaptive``): the
replaying producer follows the ``perf.control`` records that the pipeline's own select stage
publishes, so the bytes on ``perf.raw`` itself fall once a selection is in force; and the
accounting that shows it, period by period: the bytes stored on ``perf.raw``, what the full
samples would have cost, and what the control records predict.

The prediction applies each control record's rule (the ``keep`` list, every ``full_every``-th
sample of a node whole) to the trace's samples from the record's event time ``ts`` on - the rule
as :class:`~perfsift.producers.replay.AdaptiveControl` applies it, without the delay of the loop
(the record has to reach the producer, which keeps sending full samples meanwhile).
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import orjson
from perfsift.producers.publish import PublishStats, SamplePublisher
from perfsift.producers.replay import AdaptiveControl, replay, replay_samples
from perfsift.streams.config import PipelineConfig
from rich.console import Console

#: trace seconds per wall second of ``perfsift run --adaptive`` without ``--speed``: the loop needs
#: paced input (at full speed the whole trace is out before the first period closes)
ADAPTIVE_SPEED = 20.0


class HostLoop:
    """This machine sampled every ``interval`` seconds (:class:`~perfsift.producers.sampler.HostSampler`,
    job ``job``) into ``raw_topic`` in a background thread, through the same control follower as
    the replay: once the select stage has a selection for the job, its samples shrink too."""

    def __init__(
        self,
        props: dict[str, str],
        raw_topic: str,
        control: AdaptiveControl,
        interval: float,
        job: str = "host",
        pipeline: PipelineConfig | None = None,
    ) -> None:
        from perfsift.producers.sampler import HostSampler

        self.sampler = HostSampler(job=job, perf=False)
        self.publisher = SamplePublisher(props, raw_topic, control, pipeline)  # in the pipeline's encoding
        self.interval = interval
        self.stop_event = threading.Event()
        self.thread = threading.Thread(target=self._run, name="perfsift-host-sampler", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        nxt = time.monotonic() + self.interval
        while not self.stop_event.wait(max(nxt - time.monotonic(), 0.0)):
            nxt += self.interval
            self.publisher.send(self.sampler.sample())

    def close(self) -> PublishStats:
        self.stop_event.set()
        self.thread.join(10)
        self.publisher.flush()
        self.sampler.close()
        return self.publisher.stats


def replay_adaptive(
    props: dict[str, str],
    raw_topic: str,
    control_topic: str,
    trace: Path,
    speed: float | None,
    stop: threading.Event | None = None,
    console: Console | None = None,
    sample_host: float | None = None,
    pipeline: PipelineConfig | None = None,
) -> tuple[PublishStats, PublishStats | None]:
    """Replay ``trace`` into ``raw_topic`` at ``speed`` (default :data:`ADAPTIVE_SPEED`) following
    ``control_topic``: each sample goes out with only the metrics the newest control record of its
    job keeps (every ``full_every``-th whole). With ``sample_host`` (seconds), this machine is
    sampled into ``raw_topic`` too while the replay runs (job ``host``), following the same
    records (:class:`HostLoop`). Returns the replay's and the sampler's publishing stats."""
    control = AdaptiveControl(props, control_topic)
    host = None
    try:
        control.wait_ready()
        host = HostLoop(props, raw_topic, control, sample_host, pipeline=pipeline) if sample_host else None
        stats = replay(
            props,
            raw_topic,
            trace,
            speed=speed or ADAPTIVE_SPEED,
            adaptive=control,
            console=console,
            stop=stop,
            pipeline=pipeline,
        )
        return stats, host.close() if host is not None else None
    finally:
        if host is not None:
            host.stop_event.set()
        control.close()


def _rule_at(controls: list[dict[str, Any]], job: str, ts: float) -> dict[str, Any] | None:
    rule = None
    for c in controls:  # sorted by (ts, version)
        if c["job"] == job and c["ts"] <= ts:
            rule = c
    return rule


def loop_bytes(
    trace: Path, raw_values: list[bytes], controls: list[dict[str, Any]], period: float
) -> list[dict[str, Any]]:
    """Per ``period`` seconds of event time: ``stored`` (bytes of the ``raw_values`` read back
    from perf.raw, e.g. by :func:`~perfsift.streams.clients.read_topic_to_end`), ``full`` (the
    trace's samples as replay sends them whole), ``predicted`` (the samples as the control rules
    in force at their event time make them) and the shares ``stored / full`` and
    ``predicted / full``; ``kept`` is the rule's kept metrics (None before the first)."""
    controls = sorted(controls, key=lambda c: (c["ts"], c["version"]))
    counters: dict[tuple[str, str], int] = {}
    rows: dict[int, dict[str, Any]] = {}

    def row(ts: float) -> dict[str, Any]:
        k = int(np.floor(ts / period))
        return rows.setdefault(k, {"start": k * period, "stored": 0, "full": 0, "predicted": 0, "kept": None})

    for s in replay_samples(trace):
        full = len(orjson.dumps(s))
        r = row(s["ts"])
        r["full"] += full
        rule = _rule_at(controls, s["job"], s["ts"])
        if rule is None:
            r["predicted"] += full
            continue
        key = (s["job"], s["node"])
        n = counters.get(key, 0)
        counters[key] = n + 1
        keep = set(rule["keep"])
        r["kept"] = sorted(keep)
        if n % max(int(rule["full_every"]), 1) == 0:
            r["predicted"] += full
        else:
            r["predicted"] += len(orjson.dumps({**s, "metrics": {m: v for m, v in s["metrics"].items() if m in keep}}))
    for v in raw_values:
        row(float(orjson.loads(v)["ts"]))["stored"] += len(v)
    out = [rows[k] for k in sorted(rows)]
    for r in out:
        r["stored_share"] = r["stored"] / r["full"] if r["full"] else None
        r["predicted_share"] = r["predicted"] / r["full"] if r["full"] else None
    return out


def plot_loop(rows: list[dict[str, Any]], path: Path, title: str) -> Path:
    """Bytes per period on perf.raw over time: stored, full and predicted by the selection."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    t0 = rows[0]["start"]
    x = [(r["start"] - t0) for r in rows]
    fig, ax = plt.subplots(figsize=(8, 3.6))
    ax.step(x, [r["full"] / 1e3 for r in rows], where="post", label="full samples (without the loop)", color="0.6")
    ax.step(x, [r["predicted"] / 1e3 for r in rows], where="post", label="predicted by the selection", ls="--")
    ax.step(x, [r["stored"] / 1e3 for r in rows], where="post", label="stored on perf.raw", lw=2)
    ax.set_xlabel("event time (s)")
    ax.set_ylabel("kB per period")
    ax.set_title(title)
    ax.set_ylim(bottom=0)
    ax.legend(loc="lower left", fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
