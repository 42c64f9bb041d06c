"""The forecaster at another git revision against the working tree, alternating in one process.

    python -m bench.ab_forecast REV [--rounds 25] [--nodes 1000] [--steps 10]

This VM's speed drifts by up to about 25 % within an hour, so two runs of
``bench_contract_forecast`` at different times cannot tell a 5 % change from noise. Here both
versions run in the same process on the same batches, batch after batch in turn, and the ratio of
their times is taken per pair. ``operators/forecast.py`` and ``operators/_nws_kernel.py`` of REV are
loaded from git as modules of their own (the kernel uncached, so REV's code is what runs); their
outputs are checked equal to the working tree's first. Set ``NUMBA_NUM_THREADS`` for the thread
count. Prints the two medians and the median time ratio (> 1: the working tree is faster).
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import ModuleType

import numpy as np
from perfsift.operators import ForecastBank

from bench.bench_contract_forecast import forecast_batch

ROOT = Path(__file__).resolve().parent.parent


def _load(name: str, path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


def revision_bank(rev: str, tmp: Path) -> type:
    """REV's ForecastBank, bound to REV's kernel (both from git, renamed so they load beside ours)."""

    def show(path: str) -> str:
        r = subprocess.run(["git", "show", f"{rev}:{path}"], cwd=ROOT, capture_output=True, text=True, check=True)
        return r.stdout

    fsrc = show("operators/forecast.py").replace(
        "from perfsift.operators import _nws_kernel", "import perfsift_ab_kernel as _nws_kernel"
    )
    ksrc = (
        show("operators/_nws_kernel.py")
        .replace("cache=True", "cache=False")
        .replace("from perfsift.operators.forecast import", "from perfsift_ab_forecast import")
    )
    (tmp / "forecast.py").write_text(fsrc)
    (tmp / "kernel.py").write_text(ksrc)
    fmod = _load("perfsift_ab_forecast", tmp / "forecast.py")
    _load("perfsift_ab_kernel", tmp / "kernel.py")
    return fmod.ForecastBank


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description="The forecaster at another git revision against the working tree.")
    ap.add_argument("rev", help="git revision to compare against (e.g. HEAD)")
    ap.add_argument("--rounds", type=int, default=25)
    ap.add_argument("--nodes", type=int, default=1000)
    ap.add_argument("--steps", type=int, default=10)
    args = ap.parse_args(argv)
    k, metrics = args.nodes * args.steps, 12
    batch = forecast_batch(args.nodes, metrics, args.steps)  # the recorded benchmark's workload
    with tempfile.TemporaryDirectory() as tmp:
        print(f"compiling {args.rev}'s kernel (uncached, about a minute) ...", flush=True)
        banks = [revision_bank(args.rev, Path(tmp))(engine="compiled"), ForecastBank(engine="compiled")]
        outs = []
        for bank in banks:
            for _ in range(6):  # every window full before timing
                out = bank.update(batch)
            outs.append(out)
    np.testing.assert_allclose(outs[1].values, outs[0].values, rtol=1e-12)
    np.testing.assert_array_equal(outs[1].extra["method"], outs[0].extra["method"])
    times: list[list[float]] = [[], []]
    for _ in range(args.rounds):
        for j, bank in enumerate(banks):
            t = time.perf_counter()
            bank.update(batch)
            times[j].append(time.perf_counter() - t)
    n = k * metrics
    ratio = statistics.median(a / b for a, b in zip(times[0], times[1], strict=True))
    print(
        f"{args.rev}: {n / statistics.median(times[0]):,.0f} series-updates/s   working tree: "
        f"{n / statistics.median(times[1]):,.0f}   time ratio {args.rev}/tree {ratio:.3f} "
        f"(median of {args.rounds} pairs)"
    )


if __name__ == "__main__":
    main()
