"""Logging shared by the runtime: text for people, JSON lines for log collectors.

``perfsift --log-format json`` (or ``PERFSIFT_LOG_FORMAT=json``) writes one JSON object per line on
stderr with ``time`` (ISO 8601, UTC), ``level``, ``logger`` and ``message``, plus the fields a
log call passes as ``extra`` (the runner adds ``stage``, ``partitions``, ``restored``, ...), so
Loki, Elasticsearch or Cloud Logging can filter on them without parsing messages.
"""

from __future__ import annotations

import faulthandler
import logging
import signal
from enum import StrEnum
from typing import Any


class LogLevel(StrEnum):
    debug = "debug"
    info = "info"
    warning = "warning"
    error = "error"


class LogFormat(StrEnum):
    text = "text"
    json = "json"


#: what :func:`setup_logging` last set, so stage processes spawned by ``perfsift run`` log alike
_current: tuple[LogLevel, LogFormat] = (LogLevel.warning, LogFormat.text)


def kafka_logger() -> Any:
    """The logger librdkafka clients report to (typed Any: the client stubs expect str values)."""
    return logging.getLogger("perfsift.kafka")


def setup_logging(level: LogLevel | str = LogLevel.warning, fmt: LogFormat | str = LogFormat.text) -> None:
    """One handler on stderr for the whole process, at ``level``, in format ``fmt``."""
    global _current
    level, fmt = LogLevel(level), LogFormat(fmt)  # ValueError names a wrong value
    handler = logging.StreamHandler()
    if fmt is LogFormat.json:
        from pythonjsonlogger.json import JsonFormatter

        handler.setFormatter(
            JsonFormatter(
                "%(levelname)s %(name)s %(message)s",
                rename_fields={"levelname": "level", "name": "logger"},
                timestamp="time",
            )
        )
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.value.upper())
    # librdkafka reports every refused connection while brokers start or stop; keep errors only
    verbose = level in (LogLevel.debug, LogLevel.info)
    kafka_logger().setLevel(logging.INFO if verbose else logging.ERROR)
    _current = (level, fmt)


def current_logging() -> tuple[LogLevel, LogFormat]:
    """The (level, format) of the last :func:`setup_logging`."""
    return _current


def enable_stack_dumps() -> None:
    """``kill -USR1 PID`` writes every thread's Python stack to the process's stderr (a pod's log)
    and the process goes on: what a worker that stopped answering is doing. ``perfsift`` turns it
    on as it starts (``perfsift/__main__.py``), and each stage process ``perfsift run`` spawns."""
    if hasattr(signal, "SIGUSR1"):
        faulthandler.register(signal.SIGUSR1, all_threads=True)
