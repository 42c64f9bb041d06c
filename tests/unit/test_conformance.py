"""One conformance suite for every operator usable in a pipeline (river.checks-style)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from perfsift.operators import Batch, ContractMonitor, Operator
from perfsift.operators.base import SnapshotError
from perfsift.operators.contract import derive_contract
from perfsift.operators.predict import ModelPredictor
from perfsift.operators.reduce import Reduce
from perfsift.operators.selection import DataReduction
from perfsift.schemas import batch_to_samples
from perfsift.streams.config import OPERATORS


def stream(k: int = 2000, seed: int = 0) -> Batch:
    rng = np.random.default_rng(seed)
    vals = rng.normal(50, 5, size=(k, 4))
    vals[rng.random((k, 4)) < 0.05] = np.nan
    nodes = [f"n{i}" for i in rng.integers(0, 9, k)]
    jobs = [f"j{i}" for i in rng.integers(0, 2, k)]
    return Batch.from_columns(
        ts=np.arange(k, dtype=float),
        nodes=nodes,
        metrics=["a", "b", "c", "d"],
        values=vals,
        jobs=jobs,
        seq=np.arange(k),
    )


#: one configured instance of every operator a pipeline can name
#: (DataReduction emits decisions, not one output row per input row; its timing depends on when
#: rows arrive, so it has its own tests in test_reduction.py instead of these row-wise checks.
#: ProjectionPursuit also emits records, but only at period boundaries of event time, so the
#: checks below compare its record lists.)
EXAMPLES: dict[str, Operator] = {
    name: cls() for name, cls in OPERATORS.items() if cls not in (ContractMonitor, DataReduction)
}
EXAMPLES["contract"] = ContractMonitor(derive_contract(stream(400, seed=99), {"s": ["a", "b/c"], "t": ["d"]}))
EXAMPLES["reduce"] = Reduce(pursuit={"period": 100.0, "window": 5}, full_every=3)
EXAMPLES["predict"] = ModelPredictor(
    str(Path(__file__).parents[1] / "data" / "models" / "conformance.yaml"), samples=200
)
assert set(EXAMPLES) | {"data_reduction"} == set(OPERATORS)


def canonical(out: Batch | list | dict) -> object:
    """Outputs as comparable values: routed dicts become per-topic record lists (one per row)."""
    if isinstance(out, dict):
        return {
            topic: sorted(
                ([r for b in part for r in batch_to_samples(b)] if part and isinstance(part[0], Batch) else list(part)),
                key=lambda r: (r.get("job", ""), r.get("node", ""), r.get("ts", r.get("period_start", 0.0))),
            )
            for topic, part in out.items()
        }
    return out


def outputs_equal(x: Batch | list | dict, y: Batch | list | dict) -> bool:
    if isinstance(x, dict) or isinstance(y, dict):  # routed outputs (reduce)
        return canonical(x) == canonical(y)
    if isinstance(x, list) or isinstance(y, list):  # decision records (pursuit)
        return x == y
    return (
        x.metrics == y.metrics
        and np.array_equal(x.values, y.values, equal_nan=True)
        and all(np.array_equal(x.extra[k], y.extra[k], equal_nan=x.extra[k].dtype.kind == "f") for k in x.extra)
    )


@pytest.fixture(params=sorted(EXAMPLES))
def op(request: pytest.FixtureRequest) -> Operator:
    return EXAMPLES[request.param].clone()


def test_split_batches_equal_one_batch(op: Operator) -> None:
    b = stream()
    whole = op.clone().update(b)
    pieces: list[Any] = [op.update(b.take(np.arange(s, min(s + 137, len(b))))) for s in range(0, len(b), 137)]
    if isinstance(whole, list):
        joined = [r for piece in pieces for r in piece]
        # jobs are independent streams; pursuit keys by period, predictions by time, output and node
        order = lambda r: (r["job"], r.get("period_start", r.get("ts")), r.get("output", ""), r.get("node", ""))  # noqa: E731
        assert whole and sorted(joined, key=order) == sorted(whole, key=order)
    elif isinstance(whole, dict):
        merged = {t: [x for piece in pieces for x in piece[t]] for t in whole}
        assert whole["perf.reduced"] and outputs_equal(merged, whole)
    else:
        assert outputs_equal(Batch.concat(pieces), whole)


def test_snapshot_restore_gives_identical_outputs(op: Operator) -> None:
    b = stream()
    first, rest = b.take(np.arange(1200)), b.take(np.arange(1200, len(b)))
    op.update(first)
    restored = op.clone()
    restored.restore(op.snapshot())
    assert outputs_equal(restored.update(rest), op.update(rest))


def test_snapshot_of_another_configuration_is_refused(op: Operator) -> None:
    op.update(stream(50))
    other = type(op)(**{k: (v * 2 if isinstance(v, int | float) else v) for k, v in op.get_params().items()})
    with pytest.raises(SnapshotError):
        other.restore(op.snapshot())


def test_input_is_not_mutated(op: Operator) -> None:
    b = stream(300)
    before = b.values.copy()
    op.update(b)
    assert np.array_equal(b.values, before, equal_nan=True)


def test_key_order_within_a_batch_does_not_matter(op: Operator) -> None:
    """Interleaving of different keys changes nothing; only each key's own order counts."""
    b = stream(600)
    out: Any = op.clone().update(b)  # a batch, records or routed records: branched on below
    keys = b.job_idx * 100 + b.node_idx
    perm = np.argsort(keys, kind="stable")  # all rows of one key together, order within kept
    shuffled: Any = op.clone().update(b.take(perm))
    if isinstance(out, list):
        assert out and shuffled == out
    elif isinstance(out, dict):
        assert outputs_equal(shuffled, out)
    else:
        assert np.array_equal(shuffled.values, out.values[perm], equal_nan=True)


def test_state_stays_bounded_on_a_long_stream(op: Operator) -> None:
    op.update(stream(1000, seed=1))
    size = len(op.snapshot())
    for seed in range(2, 12):
        op.update(stream(1000, seed=seed))
    assert len(op.snapshot()) <= size * 1.1


def test_metrics_that_disappear_and_new_nodes(op: Operator) -> None:
    op.update(stream(200))
    late = Batch.from_columns(
        ts=[1e4, 1e4 + 1], nodes=["new1", "n1"], metrics=["d", "zz"], values=[[1.0, np.nan], [np.nan, 3.0]]
    )
    out: Any = op.update(late)
    if isinstance(op, ModelPredictor):  # the new job lacks the model's metrics: nothing to predict, yet
        assert out == [] and op.counts_["not_ready"] >= 1
        return
    if isinstance(out, list):  # records at period ends: the new job's period closes with an explanation
        held: Any = op.flush()  # the records of the periods still open
        flushed = [r for r in out + held if r["job"] == "default"]
        assert flushed and all(r["skipped"] for r in flushed)
        return
    if isinstance(out, dict):  # routed: every sample still comes out, with what it has
        rows = [r for b in out["perf.reduced"] for r in batch_to_samples(b)]
        assert [r["metrics"] for r in sorted(rows, key=lambda r: r["node"])] == [
            {"d": None, "zz": 3.0},
            {"d": 1.0, "zz": None},
        ]
        return
    assert len(out) == 2
    if out.metrics == late.metrics:  # operators that keep the input's columns
        assert out.values[0, 0] == 1.0  # a new node's first value is its own
        assert not np.isnan(out.values[1, 1])


def test_repr_and_clone_round_trip(op: Operator) -> None:
    assert repr(op.clone()) == repr(op)
    assert op.clone().get_params() == op.get_params()
