"""The perfsift command line, end to end, as a user runs it."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest

from tests.e2e.cli import perfsift, perfsift_here
from tests.e2e.conftest import DemoRun

pytestmark = pytest.mark.e2e


def test_run_on_the_embedded_default_processes_every_demo_sample(demo_run: DemoRun) -> None:
    """The session's ``perfsift run`` with no flags (tests/e2e/conftest.py; its report is
    test_report.py's)."""
    r = demo_run
    assert r.returncode == 0, r.stderr[-3000:]
    assert "every sample processed" in r.stdout
    s = r.summary
    assert s["published"] == 9600 and s["rejected_lines"] == 0
    assert s["guarantee"] == "at_least_once"  # embedded broker
    # node: clean and sliding mean in one stage; the bundled demo adds its contract, its model's
    # predictions and data reduction on its application metric iter_time (#31)
    node, select, contract, predict, reduction = s["stages"]
    assert [st["stage"] for st in s["stages"]] == ["node", "select", "contract", "predict", "reduction"]
    assert node["records_in"] == 9600 and node["dead_letters"] == 0
    # one smoothed mean per node every 10 samples (emit_every = window): 960, to perf.smoothed.byjob
    # as column frames
    assert node["records_out"] == 960
    # one reduced record per smoothed mean (the last open period is still held: a stream has no
    # end), plus about 20 selection records (600 s in 30 s periods) and their control records
    assert select["records_in"] == node["by_topic"]["perf.smoothed.byjob"] and select["dead_letters"] == 0
    assert 960 - 16 * 4 <= select["by_topic"]["perf.reduced"] <= 960
    # and a forecast per kept metric of every reduced record with a selection in force (three kept
    # metrics; none before the first selection, a few periods of 3 rows per node)
    forecasts = select["by_topic"]["perf.forecast"]
    assert 2 * (960 - 16 * 12) <= forecasts <= 4 * 960
    assert select["records_out"] <= 960 + 60 + forecasts
    # a contract record per smoothed mean; a prediction per smoothed timestamp after the first (the
    # model forecasts from what came before); data reduction reads every raw sample and writes
    # a selection record when its selection changes (a few dozen in 600 s)
    assert (
        contract["records_in"] == node["by_topic"]["perf.smoothed.byjob"]
        and contract["by_topic"]["perf.contract"] == 960
    )
    assert 50 <= predict["by_topic"]["perf.prediction"] <= 60
    assert reduction["records_in"] == 9600 and 1 <= reduction["by_topic"]["perf.selection"] <= 600
    # what perf.reduced carries, as the broker stores it, next to perf.raw; the state snapshots cost
    # at most snapshot_share (0.02) of the input after the fresh chains' headers, and everything
    # written stays under what was read (the compressed total, 0.28-0.30, is bench_bytes')
    assert s["bytes"]["topics"]["perf.reduced"]["compressed_ratio"] <= 0.2
    assert s["bytes"]["topics"]["perf.state"]["ratio"] <= 0.02 and s["bytes_written_ratio"] <= 1.0
    # the selection in force at the end, and what the reduced stream carried. At full replay speed
    # partitions interleave differently from run to run, but a node's samples that come after their
    # period closed still get that period's selection (measured 0.34-0.38 of the values; 0.57-0.82
    # when they passed whole). The last period's selection holds two or three of the planted metrics
    # (bwrite's bursts need not differ beyond noise in every 30 s period; measured both since the
    # demo carries iter_time, the same on every node, which the pursuit never keeps).
    demo = s["jobs"]["demo"]
    assert 2 <= len(demo["kept"]) <= 3 and set(demo["kept"]) <= {"bwrite", "pkts_in", "pkts_out"}
    assert 0.2 < demo["reduction_ratio"] < 0.6
    assert "demo: keeps" in r.stdout


