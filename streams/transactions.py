"""The exactly-once producer's life cycle: made (and its transactional id fenced), committed with
the input offsets, and, when Kafka fails it, replaced.

A transaction can fail for good in ways the stage can do nothing about while it runs: the
coordinator aborts a transaction that outlived ``transaction.timeout.ms`` (a broker loss stalls a
stage longer than that on a loaded machine) and bumps the producer's epoch, so its next call is
fenced (a fatal error); a commit times out; a produce fails. None of this loses or duplicates a
record as long as the stage goes back to its last commit, so the runner then replaces its producer
(:func:`discard`, then :func:`new_producer`, whose ``init_transactions`` with the same transactional
id aborts whatever the old one left open) and rewinds every owned partition, instead of exiting
(``StageRunner._recover``).
"""

from __future__ import annotations

import contextlib
import logging
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from perfsift.streams.access import AUTHORIZATION

log = logging.getLogger("perfsift.runner")

#: producer replacements in a row (no commit between them) before the stage gives up
MAX_REPLACEMENTS = 5
#: seconds init_transactions may take (it waits for the coordinator, and for a previous producer's
#: open transaction with the same id to be aborted)
INIT_TIMEOUT_S = 30.0


def new_producer(settings: dict[str, Any]) -> Producer:
    """A producer; with a ``transactional.id``, initialised: a previous producer with that id (a
    killed worker's, when the id is stable across restarts: ``perfsift worker --instance``) is
    fenced and its open transaction aborted now, not when it times out."""
    producer = Producer(settings)
    if settings.get("transactional.id"):
        producer.init_transactions(INIT_TIMEOUT_S)
    return producer


def discard(producer: Producer, in_transaction: bool) -> None:
    """Drop ``producer`` without waiting for what it still holds: abort its open transaction if
    Kafka lets it (a fenced producer cannot), then purge its queue."""
    if in_transaction:
        with contextlib.suppress(KafkaException):
            producer.abort_transaction(10)
    with contextlib.suppress(KafkaException, RuntimeError):
        producer.purge()
        producer.flush(0)


def replace(producer: Producer | None, in_transaction: bool, settings: dict[str, Any]) -> Producer:
    """A new producer in place of ``producer`` (discarded), with the same ``settings``."""
    if producer is not None:
        discard(producer, in_transaction)
    return new_producer(settings)


def describe(exc: KafkaException) -> str:
    """One line: the error's text and whether Kafka called it fatal or abortable."""
    err = exc.args[0] if exc.args else None
    if not isinstance(err, KafkaError):
        return str(exc)
    kind = "fatal" if err.fatal() else ("abortable" if err.txn_requires_abort() else "retriable")
    return f"{err.str()} ({kind})"


def commit_or_abort(producer: Producer, consumer: Consumer, offsets: list[TopicPartition]) -> bool:
    """Commit the open transaction with the input ``offsets``; False when Kafka asked for an abort
    (done here), e.g. ILLEGAL_GENERATION: a cooperative rebalance moved the group to a new
    generation while the transaction was open (seen on Apache Kafka 4.1; the embedded broker runs
    at-least-once). Any other error (a fenced producer, a timeout) raises: the runner then
    replaces its producer (module docstring)."""
    try:
        producer.send_offsets_to_transaction(offsets, consumer.consumer_group_metadata(), 30)
        producer.commit_transaction(30)
    except KafkaException as exc:
        err = exc.args[0]
        if not (isinstance(err, KafkaError) and err.txn_requires_abort()) or err.code() in AUTHORIZATION:
            raise  # ACLs: aborting and trying again would not help
        log.warning("transaction aborted (%s); the owned partitions go back to their last commit", err.str())
        producer.abort_transaction(30)
        return False
    return True
