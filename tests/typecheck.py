"""mypy over the code as it is imported: ``perfsift.*``, the tests and the benchmarks.

The sub-packages live at the top of the repository (``schemas/``, ``operators/``, ...) and are
installed as ``perfsift.schemas``, ``perfsift.operators``, ... (pyproject's ``package-dir``). An
editable install maps them with an import hook, which mypy does not run: pointed at the folders,
it would see every ``from perfsift.x import y`` as a missing module, type it ``Any`` and check
nothing across modules. So this builds the installed layout as a tree of symbolic links in
``.mypy_cache/perfsift-layout/`` and checks ``-p perfsift -p tests -p bench`` against it.

    python -m tests.typecheck            # what tests/unit/test_lint.py runs
"""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: installed sub-package name -> folder in the repository, as pyproject.toml's package-dir says
_PACKAGE_DIR = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]
LAYOUT = {name.removeprefix("perfsift."): folder for name, folder in _PACKAGE_DIR.items() if name != "perfsift"}


def layout_tree(root: Path = ROOT) -> Path:
    """The ``perfsift`` package as installed, as links into ``root``; returns the folder holding it."""
    base = root / ".mypy_cache" / "perfsift-layout"
    pkg = base / "perfsift"
    pkg.mkdir(parents=True, exist_ok=True)
    links = {name: root / folder for name, folder in LAYOUT.items()}
    links |= {f.name: f for f in (root / "perfsift").iterdir() if f.suffix in (".py", ".typed")}
    for name, target in links.items():
        link = pkg / name
        if not (link.is_symlink() and link.resolve() == target.resolve()):
            link.unlink(missing_ok=True)
            link.symlink_to(target)
    return base


def run(
    args: list[str] | None = None, root: Path = ROOT, path: tuple[Path, ...] = ()
) -> subprocess.CompletedProcess[str]:
    """mypy on the installed layout (more folders to import from: ``path``); its paths are given
    back relative to ``root``."""
    base = layout_tree(root)
    env = {**os.environ, "MYPYPATH": os.pathsep.join(map(str, (base, *path)))}
    cmd = [sys.executable, "-m", "mypy", "-p", "perfsift", "-p", "tests", "-p", "bench", *(args or [])]
    r = subprocess.run(cmd, cwd=root, env=env, capture_output=True, text=True)
    prefixes = (f"{base / 'perfsift'}/", f"{(base / 'perfsift').relative_to(root)}/")
    r.stdout = "\n".join(_repo_path(line, prefixes) for line in r.stdout.splitlines())
    return r


def _repo_path(line: str, prefixes: tuple[str, ...]) -> str:
    """A mypy line about ``<layout>/perfsift/streams/x.py`` as ``streams/x.py``."""
    for prefix in prefixes:
        if line.startswith(prefix):
            name, _, rest = line[len(prefix) :].partition("/")
            if name in LAYOUT and rest:
                return f"{LAYOUT[name]}/{rest}"
            return f"perfsift/{line[len(prefix) :]}"
    return line


def main() -> int:
    r = run(sys.argv[1:])
    print(r.stdout)
    print(r.stderr, end="", file=sys.stderr)
    return r.returncode


if __name__ == "__main__":
    sys.exit(main())
