"""The faust adapter's core without a broker: a pipeline file's stage on micro-batches of events,
its records equal the stage's operators on the whole input, and a restart from the saved state
skips the events the snapshot covers (the replay after a crash) and goes on with the same state."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest
from perfsift.adapters.faust_agent import OperatorAgent, operator_records, stage_operators
from perfsift.operators.forecast.forecast import ForecastBank
from perfsift.schemas import samples_to_batch


@dataclass
class Message:
    topic: str
    partition: int
    offset: int


@dataclass
class Event:
    value: dict
    message: Message


class Stream:
    """What the adapter uses of a faust stream: ``take_events(n, within)``."""

    def __init__(self, events: list[Event]) -> None:
        self.events = events
        self.current: Event | None = None

    async def take_events(self, n: int, within: float) -> Any:
        for i in range(0, len(self.events), n):
            yield self.events[i : i + n]

    def _set_current_event(self, event: Event) -> None:
        self.current = event


def samples(n: int = 600, nodes: int = 3) -> list[dict]:
    rng = np.random.default_rng(5)
    return [
        {
            "ts": float(i // nodes),
            "node": f"n{i % nodes}",
            "job": "j",
            "seq": i // nodes,
            "metrics": {"cpu_user": float(rng.normal(50, 5)), "pkts_in": float(rng.normal(3, 0.3))},
        }
        for i in range(n)
    ]


def events(rows: list[dict], start: int = 0) -> list[Event]:
    return [Event(r, Message("perf.raw", 0, start + i)) for i, r in enumerate(rows)]


async def collect(adapter: OperatorAgent, stream: Stream) -> list:
    return [rec async for rec in adapter.process(stream)]


def test_a_stage_in_micro_batches_equals_the_stage_on_the_whole_input() -> None:
    rows = samples()
    adapter = OperatorAgent(stage_operators(None, "node"), batch_size=64, state={})
    got = asyncio.run(collect(adapter, Stream(events(rows))))
    ops = stage_operators(None, "node")
    out: Any = samples_to_batch(rows)
    for op in ops:
        out = op.update(out)
    want = operator_records(ops[-1], out)
    assert len(want) > 0
    assert {k for k, _ in got} == {"sample"}  # the node stage cleans and smooths (forecasts moved to select, #31)
    assert got == want


def test_a_restarted_agent_skips_what_its_snapshot_covers_and_continues() -> None:
    rows = samples()
    state: dict = {}
    first = OperatorAgent("sliding_mean", {"window": 7}, state=state, name="s", batch_size=50)
    got = asyncio.run(collect(first, Stream(events(rows[:300]))))
    assert state["s"]["offsets"] == {"perf.raw:0": 300}
    # the restart re-reads from an older committed offset (200): those events are skipped
    again = OperatorAgent("sliding_mean", {"window": 7}, state=state, name="s", batch_size=50)
    got += asyncio.run(collect(again, Stream(events(rows[200:], start=200))))
    assert again.restored
    whole = asyncio.run(collect(OperatorAgent("sliding_mean", {"window": 7}, batch_size=50), Stream(events(rows))))
    assert got == whole
    lost = asyncio.run(collect(OperatorAgent("sliding_mean", {"window": 7}), Stream(events(rows[300:], start=300))))
    assert lost[:3] != whole[300:303]  # without the state the means differ: the test can tell


def test_a_chain_must_end_in_its_only_non_transformer() -> None:
    ops = stage_operators(None, "node")
    with pytest.raises(ValueError, match="transformers"):
        OperatorAgent([ForecastBank(), ops[0]])
    with pytest.raises(KeyError, match="stages: node, select"):
        stage_operators(None, "nope")
