"""The forecaster at another git revision against the working tree, alternating in one process.

    python -m bench.ab_forecast REV [--rounds 25] [--nodes 1000] [--steps 10]

This VM's speed drifts by up to about 25 % within an hour, so two runs of
``bench_contract_forecast`` at different times cannot tell a 5 % change from noise. Here both
versions run in the same process on the same batches, batch after batch in turn, and the ratio of
their times is taken per pair. ``operators/forecast/forecast.py`` and the modules of its engines
(``operators/forecast/_nws*.py``) of REV are loaded from git as modules of their own (the kernel
uncached, so REV's code is what runs); their outputs are checked equal to the working tree's first. Set
``NUMBA_NUM_THREADS`` for the thread count. Prints the two medians and the median time ratio (> 1:
the working tree is faster).
"""

from __future__ import annotations

import argparse
import importlib
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from perfsift.operators import ForecastBank

from bench.bench_contract_forecast import forecast_batch

ROOT = Path(__file__).resolve().parent.parent


def revision_bank(rev: str, tmp: Path) -> type:
    """REV's ForecastBank, bound to REV's engines: ``forecast.py`` and ``_nws*.py`` (in
    ``operators/forecast/``, or in ``operators/`` before issue #29) from git, each renamed
    ``perfsift_ab_<name>`` (imports among them rewritten) so they load beside ours."""

    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=True).stdout

    # issue #29 moved the family into operators/forecast/: REV may be on either side of the move
    folder = "operators/forecast/" if git("ls-tree", "--name-only", rev, "operators/forecast/") else "operators/"
    paths = [p for p in git("ls-tree", "--name-only", rev, folder).split() if Path(p).name.startswith("_nws")]
    names = ["forecast", *(Path(p).stem for p in paths)]
    alt = "|".join(map(re.escape, names))
    for name in names:
        src = git("show", f"{rev}:{folder}{name}.py").replace("cache=True", "cache=False")
        src = re.sub(  # module imports first: ``from perfsift.operators.forecast import _nws_kernel``
            rf"from perfsift\.operators(?:\.forecast)? import ({alt})\b(?: as (\w+))?",
            lambda m: f"import perfsift_ab_{m[1]} as {m[2] or m[1]}",
            src,
        )
        src = re.sub(rf"from perfsift\.operators(?:\.forecast)?\.({alt}) import", r"from perfsift_ab_\1 import", src)
        (tmp / f"perfsift_ab_{name}.py").write_text(src)
    sys.path.insert(0, str(tmp))
    try:  # every module now: the forecaster imports its kernel when it first runs
        mods = [importlib.import_module(f"perfsift_ab_{name}") for name in names]
    finally:
        sys.path.remove(str(tmp))
    return mods[0].ForecastBank


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
