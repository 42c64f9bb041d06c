"""Logging shared by the runtime."""

from __future__ import annotations

import logging
from typing import Any


def kafka_logger() -> Any:
    """The logger librdkafka clients report to (typed Any: the client stubs expect str values)."""
    return logging.getLogger("perfsift.kafka")
