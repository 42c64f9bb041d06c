"""The operator base class: parameters in the constructor, learned state apart, bytes snapshots.

Follows scikit-learn's rule (the constructor only stores its parameters, under the same names)
and river's streaming shape (``update`` consumes data as it comes), on column batches.
"""

from __future__ import annotations

import hashlib
import inspect
import io
import json
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, ClassVar, overload

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


#: what ``update`` returns, by role: a :class:`Transformer` a batch of samples; a :class:`Decider` its
#: decisions (records, or a batch its :meth:`Decider.records` turns into records); a :class:`Router`
#: its outputs per record kind (``{"reduced": [batches], "selection": [records], ...}``)
Output = Batch | list[dict[str, Any]] | dict[str, Any]

_MAGIC = b"PSIFT-OP1"


class SnapshotError(ValueError):
    """A snapshot cannot be restored into this operator (other class, parameters or version)."""


class _Initialised(type):
    """Creates an operator's learned state once, right after its constructor stored the parameters:
    no operator method has to check whether :meth:`Operator.reset` ran. Bad parameters therefore
    fail at construction, where the pipeline file names them."""

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        op = super().__call__(*args, **kwargs)
        op._files_digest = op._digest_files()
        op.reset()
        return op


class Operator(metaclass=_Initialised):
    """Base of every operator; an operator subclasses one of the roles :class:`Transformer`,
    :class:`Decider` or :class:`Router`.

    Subclasses take only parameters in ``__init__`` and store them under the same names; learned
    state lives in attributes ending in ``_`` and is created by :meth:`reset`, which runs once when
    the operator is constructed (and again whenever it is called). They implement :meth:`update`,
    which never mutates its input, and :meth:`_state` / :meth:`_load_state` for snapshots.
    """

    #: bump when the layout of the state changes; old snapshots are then refused, never reused
    STATE_VERSION: ClassVar[int] = 1
    #: parameters that may name a file (a contract, a model): the file's content enters the
    #: fingerprint, so state learned under an old version of the file is never reused
    FILE_PARAMS: ClassVar[tuple[str, ...]] = ()
    #: "transform", "decide" or "route" (set by the role classes)
    role: ClassVar[str] = ""
    _files_digest: dict[str, str]

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
        """Stable hash of class, state version and parameters, where a parameter that names a file
        counts by the file's content (as read when the operator was made): the key that state is
        valid for. An edited contract or model therefore never reuses the old state."""
        # a parameter that names a file stands for the file's content, wherever the file lies
        params = {k: self._files_digest.get(k, v) for k, v in self.get_params().items()}
        blob = json.dumps(
            [type(self).__name__, self.STATE_VERSION, params],
            sort_keys=True,
            default=_jsonable,
        )
        return hashlib.sha256(blob.encode()).hexdigest()[:16]

    def param_file(self, name: str) -> Path | None:
        """The file that parameter ``name`` (one of :attr:`FILE_PARAMS`) names, None when it names
        none (an inline value). Operators whose parameter may name a bundled file override this."""
        value = getattr(self, name)
        if isinstance(value, str | Path) and Path(value).is_file():
            return Path(value)
        return None

    def _digest_files(self) -> dict[str, str]:
        digests = {}
        for name in self.FILE_PARAMS:
            path = self.param_file(name)
            if path is not None:
                digests[name] = hashlib.sha256(path.read_bytes()).hexdigest()
        return digests

    def warm_up(self) -> None:
        """Load compiled kernels before the first batch, so that it does not wait for them (numba's
        cache takes about half a second per module in a fresh process). A stage worker calls it
        once at start, while its consumer group joins. The default does nothing."""

    # -- streaming --------------------------------------------------------------------------
    def reset(self) -> None:
        """Forget everything learned (and check the parameters). Runs once at construction."""
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


def _jsonable(value: Any) -> Any:
    """Parameters that JSON does not know, for fingerprints: arrays by content, objects that offer
    a ``digest()`` (a knowledge-base reference) by it, anything else by ``str``."""
    if isinstance(value, np.ndarray):
        return hashlib.sha256(np.ascontiguousarray(value).tobytes()).hexdigest() + str(value.shape)
    digest = getattr(value, "digest", None)
    if callable(digest):
        return digest()
    return str(value)


