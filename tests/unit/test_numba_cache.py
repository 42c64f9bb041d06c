"""perfsift's kernels are cached by package name and source content, not by the folder they were
loaded from (operators/_numba.py): another clone, venv or worktree of the same code loads them."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import numba
from perfsift.operators import _numba
from perfsift.operators.pursuit import _pp_kernel
from perfsift.schemas import _json_scan


def test_two_copies_of_a_kernel_module_share_one_cache_entry_and_an_edit_does_not(tmp_path: Path) -> None:
    source = Path(_pp_kernel.__file__)
    a, b, edited = (tmp_path / d / "pursuit" / source.name for d in ("clone1", "clone2", "clone3"))
    for copy in (a, b, edited):
        copy.parent.mkdir(parents=True)
        shutil.copy(source, copy)
    edited.write_text(edited.read_text() + "\n# an edit\n")
    func = _pp_kernel.lbfgs.py_func
    la, lb, le = (_numba.PathFreeLocator.from_function(func, str(p)) for p in (a, b, edited))
    assert la is not None and lb is not None and le is not None
    assert la.get_cache_path() == lb.get_cache_path() == le.get_cache_path()
    assert Path(la.get_cache_path()) == Path(vars(numba.config)["CACHE_DIR"]) / "perfsift.operators.pursuit"
    assert la.get_source_stamp() == lb.get_source_stamp() != le.get_source_stamp()
    assert la.get_disambiguator() == str(func.__code__.co_firstlineno)


def test_only_perfsift_kernels_take_the_path_free_locator() -> None:
    def elsewhere(x: float) -> float:  # a function of this test module, not of perfsift
        return x

    assert _numba.PathFreeLocator.from_function(elsewhere, __file__) is None
    kernel: Any = _json_scan._scan
    locator = kernel._cache._impl.locator  # a kernel as numba itself caches it
    assert type(locator) is _numba.PathFreeLocator
    assert Path(locator.get_cache_path()).name == "perfsift.schemas"
