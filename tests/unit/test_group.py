"""How a stage's consumers agree on one group (streams/group.py): the strategy follows from the
broker only, a refused join becomes a clear error, and readiness needs owned partitions."""

from __future__ import annotations

import threading
from types import SimpleNamespace

from confluent_kafka import KafkaError
from perfsift.streams.group import assignment_strategy, is_cooperative, protocol_error, readiness


def test_the_strategy_follows_from_the_broker_alone() -> None:
    assert assignment_strategy(True) == "range" and not is_cooperative("range")
    assert assignment_strategy(False) == "cooperative-sticky" and is_cooperative("cooperative-sticky")
    assert not is_cooperative("cooperative-sticky, range")  # librdkafka: cooperative only if all are


def test_an_inconsistent_group_protocol_is_a_clear_error_and_nothing_else_is() -> None:
    err = protocol_error(KafkaError(KafkaError.INCONSISTENT_GROUP_PROTOCOL), "node", "p.perfsift.node", "range")
    assert err is not None
    text = str(err)
    assert "p.perfsift.node" in text and "(range)" in text and "partition.assignment.strategy" in text
    assert protocol_error(KafkaError(KafkaError._TRANSPORT), "node", "g", "range") is None


def _runner(assigned: list[tuple[str, int]], started: float | None) -> SimpleNamespace:
    r = SimpleNamespace(stop_event=threading.Event(), ready=threading.Event(), group_id="g", join_timeout_s=30.0)
    r.assigned = lambda: assigned
    r.loop_started = started
    return r


def test_readyz_needs_owned_partitions_and_says_why_after_the_join_timeout() -> None:
    r = _runner([], None)
    assert readiness(r, now=100.0) == (False, "starting")
    r.ready.set()
    r.loop_started = 100.0
    ok, why = readiness(r, now=110.0)
    assert not ok and why == "joining consumer group g"
    ok, why = readiness(r, now=131.0)
    assert not ok and why.startswith("no partition assigned 31 s after joining consumer group g")
    r.assigned = lambda: [("perf.raw", 0)]
    assert readiness(r, now=131.0) == (True, "ready")
    r.stop_event.set()
    assert readiness(r, now=131.0) == (False, "stopping")
