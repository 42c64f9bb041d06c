"""Structural-model predictions: model evaluations per second for the bundled SOR model, first
order and Monte Carlo, by job size; and the streaming predictor over a trace (samples/s).

    python -m bench.bench_model
"""

from __future__ import annotations

import time

import numpy as np
from perfsift.models import bundled
from perfsift.models.structural import StructuralModel
from perfsift.operators.predict import ModelPredictor
from perfsift.producers.synth import sor
from perfsift.schemas import samples_to_batch

from bench.common import write_result


def per_second(fn, min_time: float = 1.0) -> float:  # type: ignore[no-untyped-def]
    n, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < min_time:
        fn()
        n += 1
    return n / (time.perf_counter() - t0)


def main() -> None:
    m = StructuralModel.load(bundled("sor"))
    rows, evals = [], {}
    for nodes in (4, 64, 256):
        rng = np.random.default_rng(nodes)
        inputs = {
            "FracAvailCPU": {"mean": rng.uniform(0.5, 0.9, nodes), "sigma": np.full(nodes, 0.05)},
            "BWAvail": {"mean": np.full(nodes, 2e5), "sigma": np.full(nodes, 1e4)},
        }
        for method, samples in (("first-order", 0), ("monte-carlo", 2000)):
            rate = per_second(
                lambda i=inputs, mt=method, s=samples, n=nodes: m.predict(i, method=mt, samples=max(s, 1), nodes=n)
            )
            evals[f"{method}_{nodes}"] = rate
            what = "first order" if method == "first-order" else f"Monte Carlo, {samples} draws"
            rows.append({"measure": f"SOR prediction, {nodes} nodes, {what}", "value": f"{rate:,.1f} predictions/s",
                         "target": ""})  # fmt: skip
    trace, _ = sor(nodes=16, steps=300, seed=1)
    batch = samples_to_batch(trace)
    t = time.perf_counter()
    recs = ModelPredictor("sor", samples=2000).update(batch)
    el = time.perf_counter() - t
    rows.append({"measure": "streaming predictor, SOR, 16 nodes x 300 iterations (auto: Monte Carlo, 2000 draws)",
                 "value": f"{len(batch) / el:,.0f} samples/s ({300 / el:,.0f} predictions/s, {len(recs):,} records)",
                 "target": ""})  # fmt: skip
    for r in rows:
        print(f"{r['measure']}: {r['value']}")
    path = write_result(
        "model",
        {"benchmark": "structural-model predictions (SOR)", "script": "bench_model", "evaluations_per_s": evals,
         "stream_samples_per_s": len(batch) / el, "rows": rows},
    )  # fmt: skip
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
