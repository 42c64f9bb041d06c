"""Debian's programs for the tests that run real monitoring tools (Prometheus, node-exporter,
collectd, kcat): :func:`program` gives the path of one, installing its package with apt-get when
it is missing and the run may install (``CI=true``, or running as root as ``tests/postgres.py``
does for PostgreSQL; with ``sudo -n`` when not root), and otherwise skips the test with a one-line
reason (under ``CI=true`` a program that could not be installed fails the test). Test workers
collect at once: one installs, the others wait on a lock.

A package's post-install script may start its service (Debian's prometheus on :9090,
prometheus-node-exporter on :9100); the tests start their own copies on free loopback ports.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import tempfile
from functools import cache
from pathlib import Path

import pytest

#: program -> the Debian package that ships it
PACKAGES = {
    "prometheus": "prometheus",
    "prometheus-node-exporter": "prometheus-node-exporter",
    "collectd": "collectd",
    "kcat": "kcat",
}


def _which(name: str) -> str | None:
    return shutil.which(name, path=f"{os.environ.get('PATH', '')}:/usr/sbin:/sbin")


@cache
def find(name: str) -> tuple[str | None, str]:
    """(path of ``name`` or None, why not)."""
    if (path := _which(name)) is not None:
        return path, ""
    may = os.environ.get("CI", "").lower() == "true" or os.geteuid() == 0
    if not may:
        return None, f"{name} is not installed (apt-get install {PACKAGES[name]}; CI=true installs it)"
    sudo = [] if os.geteuid() == 0 else ["sudo", "-n"]
    if not shutil.which("apt-get") or (sudo and not shutil.which("sudo")):
        return None, f"{name} is not installed and there is no apt-get{' or sudo' if sudo else ''} to install it"
    with open(Path(tempfile.gettempdir()) / "perfsift-apt-install.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (path := _which(name)) is not None:
            return path, ""
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        install = [*sudo, "apt-get", "install", "-y", "-q", "--no-install-recommends", PACKAGES[name]]
        r = subprocess.run(install, capture_output=True, text=True, env=env, timeout=900, check=False)
        if r.returncode != 0:  # a stale package list: refresh it once
            subprocess.run([*sudo, "apt-get", "update", "-q"], capture_output=True, env=env, timeout=600, check=False)
            r = subprocess.run(install, capture_output=True, text=True, env=env, timeout=900, check=False)
    if (path := _which(name)) is not None:
        return path, ""
    tail = (r.stderr or r.stdout).strip().splitlines()[-1:] or ["no output"]
    return None, f"apt-get install {PACKAGES[name]} failed: {tail[0][:200]}"


def program(name: str) -> str:
    """The path of Debian's ``name`` (installed if it may be, see the module docstring); skips the
    calling test with the reason when it is not there (fails it under ``CI=true``)."""
    path, why = find(name)
    if path is None:
        if os.environ.get("CI", "").lower() == "true":  # CI installs what its tests need: missing is a failure
            pytest.fail(why, pytrace=False)
        pytest.skip(why)
    return path
