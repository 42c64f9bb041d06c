"""The default pipeline's two stages in one process, no broker, on bench_pipeline's data.

The published JSON samples (sweep3d, 64 nodes × 12 metrics) go, keyed by node over four
partitions in micro-batches of ``--batch`` messages, through the node stage's ``step_records``
(one chain per partition, as the runner keeps them; the partitions' micro-batches in turn, as the
event-time alignment keeps them together); its frames on perf.smoothed.byjob go, in
order, through the select stage's. Printed: CPU seconds per stage (decode and chain included),
and a SHA-256 per output topic of every encoded record and key, in order - the same digests
before and after a change mean the same bytes on every topic. As the stage runner does, each
stage's operators are warmed up first (numba's cached kernels loaded: about half a CPU-second of
the select stage's otherwise); that CPU is printed apart (``warm_up``), ``--cold`` leaves it out.

``--parts`` adds the select stage's CPU by part (``time.process_time`` around its main functions,
outermost calls only; no profiler, whose per-call cost inflated the record loops several times).
``--base DIR`` alternates, in fresh processes, a base commit's code (DIR holds its tree as
``DIR/perfsift``, e.g. from ``git archive``) with the working tree's, checks that their digests are
equal and writes ``bench/results/select_stage.json``.

    python -m bench.pipeline_inproc [--samples 200000] [--profile select|node] [--cold] [--parts]
    python -m bench.pipeline_inproc --base DIR [--rounds 2]
"""

from __future__ import annotations

import argparse
import collections
import cProfile
import hashlib
import importlib
import os
import pstats
import statistics
import subprocess
import sys
import time
import zlib
from collections.abc import Callable
from typing import Any

import orjson
from perfsift.producers.synth import spmd
from perfsift.streams.config import load_pipeline
from perfsift.streams.limits import Guard
from perfsift.streams.stage import Chain, Emitted, sample_decoder, step_records


