"""A throw-away PostgreSQL server for the knowledge-base tests: Debian's ``postgresql`` binaries
(installed with apt-get when missing and running as root), ``initdb`` + ``pg_ctl`` in a temporary
directory, listening on 127.0.0.1 on a free port; as the ``postgres`` system user when running as
root (the server refuses to run as root).

When PostgreSQL is not there and cannot be installed, :func:`available` says why (loudly, as a
warning) and the tests run on SQLite only - unless the environment claims to have PostgreSQL
(``PERFSIFT_TEST_POSTGRES=1``), in which case its absence is an error.
"""

from __future__ import annotations

import fcntl
import glob
import os
import pwd
import shutil
import subprocess
import tempfile
import uuid
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from functools import cache
from pathlib import Path

from perfsift.streams.broker import free_port

CLAIMED = os.environ.get("PERFSIFT_TEST_POSTGRES") == "1"


def _bindir() -> Path | None:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    return Path(found[-1]).parent if found else None


@cache
def available() -> str | None:
    """None when a PostgreSQL server can be started here, else the reason it cannot."""
    reason = None
    try:
        import psycopg  # noqa: F401 - the client (the test extra installs it)
    except ImportError:
        reason = "psycopg is not installed (pip install -e '.[test]')"
    if reason is None and _bindir() is None:
        with open(Path(tempfile.gettempdir()) / "perfsift-postgres-install.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # test workers collect at once: one installs, the others wait
            reason = None if _bindir() is not None else _install()
    if reason is not None:
        message = f"PostgreSQL knowledge-base tests NOT RUN: {reason}; only SQLite is tested"
        if CLAIMED:
            raise RuntimeError(f"PERFSIFT_TEST_POSTGRES=1 but {message}")
        warnings.warn(message, stacklevel=1)
    return reason


def _install() -> str | None:
    """Install Debian's postgresql with apt-get (root only); None on success, else why not."""
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        return "no /usr/lib/postgresql/*/bin/initdb, and not root with apt-get to install Debian's postgresql"
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    install = ["apt-get", "install", "-y", "-q", "--no-install-recommends", "postgresql"]
    r = subprocess.run(install, capture_output=True, text=True, env=env, timeout=600)
    if r.returncode != 0:  # a stale package list: refresh it once
        subprocess.run(["apt-get", "update", "-q"], capture_output=True, env=env, timeout=600)
        r = subprocess.run(install, capture_output=True, text=True, env=env, timeout=600)
    return None if _bindir() is not None else f"apt-get install postgresql failed: {(r.stderr or r.stdout)[-300:]}"


def _as_postgres(cmd: list[str]) -> list[str]:
    """``cmd`` as the ``postgres`` user when running as root (the server refuses root)."""
    if os.geteuid() != 0:
        return cmd
    pwd.getpwnam("postgres")  # KeyError: the package creates this user
    return ["runuser", "-u", "postgres", "--", *cmd]


@contextmanager
def server() -> Iterator[str]:
    """Start a server; yield the DSN of its ``postgres`` database (user ``perfsift``, trust auth)."""
    bindir = _bindir()
    assert bindir is not None, available()
    root = Path(tempfile.mkdtemp(prefix="perfsift-pg-"))
    data, sock = root / "data", root / "sock"
    sock.mkdir()
    if os.geteuid() == 0:
        pw = pwd.getpwnam("postgres")
        for p in (root, sock):
            os.chown(p, pw.pw_uid, pw.pw_gid)
    port = free_port()
    log = root / "server.log"
    try:
        subprocess.run(
            _as_postgres([str(bindir / "initdb"), "-D", str(data), "-A", "trust", "-U", "perfsift", "-E", "UTF8"]),
            check=True,
            capture_output=True,
            timeout=120,
        )
        opts = f"-p {port} -k {sock} -c listen_addresses=127.0.0.1 -c fsync=off"
        subprocess.run(
            _as_postgres([str(bindir / "pg_ctl"), "-D", str(data), "-l", str(log), "-o", opts, "-w", "start"]),
            check=True,
            capture_output=True,
            timeout=120,
        )
        yield f"postgresql://perfsift@127.0.0.1:{port}/postgres"
    finally:
        if (data / "postmaster.pid").exists():
            subprocess.run(
                _as_postgres([str(bindir / "pg_ctl"), "-D", str(data), "-m", "fast", "-w", "stop"]),
                capture_output=True,
                timeout=60,
            )
        shutil.rmtree(root, ignore_errors=True)


def fresh_database(dsn: str) -> str:
    """A new, empty database on the server of ``dsn``; its DSN."""
    import psycopg

    name = f"kb_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    return dsn.rsplit("/", 1)[0] + f"/{name}"
