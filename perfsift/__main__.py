"""``python -m perfsift`` and the ``perfsift`` command (``[project.scripts]``).

The CLI is imported inside :func:`main`, not here: ``perfsift run`` spawns a process per stage, and
multiprocessing's spawn runs the parent's script again in each child as ``__mp_main__`` (for the
``perfsift`` console script, whose only import is this module; a package's ``__main__`` run by
``python -m`` is skipped), so an import of the CLI here cost every stage process the whole CLI's
imports (about 0.4 CPU-s) before its stage's own."""

from __future__ import annotations


def main() -> None:
    from perfsift.cli import main as cli_main

    cli_main()


if __name__ == "__main__":  # spawned stage processes import this module as __mp_main__
    main()
