"""Operators load their compiled kernels before the first batch (``warm_up``), and warming up
changes nothing that an operator computes."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import orjson
from perfsift.producers.synth import spmd
from perfsift.schemas import decode_samples
from perfsift.streams.config import load_pipeline
from perfsift.streams.runner import encode_outputs

PROBE = """
import json
import numba.core.registry
from perfsift.operators import _clean_kernel, _nws_kernel, _pp_kernel
from perfsift.streams.config import load_pipeline

def compiled(mod):
    return sorted(n for n, f in vars(mod).items() if isinstance(f, numba.core.registry.CPUDispatcher) and f.signatures)

mods = (_clean_kernel, _nws_kernel, _pp_kernel)
before = [compiled(m) for m in mods]
for st in load_pipeline().stages.values():
    for op in st.build_chain():
        op.warm_up()
print(json.dumps([[len(b) for b in before], [len(compiled(m)) for m in mods]]))
"""


def test_warm_up_loads_the_kernels_of_every_default_stage() -> None:
    # a fresh interpreter: nothing is loaded before warm_up
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=300, check=True)
    before, after = orjson.loads(out.stdout.strip().splitlines()[-1])
    assert before == [0, 0, 0]
    assert all(n >= 1 for n in after), after


def test_warming_up_changes_no_output() -> None:
    samples, _ = spmd("sweep3d", nodes=8, duration=90, seed=3, outliers=0.02, missing=0.02)
    batch = decode_samples([orjson.dumps(s) for s in samples])[0]
    for st in load_pipeline().stages.values():
        cold, warm = st.build_chain(), st.build_chain()
        for op in warm:
            op.warm_up()
        x_cold: Any = batch  # each operator's output is the next one's input
        x_warm: Any = batch
        for a, b in zip(cold, warm, strict=True):
            x_cold, x_warm = a.update(x_cold), b.update(x_warm)
        assert encode_outputs(st, x_cold, "json") == encode_outputs(st, x_warm, "json"), st.name
