"""Whether Kafka lets this client in, said in one line before a stage starts.

librdkafka reports refused credentials, a listener that wants another ``security.protocol`` and
missing ACLs as a stream of log lines and retries, and a stage would sit in them. ``perfsift
worker`` first asks the cluster for its topics with the stage's own client settings
(:func:`check_access`) and stops at once, with one line, on refused credentials; the ACL errors of
topic creation and of transactions become one line too (:func:`refusal`).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient
from perfsift.streams.stage import StageError

#: error codes that mean "not with these credentials" (authentication)
AUTHENTICATION = (KafkaError._AUTHENTICATION, KafkaError.SASL_AUTHENTICATION_FAILED)
#: error codes that mean "not allowed" (ACLs), by the resource they name
AUTHORIZATION = {
    KafkaError.TOPIC_AUTHORIZATION_FAILED: "topic",
    KafkaError.GROUP_AUTHORIZATION_FAILED: "consumer group",
    KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED: "transactional id",
    KafkaError.CLUSTER_AUTHORIZATION_FAILED: "cluster",
}
SETTINGS = "-X, PERFSIFT_KAFKA_*, the pipeline file's kafka: section"


class AccessError(StageError):
    """Kafka refused this client: credentials, protocol or ACLs (one line, no traceback)."""


def _who(props: Mapping[str, Any]) -> str:
    user = props.get("sasl.username")
    protocol = str(props.get("security.protocol", "plaintext")).upper()
    return f"user {user!r} over {protocol}" if user else f"no SASL user, over {protocol}"


def refusal(err: KafkaError, props: Mapping[str, Any], doing: str) -> str | None:
    """One line for an authentication or authorization error met while ``doing`` something, or None
    when ``err`` is neither."""
    if err.code() in AUTHENTICATION:
        return (
            f"Kafka refused the credentials ({_who(props)}) while {doing}: {err.str()}; check sasl.username, "
            f"sasl.password and sasl.mechanism ({SETTINGS})"
        )
    what = AUTHORIZATION.get(err.code())
    if what is not None:
        return (
            f"Kafka's ACLs refuse {_who(props)} a {what} while {doing}: {err.str()}; the user needs the ACLs "
            "of k8s/overlays/prod/kafka-user.yaml for the pipeline's topic_prefix"
        )
    return None


def refused(exc: BaseException, props: Mapping[str, Any], doing: str) -> str | None:
    """:func:`refusal` of a :class:`KafkaException` (None for any other exception)."""
    err = exc.args[0] if exc.args else None
    return refusal(err, props, doing) if isinstance(err, KafkaError) else None


def check_access(props: Mapping[str, Any], timeout: float = 15.0) -> None:
    """List the cluster's topics with ``props`` (the stage's client settings). Raises
    :class:`AccessError` at once when Kafka refuses the credentials, and after ``timeout`` seconds
    when no broker answered (with librdkafka's last error: a plaintext or TLS client at a SASL
    listener is dropped, which it reports as a disconnect)."""
    errors: list[KafkaError] = []
    conf: dict[str, Any] = {**props, "error_cb": errors.append, "log_level": 0}
    admin = AdminClient(conf)
    deadline = time.monotonic() + timeout
    while True:
        try:
            admin.list_topics(timeout=1.0)
            return
        except KafkaException as exc:
            if isinstance(exc.args[0], KafkaError):
                errors.append(exc.args[0])
        admin.poll(0)  # serves error_cb
        for err in errors:
            line = refusal(err, props, f"connecting to {props.get('bootstrap.servers')}")
            if line is not None:
                raise AccessError(line)
        if time.monotonic() >= deadline:
            last = next((e for e in reversed(errors) if e.code() != KafkaError._TIMED_OUT), None)
            why = last.str() if last is not None else "no answer"
            raise AccessError(
                f"cannot talk to Kafka at {props.get('bootstrap.servers')} ({_who(props)}) in "
                f"{timeout:.0f} s: {why}; check --bootstrap and security.protocol ({SETTINGS})"
            )
