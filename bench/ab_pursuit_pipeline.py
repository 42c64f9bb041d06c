"""Two commits in one run, alternated: projection pursuit's ms per update at P = n = 12 (evidence
and naming included where the commit has them; ``bench_pursuit.per_update``) and the whole
pipeline's samples/s (``bench_pipeline.throughput``, one process per stage, embedded broker).

Each measurement runs in a fresh process of the commit's own worktree and venv, so the two
sides share the machine's load; only the ratios within this run mean anything on a shared VM.
Before the rounds each side fills numba's cache (``operators.warm``) and runs a short pipeline,
untimed: a commit whose kernels were never compiled would otherwise pay ~100 CPU-s in its first run.

    python -m bench.ab_pursuit_pipeline --base /tmp/base [--rounds 2] [--samples 200000]

``--base`` is a worktree of the other commit with its own ``.venv`` (``git worktree add``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from bench.common import ROOT, write_result

WARM = (
    "from perfsift.operators.warm import warm; warm(); "
    "from bench.bench_pipeline import throughput; throughput({samples}, processes=True); print('{{}}')"
)
PURSUIT = (  # wall ms, then CPU ms (process_time: the restart pool's threads included) per update
    "import json, time, types; import bench.bench_pursuit as bp; w = bp.per_update(12, 12, {periods}); "
    "bp.time = types.SimpleNamespace(perf_counter=time.process_time); c = bp.per_update(12, 12, {periods}); "
    "print(json.dumps({{**w, 'cpu_ms': c['median_ms']}}))"
)
PIPELINE = (
    "from bench.bench_pipeline import throughput; import json; "
    "r = throughput({samples}, processes=True); print(json.dumps({{k: r[k] for k in ('rate', 'seconds', 'cpu')}}))"
)


def measure(tree: Path, code: str) -> dict:
    """Run ``code`` in ``tree`` with its venv's python; its last stdout line is JSON."""
    out = subprocess.run(
        [str(tree / ".venv" / "bin" / "python"), "-c", code], cwd=tree, capture_output=True, text=True, timeout=900
    )
    if out.returncode:
        raise RuntimeError(out.stderr[-2000:])
    return json.loads(out.stdout.strip().splitlines()[-1])


def git_head(tree: Path) -> str:
    return subprocess.run(
        ["git", "-C", str(tree), "rev-parse", "--short", "HEAD"], capture_output=True, text=True
    ).stdout.strip()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base", type=Path, required=True)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--periods", type=int, default=30)
    ap.add_argument("--samples", type=int, default=200_000)
    args = ap.parse_args()
    trees = {"base": args.base.resolve(), "branch": ROOT.parent}
    heads = {k: git_head(t) for k, t in trees.items()}
    runs: dict[str, dict[str, list[dict]]] = {k: {"pursuit": [], "pipeline": []} for k in trees}
    for tree in trees.values():  # numba's cache, and the first stage processes, compile nothing timed
        measure(tree, WARM.format(samples=min(args.samples, 20_000)))
    load = [os.getloadavg()[0]]
    for rnd in range(args.rounds):
        order = list(trees) if rnd % 2 == 0 else list(reversed(trees))
        for what, code in (("pursuit", PURSUIT.format(periods=args.periods)),
                           ("pipeline", PIPELINE.format(samples=args.samples))):  # fmt: skip
            for side in order:
                r = measure(trees[side], code)
                r["load"] = os.getloadavg()[0]
                runs[side][what].append(r)
                print(rnd, side, heads[side], what, r, flush=True)
    load.append(os.getloadavg()[0])
    ms = {k: [r["median_ms"] for r in v["pursuit"]] for k, v in runs.items()}
    rate = {k: [r["rate"] for r in v["pipeline"]] for k, v in runs.items()}
    cpu = {k: [r["cpu_ms"] for r in v["pursuit"]] for k, v in runs.items()}
    ratio_ms = statistics.median(ms["branch"]) / statistics.median(ms["base"])
    ratio_cpu = statistics.median(cpu["branch"]) / statistics.median(cpu["base"])
    ratio_rate = statistics.median(rate["branch"]) / statistics.median(rate["base"])
    rows = [
        {"measure": f"ms per update, P = n = 12, median of {args.periods - 1} periods per run, base {heads['base']}",
         "value": ", ".join(f"{x:.1f}" for x in ms["base"]), "target": ""},
        {"measure": f"ms per update, P = n = 12, branch {heads['branch']} (evidence and naming)",
         "value": ", ".join(f"{x:.1f}" for x in ms["branch"]) + f" ({ratio_ms:.2f}× base, medians)",
         "target": "≤ 20 ms"},
        {"measure": f"CPU ms per update (process_time), P = n = 12, base {heads['base']}",
         "value": ", ".join(f"{x:.1f}" for x in cpu["base"]), "target": ""},
        {"measure": f"CPU ms per update (process_time), P = n = 12, branch {heads['branch']}",
         "value": ", ".join(f"{x:.1f}" for x in cpu["branch"]) + f" ({ratio_cpu:.2f}× base, medians)",
         "target": "≤ 20 ms"},
        {"measure": f"whole pipeline samples/s ({args.samples:,} samples, one process per stage), base {heads['base']}",
         "value": ", ".join(f"{x:,.0f}" for x in rate["base"]), "target": ""},
        {"measure": f"whole pipeline samples/s, branch {heads['branch']}",
         "value": ", ".join(f"{x:,.0f}" for x in rate["branch"]) + f" ({ratio_rate:.2f}× base, medians)",
         "target": "≥ 0.9× base"},
    ]  # fmt: skip
    notes = (
        f"Alternated in one run ({args.rounds} rounds, the order flipped each round), each measurement a "
        f"fresh process of its commit's worktree; load average {load[0]:.1f} at the start, {load[1]:.1f} at "
        f"the end ({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())})."
    )
    path = write_result(
        "ab_pursuit_pipeline",
        {"benchmark": "Pursuit and pipeline against the previous main", "script": "ab_pursuit_pipeline",
         "rows": rows, "notes": notes, "runs": runs},
    )  # fmt: skip
    print(f"wrote {path}", file=sys.stderr)


if __name__ == "__main__":
    main()
