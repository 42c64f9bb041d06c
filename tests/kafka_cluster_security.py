"""The test cluster's secured listener, set up as the prod overlay's Strimzi cluster is
(k8s/overlays/prod): SASL_SSL with SCRAM-SHA-512, a certificate signed by a CA the fixture makes
(openssl), and ACLs enforced by KRaft's StandardAuthorizer. The PLAINTEXT listeners the other tests
use (and the brokers and controllers among themselves) stay open: their anonymous principal is a
super user, as is ``admin``.

:func:`grant_overlay_acls` gives a user the ACLs of k8s/overlays/prod/kafka-user.yaml for a topic
prefix ``P``: topics ``P + "perf."``, groups ``P + "perfsift."`` and ``P + "perfsift-producer-"``,
transactional ids ``P + "perfsift."``.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

HOST = "127.0.0.1"
MECHANISM = "SCRAM-SHA-512"


def tls_material(root: Path) -> tuple[Path, Path]:
    """A CA (``ca.pem``) and one server certificate for 127.0.0.1 signed by it, with its key, in one
    PEM file (``server.pem``, a PEM keystore for every node)."""
    root.mkdir(parents=True, exist_ok=True)

    def ssl(*args: str) -> None:
        subprocess.run(["openssl", *args], cwd=root, check=True, capture_output=True, timeout=60)

    ssl(
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        "ca.key",
        "-out",
        "ca.pem",
        "-days",
        "2",
        "-subj",
        "/CN=perfsift-test-ca",
    )
    ssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", "server.key", "-out", "server.csr", "-subj", f"/CN={HOST}")
    (root / "san.ext").write_text(f"subjectAltName=IP:{HOST},DNS:localhost\n")
    ssl(
        "x509",
        "-req",
        "-in",
        "server.csr",
        "-CA",
        "ca.pem",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-out",
        "server.crt",
        "-days",
        "2",
        "-extfile",
        "san.ext",
    )
    keystore = root / "server.pem"
    keystore.write_text((root / "server.key").read_text() + (root / "server.crt").read_text())
    return root / "ca.pem", keystore


def broker_properties(keystore: Path) -> dict[str, str]:
    """What every node adds for the SASL_SSL listener and the authorizer (the listener itself is in
    ``listeners`` and ``advertised.listeners``)."""
    return {
        "sasl.enabled.mechanisms": MECHANISM,
        "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config": (
            "org.apache.kafka.common.security.scram.ScramLoginModule required;"
        ),
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": str(keystore),
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": "User:ANONYMOUS;User:admin",
    }


def client_properties(bootstrap: str, ca: Path, user: str | None, password: str | None) -> dict[str, str]:
    """librdkafka properties of a client of the secured listener (no SASL without a user)."""
    props = {"bootstrap.servers": bootstrap, "ssl.ca.location": str(ca)}
    if user is None:
        return props | {"security.protocol": "SSL"}
    return props | {
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": MECHANISM,
        "sasl.username": user,
        "sasl.password": password or "",
    }


def add_user(admin: Any, user: str, password: str) -> None:
    """A SCRAM-SHA-512 credential for ``user`` (through the PLAINTEXT listener's ``admin``)."""
    from confluent_kafka.admin import ScramCredentialInfo, ScramMechanism, UserScramCredentialUpsertion

    info = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 8192)
    for f in admin.alter_user_scram_credentials([UserScramCredentialUpsertion(user, info, password.encode())]).values():
        f.result(30)


def grant_overlay_acls(admin: Any, user: str, prefix: str, topic_prefix: str = "perf.") -> None:
    """The prod overlay's KafkaUser ACLs for ``user`` under the pipeline's ``prefix``; a
    ``topic_prefix`` other than ``perf.`` narrows (or misses) the topics."""
    from confluent_kafka.admin import AclBinding, AclOperation, AclPermissionType, ResourcePatternType, ResourceType

    ops = {
        (ResourceType.TOPIC, prefix + topic_prefix): (AclOperation.DESCRIBE, AclOperation.READ, AclOperation.WRITE),
        (ResourceType.GROUP, prefix + "perfsift."): (AclOperation.DESCRIBE, AclOperation.READ),
        (ResourceType.GROUP, prefix + "perfsift-producer-"): (AclOperation.DESCRIBE, AclOperation.READ),
        (ResourceType.TRANSACTIONAL_ID, prefix + "perfsift."): (AclOperation.DESCRIBE, AclOperation.WRITE),
    }
    bindings = [
        AclBinding(kind, name, ResourcePatternType.PREFIXED, f"User:{user}", "*", op, AclPermissionType.ALLOW)
        for (kind, name), allowed in ops.items()
        for op in allowed
    ]
    for f in admin.create_acls(bindings).values():
        f.result(30)
