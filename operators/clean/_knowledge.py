"""What the knowledge base knows of an application, as :class:`~perfsift.operators.clean.clean.Clean`
uses it (METHODS.md §3.2); the runtime builds it (``perfsift.streams.knowledge``)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np


@dataclass(frozen=True, eq=False)
class KnowledgeHistory:
    """What the knowledge base knows of an application (METHODS.md §3.2), as the cleaner uses it:
    the historical maximum of each metric, and recent complete samples (``rows``, one column per
    name in ``metrics``) to train the imputation of a node that has too few of its own. Made by
    ``perfsift.streams.knowledge.KnowledgeBase.history``; the cleaner opens no database.

    >>> h = KnowledgeHistory({"cpu": 97.5}, ("cpu", "io"), np.array([[90.0, 3.0]]))
    >>> h.rows_for(["io", "mem"]).tolist()
    [[3.0, nan]]
    """

    maxima: Mapping[str, float] = field(default_factory=dict)
    metrics: tuple[str, ...] = ()
    rows: np.ndarray = field(default_factory=lambda: np.zeros((0, 0)))

    def rows_for(self, metrics: Sequence[str]) -> np.ndarray:
        """The reference rows with one column per name of ``metrics`` (NaN where none)."""
        pos = {m: i for i, m in enumerate(self.metrics)}
        out = np.full((len(self.rows), len(metrics)), np.nan)
        for j, name in enumerate(metrics):
            if name in pos:
                out[:, j] = self.rows[:, pos[name]]
        return out

    def digest(self) -> str:
        """sha256 of the content: what an operator's fingerprint counts this parameter by."""
        h = hashlib.sha256(json.dumps([sorted(self.maxima.items()), list(self.metrics)]).encode())
        rows = np.ascontiguousarray(self.rows, dtype=np.float64)
        h.update(str(rows.shape).encode())
        h.update(rows.tobytes())
        return h.hexdigest()

    def __repr__(self) -> str:
        return (
            f"KnowledgeHistory({len(self.maxima)} maxima, {len(self.rows)} reference rows of "
            f"{len(self.metrics)} metrics, digest {self.digest()[:12]})"
        )
