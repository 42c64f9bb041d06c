"""Every operator a pipeline file can name passes the conformance suite (operators/checks.py)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from perfsift.operators import OPERATORS, Batch, Operator
from perfsift.operators.checks import CHECKS, check_operator, stream
from perfsift.operators.contract import ContractMonitor, derive_contract
from perfsift.operators.predict import ModelPredictor
from perfsift.operators.reduce import Reduce
from perfsift.operators.reduction.reduction import DataReduction
from perfsift.operators.smooth import SlidingMean

DATA = Path(__file__).parents[1] / "data"


def examples(tmp: Path) -> dict[str, Operator]:
    """One configured instance of every registered operator (defaults where they are valid)."""
    contract = tmp / "contract.json"
    contract.write_text(json.dumps(derive_contract(stream(400, seed=99), {"s": ["a", "b / c"], "t": ["d"]})))
    special: dict[str, Operator] = {
        "contract": ContractMonitor(str(contract)),
        "reduce": Reduce(pursuit={"period": 100.0, "window": 5}, full_every=3, forecast={"mode": "nws"}),
        "predict": ModelPredictor(str(DATA / "models" / "conformance.yaml"), samples=200),
        # a window the test stream fills (about 100 ten-second buckets a job in its first 1000
        # rows), so the bounded-state check sees a full window and then 20 more windows pass;
        # buckets of 10 s hold rows of several nodes and straddle the split check's batch
        # boundaries, and make 10x fewer rows than 1 s (each row reclusters on this random
        # stream, 15-20 ms a row with a window of 96: the file's longest checks)
        "data_reduction": DataReduction(perf_metric="d", window=48, interval=10.0),
    }
    return {name: special.get(name) or cls() for name, cls in OPERATORS.items()}


@pytest.fixture(scope="module")
def registered(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Operator]:
    return examples(tmp_path_factory.mktemp("conformance"))


@pytest.fixture(scope="module")
def data() -> Batch:
    return stream()


@pytest.mark.parametrize("check", CHECKS, ids=lambda c: c.__name__.removeprefix("check_"))
@pytest.mark.parametrize("name", sorted(OPERATORS))
def test_every_operator_passes_every_check(
    registered: dict[str, Operator], data: Batch, name: str, check: Callable[[Operator, Batch], None]
) -> None:
    check(registered[name], data)


def test_checks_catch_a_broken_operator() -> None:
    """The suite is not vacuous: an operator whose output depends on how the stream is split into
    batches, and one whose fingerprint ignores a parameter, fail it."""

    class BatchMean(SlidingMean):
        def update(self, batch: Batch) -> Batch:  # the mean of the batch: depends on the split
            return batch.with_values(batch.values * 0 + np.nanmean(batch.values, axis=0))

    with pytest.raises(AssertionError, match="on batches of 137 rows vs one batch"):
        check_operator(BatchMean())

    class Forgetful(SlidingMean):
        def fingerprint(self) -> str:  # state of any window would be restored into any other
            return "always the same"

    with pytest.raises(AssertionError, match="fingerprint ignores window"):
        check_operator(Forgetful(window=4))


def test_fingerprint_follows_the_content_of_a_named_file(tmp_path: Path) -> None:
    """An edited contract file is another configuration: its state is not reused."""
    doc = derive_contract(stream(400, seed=99), {"s": ["a", "b / c"]})
    path = tmp_path / "c.json"
    path.write_text(json.dumps(doc))
    before = ContractMonitor(str(path)).fingerprint()
    moved = tmp_path / "moved.json"
    moved.write_text(path.read_text())
    assert ContractMonitor(str(moved)).fingerprint() == before  # the content counts, not the path
    doc["spaces"][0]["classes"][0]["tolerance"] = [t * 2 for t in doc["spaces"][0]["classes"][0]["tolerance"]]
    path.write_text(json.dumps(doc))
    assert ContractMonitor(str(path)).fingerprint() != before
