"""The forecasting operator (METHODS.md §5): :class:`~perfsift.operators.forecast.forecast.ForecastBank`
(``forecast.py``) and its compiled NWS kernel (``_nws_kernel.py``, with ``_nws_windows.py``,
``_nws_rows.py`` and ``_nws_constants.py``)."""

from perfsift.operators.forecast.forecast import ForecastBank

__all__ = ["ForecastBank"]
