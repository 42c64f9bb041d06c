"""The statistical data-reduction operator (METHODS.md §2):
:class:`~perfsift.operators.reduction.reduction.DataReduction` (``reduction.py``, step 2 and the
operator), redundant-metric elimination (``redundancy.py``, step 1) and backward elimination
(``regression.py``)."""

from perfsift.operators.reduction.reduction import DataReduction

__all__ = ["DataReduction"]
