"""perfsift operators in a faust agent (``pip install 'perfsift[faust]'``; docs/faust.md).

:class:`OperatorAgent` takes samples (dicts of the ``perf.raw`` shape) from a faust stream in
micro-batches (``stream.take_events(n, within=s)``: ``take`` with each event's offset), turns
each micro-batch into one :class:`~perfsift.operators.batch.Batch`, calls the operator — any
registered operator, or the operators of a pipeline file's stage in order — and yields its
output records as ``(kind, record)``: ``sample`` rows for a transformer, the decider's kind
(``forecast``, ``selection``, ...) or each of a router's kinds.

State: after every micro-batch the operator's snapshot (``Operator.snapshot()``: bytes, no pickle)
goes into ``state`` — a faust ``Table`` (its changelog topic carries it), or any mutable mapping —
under the agent's name, with the next offset of every topic-partition it covers. A restarted
agent restores that snapshot before its first micro-batch and skips the events the snapshot
already covers (faust commits offsets and table writes separately: without the offsets, events
between the last commit and the crash would be counted twice, the double counts
docs/architecture.md reports of plain faust tables).

One operator holds the state of every partition the agent reads, so an agent runs with
``concurrency=1`` on one worker per input topic (or on a single-partition topic); scale-out by
partition is perfsift's own runner's job (``perfsift worker``).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable, MutableMapping, Sequence
from pathlib import Path
from typing import Any

from perfsift.operators.base import Decider, Operator, Router, Transformer
from perfsift.operators.batch import Batch
from perfsift.operators.registry import OPERATORS
from perfsift.schemas.batches import batch_to_samples, samples_to_batch
from perfsift.streams.config import load_pipeline

__all__ = ["OperatorAgent", "operator_records", "stage_operators"]


def stage_operators(pipeline: str | Path | None, stage: str) -> list[Operator]:
    """The operators of ``stage`` in a pipeline file (the packaged one when ``pipeline`` is None)."""
    cfg = load_pipeline(pipeline)
    if stage not in cfg.stages:
        raise KeyError(
            f"no stage {stage!r} in {pipeline or 'the packaged pipeline file'}; stages: {', '.join(cfg.stages)}"
        )
    return cfg.stages[stage].build_chain()


def operator_records(op: Operator, out: Any) -> list[tuple[str, dict[str, Any]]]:
    """An operator's output as ``(kind, record)`` pairs, by its role."""
    if isinstance(op, Router):
        return [
            (kind, rec)
            for kind, parts in out.items()
            for part in parts
            for rec in (batch_to_samples(part) if isinstance(part, Batch) else [part])
        ]
    if isinstance(op, Decider):
        return [(op.output, r) for r in op.records(out)]
    if isinstance(op, Transformer):
        return [("sample", r) for r in batch_to_samples(out)]
    raise TypeError(f"{type(op).__name__} has no role")


class OperatorAgent:
    """Run perfsift operators on a faust stream (see the module docstring).

    Parameters
    ----------
    operators
        An operator, its registered name (with ``params``), or a list of operators (a stage's
        chain, :func:`stage_operators`); every one but the last must be a transformer.
    params
        Parameters when ``operators`` is a name.
    state
        Where snapshots go: a faust ``Table`` (``app.Table("perfsift-state", default=None)``), a dict,
        or None (no state kept across restarts).
    name
        The key of this agent's snapshot in ``state``.
    batch_size, within
        ``stream.take_events(batch_size, within=within)``: at most this many events, or what came
        within this many seconds.
    """

    def __init__(
        self,
        operators: Operator | str | Sequence[Operator],
        params: dict[str, Any] | None = None,
        *,
        state: MutableMapping[str, Any] | None = None,
        name: str = "perfsift",
        batch_size: int = 500,
        within: float = 1.0,
    ) -> None:
        if isinstance(operators, str):
            ops: list[Operator] = [OPERATORS[operators](**(params or {}))]
        elif isinstance(operators, Operator):
            ops = [operators]
        else:
            ops = list(operators)
        if not ops or any(not isinstance(op, Transformer) for op in ops[:-1]):
            raise ValueError("give one operator, or a chain whose operators but the last are transformers")
        self.operators = ops
        self.state = state
        self.name = name
        self.batch_size = batch_size
        self.within = within
        #: next offset per "topic:partition" that the operators' state covers
        self.offsets: dict[str, int] = {}
        self.restored = False
        self._loaded = False

    # -- state ------------------------------------------------------------------------------------
    def load(self) -> None:
        """Restore the last snapshot from ``state`` (once; the first micro-batch calls it)."""
        self._loaded = True
        saved = self.state.get(self.name) if self.state is not None else None
        if not saved:
            return
        for op, blob in zip(self.operators, saved["operators"], strict=True):
            op.restore(bytes.fromhex(blob) if isinstance(blob, str) else blob)
        self.offsets = dict(saved["offsets"])
        self.restored = True

    def save(self) -> None:
        if self.state is not None:
            # hex: a faust table's JSON value serialiser takes no bytes
            self.state[self.name] = {
                "operators": [op.snapshot().hex() for op in self.operators],
                "offsets": dict(self.offsets),
            }

    # -- processing -------------------------------------------------------------------------------
    def process_batch(self, samples: Sequence[dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
        """One micro-batch of samples through the operators; their output records."""
        if not samples:
            return []
        out: Any = samples_to_batch(list(samples))
        for op in self.operators:
            out = op.update(out)
        return operator_records(self.operators[-1], out)

    def fresh(self, events: Iterable[Any]) -> list[dict[str, Any]]:
        """The values of the events the state does not cover yet (advancing the offsets)."""
        values = []
        for ev in events:
            msg = ev.message
            tp = f"{msg.topic}:{msg.partition}"
            if msg.offset < self.offsets.get(tp, 0):
                continue  # already in the restored snapshot
            self.offsets[tp] = msg.offset + 1
            values.append(ev.value)
        return values

    async def process(self, stream: Any) -> AsyncIterator[tuple[str, dict[str, Any]]]:
        """The agent's loop: ``async for kind, record in adapter.process(stream): ...``."""
        async for events in stream.take_events(self.batch_size, within=self.within):
            if not self._loaded:
                self.load()
            values = self.fresh(events)
            if not values:
                continue
            records = self.process_batch(values)
            # take_events leaves no current event, and a faust Table takes the partition of its
            # changelog record from it: the batch's last event is the one the snapshot covers
            set_current = getattr(stream, "_set_current_event", None)
            if set_current is not None:
                set_current(events[-1])
            self.save()
            for rec in records:
                yield rec
