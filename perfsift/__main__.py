"""``python -m perfsift`` and the ``perfsift`` command (``[project.scripts]``).

The CLI is imported inside :func:`main`, not here: ``perfsift run`` spawns a process per stage, and
multiprocessing's spawn runs the parent's script again in each child as ``__mp_main__`` (for the
``perfsift`` console script, whose only import is this module; a package's ``__main__`` run by
``python -m`` is skipped), so an import of the CLI here cost every stage process the whole CLI's
imports (about 0.4 CPU-s) before its stage's own."""

from __future__ import annotations

import os
from collections.abc import MutableMapping

#: BLAS thread counts perfsift's processes start with unless the environment sets them: its
#: matrices are small (a regression's tens of columns, pursuit's tens of metrics) and a stage scales
#: by partitions and processes, while BLAS threads spinning on small products and eigh on two busy
#: cores cost 2.3x the CPU (the demo's data-reduction holdouts: 20.1 CPU-s, 8.8 with one thread).
BLAS_THREADS = {"OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


def limit_blas_threads(environ: MutableMapping[str, str]) -> None:
    """:data:`BLAS_THREADS` into ``environ`` where it has no value of its own (before numpy loads:
    OpenBLAS reads it once; the stage processes ``perfsift run`` spawns inherit it)."""
    for key, value in BLAS_THREADS.items():
        environ.setdefault(key, value)


def main() -> None:
    limit_blas_threads(os.environ)
    from perfsift.streams.logs import enable_stack_dumps  # logging only: no numpy before the line above

    enable_stack_dumps()
    from perfsift.cli import main as cli_main

    cli_main()


if __name__ == "__main__":  # spawned stage processes import this module as __mp_main__
    main()