@pytest.mark.parametrize("mode", ["--processes", "--threads"])
def test_run_replays_a_given_trace_and_counts_bad_lines(tmp_path: Path, mode: str) -> None:
    """Both ways of running the stages (a child process each, or threads of one) see every record."""
    trace = tmp_path / "t.jsonl"
    lines = [json.dumps({"ts": 1.0 + i, "node": f"n{i % 3}", "metrics": {"x": float(i)}}) for i in range(50)]
    lines.insert(10, "{broken")
    trace.write_text("\n".join(lines) + "\n")
    summary = tmp_path / "s.json"
    # the stages as processes in a run of its own; as threads, the run through main() in this process
    run = perfsift if mode == "--processes" else perfsift_here
    r = run("run", "--trace", str(trace), "--summary-json", str(summary), mode, "--no-report", cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    assert not (tmp_path / "perfsift-report").exists()  # --no-report: not even the default folder
    s = json.loads(summary.read_text())
    assert s["published"] == 50 and s["rejected_lines"] == 1
    # the node stage's output, the smoothed means, goes to the select stage as column frames, which
    # it reads all
    node, select = s["stages"]
    assert "perf.smoothed" not in node["by_topic"] and select["records_in"] == node["by_topic"]["perf.smoothed.byjob"]
    assert all(st["records_in"] > 0 for st in s["stages"]) and s["guarantee"] == "at_least_once"


def test_help_lists_the_commands() -> None:
    r = perfsift_here("--help")  # as a subprocess: test_cli_shell.py
    assert r.returncode == 0
    for cmd in ("run", "broker", "worker", "produce", "tail"):
        assert cmd in r.stdout


def test_bad_pipeline_file_is_named_in_the_error(tmp_path: Path) -> None:
    cfg = tmp_path / "p.yaml"
    cfg.write_text("stages:\n  s:\n    input: perf.raw\n    outputs: [x]\n    operators:\n      - type: nope\n")
    # through main() here: `perfsift worker` as a process is test_pipeline.py's and test_entrypoint.py's
    r = perfsift_here("worker", "s", "--config", str(cfg), "--bootstrap", "127.0.0.1:1")
    assert r.returncode == 2
    assert f"{cfg}: stages.s.operators[0]: unknown operator 'nope'" in r.stderr.replace("\n", "")


def test_validate_checks_a_pipeline_file_without_kafka(tmp_path: Path) -> None:
    r = perfsift_here("validate", "streams/pipeline.yaml", cwd=Path(__file__).resolve().parents[2])
    assert r.returncode == 0, r.stderr
    assert "ok - 2 stages (node, select)" in r.stdout
    assert "node: perf.raw -> clean -> sliding_mean -> perf.smoothed.byjob" in r.stdout
    outputs = "perf.reduced, perf.selection, perf.control, perf.forecast"
    assert f"select: perf.smoothed.byjob -> reduce -> {outputs}" in r.stdout
    cfg = tmp_path / "p.yaml"
    cfg.write_text("partitons: 3\nstages:\n  s: {input: perf.raw, outputs: [x], operators: [{type: sliding_maen}]}\n")
    r = perfsift_here("validate", str(cfg))
    assert r.returncode == 2
    errors = r.stderr.splitlines()  # one line per mistake, file:line first
    assert errors[0].startswith(f"error: {cfg}:1: partitons: ") and "(did you mean 'partitions'?)" in errors[0]
    assert errors[1].startswith(f"error: {cfg}:3: stages.s.operators[0].type: 'sliding_maen' is not one of")
    assert errors[1].endswith("(did you mean 'sliding_mean'?)") and len(errors) == 2


def test_bootstrap_help_says_which_commands_start_an_embedded_broker() -> None:
    import typer
    from perfsift.cli import app

    group = typer.main.get_command(app)
    ctx = typer.Context(group)

    def bootstrap_help(cmd: str) -> str:
        command = group.get_command(ctx, cmd)  # type: ignore[attr-defined]
        (opt,) = [p for p in command.params if p.name == "bootstrap"]
        return str(opt.help)

    for cmd in ("worker", "topics", "produce", "tail"):  # they refuse to run without it
        assert "required" in bootstrap_help(cmd) and "embedded" not in bootstrap_help(cmd), cmd
    for cmd in ("run", "replay", "sample"):  # they start the embedded broker without it
        assert "Without it, an embedded broker is started" in bootstrap_help(cmd), cmd


def test_unknown_stage_and_missing_bootstrap_are_clear() -> None:
    r = perfsift_here("worker", "nosuch", "--bootstrap", "127.0.0.1:1")
    assert r.returncode == 2 and "no stage 'nosuch'" in r.stderr
    r = perfsift_here("produce", __file__, "--topic", "perf.raw")
    assert r.returncode == 2 and "needs --bootstrap" in r.stderr


def test_worker_on_a_busy_http_port_says_so() -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        r = perfsift_here("worker", "node", "--bootstrap", "127.0.0.1:1", "--no-create-topics",
                     "--http-host", "127.0.0.1", "--http-port", str(port))  # fmt: skip
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert f"cannot serve /healthz and /metrics on 127.0.0.1:{port}" in r.stderr.replace("\n", "")


def test_no_broker_at_bootstrap_is_one_clear_line() -> None:
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    r = perfsift_here("run", "--bootstrap", f"127.0.0.1:{port}", "--no-report")  # main()'s Kafka error line
    assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr[-2000:]
    assert "error: Kafka: Failed to get metadata" in r.stderr and "check --bootstrap" in r.stderr


def test_produce_and_tail_name_a_missing_topic_at_once(kafka: dict, prefix: str, tmp_path: Path) -> None:
    trace = tmp_path / "t.jsonl"
    trace.write_text('{"ts": 1.0, "node": "n0", "metrics": {"x": 1.0}}\n')
    bs = kafka["bootstrap.servers"]
    for args in (["produce", str(trace), "--topic", f"{prefix}nosuch"], ["tail", f"{prefix}nosuch", "--max", "1"]):
        r = perfsift_here(*args, "-b", bs)
        assert r.returncode == 2 and f"no topic '{prefix}nosuch' on {bs}" in r.stderr.replace("\n", ""), r.stderr


def test_run_with_a_contract_shows_the_violated_nodes(tmp_path: Path) -> None:
    """A contract derived from a baseline, then a run where nodes 6-11 do fewer floating-point
    operations: the live view and the summary name exactly those nodes as violated."""
    from perfsift.producers.synth import master_worker
    from perfsift.producers.traces import write_samples

    base, run = tmp_path / "base.jsonl", tmp_path / "run.jsonl"
    write_samples(master_worker(seed=1)[0], base)
    write_samples(master_worker(seed=2, fewer_flops=range(6, 12))[0], run)
    contract = tmp_path / "c.json"
    r = perfsift_here("contract", "derive", str(base), "--space", "intrinsic=instructions_per_s / flops_per_s",
                      "-o", str(contract))  # fmt: skip
    assert r.returncode == 0, r.stderr
    summary = tmp_path / "s.json"
    # the run through main() in this process, its stages as threads (the run as a process of its
    # own, and its stages in processes of theirs: the demo run and the trace replays above); what
    # is checked is the contract stage's verdicts
    r = perfsift_here("run", "--trace", str(run), "--contract", str(contract), "--summary-json", str(summary),
                      "--no-report", "--threads")  # fmt: skip
    assert r.returncode == 0, r.stderr[-3000:]
    assert "contract violated on 6 of 12 nodes" in r.stdout
    s = json.loads(summary.read_text())
    (job,) = s["jobs"].values()
    violated = {n for n, state in job["contract_nodes"].items() if state == "violated"}
    assert violated == {f"n{p:02d}" for p in range(6, 12)}
    # one smoothed mean per node every 10 samples: 30 of each node's 300
    assert [st["stage"] for st in s["stages"]][-1] == "contract" and s["stages"][-1]["records_out"] == 12 * 30


def test_run_follow_keeps_processing_live_input_until_sigterm(tmp_path: Path) -> None:
    import re
    import signal
    import subprocess
    import sys

    from perfsift.schemas.detect import decode_any

    from tests.conftest import read_topic

    summary = tmp_path / "s.json"
    proc = subprocess.Popen(
        [sys.executable, "-m", "perfsift", "run", "--follow", "--summary-json", str(summary), "--no-report"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        assert proc.stdout is not None
        seen = ""
        while "Ctrl-C stops" not in seen.replace("\n", " "):
            line = proc.stdout.readline()
            assert line, seen
            seen += line
        port = re.search(r"127\.0\.0\.1:(\d+)", seen)
        assert port is not None, seen
        trace = tmp_path / "live.jsonl"
        trace.write_text(
            "".join(
                json.dumps({"ts": 1.0 + i, "node": f"n{i % 4}", "metrics": {"x": float(i)}}) + "\n" for i in range(400)
            )
        )
        bootstrap = f"127.0.0.1:{port.group(1)}"
        r = perfsift("produce", str(trace), "-b", bootstrap)
        assert r.returncode == 0, r.stderr

        # the stages read it and the run goes on
        # one smoothed mean per node every 10 samples, in column frames on perf.smoothed.byjob
        def means(ms: list) -> int:
            return sum(len(decode_any(m.value()).record) for m in ms)

        frames = read_topic({"bootstrap.servers": bootstrap}, "perf.smoothed.byjob", lambda ms: means(ms) >= 40,
                            timeout=60, decode=False)  # fmt: skip
        assert means(frames) == 40 and proc.poll() is None
    finally:
        proc.send_signal(signal.SIGTERM)
        rest, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0, rest[-3000:]
    assert "followed for" in rest and "400 samples read from perf.raw" in rest
    s = json.loads(summary.read_text())
    assert s["published"] == 0 and s["stages"][0]["records_in"] == 400
