"""The cleaning operator (METHODS.md §3): :class:`~perfsift.operators.clean.clean.Clean` (``clean.py``),
its compiled outlier filter (``_clean_kernel.py``), missing-value imputation (``_impute.py``) and what
it reads of the knowledge base (``_knowledge.py``).

:class:`Clean` is imported on first use (PEP 562): its kernel loads numba, which a reader of the
knowledge base (``streams/knowledge.py``, every pipeline file's parser) does not need."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from perfsift.operators.clean.clean import Clean


def __getattr__(name: str) -> object:
    if name != "Clean":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from perfsift.operators.clean.clean import Clean

    return Clean


__all__ = ["Clean"]