def raw_messages(n: int, nodes: int = 64) -> list[tuple[bytes, bytes]]:
    """(value, key) of the samples bench_pipeline publishes, in its order."""
    _, c = spmd("sweep3d", nodes=nodes, duration=n // nodes, seed=1, cube=True)
    vals, names = c["values"], c["metrics"]
    out = []
    for s, t in enumerate(c["t"].tolist()):
        for q in range(nodes):
            rec = {
                "ts": t,
                "node": f"n{q:03d}",
                "job": "sweep3d",
                "seq": s,
                "metrics": dict(zip(names, vals[s, q].tolist(), strict=True)),
            }
            out.append((orjson.dumps(rec), rec["node"].encode()))
    return out


class Stage:
    """One stage's chains (one per input partition), its collected outputs and CPU time."""

    def __init__(self, name: str) -> None:
        cfg = load_pipeline()
        self.cfg = cfg
        self.stage = cfg.stage(name)
        self.decode = sample_decoder(cfg.encoding)
        self.chains: dict[int, Chain] = {}
        self.guards: dict[int, Guard] = {}
        self.out: dict[str, list[tuple[bytes, bytes]]] = {}
        self.cpu = 0.0
        self.warm_cpu = 0.0

    def warm_up(self) -> None:
        """What the stage runner does before its first batch: every operator's and the encoding's
        warm-up (compiled kernels loaded), on a chain of its own."""
        t = time.process_time()
        chain = Chain(self.stage, self.cfg.encoding, self.cfg.framing)
        for op in chain.operators:
            op.warm_up()
        chain.encoding.warm_up()
        self.warm_cpu += time.process_time() - t

    def publish(self, emitted: Emitted) -> None:
        for topic, (values, keys) in emitted.topics.items():
            self.out.setdefault(topic, []).extend(zip(values, keys, strict=True))

    def park(self, i: int, reason: str, detail: str) -> None:
        raise AssertionError(f"dead letter {i}: {reason} {detail}")

    def step(self, part: int, values: list[bytes]) -> None:
        if part not in self.chains:
            self.chains[part] = Chain(self.stage, self.cfg.encoding, self.cfg.framing)
            self.guards[part] = Guard(self.cfg.limits)
        t = time.process_time()
        step_records(self.chains[part], self.guards[part], values, self.decode, str, self.publish, self.park, f"{part}")
        self.cpu += time.process_time() - t


#: the select stage's parts timed by ``--parts``: (module, function or Class.method)
PARTS = [
    ("operators.pursuit.pursuit", "ProjectionPursuit.update"),
    ("operators.pursuit.projection", "projection_pursuit"),
    ("operators.pursuit._pp_kernel", "run"),
    ("operators.pursuit.deviants", "name_nodes"),
    ("operators.pursuit.deviants", "node_deviants"),
    ("operators.pursuit.rows", "stacked_rows"),
    ("operators.pursuit.evidence", "metric_pvalues"),
    ("operators.forecast.forecast", "ForecastBank.update"),
    ("operators.forecast.records", "forecast_records"),
    ("schemas.encodings", "Json.encode_records"),
    ("schemas.encodings", "Json.encode_batch"),
]


def time_parts() -> collections.defaultdict[str, float]:
    """Wrap each of :data:`PARTS` (and every module's imported name of it) in a CPU timer; the
    counter fills as the stage runs."""
    spent: collections.defaultdict[str, float] = collections.defaultdict(float)
    for module, name in PARTS:
        mod = importlib.import_module(f"perfsift.{module}")
        owner: Any = mod
        attr = name
        if "." in name:
            owner, attr = getattr(mod, name.split(".")[0]), name.split(".")[1]
        f = getattr(owner, attr)
        wrapped = _timed(f, name, spent)
        setattr(owner, attr, wrapped)
        for other in list(sys.modules.values()):  # `from module import f` elsewhere
            if (
                owner is mod
                and getattr(other, "__name__", "").startswith("perfsift")
                and getattr(other, attr, None) is f
            ):
                setattr(other, attr, wrapped)
    return spent


def _timed(f: Callable[..., Any], name: str, spent: collections.defaultdict[str, float]) -> Callable[..., Any]:
    inside = [0]

    def timed(*args: Any, **kwargs: Any) -> Any:
        if inside[0]:
            return f(*args, **kwargs)
        inside[0] += 1
        t = time.process_time()
        try:
            return f(*args, **kwargs)
        finally:
            spent[name] += time.process_time() - t
            inside[0] -= 1

    return timed


def run(n: int, batch: int, profile: str | None = None, warm: bool = True, by_part: bool = False) -> dict[str, Any]:
    msgs = raw_messages(n)
    node, select = Stage("node"), Stage("select")
    if warm:
        node.warm_up()
        select.warm_up()
    parts: dict[int, list[bytes]] = {}
    for value, key in msgs:
        parts.setdefault(zlib.crc32(key) % 4, []).append(value)
    prof = cProfile.Profile(time.process_time)  # CPU time: the machine is shared
    if profile == "node":
        prof.enable()
    # the partitions' micro-batches in turn, as the runner's event-time alignment keeps them within
    # a couple of minutes of each other: one partition's whole trace before the next one's made the
    # select stage close every period by `slack` with the first partition's 16 of the 64 nodes
    for i in range(0, max(map(len, parts.values())), batch):
        for p in sorted(parts):
            if i < len(parts[p]):
                node.step(p, parts[p][i : i + batch])
    prof.disable()
    frames = [v for v, _ in node.out.get("perf.smoothed.byjob", [])]
    spent = time_parts() if by_part else None
    if profile == "select":
        prof.enable()
    for i in range(0, len(frames), 4):  # a few frames per consume batch
        select.step(0, frames[i : i + 4])
    prof.disable()
    if profile:
        pstats.Stats(prof).sort_stats("cumulative").print_stats(45)
        pstats.Stats(prof).sort_stats("tottime").print_stats(30)
    digests = {}
    for stage in (node, select):
        for topic, recs in sorted(stage.out.items()):
            h = hashlib.sha256()
            for v, k in recs:
                h.update(len(v).to_bytes(4, "big") + v + k)
            digests[topic] = (len(recs), h.hexdigest()[:16])
    cpu = {"node": round(node.cpu, 2), "select": round(select.cpu, 2)}
    if warm:
        cpu |= {"node_warm_up": round(node.warm_cpu, 2), "select_warm_up": round(select.warm_cpu, 2)}
    out: dict[str, Any] = {"cpu": cpu, "digests": digests}
    if spent is not None:
        out["select_parts"] = {k: round(v, 3) for k, v in sorted(spent.items(), key=lambda kv: -kv[1])}
    return out


def ab(base: str, rounds: int, samples: int) -> dict[str, Any]:
    """The base tree's code and the working tree's, alternated in fresh processes (``--parts``)."""
    runs: dict[str, list[dict[str, Any]]] = {"base": [], "branch": []}
    for r in range(rounds):
        for side in ("base", "branch") if r % 2 == 0 else ("branch", "base"):
            env = dict(os.environ)
            if side == "base":
                env["PYTHONPATH"] = os.pathsep.join([base, env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
            cmd = [sys.executable, "-m", "bench.pipeline_inproc", "--parts", "--samples", str(samples)]
            done = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True)
            runs[side].append(orjson.loads(done.stdout))
    digests = {side: [r["digests"] for r in rs] for side, rs in runs.items()}
    if any(d != digests["base"][0] for ds in digests.values() for d in ds):
        raise SystemExit(f"the outputs differ: {digests}")
    return runs


def write_ab(runs: dict[str, list[dict[str, Any]]], base: str, samples: int) -> None:
    from bench.common import write_result

    def cpu(side: str, key: str) -> list[float]:
        return [r["cpu"][key] for r in runs[side]]

    def part(side: str, key: str) -> float:
        return statistics.median(r["select_parts"].get(key, 0.0) for r in runs[side])

    b, a = cpu("base", "select"), cpu("branch", "select")
    rows = [
        {"measure": f"select stage CPU-s per {samples:,} samples, base", "value": ", ".join(map(str, b)), "target": ""},
        {
            "measure": "select stage CPU-s, this tree",
            "value": f"{', '.join(map(str, a))} ({statistics.median(a) / statistics.median(b):.2f}x base, medians)",
            "target": "",
        },
    ]
    rows += [
        {
            "measure": f"of which {name} (median)",
            "value": f"base {part('base', name):.2f}, tree {part('branch', name):.2f}",
            "target": "",
        }
        for _, name in PARTS
    ]
    rows.append(
        {"measure": "outputs (SHA-256 per topic)", "value": "identical on all five topics", "target": "same bytes"}
    )
    load = os.getloadavg()[0]
    write_result(
        "select_stage",
        {
            "benchmark": "The select stage's CPU in one process (issue #29, #32)",
            "script": "pipeline_inproc",
            "rows": rows,
            "runs": runs,
            "notes": (
                f"Base: the tree in {base}. Each run a fresh process, the two alternated "
                f"{len(a)} times; operators warmed up first as the runner does (not counted). "
                f"Load average {load:.1f} at the end, 2 shared cores."
            ),
        },
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--samples", type=int, default=200_000)
    ap.add_argument("--batch", type=int, default=1250)
    ap.add_argument("--profile", choices=["node", "select"])
    ap.add_argument("--cold", action="store_true", help="no warm-up: kernels load in the first batches")
    ap.add_argument("--parts", action="store_true", help="the select stage's CPU by part")
    ap.add_argument("--base", help="a base tree (DIR/perfsift): alternate it with this one, write the result")
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    if args.base:
        runs = ab(args.base, args.rounds, args.samples)
        write_ab(runs, args.base, args.samples)
        print(orjson.dumps({s: [r["cpu"] for r in rs] for s, rs in runs.items()}).decode())
        return
    r = run(args.samples, args.batch, args.profile, warm=not args.cold, by_part=args.parts)
    print(orjson.dumps(r, option=orjson.OPT_INDENT_2).decode())


if __name__ == "__main__":
    main()