class Transformer(Operator):
    """Samples in, samples out: ``update(batch) -> Batch`` with the input's rows (cleaned, smoothed,
    ...). A transformer's output goes on to the next operator of its stage, or to the stage's
    sample topics."""

    role = "transform"

    def update(self, batch: Batch) -> Batch:
        raise NotImplementedError


class Decider(Operator):
    """Samples in, decisions out: records of one kind (:attr:`output`, the name of its schema in
    ``schemas/``: ``selection``, ``contract``, ``forecast``, ``prediction``). ``update`` returns
    the records, or a batch that :meth:`records` turns into records (column-wise results such as
    forecasts stay arrays until they are encoded). A decider ends its stage's chain; the stage
    writes its records to the topic of that kind unless the pipeline file names others."""

    role = "decide"
    #: the kind of record emitted (a schema name)
    output: ClassVar[str] = ""

    def update(self, batch: Batch) -> Batch | list[dict[str, Any]]:
        raise NotImplementedError

    def records(self, out: Batch | list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The records of an ``update`` (or ``flush``) result. The default takes a list as it is."""
        if isinstance(out, Batch):
            raise TypeError(f"{type(self).__name__} returned a batch but does not say how it becomes records")
        return out


class Router(Operator):
    """Samples in, several kinds of output: ``update`` returns ``{kind: [batches or records]}`` for
    each kind in :attr:`outputs` (e.g. ``reduce``: the reduced samples, the selections, the control
    records). The stage writes each kind to its topic of that kind; an operator never names topics."""

    role = "route"
    #: the kinds of output (schema names) and whether each is a batch of samples (True) or records
    outputs: ClassVar[dict[str, bool]] = {}
    #: kinds among ``outputs`` a stage need not send anywhere (emitted only when configured)
    optional_outputs: ClassVar[tuple[str, ...]] = ()

    def update(self, batch: Batch) -> dict[str, list[Any]]:
        raise NotImplementedError


class BatchRecords(Sequence[dict[str, Any]]):
    """A router's records of one kind held as the output batches they come from, made into dicts
    only when first read: an encoding that builds the kind column-wise (``Kind.columnar_json`` in
    ``schemas/kinds.py``) writes them from :attr:`batches` without a dict per record, which can cost
    more than the records' computation (the forecast bank's, docs/benchmarks.md). A subclass says how
    batches become records (:meth:`make`) and how many records a batch holds (:meth:`size_of`)."""

    def __init__(self, batches: Sequence[Batch] = ()) -> None:
        self.batches: list[Batch] = []
        self._count = 0
        self._made: list[dict[str, Any]] | None = None
        for b in batches:
            self.add(b)

    def make(self, batches: list[Batch]) -> list[dict[str, Any]]:
        """The records of ``batches``, in order."""
        raise NotImplementedError

    def size_of(self, batch: Batch) -> int:
        """How many records ``batch`` holds."""
        raise NotImplementedError

    def add(self, out: Batch) -> None:
        """One more output batch (its records come after those already held)."""
        self.batches.append(out)
        self._count += self.size_of(out)
        self._made = None

    def records(self) -> list[dict[str, Any]]:
        """Every record as a dict (made once)."""
        if self._made is None:
            self._made = self.make(self.batches)  # one pass over all of them
        return self._made

    def __len__(self) -> int:
        return self._count

    @overload
    def __getitem__(self, i: int) -> dict[str, Any]: ...

    @overload
    def __getitem__(self, i: slice) -> list[dict[str, Any]]: ...

    def __getitem__(self, i: int | slice) -> dict[str, Any] | list[dict[str, Any]]:
        return self.records()[i]

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return iter(self.records())

    def __eq__(self, other: object) -> bool:
        if isinstance(other, BatchRecords | list):
            return self.records() == list(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]  # mutable, as a list

    def __repr__(self) -> str:
        return f"{type(self).__name__}({len(self.batches)} batches, {self._count} records)"
