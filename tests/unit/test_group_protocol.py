"""KIP-848 (``group.protocol: consumer``): perfsift's classic-protocol defaults are left out, so
librdkafka builds the consumer (it refuses them under that protocol); a user's own value stays."""

from __future__ import annotations

import pytest
from confluent_kafka import Consumer, KafkaException
from perfsift.streams.clients import CONSUMER_DEFAULTS, consumer_settings


def test_the_consumer_protocol_drops_the_classic_defaults_and_builds() -> None:
    s = consumer_settings({"bootstrap.servers": "127.0.0.1:1", "group.protocol": "consumer"}, "g")
    assert "session.timeout.ms" not in s
    assert "heartbeat.interval.ms" not in s
    Consumer(s).close()  # librdkafka accepts it


def test_the_classic_protocol_keeps_them() -> None:
    s = consumer_settings({"bootstrap.servers": "127.0.0.1:1"}, "g")
    assert s["session.timeout.ms"] == CONSUMER_DEFAULTS["session.timeout.ms"]
    assert s["heartbeat.interval.ms"] == CONSUMER_DEFAULTS["heartbeat.interval.ms"]


def test_a_users_session_timeout_under_the_consumer_protocol_is_refused_by_librdkafka() -> None:
    props = {"bootstrap.servers": "127.0.0.1:1", "group.protocol": "consumer", "session.timeout.ms": "6000"}
    s = consumer_settings(props, "g")
    assert s["session.timeout.ms"] == "6000"
    with pytest.raises(KafkaException, match=r"session\.timeout\.ms"):
        Consumer(s)
