"""Run the runnable examples in the docstrings of every perfsift module."""

from __future__ import annotations

import doctest
import importlib
import pkgutil

import pytest

import perfsift


def all_modules() -> list[str]:
    names = []
    layers = ("models", "operators", "schemas", "formats", "streams", "producers", "analysis", "adapters", "cli")
    for pkg in (f"perfsift.{layer}" for layer in layers):
        mod = importlib.import_module(pkg)
        names += [m.name for m in pkgutil.walk_packages(mod.__path__, pkg + ".")]  # sub-packages too
    return names


@pytest.mark.parametrize("name", all_modules())
def test_docstring_examples(name: str) -> None:
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.failed == 0


def test_there_are_examples() -> None:
    total = sum(doctest.testmod(importlib.import_module(n)).attempted for n in all_modules())
    assert total >= 8
    assert perfsift.__version__
