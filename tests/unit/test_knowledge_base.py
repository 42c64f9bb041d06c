"""The knowledge base (METHODS.md §3.2) on both backends it supports: SQLite (a file) and
PostgreSQL (a real server started by the fixture, see tests/postgres.py). Every test runs on each
backend; what the cleaner reads from it must be the same."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from perfsift.operators import Batch, Clean
from perfsift.producers.synth import spmd
from perfsift.schemas import samples_to_batch
from perfsift.streams.knowledge import KnowledgeBase, clean_params

from tests import postgres

#: PostgreSQL is left out only when it can be neither found nor installed (a loud warning says so;
#: with PERFSIFT_TEST_POSTGRES=1 that is an error instead)
BACKENDS = ["sqlite", *(["postgresql"] if postgres.available() is None else [])]
OLD_RUNS = (
    "CREATE TABLE runs (run_id {key}, app TEXT NOT NULL, source TEXT, added_at REAL, "
    "start_ts REAL, end_ts REAL, samples INTEGER)"
)


@pytest.fixture(scope="module")
def pg_server() -> Iterator[str | None]:
    if "postgresql" not in BACKENDS:
        yield None
        return
    with postgres.server() as dsn:
        yield dsn


@pytest.fixture(params=BACKENDS)
def location(request: pytest.FixtureRequest, tmp_path: Path, pg_server: str | None) -> str:
    """Where a new, empty knowledge base lives: a SQLite file or a fresh PostgreSQL database."""
    if request.param == "sqlite":
        return str(tmp_path / "kb.sqlite")
    assert pg_server is not None
    return postgres.fresh_database(pg_server)


def _old_layout(location: str) -> None:
    """The layout before runs were keyed by platform, workload and interval."""
    if location.startswith("postgresql://"):
        import psycopg

        with psycopg.connect(location, autocommit=True) as conn:
            conn.execute(OLD_RUNS.format(key="SERIAL PRIMARY KEY"))
    else:
        old = sqlite3.connect(location)
        old.execute(OLD_RUNS.format(key="INTEGER PRIMARY KEY"))
        old.commit()
        old.close()


def flagged(out: Batch, rule: str) -> list[int]:
    return [i for i, f in enumerate(out.extra["flags"]) if f and any(g["rule"] == rule for g in f)]


def test_the_backends_under_test() -> None:
    """PostgreSQL is tested wherever it can be installed (here: Debian's postgresql package)."""
    if postgres.available() is None:
        assert BACKENDS == ["sqlite", "postgresql"]
    else:  # said loudly at collection; an error instead where the environment claims PostgreSQL
        assert BACKENDS == ["sqlite"] and not postgres.CLAIMED


def test_knowledge_base_thresholds_and_training_rows(location: str) -> None:
    base, _ = spmd("cactus", nodes=3, duration=200, seed=1)
    with KnowledgeBase(location) as kb:
        run = kb.add_run("cactus", base, source="base.jsonl")
        assert kb.runs()[0]["run"] == run and kb.runs()[0]["samples"] == 600
        ev = {e["event"]: e for e in kb.events(run)}
        user = [s["metrics"]["cpu_user"] for s in base]
        assert ev["cpu_user"]["max"] == max(user) and ev["cpu_user"]["mean"] == pytest.approx(np.mean(user))
        names, rows = kb.reference_rows("cactus", 50)
        assert rows.shape == (50, 12) and set(names) == set(base[0]["metrics"])
        maxima = kb.maxima("cactus")
        history = kb.history("cactus", 200)
    high = Batch.from_columns(ts=[0.0, 1.0], nodes=["n00"] * 2, metrics=["cpu_user"],
                              values=[[maxima["cpu_user"] * 0.9], [maxima["cpu_user"] * 1.5]])  # fmt: skip
    out = Clean(history=history, gamma=1.1, action="clip", impute="none").update(high)
    assert flagged(out, "kb_max") == [1] and out.values[1, 0] == pytest.approx(1.1 * maxima["cpu_user"])
    # a new node with one sample: KNN trains on the knowledge base's rows
    row = dict(base[-1]["metrics"])
    row["cpu_user"] = None
    lone = samples_to_batch([{"ts": 5.0, "node": "fresh", "metrics": row}])
    imputed = Clean(**clean_params({"kb": location, "app": "cactus"})).update(lone)
    assert imputed.extra["flags"][0][0]["rule"] == "knn_impute"
    assert imputed.values[0, imputed.metrics.index("cpu_user")] == pytest.approx(
        base[-1]["metrics"]["cpu_user"], rel=0.1
    )


def test_the_knowledge_base_is_keyed_and_reads_every_run_of_a_key(location: str) -> None:
    _old_layout(location)  # it is brought up to date when opened
    one, _ = spmd("cactus", nodes=2, duration=60, seed=1)
    two, _ = spmd("cactus", nodes=2, duration=60, seed=2, t0=1.8e9)
    other, _ = spmd("cactus", nodes=2, duration=60, seed=3, interval=5.0)
    big = [{**s, "metrics": {**s["metrics"], "cpu_user": 1e6}} for s in other]
    with KnowledgeBase(location) as kb:
        kb.add_run("cactus", one, platform="xeon", workload="small")
        kb.add_run("cactus", two, platform="xeon", workload="small")
        kb.add_run("cactus", big, platform="xeon", workload="small")  # interval 5 s: another key
        kb.add_run("cactus", big, platform="epyc", workload="small", interval=1.0)
        assert [r["interval"] for r in kb.runs()] == [1.0, 1.0, 5.0, 1.0]
        key = ("xeon", "small", 1.0)
        users = [s["metrics"]["cpu_user"] for s in one + two]
        assert kb.maxima("cactus", *key)["cpu_user"] == max(users)
        assert kb.maxima("cactus", "xeon", "small")["cpu_user"] == 1e6  # no interval given: any
        names, rows = kb.reference_rows("cactus", 1000, *key)
        assert len(rows) == len(one) + len(two)  # both runs of the key, nothing of the others
        assert set(rows[:, names.index("cpu_user")]) == set(users)
    params = clean_params({"kb": location, "app": "cactus", "platform": "xeon", "workload": "small", "interval": 1.0})
    assert params["history"].maxima["cpu_user"] == max(users)
    with pytest.raises(ValueError, match="give kb and app"):
        clean_params({"platform": "xeon"})
