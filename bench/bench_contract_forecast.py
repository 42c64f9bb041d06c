"""Contract evaluation (samples/s, 4 dimensions) and NWS forecasting (series-updates/s) on column
batches, each next to the same operator fed one record at a time (the per-record baseline).

    python -m bench.bench_contract_forecast
"""

from __future__ import annotations

import statistics
import time

import numpy as np
from perfsift.operators import Batch, ContractMonitor, ForecastBank
from perfsift.operators.contract import derive_contract
from perfsift.producers.synth import master_worker
from perfsift.schemas import samples_to_batch

from bench.common import write_result

SPACES = {
    "intrinsic": ["instructions_per_s / flops_per_s", "messages_per_s / bytes_per_s"],
    "execution": ["instructions_per_s", "messages_per_s"],
}


def rates(fn, count: int, repeat: int = 3) -> tuple[float, float]:  # type: ignore[no-untyped-def]
    """(median, best) rate over ``repeat`` runs."""
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return count / statistics.median(times), count / min(times)


def rate(fn, count: int, repeat: int = 3) -> float:  # type: ignore[no-untyped-def]
    return rates(fn, count, repeat)[0]


def bench_contract() -> dict:
    contract = derive_contract(samples_to_batch(master_worker(seed=1)[0]), SPACES)
    run = samples_to_batch(master_worker(nodes=256, duration=40, seed=2, load_node=3, load_start=10)[0])
    mon = ContractMonitor(contract)
    mon.update(run.take(np.arange(256)))
    batched = rate(lambda: mon.update(run), len(run))
    rows = [run.take([i]) for i in range(400)]
    one = ContractMonitor(contract)
    per_record = rate(lambda: [one.update(r) for r in rows], len(rows))
    return {
        "samples": len(run),
        "nodes": 256,
        "dimensions": 4,
        "batched_samples_per_s": batched,
        "per_record_samples_per_s": per_record,
        "speedup": batched / per_record,
    }


def forecast_batch(nodes: int = 1000, metrics: int = 12, steps: int = 10) -> Batch:
    """The forecaster's workload: ``steps`` samples of every node, ``metrics`` Gaussian values each."""
    rng = np.random.default_rng(0)
    k = nodes * steps
    return Batch.from_columns(
        ts=np.repeat(np.arange(steps, dtype=float), nodes),
        nodes=[f"n{i % nodes}" for i in range(k)],
        metrics=[f"m{j}" for j in range(metrics)],
        values=rng.normal(100, 10, (k, metrics)),
    )


def bench_forecast(nodes: int = 1000, metrics: int = 12, steps: int = 10) -> dict:
    """Steady state (every window full) for the compiled kernel and the numpy reference engine."""
    k = nodes * steps
    b = forecast_batch(nodes, metrics, steps)
    out: dict = {"nodes": nodes, "metrics": metrics, "steps": steps}
    for engine in ("compiled", "numpy"):
        bank = ForecastBank(engine=engine)
        for _ in range(6):  # fill every window (51 values) before timing
            bank.update(b)
        med, best = rates(lambda bank=bank: bank.update(b), k * metrics, repeat=7 if engine == "compiled" else 3)
        out[f"{engine}_series_updates_per_s"] = med
        out[f"{engine}_best_series_updates_per_s"] = best
    rows = [b.take([i]) for i in range(150)]
    one = ForecastBank()
    out["per_record_series_updates_per_s"] = rate(lambda: [one.update(r) for r in rows], len(rows) * metrics, repeat=2)
    out["batched_series_updates_per_s"] = out["compiled_series_updates_per_s"]
    out["speedup"] = out["compiled_series_updates_per_s"] / out["numpy_series_updates_per_s"]
    out["state_bytes_per_series"] = int(sum(getattr(bank, a + "_")[:1].nbytes for a in bank._ARRAYS))
    out["kernel_cache_bytes_per_series"] = int(sum(getattr(bank, a)[:1].nbytes for a in ("win_v_", "win_n_")))
    return out


#: what one run cannot show: this VM's speed drifts, so kernel changes are judged by same-process,
#: alternating comparisons (outputs checked equal first); kept with the results
NOTES = (
    "This VM's speed drifts by up to about 25 % within an hour (the contract row, unchanged code, has read "
    "725k to 992k samples/s), so the forecaster's gains are read from same-process comparisons, old and new "
    "code alternating on the same batches with equal outputs. Against the kernel of 5b12f9a (1.01M series-"
    "updates/s in its own run): the comparison-only adaptive-median candidates and outputs written straight "
    "into their cells gave 1.25x on 2 threads (two runs) and 1.24x on one; the branch-free candidate picks and "
    "the 5-value sorting network then 1.05x-1.10x. Runs of this script on 2026-11-22: 1.21M at 16:40 (contract "
    "992k) and 1.25M at 16:49, the recorded run, in a slower phase (contract 852k)."
)


def main() -> None:
    c = bench_contract()
    print(
        f"contract: {c['batched_samples_per_s']:,.0f} samples/s batched, {c['per_record_samples_per_s']:,.0f} "
        f"per record ({c['speedup']:.0f}x)"
    )
    f = bench_forecast()
    print(
        f"forecast: {f['compiled_series_updates_per_s']:,.0f} series-updates/s compiled, "
        f"{f['numpy_series_updates_per_s']:,.0f} numpy, {f['per_record_series_updates_per_s']:,.0f} per record"
    )
    path = write_result(
        "contract_forecast",
        {
            "benchmark": "contract evaluation and NWS forecasting on column batches",
            "script": "bench_contract_forecast",
            "notes": NOTES,
            "contract": c,
            "forecast": f,
            "rows": [
                {
                    "measure": "contract, 4 dims, 256 nodes x 40 rows per batch",
                    "value": f"{c['batched_samples_per_s']:,.0f} samples/s",
                    "target": ">= 200,000 samples/s",
                },
                {
                    "measure": "contract, one record per update (baseline)",
                    "value": f"{c['per_record_samples_per_s']:,.0f} samples/s",
                    "target": "",
                },
                {
                    "measure": "forecast, compiled kernel (2 threads), 1000 nodes x 12 metrics per step, windows full",
                    "value": f"{f['compiled_series_updates_per_s']:,.0f} series-updates/s",
                    "target": ">= 1,000,000",
                },
                {
                    "measure": "forecast, compiled kernel, best of 7 batches (the median above is the headline)",
                    "value": f"{f['compiled_best_series_updates_per_s']:,.0f} series-updates/s",
                    "target": "",
                },
                {
                    "measure": "forecast, numpy reference engine, same batches",
                    "value": f"{f['numpy_series_updates_per_s']:,.0f} series-updates/s",
                    "target": "",
                },
                {
                    "measure": "forecast, one record per update (baseline)",
                    "value": f"{f['per_record_series_updates_per_s']:,.0f} series-updates/s",
                    "target": "",
                },
                {
                    "measure": "forecast state per series",
                    "value": f"{f['state_bytes_per_series']:,} bytes "
                    f"(+ {f['kernel_cache_bytes_per_series']:,} of sorted windows, not snapshotted)",
                    "target": "",
                },
            ],
        },
    )
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
