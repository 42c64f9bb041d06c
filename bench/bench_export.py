"""Throughput of ``perfsift export``'s exposition, in process: perf.reduced records (JSON, as the
stages write them) decoded and put into the latest-values store, per second; beside it in the same
run the decoding alone (``decode_any``, the baseline any reader pays), the store alone on decoded
records, forecasts and contracts, a scrape's rendering of every series (``generate_latest``) and
one remote_write request's encoding.

A reduced record of ``--metrics`` selected metrics is one node's sample: ``--nodes`` nodes in 4
jobs; every round updates every series once.

    python -m bench.bench_export [--nodes 1000] [--metrics 12] [--rounds 5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable

import numpy as np
import orjson
from perfsift.formats.prom_out import LatestValues
from perfsift.formats.remote_write import encode_series
from perfsift.schemas.detect import decode_any
from prometheus_client import CollectorRegistry, generate_latest

from bench.common import write_result


def reduced_messages(nodes: int, metrics: int, rounds: int, seed: int = 0) -> list[list[bytes]]:
    rng = np.random.default_rng(seed)
    out = []
    for r in range(rounds):
        msgs = []
        for n in range(nodes):
            values = {f"metric_{j:02d}": float(v) for j, v in enumerate(rng.normal(50, 10, metrics))}
            rec = {
                "ts": 1.7e9 + r,
                "node": f"node-{n:05d}",
                "job": f"job-{n % 4}",
                "seq": r,
                "metrics": values,
                "selection_version": 3,
                "full": False,
            }
            msgs.append(orjson.dumps(rec))
        out.append(msgs)
    return out


def best_rate(n: int, run: Callable[[], None], repeat: int) -> float:
    """Items per second, the median of ``repeat`` runs of ``run`` (``n`` items each)."""
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        run()
        times.append(time.perf_counter() - t0)
    return n / statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--nodes", type=int, default=1000)
    ap.add_argument("--metrics", type=int, default=12)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    load0 = os.getloadavg()[0]
    rounds = reduced_messages(args.nodes, args.metrics, args.rounds)
    n_records = args.nodes * args.rounds
    values_per_record = args.metrics
    store = LatestValues(max_series=10**7)

    def decode_only() -> None:
        for msgs in rounds:
            for m in msgs:
                decode_any(m)

    def decode_and_store() -> None:  # what Exporter.run does per batch
        for msgs in rounds:
            store.add("reduced", [decode_any(m).record for m in msgs])

    decoded = [[orjson.loads(m) for m in msgs] for msgs in rounds]

    def store_only() -> None:
        for recs in decoded:
            store.add("reduced", recs)

    forecasts = [
        {
            "ts": 1.7e9,
            "node": f"node-{n:05d}",
            "job": f"job-{n % 4}",
            "metric": f"metric_{j:02d}",
            "forecast": 1.0,
            "sigma": 0.1,
            "lower": 0.8,
            "upper": 1.2,
            "method": "mean",
        }
        for n in range(args.nodes)
        for j in range(2)
    ]
    contracts = [
        {
            "ts": 1.7e9,
            "node": f"node-{n:05d}",
            "job": f"job-{n % 4}",
            "violation": 0.2,
            "smoothed": 0.1,
            "state": "ok",
            "driver": None,
            "spaces": {"app": {"violation": 0.2, "distance": 0.5, "dims": {}}},
        }
        for n in range(args.nodes)
    ]
    result: dict = {"nodes": args.nodes, "metrics_per_record": values_per_record, "rounds": args.rounds}
    result["decode_only_records_per_s"] = best_rate(n_records, decode_only, 3)
    result["decode_and_store_records_per_s"] = best_rate(n_records, decode_and_store, 3)
    result["store_only_records_per_s"] = best_rate(n_records, store_only, 3)
    result["store_only_values_per_s"] = result["store_only_records_per_s"] * values_per_record
    result["forecast_records_per_s"] = best_rate(len(forecasts), lambda: store.add("forecast", forecasts), 3)
    result["contract_records_per_s"] = best_rate(len(contracts), lambda: store.add("contract", contracts), 3)
    result["vs_decode_only"] = result["decode_and_store_records_per_s"] / result["decode_only_records_per_s"]
    reg = CollectorRegistry()
    reg.register(store)
    result["series"] = store.count
    t0 = time.perf_counter()
    text = generate_latest(reg)
    result["scrape_render_s"] = time.perf_counter() - t0
    result["scrape_bytes"] = len(text)
    t0 = time.perf_counter()
    body = encode_series((store.labelled(f, k), [(round(ts * 1000), v)]) for f, k, v, ts in store.series())
    result["remote_write_encode_s"] = time.perf_counter() - t0
    result["remote_write_bytes"] = len(body)
    r = result
    rows = [
        (
            f"perf.reduced records (JSON, {values_per_record} metrics) decoded and stored",
            f"{r['decode_and_store_records_per_s']:,.0f} records/s = "
            f"{r['decode_and_store_records_per_s'] * values_per_record:,.0f} values/s",
        ),
        (
            "baseline: decoding alone (decode_any, what any reader pays)",
            f"{r['decode_only_records_per_s']:,.0f} records/s",
        ),
        (
            "the store alone (decoded records)",
            f"{r['store_only_records_per_s']:,.0f} records/s = {r['store_only_values_per_s']:,.0f} values/s",
        ),
        ("decoded and stored / decoding alone (ratio of rates, same run)", f"{r['vs_decode_only']:.2f}"),
        ("perf.forecast records stored (4 series each)", f"{r['forecast_records_per_s']:,.0f} records/s"),
        ("perf.contract records stored (1 space, 6 series each)", f"{r['contract_records_per_s']:,.0f} records/s"),
        (
            f"a scrape of {r['series']:,} series rendered (generate_latest)",
            f"{r['scrape_render_s']:.3f} s, {r['scrape_bytes'] / 1e6:.1f} MB",
        ),
        (
            f"one remote_write request of {r['series']:,} series encoded (snappy protobuf)",
            f"{r['remote_write_encode_s']:.3f} s, {r['remote_write_bytes'] / 1e6:.2f} MB",
        ),
    ]
    result["rows"] = [{"measure": m, "value": v, "target": ""} for m, v in rows]
    result["benchmark"] = "perfsift export: records into the Prometheus exposition (in process)"
    result["script"] = "bench_export"
    result["load_average"] = [load0, os.getloadavg()[0]]
    result["notes"] = (
        f"{args.nodes:,} nodes in 4 jobs, {args.rounds} rounds, each updating every series once; medians of 3 runs. "
        "The Kafka consumer around it is the one every reader has. The 2 cores were shared with other work "
        f"(load average {load0:.1f} at the start, {os.getloadavg()[0]:.1f} at the end)."
    )
    path = write_result("export", result)
    for m, v in rows:
        print(f"{m:70s} {v}")
    print(f"-> {path}")


if __name__ == "__main__":
    main()
