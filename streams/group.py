"""How a stage's consumers agree on one consumer group: the assignment strategy, the error when a
group's members disagree, readiness, and waiting for assignment.

Every member of a Kafka consumer group must name a common partition assignment strategy, or the
coordinator refuses the newcomer's JoinGroup with INCONSISTENT_GROUP_PROTOCOL, for as long as the
others stay. So the strategy follows from the *broker* alone, never from which process starts the
stage (``perfsift worker``, ``perfsift run``, ``perfsift run --bootstrap``, a benchmark):

- ``cooperative-sticky`` on a real cluster: a scale step moves only the partitions that change owner;
- eager ``range`` on the embedded broker: its coordinator (Tansu 0.6.0) answers a joining member's
  first SyncGroup with REBALANCE_IN_PROGRESS when the leader rejoins for the cooperative follow-up
  round, so with the default timeouts the revoked partitions stay unowned for ~15 s (eager: ~3.5 s).

The broker is asked for its cluster id once per runner (:func:`~perfsift.streams.broker.is_embedded_cluster`);
``partition.assignment.strategy`` set by the user (pipeline file ``kafka:``, ``PERFSIFT_KAFKA_*``, ``-X``)
wins, and must then be the same on every process of the stage.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from confluent_kafka import KafkaError, TopicPartition
from perfsift.streams.clients import STATISTICS_INTERVAL_MS, consumer_settings, producer_settings
from perfsift.streams.stage import StageError

#: seconds a runner may take to be assigned partitions after its loop started before ``/readyz``
#: says why it is not ready (before: "joining")
JOIN_TIMEOUT_S = 30.0


def client_settings(
    kafka: dict[str, str], group_id: str, txn_id: str | None, embedded: Callable[[], bool]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """A stage's consumer and producer configuration: perfsift's defaults < the pipeline file <
    ``PERFSIFT_KAFKA_*`` < ``-X`` (all in ``kafka``), then what the guarantee needs (``txn_id``:
    exactly-once, a transactional producer and read_committed); the assignment strategy follows
    from the broker (``embedded()``, asked only when ``kafka`` names none)."""
    isolation = "read_committed" if txn_id is not None else "read_uncommitted"
    consumer = consumer_settings(kafka, group_id, isolation)
    consumer.setdefault("statistics.interval.ms", STATISTICS_INTERVAL_MS)
    if "partition.assignment.strategy" not in kafka and consumer.get("group.protocol") != "consumer":
        consumer["partition.assignment.strategy"] = assignment_strategy(embedded())
    producer = producer_settings(kafka, txn_id, negotiate=True)
    producer.setdefault("statistics.interval.ms", STATISTICS_INTERVAL_MS)
    return consumer, producer


def assignment_strategy(embedded: bool) -> str:
    """The default ``partition.assignment.strategy`` on this broker (see the module docstring)."""
    return "range" if embedded else "cooperative-sticky"


def is_cooperative(strategy: str) -> bool:
    """librdkafka is cooperative only when every listed strategy is (cooperative-sticky is the one)."""
    return all(s == "cooperative-sticky" for s in strategy.replace(" ", "").split(","))


def protocol_error(err: KafkaError, stage: str, group: str, strategy: str) -> StageError | None:
    """The error to stop a stage with when the group's coordinator refused it for naming another
    assignment strategy than the members already in the group (None for any other error)."""
    if err.code() != KafkaError.INCONSISTENT_GROUP_PROTOCOL:
        return None
    return StageError(
        f"stage {stage}: consumer group {group} already has members with another partition assignment "
        f"strategy than this one's ({strategy}); every process of a stage must use the same one. perfsift "
        "picks it from the broker (range on the embedded broker, cooperative-sticky elsewhere): stop the "
        "other members, or set partition.assignment.strategy the same everywhere (pipeline file kafka:, "
        "PERFSIFT_KAFKA_PARTITION_ASSIGNMENT_STRATEGY or -X)"
    )


def readiness(runner: Any, now: float | None = None) -> tuple[bool, str]:
    """``/readyz``: ready while the loop runs and the runner owns input partitions. Not ready before
    the first poll, while stopping, and while nothing is assigned; after ``JOIN_TIMEOUT_S`` without
    partitions the reason says so (more replicas than partitions, or a group that cannot agree)."""
    now = time.monotonic() if now is None else now
    if runner.stop_event.is_set():
        return False, "stopping"
    if not runner.ready.is_set():
        return False, "starting"
    if runner.assigned():
        return True, "ready"
    started = runner.loop_started
    if started is None or now - started < runner.join_timeout_s:
        return False, f"joining consumer group {runner.group_id}"
    return False, (
        f"no partition assigned {now - started:.0f} s after joining consumer group {runner.group_id}: more "
        "replicas than partitions of the input, or the group cannot agree (see the log)"
    )


def wait_assigned(runners: list[Any], timeout: float = 60.0, abort: Callable[[], bool] | None = None) -> bool:
    """Wait until every runner owns input partitions (its group join is done), at most ``timeout``
    seconds, or until ``abort()``; True when all are assigned."""
    deadline = time.monotonic() + timeout
    while not all(r.assigned() for r in runners):
        if time.monotonic() > deadline or (abort is not None and abort()):
            return False
        time.sleep(0.1)
    return True


def log_partitions(runner: Any, event: str, partitions: list[TopicPartition], level: int, **fields: Any) -> None:
    """One log record per rebalance event of ``runner`` (a StageRunner: assigned, revoked, lost),
    with the partition numbers and ``fields`` as structured fields (``restored``: those resumed from
    a snapshot), counted in its stats."""
    numbers = sorted(tp.partition for tp in partitions)
    stage = runner.stage.name
    runner.stats.rebalances[event] = runner.stats.rebalances.get(event, 0) + 1
    detail = "".join(f", {k} {v}" for k, v in fields.items())
    extra = {"stage": stage, "instance": runner.instance, "event": event, "partitions": numbers, **fields}
    logging.getLogger("perfsift.runner").log(
        level, "stage %s: partitions %s of %s %s%s", stage, numbers, runner._in_topic, event, detail, extra=extra
    )
