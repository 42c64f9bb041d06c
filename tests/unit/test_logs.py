"""Worker logs: JSON lines with the fields a collector filters on, or text for people."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator

import pytest
from perfsift.streams.logs import LogFormat, LogLevel, current_logging, setup_logging

from tests.e2e.cli import perfsift


@pytest.fixture(autouse=True)
def restore_logging() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)
    setup_logging(LogLevel.warning, LogFormat.text)
    root.handlers[:] = handlers


def test_json_lines_carry_time_level_logger_message_and_extra_fields(capsys: pytest.CaptureFixture[str]) -> None:
    setup_logging("info", "json")
    assert current_logging() == (LogLevel.info, LogFormat.json)
    log = logging.getLogger("perfsift.runner")
    log.info("stage %s: assigned %s", "node", [0, 2], extra={"stage": "node", "partitions": [0, 2]})
    log.debug("not at info")
    logging.getLogger("perfsift.kafka").info("client chatter is kept at info")
    lines = [json.loads(line) for line in capsys.readouterr().err.splitlines()]
    assert len(lines) == 2
    first = lines[0]
    assert first["message"] == "stage node: assigned [0, 2]" and first["partitions"] == [0, 2]
    assert first["level"] == "INFO" and first["logger"] == "perfsift.runner" and first["stage"] == "node"
    assert first["time"].startswith("20") and "T" in first["time"]  # ISO 8601


def test_text_at_warning_keeps_client_chatter_out(capsys: pytest.CaptureFixture[str]) -> None:
    setup_logging()
    logging.getLogger("perfsift.runner").info("hidden")
    logging.getLogger("perfsift.kafka").warning("a refused connection while the broker starts")
    logging.getLogger("perfsift.runner").warning("stage node: shown")
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "WARNING perfsift.runner: stage node: shown" in err


def test_bad_values_are_refused() -> None:
    with pytest.raises(ValueError, match="xml"):
        setup_logging("info", "xml")
    r = perfsift("--log-format", "xml", "report", "nowhere")
    assert r.returncode == 2 and "Invalid value for '--log-format'" in r.stderr and "'xml'" in r.stderr
