"""A real Schema Registry API on 127.0.0.1 for the tests marked ``schema_registry``: Apicurio
Registry's Confluent-compatible API (``/apis/ccompat/v7``), in-memory storage (H2), small heap.

Apicurio publishes its app as a Quarkus application jar, not a runnable one, so the fixture runs the
Quarkus build of it from Maven Central: ``mvn package`` on ``tests/schema-registry/pom.xml`` into
``~/.cache/perfsift/apicurio-registry-<version>/`` (``.ci/run`` does it before the suite; the
fixture does it on first use). Why that version and what the build works around: the pom's comment.
The registry starts with the first marked test of a file and stops after the file's last. Without
Java or Maven the tests skip with one line, except with ``CI=true``, where that is a failure.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.kafka_cluster import HOST, free_port

POM = Path(__file__).parent / "schema-registry" / "pom.xml"
#: the registry's version: the pom's (also read by .ci/run)
VERSION = re.search(r"<apicurio.version>(.+)</apicurio.version>", POM.read_text()).group(1)  # type: ignore[union-attr]
HEAP = os.environ.get("PERFSIFT_TEST_REGISTRY_HEAP", "-Xmx256m")
CCOMPAT = "/apis/ccompat/v7"


def build_dir() -> Path:
    default = Path.home() / ".cache" / "perfsift" / f"apicurio-registry-{VERSION}"
    return Path(os.environ.get("PERFSIFT_REGISTRY_BUILD", default))


def runner_jar() -> Path:
    return build_dir() / "schema-registry-runner.jar"


def build() -> Path:
    """The Quarkus build of Apicurio Registry in the cache folder, made by Maven if not there."""
    if not runner_jar().exists():
        if shutil.which("mvn") is None:
            raise FileNotFoundError("mvn not found")
        cmd = ["mvn", "-q", "-B", "-f", str(POM), "package", "-DskipTests", f"-Dbuild.dir={build_dir()}"]
        subprocess.run(cmd, check=True, timeout=900)
    return runner_jar()


@dataclass
class Registry:
    """A running registry: ``url`` is its Confluent-compatible API, ``started_s`` how long it took
    from the JVM's start to the first answer of that API."""

    url: str
    started_s: float
    proc: subprocess.Popen[bytes]
    log: Path

    def subjects(self) -> list[str]:
        import json

        with urllib.request.urlopen(f"{self.url}/subjects", timeout=10) as resp:
            return list(json.loads(resp.read()))


def start(timeout: float = 180.0) -> Registry:
    """Start the registry on a free loopback port; wait until its ccompat API answers."""
    jar = build()
    port = free_port()
    log = Path(tempfile.mkdtemp(prefix="perfsift-registry-")) / "registry.log"
    cmd = [
        "java",
        *HEAP.split(),
        "-XX:+UseSerialGC",
        "-XX:TieredStopAtLevel=1",
        f"-Dquarkus.http.host={HOST}",
        f"-Dquarkus.http.port={port}",
        "-Dquarkus.datasource.jdbc.min-size=1",
        "-Dquarkus.datasource.jdbc.initial-size=1",
        "-Dquarkus.datasource.jdbc.max-size=8",
        "-jar",
        str(jar),
    ]
    url = f"http://{HOST}:{port}{CCOMPAT}"
    t0 = time.monotonic()
    with log.open("wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, cwd=log.parent)
    while time.monotonic() - t0 < timeout:
        if proc.poll() is not None:
            raise RuntimeError(f"the registry exited with {proc.returncode}: {log.read_text()[-2000:]}")
        try:
            with urllib.request.urlopen(f"{url}/subjects", timeout=2) as resp:
                if resp.status == 200:
                    return Registry(url, time.monotonic() - t0, proc, log)
        except OSError:
            pass
        time.sleep(0.25)
    proc.kill()
    raise RuntimeError(f"the registry did not answer in {timeout:.0f} s: {log.read_text()[-2000:]}")


def stop(registry: Registry) -> None:
    registry.proc.terminate()
    try:
        registry.proc.wait(20)
    except subprocess.TimeoutExpired:
        registry.proc.kill()
        registry.proc.wait(10)
    shutil.rmtree(registry.log.parent, ignore_errors=True)


def missing_tools() -> str | None:
    """Why the registry cannot run here (no Java, no Maven and no cached build), or None."""
    if shutil.which("java") is None:
        return "java not found"
    if not runner_jar().exists() and shutil.which("mvn") is None:
        return "mvn not found and no registry build cached"
    return None


@pytest.fixture(scope="module")
def schema_registry() -> Iterator[Registry]:
    """An Apicurio Registry for one test file (see the module docstring), stopped after its last
    test rather than idling, a JVM, through the rest of the worker's session."""
    reason = missing_tools()
    if reason is not None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"schema_registry tests need Java and Maven under CI=true: {reason}")
        pytest.skip(f"Schema Registry unavailable: {reason}")
    registry = start()
    try:
        yield registry
    finally:
        stop(registry)
