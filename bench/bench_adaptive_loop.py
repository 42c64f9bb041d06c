"""The closed adaptive loop: ``perfsift run --adaptive`` on the bundled demo (16 nodes x 12
metrics, 600 s) on the embedded broker, replayed at 40 trace seconds per second; the replay
follows the select stage's own perf.control records. Reads perf.raw and perf.control back and
writes the bytes per 30-s period (stored on perf.raw, full, predicted by the selection) to
``bench/results/adaptive_loop.json`` and the figure ``docs/figures/adaptive_loop.png``.

    python -m bench.bench_adaptive_loop
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

import orjson
from perfsift.producers import demo_trace_path
from perfsift.producers.adaptive import loop_bytes, plot_loop
from perfsift.streams.broker import EmbeddedBroker
from perfsift.streams.clients import read_topic_to_end

from bench.common import ROOT, write_result

FIGURE = ROOT.parent / "docs" / "figures" / "adaptive_loop.png"
SPEED, PERIOD = 40, 30.0


def main() -> None:
    with EmbeddedBroker() as b, tempfile.TemporaryDirectory() as tmp:
        summary = Path(tmp) / "s.json"
        cmd = [sys.executable, "-m", "perfsift", "run", "-b", b.bootstrap, "--adaptive", "--speed", str(SPEED)]
        r = subprocess.run([*cmd, "--threads", "--no-report", "--summary-json", str(summary)], capture_output=True)
        if r.returncode:
            raise SystemExit(r.stderr.decode()[-3000:])
        s = json.loads(summary.read_text())
        props = {"bootstrap.servers": b.bootstrap}
        raw = read_topic_to_end(props, "perf.raw")
        controls = [orjson.loads(v) for v in read_topic_to_end(props, "perf.control")]
    rows = loop_bytes(demo_trace_path(), raw, controls, PERIOD)
    plot_loop(rows, FIGURE, f"perf.raw per {PERIOD:.0f}-s period, perfsift run --adaptive (demo, {SPEED}x)")
    first = min(c["ts"] for c in controls)
    late = [r for r in rows if r["start"] >= first + 150.0]
    share = sum(r["stored"] for r in late) / sum(r["full"] for r in late)
    predicted = sum(r["predicted"] for r in late) / sum(r["full"] for r in late)
    total = s["adaptive"]["bytes_sent"] / s["adaptive"]["bytes_full"]
    engaged = next(r["start"] - rows[0]["start"] for r in rows if r["stored_share"] < 0.6)
    print(f"after the first periods: stored {share:.3f} of full, predicted {predicted:.3f}; whole run {total:.3f}")
    path = write_result(
        "adaptive_loop",
        {
            "benchmark": "closed adaptive loop: perfsift run --adaptive on the demo (perf.raw bytes per period)",
            "script": "bench_adaptive_loop",
            "speed": SPEED,
            "controls": len(controls),
            "periods": rows,
            "rows": [
                {
                    "measure": "perf.raw bytes / full bytes, periods from 150 s after the first control record",
                    "value": f"{share:.3f} (predicted {predicted:.3f})",
                    "target": "= predicted ± 0.03",
                },
                {"measure": "perf.raw bytes / full bytes, whole 600-s run", "value": f"{total:.3f}", "target": ""},
                {
                    "measure": "event time until perf.raw falls below 60 % (loop latency at 40x)",
                    "value": f"{engaged:.0f} s",
                    "target": "reported",
                },
            ],
            "notes": "Figure: docs/figures/adaptive_loop.png (docs/reduction.md).",
        },
    )
    print(f"wrote {path} and {FIGURE}")


if __name__ == "__main__":
    main()
