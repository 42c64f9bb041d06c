"""docs/deploy.md's connection recipes: each provider's pipeline-file ``kafka:`` block and its
``PERFSIFT_KAFKA_*`` variables give the same client properties, and librdkafka accepts them
(property names and values) for a perfsift stage consumer and producer."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
import yaml
from confluent_kafka import Consumer, KafkaException, Producer
from perfsift.streams.clients import consumer_settings, kafka_properties, producer_settings

ROOT = Path(__file__).resolve().parents[2]
DOC = (ROOT / "docs" / "deploy.md").read_text()
SECTION = DOC[DOC.index("## Connecting to a managed Kafka") :]
RECIPES = re.findall(r"^### (.+?)\n.*?```yaml\n(kafka:\n.*?)```\n+```bash\n(.*?)```", SECTION, re.S | re.M)
#: what the comments say comes from a Secret, so the check has the whole configuration
SECRETS = {
    "sasl.password": "from-a-secret",
    "sasl.oauthbearer.client.secret": "from-a-secret",
}


def self_signed_ca(directory: Path) -> str:
    """A real CA certificate file (what Strimzi's ca.crt is), made with the openssl CLI."""
    cert, key = directory / "ca.crt", directory / "ca.key"
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "1",
            "-subj",
            "/CN=test-ca",
            "-keyout",
            str(key),
            "-out",
            str(cert),
        ],
        check=True,
        capture_output=True,
    )
    return str(cert)


def test_every_provider_has_a_recipe() -> None:
    titles = [t for t, _, _ in RECIPES]
    assert titles == [
        "Strimzi (SASL/SCRAM-SHA-512 over TLS)",
        "Confluent Cloud, API key (SASL/PLAIN)",
        "Confluent Cloud, OAuth (SASL/OAUTHBEARER)",
        "Amazon MSK, SASL/SCRAM",
    ]


@pytest.mark.parametrize(("title", "block", "env_text"), RECIPES, ids=[t for t, _, _ in RECIPES])
def test_the_file_and_the_environment_forms_agree_and_librdkafka_takes_them(
    title: str, block: str, env_text: str, tmp_path: Path
) -> None:
    file_props = {k: str(v) for k, v in yaml.safe_load(block)["kafka"].items()}
    env = dict(line.split("=", 1) for line in env_text.splitlines() if line and not line.startswith("#"))
    bootstrap = env.pop("PERFSIFT_BOOTSTRAP")
    assert all(k.startswith("PERFSIFT_KAFKA_") for k in env), title
    from_env = kafka_properties(bootstrap, env=env)
    from_file = kafka_properties(bootstrap, env={}, file=file_props)
    assert from_env == from_file, title
    # the comment names the secret variable the recipe leaves out, and it maps to a secret property
    (secret_var,) = re.findall(r"^# (PERFSIFT_KAFKA_\w+)", env_text, re.M)
    secret_prop = next(iter(kafka_properties("x", env={secret_var: "s"}).keys() - {"bootstrap.servers"}))
    assert secret_prop in SECRETS and secret_prop not in from_file
    props = {**from_file, "bootstrap.servers": "127.0.0.1:1", secret_prop: SECRETS[secret_prop]}
    if props.get("ssl.ca.location", "probe") != "probe":  # a mounted CA file: librdkafka loads it at once
        props["ssl.ca.location"] = self_signed_ca(tmp_path)
    for client, settings in (
        (Consumer, consumer_settings(props, "perfsift.node", "read_committed")),
        (Producer, producer_settings(props, "perfsift.node.0")),
    ):
        try:
            c = client(settings)
        except KafkaException as exc:  # an unknown property or a bad value
            pytest.fail(f"{title}: librdkafka refuses the {client.__name__} settings: {exc}")
        if isinstance(c, Consumer):
            c.close()


def test_librdkafka_would_refuse_a_wrong_property() -> None:
    """The check above has teeth: a misspelt property is refused at construction."""
    with pytest.raises(KafkaException, match=re.escape("sasl.oauthbearer.tokn.endpoint.url")):
        Producer({"bootstrap.servers": "127.0.0.1:1", "sasl.oauthbearer.tokn.endpoint.url": "https://x"})
