"""Where numba puts compiled kernels: the user's cache, never site-packages (files pip does not
know about would survive an uninstall and turn the package directory into a namespace package).
Import this module before any ``@njit(cache=True)`` definition; :mod:`perfsift.operators.warm`
fills the cache.

numba checks a cached function against its own source file only, so a kernel that calls
functions of another module (``_nws_kernel`` calls ``_nws_windows``) would keep running stale
machine code after that module changed. The cache folder is therefore named after the content
of every kernel module, in this folder and in the operator families' sub-packages (``clean/``,
``forecast/``, ``pursuit/``: hence ``rglob``): any change to one of them compiles everything afresh.

Inside it, perfsift's kernels are filed by module name and checked against their source's content
(:class:`PathFreeLocator`), not, as numba files them, under a hash of the folder they were loaded
from: the same perfsift in another venv, clone or worktree (a reinstall, a CI checkout, a new
virtualenv for the README's first command) loads the kernels a previous one compiled, 2-3 CPU-minutes
of compilation otherwise. The machine code stays per machine: numba keys each entry by the CPU's
name and features as well.
"""

from __future__ import annotations

import functools
import hashlib
import os
from pathlib import Path
from typing import Any

import numba
from numba.core import caching
from perfsift.operators.cache_dir import cache_root

if not os.environ.get("NUMBA_CACHE_DIR"):
    _here = Path(__file__).parent
    _sources = hashlib.sha256()
    for _kernel in sorted(_here.rglob("_*.py")):
        _sources.update(_kernel.read_bytes())
    numba.config.CACHE_DIR = str(cache_root() / "numba" / _sources.hexdigest()[:12])  # type: ignore[attr-defined]


@functools.cache
def _content(path: str, mtime: float, size: int) -> str:
    """sha256 of a source file (memoised per mtime and size: a file edited while running is read again)."""
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


# public names from numba 0.61 on, underscored before
_names = vars(caching)
_UserLocator: Any = _names.get("UserProvidedCacheLocator") or _names["_UserProvidedCacheLocator"]
_Impl: Any = _names.get("CacheImpl") or _names["_CacheImpl"]


class PathFreeLocator(_UserLocator):
    """numba's locator for ``NUMBA_CACHE_DIR`` (or the folder above) for perfsift's own kernels:
    the folder inside it is the kernel's package name (``perfsift.operators.pursuit``), not its
    folder's path hashed, and the source stamp is the file's content (recent numba stamps so
    itself; older ones used the modification time, which a fresh clone changes). Kernels of other
    packages get numba's own locators."""

    def __init__(self, py_func: Any, py_file: str) -> None:
        self._py_file = py_file
        self._lineno = py_func.__code__.co_firstlineno
        self._cache_path = os.path.join(numba.config.CACHE_DIR, py_func.__module__.rpartition(".")[0])  # type: ignore[attr-defined]

    def get_source_stamp(self) -> str:
        st = os.stat(self._py_file)
        return _content(self._py_file, st.st_mtime, st.st_size)

    @classmethod
    def from_function(cls, py_func: Any, py_file: str) -> PathFreeLocator | None:
        if not getattr(py_func, "__module__", "").startswith("perfsift."):
            return None
        return super().from_function(py_func, py_file)


if PathFreeLocator not in _Impl._locator_classes:
    _Impl._locator_classes.insert(0, PathFreeLocator)
