"""The evidence tests' ranks (operators/pursuit/evidence.py ``_ranks``) without scipy.stats: both of
its ways (comparison counts up to 48 nodes, a sort above) equal scipy's ``rankdata`` bit for bit
on the arrays the callers pass (nodes × snapshots × metrics, ties everywhere), and the select
stage's warm-up and a period's evidence over many nodes no longer import scipy.stats (about
1 CPU-s of every stage process's start)."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from perfsift.operators.pursuit.evidence import _ranks, _sorted_ranks
from scipy.stats import rankdata

#: few distinct values (ties in most columns), both zeros (equal, as the comparisons see them),
#: infinities, and ordinary floats
VALUES = st.one_of(
    st.sampled_from([0.0, -0.0, 1.0, 2.5, -3.0, np.inf, -np.inf]),
    st.floats(allow_nan=False, width=64),
)


@st.composite
def rank_inputs(draw: st.DrawFn) -> np.ndarray:
    nodes = draw(st.one_of(st.integers(1, 60), st.integers(40, 130)))
    tail = draw(st.lists(st.integers(1, 4), min_size=0, max_size=2))  # 1-D, 2-D or 3-D as the callers pass
    return draw(hnp.arrays(np.float64, (nodes, *tail), elements=VALUES))


@settings(max_examples=300, deadline=None)
@given(v=rank_inputs())
def test_ranks_equal_scipy_rankdata_bit_for_bit(v: np.ndarray) -> None:
    expected = np.asarray(rankdata(v, axis=0), dtype=np.float64)
    for got in (_ranks(v), _sorted_ranks(v)):
        assert got.shape == expected.shape and got.dtype == np.float64
        assert got.tobytes() == expected.tobytes(), (v, got, expected)


def test_sorted_ranks_on_a_large_tied_cube() -> None:
    """Many nodes, few distinct values: every column is mostly ties (the path above 48 nodes)."""
    v = np.random.default_rng(7).integers(0, 4, size=(500, 20, 6)).astype(np.float64)
    assert _ranks(v).tobytes() == np.asarray(rankdata(v, axis=0), dtype=np.float64).tobytes()


def test_the_select_stage_warm_up_and_evidence_do_not_import_scipy_stats() -> None:
    code = (
        "import sys, numpy as np\n"
        "from perfsift.operators.pursuit.evidence import metric_pvalues\n"
        "from perfsift.operators.reduce import Reduce\n"
        "Reduce(pursuit={'period': 30}).warm_up()\n"
        "p = metric_pvalues(np.random.default_rng(0).normal(size=(100, 8, 3)))\n"
        "assert p.shape == (3,)\n"
        "print(sorted(m for m in sys.modules if m == 'scipy.stats' or m.startswith('scipy.stats.')))\n"
        "print('scipy.special' in sys.modules)\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    stats, special = r.stdout.strip().splitlines()[-2:]
    assert stats == "[]"
    assert special == "True"  # the warm-up still loads what the evidence uses
