"""Property tests of the other registered operators (clean, contract, data reduction, reduce,
predict) on random streams with 1e9 level jumps, gaps, repeated timestamps and skewed node clocks
(tests/property_streams.py): what they emit on one batch they emit on any split into micro-batches
(with what ``flush`` holds at the end), and every number they emit is finite. The conformance
suite checks the same on a benign stream (operators/checks.py); here the data are the nasty ones.
Oracles for their formulas: test_library_oracles.py, test_counter_rates.py, test_contract_edges.py."""

from __future__ import annotations

import json
import math
from collections.abc import Callable

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from perfsift.operators.base import Operator
from perfsift.operators.batch import Batch
from perfsift.operators.checks import emitted
from perfsift.operators.clean.clean import Clean
from perfsift.operators.contract import ContractMonitor, derive_contract
from perfsift.operators.predict import ModelPredictor
from perfsift.operators.reduce import Reduce
from perfsift.operators.reduction.reduction import DataReduction

from tests.property_streams import Stream, numbers, streams

MODEL = """parameters:
  X: {metric: m0, min: 1}
  Y: {metric: m1, min: 1}
components:
  T: X / Y
outputs: [T]
observed: {T: m2}
"""


def baseline() -> Batch:
    rng = np.random.default_rng(7)
    k = 300
    return Batch.from_columns(
        ts=np.repeat(np.arange(k // 3, dtype=float), 3),
        nodes=[f"n{i % 3}" for i in range(k)],
        metrics=["m0", "m1", "m2"],
        values=rng.normal(100.0, 5.0, (k, 3)),
    )


@pytest.fixture(scope="module")
def makers(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Callable[[], Operator]]:
    tmp = tmp_path_factory.mktemp("properties")
    contract = tmp / "contract.json"
    contract.write_text(json.dumps(derive_contract(baseline(), {"s": ["m0", "m1"], "t": ["m2"]})))
    model = tmp / "model.yaml"
    model.write_text(MODEL)
    return {
        "clean": lambda: Clean(),
        "contract": lambda: ContractMonitor(str(contract)),
        "data_reduction": lambda: DataReduction(perf_metric="m0", window=16, rand_subsets=5),
        "reduce": lambda: Reduce(
            pursuit={"period": 10.0, "window": 3, "slack": 4, "restarts": 2, "alpha": 1.0}, forecast={"mode": "nws"}
        ),
        "predict": lambda: ModelPredictor(str(model), samples=50),
    }


def run(op: Operator, parts: list[Batch]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for result in [*(op.update(p) for p in parts), op.flush()]:
        for kind, rows in emitted(op, result).items():
            out.setdefault(kind, []).extend(rows)
    return {k: sorted(v) for k, v in out.items()}


@pytest.mark.parametrize("name", ["clean", "contract", "data_reduction", "reduce", "predict"])
def test_micro_batches_equal_one_batch_and_numbers_stay_finite(
    makers: dict[str, Callable[[], Operator]], name: str
) -> None:
    @settings(max_examples=4, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(stream=streams(nodes=(1, 4), metrics=(3, 3), rows=(3, 40)))
    def check(stream: Stream) -> None:
        whole = run(makers[name](), [stream.batch])
        assert run(makers[name](), list(stream.parts())) == whole
        for texts in whole.values():
            for text in texts:
                # NaN is json.dumps' "NaN" (a missing value in a sample row); infinities never
                assert "Infinity" not in text, text[:300]
                assert all(math.isfinite(x) or x != x for x in numbers(json.loads(text)))

    check()
