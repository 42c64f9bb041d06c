"""The command line in a shell and in a log: plain metavars in every --help, one-line usage errors
when stderr is not a terminal, shell completion, and validate --schema."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.e2e.cli import perfsift, perfsift_here

pytestmark = pytest.mark.e2e
ROOT = Path(__file__).resolve().parents[2]
#: the console script, run with this interpreter (so the program name is perfsift, as installed)
MAIN = [sys.executable, "-c", "import sys; from perfsift.cli import main; sys.argv[0] = 'perfsift'; main()"]


def _all_commands() -> list[list[str]]:
    import typer
    from perfsift.cli import app

    group = typer.main.get_command(app)
    found: list[list[str]] = []

    def walk(cmd: object, path: list[str]) -> None:
        found.append(path)
        for name, sub in getattr(cmd, "commands", {}).items():
            walk(sub, [*path, name])

    walk(group, [])
    return found


def test_no_help_shows_python_types_as_metavars() -> None:
    """Every command's --help, as printed: no <str>, <int>, <list[str]>, <bool> or {ARG}."""
    from perfsift.cli import app
    from perfsift.cli.shell import cli_command, run_cli

    commands = _all_commands()
    assert len(commands) > 20
    r = subprocess.run([*MAIN, "--help"], capture_output=True, text=True, timeout=60)  # as a user runs it
    assert r.returncode == 0 and "Usage: perfsift" in r.stdout, r.stderr
    # all of them in-process (fast): the same click command main() runs
    import contextlib
    import io

    command = cli_command(app)  # built once: click makes a new context for every call
    for path in commands:
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf), pytest.MonkeyPatch.context() as mp:
            mp.setenv("COLUMNS", "200")
            assert run_cli(command, [*path, "--help"]) == 0
        text = buf.getvalue()
        assert "Usage: perfsift" in text, path
        bad = re.findall(r"<(?:str|int|float|bool|path|file|list\[[^\]]*\]|Path)>|\{[A-Za-z_]+\}", text)
        assert bad == [], (path, bad)
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        run_cli(command, ["forecast", "--help"])
    assert re.search(r"--metric\s+-m\s+METRIC\b", buf.getvalue())
    assert re.search(r"\bTRACE\b", buf.getvalue())


def test_usage_errors_are_one_line_when_stderr_is_not_a_terminal() -> None:
    r = perfsift("worker")  # a real process with stderr a pipe; the rest through the same main() here
    assert r.returncode == 2
    assert r.stderr.splitlines() == [
        "perfsift worker: error: Missing argument 'STAGE'. (see perfsift worker --help)"
    ], r.stderr
    r = perfsift_here("forecast", "x.csv", "--metrc", "cpu")
    assert r.returncode == 2 and len(r.stderr.splitlines()) == 1
    assert r.stderr.startswith("perfsift forecast: error: No such option: --metrc") and "--metric" in r.stderr
    r = perfsift_here("validate", "--bogus")
    assert r.returncode == 2 and len(r.stderr.splitlines()) == 1 and "╭" not in r.stderr
    r = perfsift_here()  # no command: the help, as before
    assert r.returncode == 2 and "Usage: perfsift [OPTIONS] COMMAND" in r.stdout


def test_shell_completion_is_on(tmp_path: Path) -> None:
    r = perfsift("--show-completion", "bash")
    assert r.returncode == 0, r.stderr
    assert "_PERFSIFT_COMPLETE=complete_bash" in r.stdout and "complete -o default -F" in r.stdout
    # what bash's completion function runs: the words so far -> the candidates (main() in this process)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("_PERFSIFT_COMPLETE", "complete_bash")
        mp.setenv("COMP_WORDS", "perfsift wor")
        mp.setenv("COMP_CWORD", "1")
        r = perfsift_here()
        assert r.stdout.split() == ["worker"], (r.stdout, r.stderr)
        mp.setenv("COMP_WORDS", "perfsift validate --sch")
        mp.setenv("COMP_CWORD", "2")
        r = perfsift_here()
        assert r.stdout.split() == ["--schema"], (r.stdout, r.stderr)
    home = tmp_path / "home"
    home.mkdir()
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HOME", str(home))
        r = perfsift_here("--install-completion", "bash")
    assert r.returncode == 0, r.stderr
    assert "perfsift" in (home / ".bashrc").read_text()


def test_validate_prints_the_committed_schema() -> None:
    r = perfsift("validate", "--schema")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout) == json.loads((ROOT / "docs" / "pipeline.schema.json").read_text())
    r = perfsift_here("validate")
    assert r.returncode == 2 and "validate needs a PIPELINE file (or --schema)" in r.stderr
