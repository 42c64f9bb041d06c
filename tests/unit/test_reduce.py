"""The reduce operator: selections from projection pursuit applied to the following periods."""

from __future__ import annotations

import functools
import itertools
from collections import Counter

import numpy as np
import pytest
from perfsift.operators import Batch, SlidingMean
from perfsift.operators.reduce import Reduce
from perfsift.producers.synth import spmd
from perfsift.schemas import batch_to_samples, samples_to_batch


def smoothed(duration: int = 900, seed: int = 1) -> tuple[Batch, dict]:
    samples, truth = spmd("sweep3d", nodes=12, duration=duration, seed=seed)
    return SlidingMean(window=5).update(samples_to_batch(samples)), truth


def reduced_rows(out: dict) -> list[dict]:
    rows = []
    for b in out["reduced"]:
        for r in batch_to_samples(b):
            rows.append(r)
    return rows


def test_every_sample_comes_out_with_the_previous_periods_selection() -> None:
    batch, truth = smoothed()
    op = Reduce(pursuit={"period": 30.0, "window": 5}, full_every=5)
    outs = [op.update(batch.take(rows)) for rows in np.array_split(np.arange(len(batch)), 9)]
    rows = [r for o in outs for r in reduced_rows(o)]
    selections = [s for o in outs for s in o["selection"]]
    controls = [c for o in outs for c in o["control"]]
    assert sorted((r["node"], r["seq"]) for r in rows) == sorted(
        zip(batch.node_names(), batch.seq.tolist(), strict=True)
    )
    first_sel_end = min(s["period_end"] for s in selections if not s["skipped"])
    early = [r for r in rows if r["ts"] < first_sel_end]
    assert early and all(r["full"] and r["selection_version"] == -1 and len(r["metrics"]) == 12 for r in early)
    partial = [r for r in rows if not r["full"]]
    # the metrics that differ (0 to dims = 3 of them, #32), nothing else
    assert partial and all(len(r["metrics"]) <= 3 for r in partial)
    kept = Counter(m for r in partial for m in r["metrics"])
    # what differs across nodes: sweep3d's per-node phase of the network traffic (its bursty metrics
    # burst at one rate on every node: each node's own noise, which #32's evidence does not keep)
    differ = set(truth["interesting"]) | set(truth["phased"])
    planted = sum(kept[m] for m in differ) / sum(kept.values())
    assert planted >= 0.9, kept  # precision of what is kept (#32)
    periods = {int(r["ts"] // 30) for r in rows if r["full"] and r["selection_version"] >= 0}
    assert periods and all(p % 5 == 0 for p in periods)  # absolute period numbers: every 5th
    assert sum(r["full"] for r in rows) < 0.3 * len(rows)  # every 5th period and the first ones only
    assert [c["version"] for c in controls] == list(range(len(controls)))
    assert controls and all(c["full_every"] >= 5 and len(c["keep"]) <= 3 for c in controls)
    summary = op.summary()["sweep3d"]
    assert summary["samples"] == len(batch) and 0.2 < summary["reduction_ratio"] < 0.6


def test_union_policy_and_metrics_always_kept() -> None:
    batch, _ = smoothed(duration=300)
    op = Reduce(pursuit={"period": 30.0, "window": 5}, keep=("cpu_user",), full_every=0)
    rows = reduced_rows(op.update(batch))
    later = [r for r in rows if r["selection_version"] >= 0]
    assert later and all("cpu_user" in r["metrics"] and not r["full"] for r in later)
    assert all(1 <= len(r["metrics"]) <= 4 for r in later)  # cpu_user and 0..3 selected (#32)


def test_refuses_an_empty_configuration() -> None:
    with pytest.raises(ValueError, match="pursuit or reduction"):
        Reduce().reset()
    with pytest.raises(ValueError, match="policy"):
        Reduce(pursuit={}, policy="all").reset()


def test_a_data_reduction_selection_keeps_its_metrics_in_the_stream_and_the_control() -> None:
    """Data reduction selects ``node/metric`` features; the reduced stream and the control
    records keep metric columns, so the features' metrics must be what is kept (the feature names
    matched no column: every reduced sample came out empty and producers sent no metric at all)."""
    from perfsift.producers.synth import gridftp

    samples, _ = gridftp(seed=6, duration=900)
    op = Reduce(reduction={"perf_metric": "transfer_rate", "window": 400, "f_out": 6.63}, full_every=0)
    out = op.update(samples_to_batch(samples))
    sel = [s for s in out["selection"] if s["selected"]]
    assert sel and out["control"]
    features = set(sel[-1]["selected"])
    assert all("/" in f for f in features)  # node/metric features ...
    assert set(out["control"][-1]["keep"]) == {f.split("/", 1)[1] for f in features}  # ... kept as metrics
    kept_ever = {m for c in out["control"] for m in c["keep"]}
    later = [r for r in reduced_rows(out) if r["selection_version"] >= 0]
    assert later and all(r["metrics"] and set(r["metrics"]) <= kept_ever for r in later)


def test_a_node_that_lags_gets_the_selection_of_its_samples_period() -> None:
    """A replay: one upstream partition's nodes come whole before another's. The lagging nodes'
    samples reach reduce after their periods closed; each gets the selection in force in its own
    period (the one the on-time nodes got there), not the whole sample."""
    batch, _ = smoothed(duration=1200)
    names = batch.node_names()
    late_nodes = {"n09", "n10", "n11"} & set(names) or set(sorted(set(names))[-3:])
    late = np.array([n in late_nodes for n in names])
    op = Reduce(pursuit={"period": 30.0, "window": 5, "slack": 32}, full_every=5)
    chunks = np.array_split(np.flatnonzero(~late), 6)
    on_time = [r for rows in chunks for r in reduced_rows(op.update(batch.take(rows)))]
    lagging = reduced_rows(op.update(batch.take(np.flatnonzero(late))))
    lagging += reduced_rows(op.flush())
    by_period: dict[int, set[tuple[int, bool, tuple[str, ...]]]] = {}
    for r in on_time:
        by_period.setdefault(int(r["ts"] // 30), set()).add((r["selection_version"], r["full"], tuple(r["metrics"])))
    assert {r["node"] for r in lagging} >= late_nodes
    checked = 0
    for r in lagging:
        seen = by_period.get(int(r["ts"] // 30))
        if seen is not None and len(seen) == 1:  # a period the on-time nodes saw under one selection
            assert {(r["selection_version"], r["full"], tuple(r["metrics"]))} == seen, r
            checked += 1
    assert checked > 0.8 * len(lagging)
    assert sum(not r["full"] for r in lagging) > 0.5 * len(lagging)  # reduced, not passed whole


def test_forecasts_follow_the_kept_metrics_whatever_their_names() -> None:
    """With forecast settings, every reduced row with a selection in force gets one forecast per
    kept metric (a full period's extra metrics are not forecast; before the first selection,
    nothing), on data whose metric names are not the demo's."""
    batch, _ = smoothed()
    batch = batch.with_values(batch.values, [f"m{j}.x" for j in range(len(batch.metrics))])  # any names
    op = Reduce(pursuit={"period": 30.0, "window": 5}, full_every=5, forecast={"mode": "nws"})
    outs = [op.update(batch.take(rows)) for rows in np.array_split(np.arange(len(batch)), 7)]
    rows = [r for o in outs for r in reduced_rows(o)]
    keep = {c["version"]: set(c["keep"]) for o in outs for c in o["control"]}
    forecasts = [f for o in outs for f in o["forecast"]]
    by_row: dict[tuple[str, float], set[str]] = {}
    for f in forecasts:
        by_row.setdefault((f["node"], f["ts"]), set()).add(f["metric"])
    scored = [f for f in forecasts if f["sigma"] is not None]
    assert scored and all(f["lower"] <= f["forecast"] <= f["upper"] for f in scored)
    expected = {(r["node"], r["ts"]): keep[r["selection_version"]] for r in rows if r["selection_version"] >= 0}
    assert len(expected) > 100 and any(r["full"] and r["selection_version"] >= 0 for r in rows)
    expected = {k: v for k, v in expected.items() if v}  # a period that keeps nothing forecasts nothing
    assert by_row == expected  # exactly the kept set on every selected row (full or not), nothing else
    assert len(forecasts) == sum(map(len, expected.values()))
    # the forecast of a kept metric tracks it: mean absolute error below the metric's own spread
    vals = {(r["node"], r["ts"], m): v for r in rows for m, v in r["metrics"].items()}
    first = sorted(next(v for _, v in sorted(keep.items()) if v))[0]  # the first non-empty selection
    nxt = sorted((f for f in forecasts if f["metric"] == first), key=lambda f: (f["node"], f["ts"]))
    pairs = [(a, b) for a, b in itertools.pairwise(nxt) if a["node"] == b["node"]]
    err = [abs(a["forecast"] - vals[(b["node"], b["ts"], b["metric"])]) for a, b in pairs]
    spread = np.std([vals[(f["node"], f["ts"], f["metric"])] for f in nxt])
    assert err and float(np.mean(err)) < spread


def test_forecast_settings_take_no_metric_names() -> None:
    with pytest.raises(ValueError, match="metrics it keeps"):
        Reduce(pursuit={"period": 30.0}, forecast={"metrics": ["cpu_user"]})


def upstream_bursts(batch: Batch, seed: int, partitions: int = 4, most: int = 30) -> list[np.ndarray]:
    """The row order of an at-least-once reader of perf.smoothed.byjob: each upstream partition
    (``partitions`` of them, nodes spread over them) appends bursts of 1 to ``most - 1`` rows, in
    time order, the partitions in a random order each round -- so a partition's nodes run up to
    ~2·most/nodes-per-partition rows ahead of another's, and nodes first appear a burst apart."""
    rng = np.random.default_rng(seed)
    parts = [np.flatnonzero(batch.node_idx % partitions == p) for p in range(partitions)]
    parts = [rows[np.argsort(batch.ts[rows], kind="stable")] for rows in parts]
    pos, chunks = [0] * partitions, []
    while any(pos[p] < len(parts[p]) for p in range(partitions)):
        for p in rng.permutation(partitions).tolist():
            k = int(rng.integers(1, most))
            if pos[p] < len(parts[p]):
                chunks.append(parts[p][pos[p] : pos[p] + k])
            pos[p] += k
    return chunks


#: the default pipeline's pursuit settings
INTERLEAVE_SETTINGS = {"period": 30.0, "window": 1, "evidence_gap": 1, "restarts": 10, "slack": 32}


def reduce_in_chunks(batch: Batch, chunks: list[np.ndarray]) -> tuple[list[dict], list[dict], list[dict]]:
    """Reduce fed ``batch``'s rows in ``chunks``: reduced rows, selections and forecasts, in a
    canonical order."""
    op = Reduce(pursuit=INTERLEAVE_SETTINGS, full_every=10, forecast={"mode": "nws"})
    outs = [op.update(batch.take(rows)) for rows in chunks]
    rows = sorted((r for o in outs for r in reduced_rows(o)), key=lambda r: (r["node"], r["seq"]))
    forecasts = sorted((f for o in outs for f in o["forecast"]), key=lambda f: (f["node"], f["ts"], f["metric"]))
    return rows, [s for o in outs for s in o["selection"]], forecasts


@functools.cache  # the same trace and one-batch reference for every seed below (only compared, never changed)
def interleave_case() -> tuple[Batch, tuple[list[dict], list[dict], list[dict]]]:
    samples, _ = spmd("sweep3d", nodes=12, duration=600, seed=2)
    batch = SlidingMean(window=10, emit_every=10).update(samples_to_batch(samples))  # the node stage's output
    return batch, reduce_in_chunks(batch, [np.argsort(batch.ts, kind="stable")])


@pytest.mark.parametrize("seed", range(4))
def test_how_upstream_partitions_interleave_changes_nothing(seed: int) -> None:
    """The at-least-once run on the embedded broker: the reader sees each upstream partition's
    outputs as they are written, so one partition's nodes come bursts ahead of another's, and some
    nodes' first rows come after others reached the job's third period. The reduced stream and the
    selections are those of one batch in time order (``perfsift analyze``), row for row. (The first
    period once closed on the first partition's nodes alone, a lagging node was taken for a silent
    one after one period: versions then shifted for every later row.)"""
    batch, (reference, ref_selections, ref_forecasts) = interleave_case()
    chunks = upstream_bursts(batch, seed)
    order = np.concatenate(chunks)
    first = {n: i for i, n in reversed(list(enumerate(batch.node_idx[order].tolist())))}
    # the case that broke: some node appears only after event time is two periods past the first row
    ts = batch.ts[order]
    assert ts[: max(first.values())].max() - ts.min() > 60
    streamed, selections, forecasts = reduce_in_chunks(batch, chunks)
    assert len(reference) == len(batch) and len(ref_selections) >= 18 and len(ref_forecasts) > 100
    assert max(r["selection_version"] for r in reference) >= 1  # selections did change the kept set
    assert streamed == reference
    assert selections == ref_selections
    assert forecasts == ref_forecasts


def bursty_writers(periods: int = 12, nodes: int = 8, seed: int = 3) -> Batch:
    """Smoothed samples of ``nodes`` nodes, 1 Hz; n0 writes 20x more in periods 3-5, n5 in 8."""
    rng = np.random.default_rng(seed)
    t = np.repeat(np.arange(30.0 * periods), nodes)
    node = np.tile([f"n{p}" for p in range(nodes)], 30 * periods)
    bwrite = 1.0 + 0.1 * rng.standard_normal(len(t))
    burst = ((node == "n0") & (t >= 90) & (t < 180)) | ((node == "n5") & (t >= 240) & (t < 270))
    bwrite[burst] *= 20.0
    values = np.c_[bwrite, 2 + 0.01 * rng.standard_normal(len(t)), 5 + 0.01 * t + 0.05 * rng.standard_normal(len(t))]
    return Batch.from_columns(ts=t, nodes=node.tolist(), metrics=["bwrite", "forks", "cpu"], values=values)


def test_the_summary_counts_the_nodes_pursuit_names_per_job() -> None:
    """#32: the run's closing line names the nodes that stood apart, from reduce's summary, which
    counts each pursuit record's deviant_nodes (once per period), survives a restart, and is what
    ``perfsift run`` prints."""
    from perfsift.cli.pipeline import _selections

    batch = bursty_writers()
    op = Reduce(pursuit={"period": 30.0, "window": 1}, full_every=0)
    half = np.flatnonzero(batch.ts < 180)
    out = op.update(batch.take(half))
    restored = Reduce(pursuit={"period": 30.0, "window": 1}, full_every=0)
    restored.restore(op.snapshot())
    later = [restored.update(batch.take(np.flatnonzero(batch.ts >= 180))), restored.flush()]
    records = out["selection"] + [s for o in later for s in o["selection"]]
    expected = Counter(n for r in records if r["kind"] == "pursuit" for n in {d["node"] for d in r["deviant_nodes"]})
    apart = restored.summary()["default"]["nodes_apart"]
    assert apart == dict(expected)
    assert list(apart.items()) == sorted(expected.items(), key=lambda kv: (-kv[1], kv[0]))  # most often first
    assert next(iter(apart)) == "n0" and apart["n0"] >= 2  # the longer episode first
    assert "n5" in apart and apart["n0"] > apart["n5"]
    calm = {f"n{p}" for p in range(8)} - {"n0", "n5"}
    assert sum(c for n, c in apart.items() if n in calm) <= 1  # calm nodes named falsely: at most once
    line = _selections(restored.summary())
    assert line is not None
    shown = ", ".join(f"{n} ({c}{' periods' if i == 0 else ''})" for i, (n, c) in enumerate(apart.items()))
    assert line.startswith("default: keeps ") and line.endswith(f"nodes apart: {shown}"), line


def test_the_summary_says_when_pursuit_analysed_fewer_nodes_than_the_job_has() -> None:
    """A backlog read one upstream partition after another (a replay faster than the node stage):
    the nodes n0-n3 arrive for the whole trace before n4-n7, pursuit's periods close with 4 nodes,
    and the summary and the closing line say so (#32); in time order every period has all 8."""
    from perfsift.cli.pipeline import _selections

    batch = bursty_writers()
    first = np.isin(np.array(batch.nodes)[batch.node_idx], ["n0", "n1", "n2", "n3"])
    in_time = Reduce(pursuit={"period": 30.0, "window": 1, "slack": 8}, full_every=0)
    in_time.update(batch)
    grouped = Reduce(pursuit={"period": 30.0, "window": 1, "slack": 8}, full_every=0)
    grouped.update(batch.take(np.flatnonzero(first)))
    restored = Reduce(pursuit={"period": 30.0, "window": 1, "slack": 8}, full_every=0)
    restored.restore(grouped.snapshot())
    restored.update(batch.take(np.flatnonzero(~first)))
    ok, short = in_time.summary()["default"], restored.summary()["default"]
    assert (ok["nodes_seen"], ok["fewest_nodes"]) == (8, 8)
    assert (short["nodes_seen"], short["fewest_nodes"]) == (8, 4)
    line_ok, line_short = _selections(in_time.summary()), _selections(restored.summary())
    assert line_ok is not None and "pursuit analysed only" not in line_ok
    assert line_short is not None and "pursuit analysed only 4 of 8 nodes in some periods" in line_short
