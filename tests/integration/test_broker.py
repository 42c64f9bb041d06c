"""The embedded broker cleans up after itself."""

from __future__ import annotations

import os
from pathlib import Path

from confluent_kafka.admin import AdminClient
from perfsift.streams.broker import EmbeddedBroker


def test_a_clean_stop_removes_the_temporary_log() -> None:
    broker = EmbeddedBroker().start()
    log = str(broker.log_file)
    assert os.path.exists(log)
    assert AdminClient({"bootstrap.servers": broker.bootstrap}).list_topics(timeout=10).brokers
    broker.stop()
    assert not os.path.exists(log)


def test_a_given_log_file_is_kept(tmp_path: Path) -> None:
    log = tmp_path / "broker.log"
    with EmbeddedBroker(log_file=log):
        pass
    assert log.exists()
