"""Operators load their compiled kernels before the first batch (``warm_up``), warming up changes
nothing that an operator computes, and ``python -m perfsift.operators.warm`` (the image build)
compiles every kernel of the operators."""

from __future__ import annotations

import subprocess
import sys

import orjson
from perfsift.producers.synth import spmd
from perfsift.schemas import decode_samples
from perfsift.streams.config import load_pipeline
from perfsift.streams.stage import Chain

PROBE = """
import json
import numba.core.registry
from perfsift.operators.clean import _clean_kernel
from perfsift.operators.forecast import _nws_kernel
from perfsift.operators.pursuit import _pp_kernel
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

#: after ``warm()``, the operators modules with kernels none of which is compiled (a kernel numba
#: inlines is never compiled on its own, nor, when its caller comes from the cache, one it calls:
#: so a module counts as warm when one of its kernels is)
WARM_PROBE = """
import importlib, json, pkgutil
#: modules whose kernels only other modules' kernels call: compiled with their caller (whose cached
#: machine code holds them), never on their own once the caller comes from the cache
CALLED_ONLY = {"perfsift.operators.forecast._nws_windows"}  # the NWS kernel's window primitives
import numba.core.registry
import perfsift.operators
from perfsift.operators.warm import warm

warm()
cold = []
for info in pkgutil.walk_packages(perfsift.operators.__path__, "perfsift.operators."):  # sub-packages too
    mod = importlib.import_module(info.name)
    kernels = [
        f
        for f in vars(mod).values()
        if isinstance(f, numba.core.registry.CPUDispatcher)
        and f.__module__ == mod.__name__
        and f.targetoptions.get("inline", "never") == "never"
    ]
    if kernels and not any(f.signatures for f in kernels) and info.name not in CALLED_ONLY:
        cold.append(info.name)
print(json.dumps(cold))
"""


def test_warm_up_loads_the_kernels_of_every_default_stage() -> None:
    # a fresh interpreter: nothing is loaded before warm_up
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=300, check=True)
    before, after = orjson.loads(out.stdout.strip().splitlines()[-1])
    assert before == [0, 0, 0]
    assert all(n >= 1 for n in after), after


def test_warm_compiles_every_kernel_of_the_operators() -> None:
    out = subprocess.run([sys.executable, "-c", WARM_PROBE], capture_output=True, text=True, timeout=600, check=True)
    assert orjson.loads(out.stdout.strip().splitlines()[-1]) == []


def test_warming_up_changes_no_output() -> None:
    samples, _ = spmd("sweep3d", nodes=8, duration=90, seed=3, outliers=0.02, missing=0.02)
    batch = decode_samples([orjson.dumps(s) for s in samples])[0]
    for st in load_pipeline().stages.values():
        cold, warm = Chain(st, "json"), Chain(st, "json")
        for op in warm.operators:
            op.warm_up()
        assert cold.process(batch).topics == warm.process(batch).topics, st.name
