"""Structural performance models (METHODS.md §5.3): their language and the models shipped with
perfsift (``*.yaml`` here, found by :func:`bundled`), and the contracts shipped beside them
(``*.contract.json``, found by :func:`bundled_contract`: ``demo``, the bundled demo's).

- :mod:`~perfsift.models.expressions`: the expression language (parsing, evaluation, range checks);
- :mod:`~perfsift.models.model_file`: the model file (parameters, components, outputs);
- :mod:`~perfsift.models.structural`: :class:`~perfsift.models.structural.StructuralModel`, the
  checked model, and its stochastic predictions;
- :mod:`~perfsift.models.balance`: time balancing of work across nodes.

Nothing here imports the rest of perfsift: the operators, producers and CLI build on it.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path


def bundled(name: str) -> Path:
    """Path of a shipped model by name (``"sor"``) or file name."""
    fname = name if name.endswith((".yaml", ".yml")) else f"{name}.yaml"
    path = Path(str(resources.files(__name__) / fname))
    if not path.is_file():
        known = sorted(p.name for p in resources.files(__name__).iterdir() if p.name.endswith(".yaml"))
        raise FileNotFoundError(f"no bundled model {name!r}; shipped: {', '.join(known)}")
    return path


def bundled_contract(name: str) -> Path:
    """Path of a shipped contract (``perfsift contract derive``'s JSON) by name (``"demo"``)."""
    fname = name if name.endswith(".contract.json") else f"{name}.contract.json"
    path = Path(str(resources.files(__name__) / fname))
    if not path.is_file():
        known = sorted(p.name for p in resources.files(__name__).iterdir() if p.name.endswith(".contract.json"))
        raise FileNotFoundError(f"no bundled contract {name!r}; shipped: {', '.join(known)}")
    return path
