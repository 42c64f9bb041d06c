"""The operator base class: parameters in the constructor, learned state apart, bytes snapshots.

Follows scikit-learn's rule (the constructor only stores its parameters, under the same names)
and river's streaming shape (``update`` consumes data as it comes), on column batches.
"""

from __future__ import annotations

import hashlib
import inspect
import io
import json
from typing import Any, ClassVar

import numpy as np
from perfsift.operators.batch import Batch


def warm_batch(metrics: tuple[str, ...] = ("a", "b", "c"), rows: int = 64, nodes: int = 2) -> Batch:
    """A small synthetic batch for :meth:`Operator.warm_up`: correlated normal values with a few
    gaps and one outlier per metric, so that every path of a cleaner runs."""
    rng = np.random.default_rng(0)
    base = rng.normal(10.0, 1.0, (rows, 1))
    values = base + rng.normal(0.0, 0.1, (rows, len(metrics)))
    values[rng.random(values.shape) < 0.05] = np.nan
    values[rows - 3, :] += 50.0
    return Batch(
        ts=np.repeat(np.arange(rows // nodes + 1, dtype=np.float64), nodes)[:rows],
        node_idx=np.arange(rows) % nodes,
        values=values,
        metrics=metrics,
        nodes=tuple(f"warm{i}" for i in range(nodes)),
        job_idx=np.zeros(rows, dtype=np.int64),
    )


#: what ``update`` returns: a batch of samples for the next operator (or the stage's outputs), a
#: list of records (selections, contract evaluations, ...), or records per topic (``emit: routed``)
Output = Batch | list[dict[str, Any]] | dict[str, Any]

_MAGIC = b"PSIFT-OP1"


class SnapshotError(ValueError):
    """A snapshot cannot be restored into this operator (other class, parameters or version)."""


class Operator:
    """Base of every operator.

    Subclasses take only parameters in ``__init__`` and store them under the same names; learned
    state lives in attributes ending in ``_`` and is created by :meth:`reset`. They implement
    :meth:`update`, which never mutates its input, and :meth:`_state` / :meth:`_load_state` for
    snapshots.
    """

    #: bump when the layout of the state changes; old snapshots are then refused, never reused
    STATE_VERSION: ClassVar[int] = 1

    # -- parameters -------------------------------------------------------------------------
    @classmethod
    def _param_names(cls) -> list[str]:
        sig = inspect.signature(cls.__init__)
        return [p for p in sig.parameters if p != "self"]

    def get_params(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self._param_names()}

    def clone(self) -> Operator:
        """A new operator with the same parameters and fresh state."""
        return type(self)(**self.get_params())

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.get_params().items())
        return f"{type(self).__name__}({args})"

    def fingerprint(self) -> str:
        """Stable hash of class, state version and parameters: the key that state is valid for."""
        blob = json.dumps([type(self).__name__, self.STATE_VERSION, self.get_params()], sort_keys=True, default=str)
        return hashlib.sha256(blob.encode()).hexdigest()[:16]

    def warm_up(self) -> None:
        """Load compiled kernels before the first batch, so that it does not wait for them (numba's
        cache takes about half a second per module in a fresh process). A stage worker calls it
        once at start, while its consumer group joins. The default does nothing."""

    # -- streaming --------------------------------------------------------------------------
    def reset(self) -> None:
        """Forget everything learned."""
        raise NotImplementedError

    def update(self, batch: Batch) -> Output:
        """Consume a batch and return its output (see :data:`Output`). Must not mutate ``batch``."""
        raise NotImplementedError

    def flush(self) -> Output | None:
        """At the end of a finite input (``perfsift analyze``): what the operator still holds, e.g.
        the last open period. None (the default) when it holds nothing back."""
        return None

    def summary(self) -> dict[str, dict[str, Any]]:
        """Per job, what ``perfsift run``'s live view and summary show of this operator (kept
        metrics, contract state, ...). Empty (the default) when it reports nothing."""
        return {}

    # -- snapshots --------------------------------------------------------------------------
    def _state(self) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        """(JSON-able metadata, arrays) describing the learned state."""
        raise NotImplementedError

    def _load_state(self, meta: dict[str, Any], arrays: dict[str, np.ndarray]) -> None:
        raise NotImplementedError

    def snapshot(self) -> bytes:
        """Serialise the learned state (bounded size) to bytes; no pickle is involved."""
        meta, arrays = self._state()
        header = {"fingerprint": self.fingerprint(), "meta": meta}
        buf = io.BytesIO()
        np.savez(buf, **arrays)  # type: ignore[arg-type]
        head = json.dumps(header).encode()
        return _MAGIC + len(head).to_bytes(4, "big") + head + buf.getvalue()

    def restore(self, data: bytes) -> None:
        """Load a snapshot made by an operator of the same class and parameters."""
        if not data.startswith(_MAGIC):
            raise SnapshotError("not a perfsift operator snapshot")
        n = int.from_bytes(data[len(_MAGIC) : len(_MAGIC) + 4], "big")
        start = len(_MAGIC) + 4
        header = json.loads(data[start : start + n])
        if header["fingerprint"] != self.fingerprint():
            raise SnapshotError(
                f"snapshot was made by another operator configuration or state version "
                f"({header['fingerprint']} != {self.fingerprint()} for {self!r})"
            )
        with np.load(io.BytesIO(data[start + n :]), allow_pickle=False) as npz:
            arrays = {k: npz[k] for k in npz.files}
        self.reset()
        self._load_state(header["meta"], arrays)
