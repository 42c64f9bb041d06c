"""Structural performance models shipped with perfsift (see :mod:`perfsift.operators.model`)."""

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
