"""What event-time alignment costs the whole pipeline while it catches up (issues #29, #32).

``bench.bench_pipeline.throughput`` (N sweep3d samples of 64 nodes published at full speed: a
backlog, one process per stage) with pipeline settings given per variant, the variants alternated
in one run: per run the rate, the CPU seconds per process, the partitions each stage paused and
resumed, and its consumer's fetch requests and bytes received (librdkafka statistics every
200 ms, read when every stage has seen every record).

    python -m bench.bench_align [--samples 200000] [--rounds 2] \\
        [--variant NAME:SETTING=VALUE,...]...    # default: align (120 s) and off (.inf)
"""

from __future__ import annotations

import argparse
import os
from typing import Any

from bench.bench_pipeline import throughput
from bench.common import write_result

BENCHMARK = "Event-time alignment's catch-up cost (whole pipeline, a backlog of 200,000 samples)"
DEFAULT_VARIANTS = ["align:event_time_skew_s=120", "off:event_time_skew_s=inf"]


def parse_variant(text: str) -> tuple[str, dict[str, Any]]:
    """``NAME:KEY=VALUE,...`` -> (name, settings); values are numbers."""
    name, _, rest = text.partition(":")
    settings = {k: float(v) for k, v in (kv.split("=", 1) for kv in rest.split(",") if kv)}
    return name, settings


def one(n: int, name: str, settings: dict[str, Any]) -> dict[str, Any]:
    """One run of the whole pipeline with ``settings``, summarised."""
    load = os.getloadavg()[0]
    r = throughput(n, processes=True, kafka={"statistics.interval.ms": "200"}, **settings)
    per = 200_000 / r["samples"]  # figures per 200,000 samples
    stages = {}
    for stage, k in r["kafka"].items():
        stages[stage] = {
            "cpu_s": round(r["cpu"].get(stage, 0.0) * per, 2),
            "busy_s": round(r["busy"][stage] * per, 2),
            "paused": round(r["paused"][stage] * per),
            "resumed": round(r["resumed"][stage] * per),
            "fetch_requests": round(k.get("consumer.fetch_requests", 0.0) * per),
            "rx_mb": round(k.get("consumer.rx_bytes", 0.0) * per / 1e6, 1),
        }
    return {
        "variant": name,
        "settings": settings,
        "load_average": round(load, 1),
        "rate": round(r["rate"]),
        "seconds": round(r["seconds"], 2),
        "cpu_total_s": round(sum(r["cpu"].values()) * per, 2),
        "cpu": r["cpu"],
        "stages": stages,
    }


def rows(runs: list[dict[str, Any]]) -> list[dict[str, str]]:
    """The docs table: per variant its runs' rates and, per 200,000 samples, the node stage's
    CPU seconds, pauses and bytes received, the run's CPU seconds in all."""
    out = []
    for name in dict.fromkeys(r["variant"] for r in runs):
        mine = [r for r in runs if r["variant"] == name]
        node = [r["stages"]["node"] for r in mine]
        rates = ", ".join(f"{r['rate']:,}" for r in mine)
        loads = ", ".join(f"{r['load_average']}" for r in mine)
        value = (
            f"{rates} samples/s (load {loads}); node stage {', '.join(str(n['cpu_s']) for n in node)} CPU-s, "
            f"{', '.join(str(n['paused']) for n in node)} pauses, {', '.join(str(n['rx_mb']) for n in node)} MB "
            f"received; all processes {', '.join(str(r['cpu_total_s']) for r in mine)} CPU-s"
        )
        settings = ", ".join(f"{k} {int(v) if float(v).is_integer() else v}" for k, v in mine[0]["settings"].items())
        out.append({"measure": f"{name} ({settings})", "value": value, "target": ""})
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--samples", type=int, default=200_000)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--variant", action="append", help="NAME:SETTING=VALUE,... (repeatable)")
    ap.add_argument("--out", default="align", help="bench/results/OUT.json")
    args = ap.parse_args()
    variants = [parse_variant(v) for v in args.variant or DEFAULT_VARIANTS]
    throughput(20_000, processes=True)  # the kernels' cache, compiled outside the timed runs
    runs = []
    for rnd in range(args.rounds):
        for name, settings in variants:
            run = one(args.samples, name, settings) | {"round": rnd + 1}
            runs.append(run)
            head = f"{name} round {rnd + 1}: load {run['load_average']}, {run['rate']} samples/s"
            print(head, f"cpu {run['cpu_total_s']} s", run["stages"], flush=True)
    write_result(args.out, {"benchmark": BENCHMARK, "rows": rows(runs), "runs": runs})


if __name__ == "__main__":
    main()
