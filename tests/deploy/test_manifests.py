"""Deployment files: Dockerfile (hadolint), YAML (yamllint), every rendered manifest against the
Kubernetes schema (kubernetes-validate) and the published Strimzi/KEDA CRD schemas, and their
consistency with the pipeline."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from perfsift.streams.config import load_pipeline

from tests.deploy.kustomize import render

ROOT = Path(__file__).resolve().parents[2]
K8S = ROOT / "k8s"
OVERLAYS = ["dev", "prod"]
CRD_KINDS = {"KafkaTopic", "KafkaUser", "ScaledObject", "TriggerAuthentication", "PodMonitor", "PrometheusRule"}
K8S_VERSION = "1.30.0"


def tool(name: str) -> str:
    path = shutil.which(name, path=str(Path(sys.executable).parent)) or shutil.which(name)
    if path is None:
        pytest.fail(f"{name} is not installed (it is in the [test] extra)")
    return path


@pytest.fixture(scope="module", params=OVERLAYS)
def rendered(request: pytest.FixtureRequest) -> tuple[str, list[dict[str, Any]]]:
    return request.param, render(K8S / "overlays" / request.param)


def test_the_image_copies_every_package_folder() -> None:
    """A package folder missing from the Dockerfile's COPY lines builds an image without it."""
    dirs = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"].values())
    copied = set(re.findall(r"^COPY (\S+) \./", (ROOT / "docker" / "Dockerfile").read_text(), re.M))
    assert dirs <= copied, f"not copied into the image: {sorted(dirs - copied)}"


