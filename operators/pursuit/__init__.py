"""The projection-pursuit operator (METHODS.md §1):
:class:`~perfsift.operators.pursuit.pursuit.ProjectionPursuit` (``pursuit.py``), the analysis itself
(``projection.py``, its compiled optimiser ``_pp_kernel.py``) and the nodes that stand apart
(``deviants.py``)."""

from perfsift.operators.pursuit.pursuit import ProjectionPursuit

__all__ = ["ProjectionPursuit"]
