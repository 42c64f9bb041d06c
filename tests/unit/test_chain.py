"""A stage's operator chain: one stage that cleans and smooths publishes exactly what two stages
with perf.clean between them publish, and a ``publish`` tap carries the cleaner's output."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest
from perfsift.operators import Batch
from perfsift.producers.synth import spmd
from perfsift.schemas import decode_samples, encode_batch
from perfsift.streams.config import ConfigError, load_pipeline
from perfsift.streams.stage import Chain


def config(tmp_path: Path, ops: str) -> Path:
    p = tmp_path / "p.yaml"
    p.write_text(f"stages:\n  s:\n    input: perf.raw\n    outputs: [perf.smoothed, perf.smoothed.byjob]\n"
                 f"    operators:\n{ops}")  # fmt: skip
    return p


MERGED = """      - {type: clean, mode: window, k: 2.0, action: replace, publish: [perf.clean]}
      - {type: sliding_mean, window: 5}
"""


def test_one_stage_equals_two_stages_with_a_topic_between(tmp_path: Path) -> None:
    samples, _ = spmd("cactus", nodes=6, duration=120, seed=4, outliers=0.03, missing=0.02)
    raw = [orjson.dumps(s) for s in samples]
    merged = load_pipeline(config(tmp_path, MERGED)).stage("s")
    two = load_pipeline(config(tmp_path, MERGED.replace(", publish: [perf.clean]", ""))).stage("s")
    chain_m, chain_c, chain_s = Chain(merged, "json"), two.build_chain()[:1], two.build_chain()[1:]
    out_m, out_c, out_2 = [], [], []
    for i in range(0, len(raw), 97):  # uneven batches
        batch = decode_samples(raw[i : i + 97])[0]
        emitted = chain_m.process(batch).topics
        out_m += emitted["perf.smoothed"][0]
        out_c += emitted["perf.clean"][0]
        # the two-stage way: clean, encode to perf.clean, decode, smooth
        cleaned = chain_c[0].update(batch)
        assert isinstance(cleaned, Batch)
        wire = encode_batch(cleaned)
        smoothed = chain_s[0].update(decode_samples(wire)[0])
        assert isinstance(smoothed, Batch)
        out_2 += encode_batch(smoothed)
        assert emitted["perf.clean"][0] == wire
    assert out_m == out_2 and len(out_m) == len(samples)
    assert sum(b'"flags":[' in r for r in out_c) > 0  # the planted faults were flagged ...
    assert not any(b'"flags"' in r for r in out_m)  # ... on perf.clean only


def test_tap_keys_follow_the_topic(tmp_path: Path) -> None:
    stage = load_pipeline(config(tmp_path, MERGED.replace("[perf.clean]", "[perf.clean, perf.smoothed.byjob]"))).stage(
        "s"
    )
    samples, _ = spmd("cactus", nodes=3, duration=5, seed=1)
    batch = decode_samples([orjson.dumps(s) for s in samples])[0]
    tapped = Chain(stage, "json").process(batch).topics
    assert set(tapped) == {"perf.clean", "perf.smoothed", "perf.smoothed.byjob"}
    assert {k.decode() for k in tapped["perf.clean"][1]} == {s["node"] for s in samples}
    assert {k.decode() for k in tapped["perf.smoothed.byjob"][1]} == {s["job"] for s in samples}
    assert len(tapped["perf.smoothed.byjob"][0]) == 2 * len(samples)  # the tap and the output


@pytest.mark.parametrize(
    ("ops", "msg"),
    [
        ("      - {type: clean, publish: perf.clean}\n      - {type: sliding_mean}\n", "publish: must be a list"),
        ("      - {type: sliding_mean, publish: [perf.clean]}\n", "the last operator's output goes to the stage's"),
    ],
)
def test_bad_publish_is_refused(tmp_path: Path, ops: str, msg: str) -> None:
    with pytest.raises(ConfigError, match=msg):
        load_pipeline(config(tmp_path, ops))


def test_a_decider_ends_the_chain(tmp_path: Path) -> None:
    """Records cannot go on to another operator, nor be tapped: the pipeline file is refused."""
    ops = "      - {type: pursuit, publish: [perf.clean]}\n      - {type: sliding_mean}\n"
    with pytest.raises(ConfigError, match="pursuit emits records, so it must be the last operator"):
        load_pipeline(config(tmp_path, ops))


def test_a_forecast_of_metrics_the_input_never_carries_says_so_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The demo's forecast metrics on other data: after MISSING_AFTER_ROWS rows the stage logs the
    missing names once and counts them; a metric that is there is not named."""
    from perfsift.operators.forecast.forecast import MISSING_AFTER_ROWS
    from perfsift.streams.stage import StageStats, note_missing

    p = tmp_path / "f.yaml"
    p.write_text("stages:\n  s: {input: perf.smoothed, operators: [{type: forecast, metrics: [cpu_user, x.1, m0]}]}\n")
    chain = Chain(load_pipeline(p).stage("s"), "json")
    stats = StageStats("s")
    rows = 0
    batch = Batch.from_columns(ts=range(40), nodes=["a", "b"] * 20, metrics=["m0", "m1"], values=[[1.0, 2.0]] * 40)
    with caplog.at_level("WARNING", logger="perfsift.stage"):
        while rows < 3 * MISSING_AFTER_ROWS:
            chain.process(batch)
            note_missing(chain, stats)
            rows += len(batch)
            if rows < MISSING_AFTER_ROWS:
                assert stats.missing_metrics == set()  # not said before enough rows came
    said = [r for r in caplog.records if "never carried" in r.getMessage()]
    assert len(said) == 1 and "cpu_user, x.1" in said[0].getMessage()
    assert stats.missing_metrics == {"cpu_user", "x.1"} and stats.as_dict()["missing_metrics"] == ["cpu_user", "x.1"]
