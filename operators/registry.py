"""The operators a pipeline file can name, by their ``type:``.

Each class is imported when it is first looked up, not with this module: reading a pipeline file
checks every operator it names (``streams/config.py``), but a stage process builds and runs only
its own, and most operators load numba and their compiled kernels on import."""

from __future__ import annotations

import importlib
from collections.abc import Iterator, MutableMapping

from perfsift.operators.base import Operator


class OperatorRegistry(MutableMapping[str, type[Operator]]):
    """Operator names -> classes, each given as ``"module:Class"`` and imported on first lookup;
    iterating, ``in`` and ``len`` import nothing. A class set by assignment is used as is (tests
    add operators of their own)."""

    def __init__(self, where: dict[str, str]) -> None:
        self._entries: dict[str, str | type[Operator]] = dict(where)

    def __getitem__(self, name: str) -> type[Operator]:
        entry = self._entries[name]
        if isinstance(entry, str):
            module, _, attr = entry.partition(":")
            entry = getattr(importlib.import_module(module), attr)
            if not (isinstance(entry, type) and issubclass(entry, Operator)):
                raise TypeError(f"{self._entries[name]} is not an operator class")
            self._entries[name] = entry
        return entry

    def __setitem__(self, name: str, cls: type[Operator]) -> None:
        self._entries[name] = cls

    def __delitem__(self, name: str) -> None:
        del self._entries[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def __repr__(self) -> str:
        return f"OperatorRegistry({sorted(self._entries)})"


#: operator names usable in a pipeline file -> class
OPERATORS = OperatorRegistry(
    {
        "sliding_mean": "perfsift.operators.smooth:SlidingMean",
        "ewma": "perfsift.operators.smooth:Ewma",
        "forecast": "perfsift.operators.forecast.forecast:ForecastBank",
        "contract": "perfsift.operators.contract:ContractMonitor",
        "data_reduction": "perfsift.operators.reduction.reduction:DataReduction",
        "pursuit": "perfsift.operators.pursuit.pursuit:ProjectionPursuit",
        "clean": "perfsift.operators.clean.clean:Clean",
        "reduce": "perfsift.operators.reduce:Reduce",
        "predict": "perfsift.operators.predict:ModelPredictor",
    }
)
