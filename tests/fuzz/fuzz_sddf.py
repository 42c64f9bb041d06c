"""Fuzz the SDDF reader and the sample mapping: mutated copies of the example streams must only
ever raise SddfError/RecordError (never another exception, never hang).

    python -m tests.fuzz.fuzz_sddf [N]      # default 100,000; writes bench/results/fuzz_sddf.json
"""

from __future__ import annotations

import io
import random
import sys
import time
import traceback

from perfsift.producers.sddf import read_sddf
from perfsift.producers.traces import sddf_samples
from perfsift.schemas import RecordError

from bench.common import write_result
from tests.unit.test_sddf import INTERVAL, INTERVAL_BIN, NODE, mutate


def main(n: int = 100_000, seed: int = 1) -> None:
    seeds = [NODE.read_bytes(), INTERVAL.read_bytes(), INTERVAL_BIN.read_bytes()]
    rng = random.Random(seed)
    counts = {"parsed": 0, "rejected": 0, "crashed": 0}
    t0 = time.perf_counter()
    for i in range(n):
        data = mutate(rng.choice(seeds), rng)
        try:
            list(sddf_samples(read_sddf(io.BytesIO(data), "fuzz")))
            counts["parsed"] += 1
        except RecordError:
            counts["rejected"] += 1
        except Exception:  # anything else is a bug: report the input
            counts["crashed"] += 1
            print(f"input {i} crashed the reader: {data!r}", file=sys.stderr)
            traceback.print_exc()
    elapsed = time.perf_counter() - t0
    print(counts, f"{n / elapsed:.0f} inputs/s")
    write_result(
        "fuzz_sddf",
        {
            "benchmark": "SDDF reader fuzzing",
            "script": "tests.fuzz.fuzz_sddf",
            "rows": [
                {"measure": "mutated inputs (byte flips, cuts, insertions of SDDF tokens)", "value": f"{n:,}",
                 "target": ">= 100,000"},
                {"measure": "parsed without error / rejected with SddfError", "value":
                 f"{counts['parsed']:,} / {counts['rejected']:,}", "target": ""},
                {"measure": "other exceptions (crashes)", "value": str(counts["crashed"]), "target": "0"},
                {"measure": "inputs per second", "value": f"{n / elapsed:,.0f}", "target": ""},
            ],
        },
    )  # fmt: skip
    if counts["crashed"]:
        raise SystemExit(1)


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 100_000)
