"""The cleaning operator (METHODS.md §3): :class:`~perfsift.operators.clean.clean.Clean` (``clean.py``),
its compiled outlier filter (``_clean_kernel.py``), missing-value imputation (``_impute.py``) and what
it reads of the knowledge base (``_knowledge.py``)."""

from perfsift.operators.clean.clean import Clean

__all__ = ["Clean"]
