"""Run the runnable examples in the docstrings of every perfsift module, one test per docstring, so
that a failing example names itself; and require an example in every registered operator's module."""

from __future__ import annotations

import doctest
import importlib
import pkgutil

import pytest
from perfsift.operators.registry import OPERATORS

import perfsift

FLAGS = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE
#: operator modules allowed to have no example, with the reason (keep this empty where possible)
EXEMPT: dict[str, str] = {}


def all_modules() -> list[str]:
    names = []
    layers = ("models", "operators", "schemas", "formats", "streams", "producers", "analysis", "adapters", "cli")
    for pkg in (f"perfsift.{layer}" for layer in layers):
        mod = importlib.import_module(pkg)
        names += [m.name for m in pkgutil.walk_packages(mod.__path__, pkg + ".")]  # sub-packages too
    return names


def all_docstrings() -> list[doctest.DocTest]:
    finder = doctest.DocTestFinder(exclude_empty=True)
    tests = []
    for name in all_modules():
        module = importlib.import_module(name)
        tests += [t for t in finder.find(module, name) if _runs(t) and _defined_in(t, name)]
    return sorted(tests, key=lambda t: t.name)


def _runs(test: doctest.DocTest) -> bool:
    """A docstring with an example that is not ``+SKIP`` (one of only skipped examples cannot fail)."""
    return any(not ex.options.get(doctest.SKIP, False) for ex in test.examples)


def _defined_in(test: doctest.DocTest, module: str) -> bool:
    """Docstrings of objects a module only imports are found again there: run each once, where it lives."""
    return test.name == module or test.name.startswith(module + ".")


DOCTESTS = all_docstrings()


@pytest.mark.parametrize("test", DOCTESTS, ids=[t.name for t in DOCTESTS])
def test_docstring_examples(test: doctest.DocTest) -> None:
    runner = doctest.DocTestRunner(optionflags=FLAGS)
    runner.run(test)
    result = runner.summarize(verbose=False)
    assert result.attempted == sum(not ex.options.get(doctest.SKIP, False) for ex in test.examples)
    assert result.failed == 0, f"{test.name}: {result.failed} of {result.attempted} examples failed (output above)"


@pytest.mark.parametrize("kind", sorted(k for k, op in OPERATORS.items() if op.__module__ not in EXEMPT))
def test_every_operator_module_has_an_example(kind: str) -> None:
    module = OPERATORS[kind].__module__
    assert any(t.name.startswith(module) for t in DOCTESTS), f"{module} ({kind}) has no docstring example"


def test_there_are_examples() -> None:
    assert sum(len(t.examples) for t in DOCTESTS) >= 8
    assert perfsift.__version__
