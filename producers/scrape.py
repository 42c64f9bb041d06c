"""Scrape Prometheus exporters at an interval (``perfsift scrape``): each target's text exposition
goes to a topic as one message (keyed by the target's node, stamped with the scrape's start),
for ``perfsift ingest --format prometheus_text``; or, decoded here as that stage decodes it,
straight into perf.raw as samples.

Every target has its own thread, its own schedule (``interval`` from the previous scrape's start,
skipping missed ticks) and its own errors: a timeout, a refused connection or an HTTP error is
counted and logged for that target, which then waits ``interval * 2**failures`` (at most
:data:`MAX_BACKOFF_S`) before trying again; the others go on. :meth:`Scraper.run` returns when
``stop`` is set (SIGTERM, Ctrl-C), within one request's timeout.
"""

from __future__ import annotations

import logging
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from urllib.parse import urlsplit

log = logging.getLogger("perfsift.scrape")

#: the longest wait after failures, seconds
MAX_BACKOFF_S = 300.0
#: the text format, as Prometheus asks for it (never protobuf)
ACCEPT = "text/plain;version=0.0.4;q=1,application/openmetrics-text;version=1.0.0;q=0.5,*/*;q=0.1"


@dataclass(frozen=True)
class Target:
    """An exporter's URL and the node its samples belong to."""

    url: str
    node: str


def parse_target(text: str) -> Target:
    """``[NODE=]URL``; a URL without a scheme gets ``http://``, without a path ``/metrics``; the
    node defaults to the URL's host (without the port: one node's exporters meet in one sample).

    >>> parse_target("node-1:9100")
    Target(url='http://node-1:9100/metrics', node='node-1')
    >>> parse_target("gpu7=http://10.0.0.7:9400/metrics")
    Target(url='http://10.0.0.7:9400/metrics', node='gpu7')
    """
    node = None
    head, eq, rest = text.partition("=")
    if eq and "/" not in head and ":" not in head:
        node, text = head, rest
    url = text if "://" in text else f"http://{text}"
    parts = urlsplit(url)
    if not parts.hostname:
        raise ValueError(f"not a target URL: {text!r}")
    if parts.path in ("", "/"):
        url = url.rstrip("/") + "/metrics"
    return Target(url, node or parts.hostname)


@dataclass
class TargetStats:
    scrapes: int = 0
    errors: int = 0
    failures_in_a_row: int = 0
    last_error: str = ""
    last_duration_s: float = 0.0
    bytes: int = 0


@dataclass
class Scraper:
    """Scrapes ``targets`` every ``interval`` seconds and hands each body to ``emit(target, body,
    time)`` (time: the scrape's start, Unix seconds) until ``stop`` is set."""

    targets: list[Target]
    interval: float
    timeout: float
    emit: Callable[[Target, bytes, float], None]
    stop: threading.Event = field(default_factory=threading.Event)
    #: stop after this many rounds per target (None: until stopped)
    rounds: int | None = None
    stats: dict[str, TargetStats] = field(default_factory=dict)

    def fetch(self, target: Target) -> bytes:
        headers = {
            "Accept": ACCEPT,
            "User-Agent": "perfsift-scrape",
            "X-Prometheus-Scrape-Timeout-Seconds": f"{self.timeout:g}",
        }
        req = urllib.request.Request(target.url, headers=headers)
        with urllib.request.urlopen(req, timeout=self.timeout) as resp:
            return bytes(resp.read())

    def _loop(self, target: Target) -> None:
        st = self.stats[target.url]
        next_at = time.monotonic()
        done = 0
        while not self.stop.is_set() and (self.rounds is None or done < self.rounds):
            started, wall = time.monotonic(), time.time()
            try:
                body = self.fetch(target)
            except (urllib.error.URLError, OSError, ValueError) as exc:
                st.errors += 1
                st.failures_in_a_row += 1
                st.last_error = str(getattr(exc, "reason", None) or exc)[:200]
                wait = min(self.interval * 2**st.failures_in_a_row, MAX_BACKOFF_S)
                log.warning(
                    "scrape %s (node %s) failed (%d in a row): %s; next try in %.0f s",
                    target.url,
                    target.node,
                    st.failures_in_a_row,
                    st.last_error,
                    wait,
                )
                next_at = started + wait
            else:
                st.scrapes += 1
                st.bytes += len(body)
                st.failures_in_a_row = 0
                st.last_duration_s = time.monotonic() - started
                self.emit(target, body, wall)
                next_at += self.interval
                if next_at < time.monotonic():  # a slow scrape: skip the ticks it missed
                    next_at += self.interval * ((time.monotonic() - next_at) // self.interval + 1)
            done += 1
            self.stop.wait(max(0.0, next_at - time.monotonic()))

    def run(self) -> None:
        """Scrape until ``stop`` is set (or ``rounds`` are done); every target in a thread of its own."""
        for t in self.targets:
            self.stats.setdefault(t.url, TargetStats())
        threads = [
            threading.Thread(target=self._loop, args=(t,), name=f"scrape-{t.node}", daemon=True) for t in self.targets
        ]
        for th in threads:
            th.start()
        for th in threads:
            while th.is_alive():
                th.join(0.2)