def test_dockerfile_passes_hadolint() -> None:
    r = subprocess.run([tool("hadolint"), str(ROOT / "docker" / "Dockerfile")], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


def test_image_version_matches_the_package() -> None:
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert f"ARG PERFSIFT_VERSION={version}" in (ROOT / "docker" / "Dockerfile").read_text()
    for overlay in OVERLAYS:
        images = {c["image"] for d in render(K8S / "overlays" / overlay) for c in _containers(d)}
        assert images == {f"ghcr.io/perfsift/perfsift:{version}"}


def test_yaml_files_pass_yamllint() -> None:
    files = [str(p) for p in [*K8S.rglob("*.yaml"), *(ROOT / "docker").glob("*.yaml")] if "node_modules" not in str(p)]
    conf = "{extends: default, rules: {line-length: {max: 120}, document-start: disable, truthy: {check-keys: false}}}"
    r = subprocess.run([tool("yamllint"), "-s", "-d", conf, *files], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


def test_core_resources_match_the_kubernetes_schema(rendered: tuple[str, list[dict]]) -> None:
    overlay, docs = rendered
    core = [d for d in docs if d["kind"] not in CRD_KINDS]
    # prod goes into the Kafka cluster's namespace, which it must not create or relabel
    assert ("Namespace" in {d["kind"] for d in core}) == (overlay == "dev")
    assert {d["kind"] for d in core} >= {
        "ServiceAccount",
        "ConfigMap",
        "Deployment",
        "Job",
        "PodDisruptionBudget",
        "NetworkPolicy",
    }
    for d in core:
        kubernetes_validate.validate(d, K8S_VERSION, strict=True)


@pytest.fixture(scope="module")
def crd_validator() -> Path:
    schemas = K8S / "schemas"
    deps = json.loads((schemas / "package.json").read_text())["dependencies"]
    installed = [schemas / "node_modules" / name / "package.json" for name in deps]
    # (re)install when a pinned package is missing or at another version (package.json changed)
    if not all(
        p.exists()
        and json.loads(p.read_text())["version"] == deps[p.parent.relative_to(schemas / "node_modules").as_posix()]
        for p in installed
    ):
        npm = tool("npm")
        r = subprocess.run(
            [npm, "ci", "--no-audit", "--no-fund"], cwd=schemas, capture_output=True, text=True, timeout=300
        )
        assert r.returncode == 0, f"npm ci failed in {schemas}:\n{r.stdout}{r.stderr}"
    return schemas


def validate_crs(crs: list[dict], validator: Path) -> list[dict]:
    """Run the published-CRD validators on custom resources: one {kind, name, error} per resource."""
    r = subprocess.run(
        [tool("node"), "validate.mjs"], cwd=validator, input=json.dumps(crs), capture_output=True, text=True, timeout=60
    )
    assert r.returncode == 0, r.stderr
    return [json.loads(line) for line in r.stdout.splitlines()]


def test_custom_resources_match_the_published_crds(rendered: tuple[str, list[dict]], crd_validator: Path) -> None:
    _, docs = rendered
    crs = [d for d in docs if d["kind"] in CRD_KINDS]
    results = validate_crs(crs, crd_validator)
    assert len(results) == len(crs)
    assert [x for x in results if x["error"]] == []


def test_the_crd_validator_rejects_a_bad_resource(crd_validator: Path) -> None:
    bad = {
        "apiVersion": "kafka.strimzi.io/v1beta2",
        "kind": "KafkaTopic",
        "metadata": {"name": "x"},
        "spec": {"partitions": 0},
    }
    (result,) = validate_crs([bad], crd_validator)
    assert "partitions must be >= 1" in result["error"]
    user = {
        "apiVersion": "kafka.strimzi.io/v1beta2",
        "kind": "KafkaUser",
        "metadata": {"name": "u"},
        "spec": {"authorization": {"type": "simple", "acls": [{"resource": {"type": "topic"}, "operations": ["Fly"]}]}},
    }
    rule = {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PrometheusRule",
        "metadata": {"name": "r"},
        "spec": {"groups": [{"rules": [{"alert": "x"}]}]},
    }
    errors = [r["error"] for r in validate_crs([user, rule], crd_validator)]
    assert "operations/0 must be equal to one of the allowed values" in errors[0]
    assert "must have required property" in errors[1]


def _env(container: dict) -> dict[str, str]:
    return {e["name"]: e.get("value", "<from secret>") for e in container.get("env", [])}


def _containers(doc: dict) -> list[dict]:
    return doc.get("spec", {}).get("template", {}).get("spec", {}).get("containers", [])


def test_every_stage_has_a_deployment_and_every_topic_a_kafkatopic(rendered: tuple[str, list[dict]]) -> None:
    overlay, docs = rendered
    (cm,) = [d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"] == "perfsift-pipeline"]
    pipeline_file = Path(K8S / "base" / "pipeline.yaml")
    assert cm["data"]["pipeline.yaml"] == pipeline_file.read_text()
    deployments = {d["metadata"]["name"]: d for d in docs if d["kind"] == "Deployment"}
    for d in deployments.values():
        (c,) = _containers(d)
        env = {
            k: v
            for k, v in _env(c).items()
            if k.startswith("PERFSIFT_")
            and not k.startswith("PERFSIFT_KAFKA_")
            and k not in ("PERFSIFT_BOOTSTRAP", "PERFSIFT_HTTP_PORT", "PERFSIFT_CONFIG")
        }
        cfg = load_pipeline(pipeline_file, env=env)
        stage = c["args"][1]
        assert c["args"] == ["worker", stage, "--config", "/etc/perfsift/pipeline.yaml"]
        assert d["metadata"]["name"] == f"perfsift-{stage}"
        topics = {t["spec"]["topicName"]: t for t in docs if t["kind"] == "KafkaTopic"}
        names, compacted = cfg.topics()
        assert set(topics) == set(names), overlay
        for name, t in topics.items():
            assert t["spec"]["partitions"] == cfg.partitions, (overlay, name)
            assert (t["spec"]["config"]["cleanup.policy"] == "compact") == (name in compacted)
        assert topics["perf.selection"]["spec"]["config"]["cleanup.policy"] == "compact"
        scaled = {s["spec"]["scaleTargetRef"]["name"]: s for s in docs if s["kind"] == "ScaledObject"}
        so = scaled[d["metadata"]["name"]]
        assert so["spec"]["maxReplicaCount"] <= cfg.partitions
        assert so["spec"]["triggers"][0]["metadata"]["topic"] == cfg.stage(stage).input
        assert so["spec"]["triggers"][0]["metadata"]["consumerGroup"] == f"perfsift.{stage}"
    stages = set(load_pipeline(pipeline_file).stages)
    assert {n.removeprefix("perfsift-") for n in deployments} == stages


def test_pods_are_locked_down(rendered: tuple[str, list[dict]]) -> None:
    _, docs = rendered
    for d in docs:
        if d["kind"] not in ("Deployment", "Job"):
            continue
        pod = d["spec"]["template"]["spec"]
        assert pod["securityContext"]["runAsNonRoot"] is True
        assert pod["automountServiceAccountToken"] is False
        for c in pod["containers"]:
            sc = c["securityContext"]
            assert sc["readOnlyRootFilesystem"] is True and sc["allowPrivilegeEscalation"] is False
            assert sc["capabilities"]["drop"] == ["ALL"]
            assert "limits" in c["resources"] and "requests" in c["resources"]
        if d["kind"] == "Deployment":
            (c,) = pod["containers"]
            assert c["livenessProbe"]["httpGet"]["path"] == "/healthz"
            assert c["readinessProbe"]["httpGet"]["path"] == "/readyz"
            assert d["spec"]["template"]["metadata"]["annotations"]["prometheus.io/scrape"] == "true"
            assert pod["topologySpreadConstraints"]


def _by_kind(docs: list[dict], kind: str) -> list[dict]:
    return [d for d in docs if d["kind"] == kind]


def test_prod_credentials_and_ca_come_from_strimzi_secrets_only() -> None:
    """Every container that talks to Kafka gets SASL_SSL with the KafkaUser's name, its password from
    the Secret Strimzi writes for that user and the CA file from a volume of the cluster-CA Secret;
    KEDA uses the same Secrets; no Secret, password or certificate is in any manifest or ConfigMap."""
    docs = render(K8S / "overlays" / "prod")
    (user,) = _by_kind(docs, "KafkaUser")
    cluster = user["metadata"]["labels"]["strimzi.io/cluster"]
    assert {t["metadata"]["labels"]["strimzi.io/cluster"] for t in _by_kind(docs, "KafkaTopic")} == {cluster}
    assert user["spec"]["authentication"]["type"] == "scram-sha-512"
    ca_secret, name = f"{cluster}-cluster-ca-cert", user["metadata"]["name"]
    assert {d["metadata"]["namespace"] for d in docs} == {"kafka"}  # where Strimzi's operators and Secrets are
    kafka_containers = 0
    for d in docs:
        pod = d.get("spec", {}).get("template", {}).get("spec", {})
        volumes = {v["name"]: v for v in pod.get("volumes", [])}
        for c in _containers(d):
            env = {e["name"]: e for e in c.get("env", [])}
            for e in env.values():  # nothing secret-looking is ever a literal
                if re.search(r"PASSWORD|SECRET|TOKEN|PEM|JAAS|_KEY\b", e["name"]):
                    assert "value" not in e and "secretKeyRef" in e["valueFrom"], e
            if "PERFSIFT_BOOTSTRAP" not in env:
                continue
            kafka_containers += 1
            assert env["PERFSIFT_BOOTSTRAP"]["value"].startswith(f"{cluster}-kafka-bootstrap.")
            assert env["PERFSIFT_KAFKA_SECURITY_PROTOCOL"]["value"] == "SASL_SSL"
            assert env["PERFSIFT_KAFKA_SASL_MECHANISM"]["value"] == "SCRAM-SHA-512"
            assert env["PERFSIFT_KAFKA_SASL_USERNAME"]["value"] == name
            assert env["PERFSIFT_KAFKA_SASL_PASSWORD"]["valueFrom"]["secretKeyRef"] == {"name": name, "key": "password"}
            ca = Path(env["PERFSIFT_KAFKA_SSL_CA_LOCATION"]["value"])
            (mount,) = [m for m in c["volumeMounts"] if m["mountPath"] == str(ca.parent)]
            secret = volumes[mount["name"]]["secret"]
            assert secret["secretName"] == ca_secret and {"key": "ca.crt", "path": ca.name} in secret["items"]
    assert kafka_containers == len(_by_kind(docs, "Deployment")) + len(_by_kind(docs, "Job"))
    (auth,) = _by_kind(docs, "TriggerAuthentication")
    refs = {r["parameter"]: (r["name"], r["key"]) for r in auth["spec"]["secretTargetRef"]}
    assert refs == {"password": (name, "password"), "ca": (ca_secret, "ca.crt")}
    assert auth["spec"]["env"] == [
        {"parameter": "username", "name": "PERFSIFT_KAFKA_SASL_USERNAME", "containerName": "worker"}
    ]
    # KEDA reads that variable from the container of each scaled Deployment
    assert {_containers(d)[0]["name"] for d in _by_kind(docs, "Deployment")} == {"worker"}
    for so in _by_kind(docs, "ScaledObject"):
        meta = so["spec"]["triggers"][0]["metadata"]
        assert (meta["sasl"], meta["tls"]) == ("scram_sha512", "enable")
        assert so["spec"]["triggers"][0]["authenticationRef"]["name"] == auth["metadata"]["name"]
        assert meta["bootstrapServers"].startswith(f"{cluster}-kafka-bootstrap.")
    assert not _by_kind(docs, "Secret")
    text = json.dumps(docs)
    assert "BEGIN CERTIFICATE" not in text and "BEGIN PRIVATE" not in text
    for d in _by_kind(docs, "ConfigMap"):
        assert not re.search(r"(?i)password|sasl\.|secret|ssl\.", json.dumps(d["data"]))


def test_prod_acls_cover_exactly_the_pipelines_topics_groups_and_transactional_ids() -> None:
    """The KafkaUser's prefixed ACLs follow from the pipeline file: every topic, every stage's group
    (and its snapshot reader) and every exactly-once transactional id falls under a prefix with the
    operations it needs, and nothing outside the pipeline's names does."""
    from perfsift.streams.runner import StageRunner

    docs = render(K8S / "overlays" / "prod")
    (user,) = _by_kind(docs, "KafkaUser")
    acls = user["spec"]["authorization"]["acls"]
    assert user["spec"]["authorization"]["type"] == "simple"
    assert all(a["resource"]["patternType"] == "prefix" for a in acls)

    def allowed(kind: str, name: str) -> set[str]:
        return {
            op
            for a in acls
            if a["resource"]["type"] == kind and name.startswith(a["resource"]["name"])
            for op in a["operations"]
        }

    cfg = load_pipeline(K8S / "base" / "pipeline.yaml", env={})
    names, _ = cfg.topics()
    for topic in names:
        assert allowed("topic", topic) == {"Describe", "Read", "Write"}, topic
    assert {a["resource"]["name"] for a in acls if a["resource"]["type"] == "topic"} == {f"{cfg.topic_prefix}perf."}
    for stage in cfg.stages.values():
        runner = StageRunner(stage, cfg, {"bootstrap.servers": "127.0.0.1:1"}, embedded=False)
        consumer, producer = runner.client_settings()  # a real cluster: exactly-once
        assert runner.exactly_once
        for group in (consumer["group.id"], f"{runner.group_id}.restore"):
            assert allowed("group", group) == {"Describe", "Read"}, group
        assert allowed("transactionalId", producer["transactional.id"]) == {"Describe", "Write"}
    # the scaler reads the groups the workers use
    for so in _by_kind(docs, "ScaledObject"):
        assert allowed("group", so["spec"]["triggers"][0]["metadata"]["consumerGroup"]) >= {"Describe", "Read"}
    assert not allowed("topic", "__consumer_offsets") and not allowed("group", "other-app")
    assert not [a for a in acls if a["resource"]["type"] == "cluster"]


def test_prod_monitoring_scrapes_the_workers_and_alerts_on_exported_metrics() -> None:
    from tests.deploy.test_dashboard import exported_names

    docs = render(K8S / "overlays" / "prod")
    (pm,) = _by_kind(docs, "PodMonitor")
    (endpoint,) = pm["spec"]["podMetricsEndpoints"]
    for d in _by_kind(docs, "Deployment"):
        labels = d["spec"]["template"]["metadata"]["labels"]
        assert pm["spec"]["selector"]["matchLabels"].items() <= labels.items()
        (c,) = _containers(d)
        port = {p["name"]: p["containerPort"] for p in c["ports"]}[endpoint["port"]]
        probe = c["livenessProbe"]["httpGet"]
        assert endpoint["path"] == "/metrics" and probe["port"] == endpoint["port"]
        assert str(port) == _env(c)["PERFSIFT_HTTP_PORT"]
    (rule,) = _by_kind(docs, "PrometheusRule")
    rules = [r for g in rule["spec"]["groups"] for r in g["rules"]]
    assert {r["alert"] for r in rules} == {
        "PerfsiftWorkerDown",
        "PerfsiftLagGrowing",
        "PerfsiftDeadLetters",
        "PerfsiftContractViolations",
    }
    used = {m for r in rules for m in re.findall(r"\bperfsift_\w+", r["expr"])}
    assert used and used <= exported_names(), sorted(used - exported_names())
    (down,) = [r for r in rules if r["alert"] == "PerfsiftWorkerDown"]
    m = re.fullmatch(r'up\{job=~"\.\+/(\w+)"\} == 0', down["expr"])  # a PodMonitor's job: <namespace>/<name>
    assert m is not None and m.group(1) == pm["metadata"]["name"]


SECRETISH = re.compile(r"""(?ix)
    \b(password|passwd|secret|token|api[_-]?key|private[_-]?key)\s*[:=]\s*["']?(?!\s*$)(?![{<$])[^\s"']{6,}
    | -----BEGIN\ [A-Z ]*PRIVATE\ KEY-----
    | AKIA[0-9A-Z]{16}
""")


def test_no_secret_material_is_committed() -> None:
    files = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    hits = []
    for f in files:
        p = ROOT / f
        if (p.suffix not in (".yaml", ".yml", ".json", ".toml", ".env", ".md") and p.name != "Dockerfile") or (
            "lock" in p.name
        ):
            continue
        for i, line in enumerate(p.read_text(errors="replace").splitlines(), 1):
            m = SECRETISH.search(line)
            if m and "secretKeyRef" not in line and "SECRETISH" not in line:
                hits.append(f"{f}:{i}: {line.strip()[:100]}")
    assert hits == []


def test_image_and_compose_run_the_stages_of_the_packaged_pipeline() -> None:
    """The image's pipeline is streams/pipeline.yaml: its default command and the compose services
    run its stages, every one of them."""
    from perfsift.streams.config import load_pipeline

    stages = set(load_pipeline(ROOT / "streams" / "pipeline.yaml", env={}).stages)
    cmd = re.search(r'^CMD \["worker", "(\w+)"\]', (ROOT / "docker" / "Dockerfile").read_text(), re.M)
    assert cmd is not None and cmd.group(1) in stages
    services = yaml.safe_load((ROOT / "docker" / "compose.yaml").read_text())["services"].values()
    workers = [s["command"][1] for s in services if s.get("command", [None])[0] == "worker"]
    assert sorted(workers) == sorted(stages)


def test_base_pipeline_is_the_packaged_default_with_the_node_stage_apart() -> None:
    """The cluster layout has the packaged default's settings and operators; only the node stage
    (clean -> sliding mean) runs as two stages with a topic between them."""
    from dataclasses import replace

    from perfsift.streams.config import load_pipeline

    k8s = load_pipeline(K8S / "base" / "pipeline.yaml", env={})
    default = load_pipeline(ROOT / "streams" / "pipeline.yaml", env={})
    assert replace(k8s, stages={}, source="") == replace(default, stages={}, source="")
    clean, smooth = (k8s.stages[n] for n in ("clean", "smooth"))
    node = default.stages["node"]
    assert (clean.input, clean.outputs, smooth.input) == ("perf.raw", ("perf.clean",), "perf.clean")
    assert (node.input, node.outputs, node.role) == (clean.input, smooth.outputs, smooth.role)
    ops = [(op.type, op.params) for op in node.operators]
    assert ops == [(op.type, op.params) for op in clean.operators + smooth.operators]
    rest = {n: s for n, s in k8s.stages.items() if n not in ("clean", "smooth")}
    assert rest == {n: s for n, s in default.stages.items() if n != "node"}
    assert yaml.safe_load((ROOT / "docker" / "compose.yaml").read_text())["services"]["kafka"]["image"].startswith(
        "apache/kafka:"
    )


def test_the_secret_scan_finds_planted_secrets() -> None:
    assert SECRETISH.search("  password: hunter2hunter2")
    assert SECRETISH.search('sasl.password="s3cr3t-value"')
    assert SECRETISH.search("-----BEGIN RSA PRIVATE KEY-----")
    assert not SECRETISH.search("  password: ${KAFKA_PASSWORD}")
    assert not SECRETISH.search("      key: password")
