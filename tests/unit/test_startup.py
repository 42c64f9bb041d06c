"""Every perfsift process (each CLI call, each stage of ``perfsift run``) pays for its imports: scipy
alone was ~0.9 of 2.3 CPU-s under load, and perfsift needs it only inside a few functions, which
import it where they use it. A module-level ``import scipy.stats`` anywhere on the way fails this."""

from __future__ import annotations

import subprocess
import sys

HEAVY = ("scipy.stats", "scipy.optimize", "scipy.special", "scipy.linalg", "matplotlib", "sklearn", "statsmodels")


def test_the_cli_and_the_stage_runner_import_no_heavy_library() -> None:
    code = (
        "import sys, perfsift.cli, perfsift.streams.runner, perfsift.operators; "
        f"print(','.join(m for m in {HEAVY!r} if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == "", f"imported at start: {out}"


def test_a_stage_process_spawned_by_the_perfsift_command_does_not_import_the_cli(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """multiprocessing's spawn runs the parent's script again in each child (``perfsift run``'s
    stage processes): the console script imports only ``perfsift.__main__``, which must not import
    the CLI (an entry point of ``perfsift.cli:main`` fails this)."""
    import importlib.metadata

    (entry,) = [e for e in importlib.metadata.entry_points(group="console_scripts") if e.name == "perfsift"]
    module, func = entry.value.split(":")
    script = tmp_path / "perfsift_script.py"
    script.write_text(
        f"from {module} import {func}  # what pip's console script does\n"
        "import multiprocessing\n"
        "if __name__ == '__main__':\n"
        "    with multiprocessing.get_context('spawn').Pool(1) as pool:\n"
        "        print(pool.apply(eval, (\"'perfsift.cli' in __import__('sys').modules\",)))\n"
    )
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, check=True).stdout.strip()
    assert out == "False"
