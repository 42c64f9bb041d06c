"""The knowledge base (Zhu's two-tier design, METHODS.md §3.2): a primary table describing every
recorded run and event (application, event, time range, count, min, max, mean, sd) and a record
table with the data. Runs are keyed as §3.2 says: application, ``platform``, ``workload`` class
and sampling ``interval`` (seconds; inferred from the run's samples when not given), and what the
cleaner reads - maxima and reference rows - comes from every run of a key, not only the newest.
SQLite by default (a file path); PostgreSQL when given a ``postgresql://`` DSN (needs ``psycopg``:
``pip install 'perfsift[postgres]'``). A knowledge base of the older, application-only layout gains the key
columns when opened (its runs get platform and workload ``""`` and no interval).

The clean operator opens no database: it gets what it needs of a key - the historical maxima of
its events (thresholds) and recent samples of its runs, partial ones too (imputation training
data when a node has too little of its own) - as a
:class:`~perfsift.operators.clean.clean.KnowledgeHistory`, made by :meth:`KnowledgeBase.history`. A
pipeline file names the knowledge base and the key on the clean operator (``kb:``, ``app:``, and
optionally ``platform:``, ``workload:``, ``interval:``); :func:`clean_params` turns them into
that history.
"""

from __future__ import annotations

import inspect
import math
import sqlite3
import time
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np
from perfsift.operators.clean._knowledge import KnowledgeHistory

SCHEMA = (
    """CREATE TABLE IF NOT EXISTS runs (
        run_id INTEGER PRIMARY KEY, app TEXT NOT NULL, source TEXT, added_at REAL,
        start_ts REAL, end_ts REAL, samples INTEGER, platform TEXT NOT NULL DEFAULT '',
        workload TEXT NOT NULL DEFAULT '', interval_s REAL)""",
    """CREATE TABLE IF NOT EXISTS events (
        run_id INTEGER NOT NULL REFERENCES runs(run_id), event TEXT NOT NULL, n INTEGER,
        min REAL, max REAL, mean REAL, sd REAL, PRIMARY KEY (run_id, event))""",
    """CREATE TABLE IF NOT EXISTS records (
        run_id INTEGER NOT NULL REFERENCES runs(run_id), ts REAL NOT NULL, node TEXT NOT NULL,
        event TEXT NOT NULL, value REAL)""",
    "CREATE INDEX IF NOT EXISTS records_run ON records (run_id, ts)",
    "CREATE INDEX IF NOT EXISTS runs_app ON runs (app)",
)
#: columns a knowledge base made before runs were keyed by platform, workload and interval lacks
KEY_COLUMNS = (
    ("platform", "TEXT NOT NULL DEFAULT ''"),
    ("workload", "TEXT NOT NULL DEFAULT ''"),
    ("interval_s", "REAL"),
)
#: two intervals are the same key when they differ by less than this fraction
INTERVAL_TOLERANCE = 1e-3


class KnowledgeBase:
    """Open (and create) a knowledge base; use as a context manager."""

    def __init__(self, location: str) -> None:
        self.location = location
        if location.startswith(("postgresql://", "postgres://")):
            try:
                import psycopg
            except ImportError:
                raise RuntimeError(
                    "a PostgreSQL knowledge base needs psycopg: pip install 'perfsift[postgres]'"
                ) from None
            self.conn: Any = psycopg.connect(location)
            self.ph = "%s"
        else:
            self.conn = sqlite3.connect(location)
            self.ph = "?"
        cur = self.conn.cursor()
        for stmt in SCHEMA:
            cur.execute(self._ddl(stmt))
        self._add_key_columns(cur)
        self.conn.commit()

    def _add_key_columns(self, cur: Any) -> None:
        """Bring a knowledge base of the older, application-only layout to the keyed one."""
        if self.ph == "?":
            cur.execute("PRAGMA table_info(runs)")
            have = {row[1] for row in cur.fetchall()}
            for name, decl in KEY_COLUMNS:
                if name not in have:
                    cur.execute(f"ALTER TABLE runs ADD COLUMN {name} {decl}")
        else:
            for name, decl in KEY_COLUMNS:
                cur.execute(self._ddl(f"ALTER TABLE runs ADD COLUMN IF NOT EXISTS {name} {decl}"))

    def _ddl(self, stmt: str) -> str:
        """A table definition for this backend: on PostgreSQL the run id is generated (SERIAL) and
        REAL, which is 4 bytes there, is DOUBLE PRECISION (8 bytes, as SQLite's REAL)."""
        if self.ph == "?":
            return stmt
        return stmt.replace("INTEGER PRIMARY KEY", "SERIAL PRIMARY KEY").replace(" REAL", " DOUBLE PRECISION")

    def _key_filter(self, app: str, platform: str, workload: str, interval: float | None) -> tuple[str, list[Any]]:
        """SQL condition on ``runs r`` and its arguments for one key; interval None = any."""
        sql = "r.app = ? AND r.platform = ? AND r.workload = ?"
        args: list[Any] = [app, platform, workload]
        if interval is not None:
            sql += " AND ABS(r.interval_s - ?) <= ?"
            args += [float(interval), INTERVAL_TOLERANCE * float(interval)]
        return sql, args

    def _q(self, sql: str) -> str:
        return sql.replace("?", self.ph)

    def close(self) -> None:
        self.conn.close()

    def __enter__(self) -> KnowledgeBase:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- writing -------------------------------------------------------------------------------------
    def add_run(
        self,
        app: str,
        samples: Iterable[dict[str, Any]],
        source: str = "",
        platform: str = "",
        workload: str = "",
        interval: float | None = None,
    ) -> int:
        """Store a run's samples under its key; returns its run id. Events' statistics go to the
        primary table. ``interval`` None: the median spacing of each node's samples."""
        cur = self.conn.cursor()
        insert = "INSERT INTO runs (app, source, added_at) VALUES (?, ?, ?)"
        if self.ph == "?":
            cur.execute(insert, (app, source, time.time()))
            run_id = int(cur.lastrowid)
        else:  # psycopg cursors have no lastrowid
            cur.execute(self._q(insert + " RETURNING run_id"), (app, source, time.time()))
            run_id = int(cur.fetchone()[0])
        stats: dict[str, list[float]] = {}  # event -> [n, min, max, sum, sumsq-shifted...] (Welford below)
        n_samples = 0
        t_min, t_max = math.inf, -math.inf
        last_ts: dict[str, float] = {}
        spacing: list[float] = []
        batch: list[tuple[int, float, str, str, float]] = []
        for s in samples:
            n_samples += 1
            ts = float(s["ts"])
            t_min, t_max = min(t_min, ts), max(t_max, ts)
            if s["node"] in last_ts and ts > last_ts[s["node"]]:
                spacing.append(ts - last_ts[s["node"]])
            last_ts[s["node"]] = ts
            for event, v in s["metrics"].items():
                if v is None:
                    continue
                batch.append((run_id, ts, s["node"], event, float(v)))
                st = stats.setdefault(event, [0.0, math.inf, -math.inf, 0.0, 0.0])
                st[0] += 1
                st[1] = min(st[1], v)
                st[2] = max(st[2], v)
                delta = v - st[3]
                st[3] += delta / st[0]
                st[4] += delta * (v - st[3])
            if len(batch) >= 50000:
                cur.executemany(self._q("INSERT INTO records VALUES (?, ?, ?, ?, ?)"), batch)
                batch.clear()
        if batch:
            cur.executemany(self._q("INSERT INTO records VALUES (?, ?, ?, ?, ?)"), batch)
        cur.executemany(
            self._q("INSERT INTO events VALUES (?, ?, ?, ?, ?, ?, ?)"),
            [(run_id, e, int(st[0]), st[1], st[2], st[3], math.sqrt(st[4] / st[0])) for e, st in stats.items()],
        )
        if interval is None and spacing:
            interval = float(np.median(spacing))
        cur.execute(
            self._q(
                "UPDATE runs SET start_ts = ?, end_ts = ?, samples = ?, platform = ?, workload = ?, interval_s = ? "
                "WHERE run_id = ?"
            ),
            (
                t_min if n_samples else None,
                t_max if n_samples else None,
                n_samples,
                platform,
                workload,
                interval,
                run_id,
            ),
        )
        self.conn.commit()
        return run_id

    # -- reading -------------------------------------------------------------------------------------
    def runs(self) -> list[dict[str, Any]]:
        cur = self.conn.cursor()
        cur.execute(
            "SELECT r.run_id, r.app, r.platform, r.workload, r.interval_s, r.source, r.start_ts, r.end_ts, r.samples, "
            "COUNT(e.event) FROM runs r LEFT JOIN events e ON e.run_id = r.run_id "
            "GROUP BY r.run_id, r.app, r.platform, r.workload, r.interval_s, r.source, r.start_ts, r.end_ts, r.samples "
            "ORDER BY r.run_id"
        )
        keys = ("run", "app", "platform", "workload", "interval", "source", "start", "end", "samples", "events")
        return [dict(zip(keys, row, strict=True)) for row in cur.fetchall()]

    def events(self, run_id: int) -> list[dict[str, Any]]:
        cur = self.conn.cursor()
        cur.execute(
            self._q("SELECT event, n, min, max, mean, sd FROM events WHERE run_id = ? ORDER BY event"), (run_id,)
        )
        keys = ("event", "n", "min", "max", "mean", "sd")
        return [dict(zip(keys, row, strict=True)) for row in cur.fetchall()]

    def maxima(
        self, app: str, platform: str = "", workload: str = "", interval: float | None = None
    ) -> dict[str, float]:
        """Historical maximum of every event of a key (over all its runs)."""
        where, args = self._key_filter(app, platform, workload, interval)
        cur = self.conn.cursor()
        sql = (
            f"SELECT e.event, MAX(e.max) FROM events e JOIN runs r ON r.run_id = e.run_id WHERE {where} "
            "GROUP BY e.event"
        )
        cur.execute(self._q(sql), args)
        return {event: float(mx) for event, mx in cur.fetchall()}

    def reference_rows(
        self, app: str, limit: int, platform: str = "", workload: str = "", interval: float | None = None
    ) -> tuple[list[str], np.ndarray]:
        """Up to ``limit`` (run, ts, node) samples with at least two values, newest run and time
        first, from every run of the key, as (event names, rows × events, NaN where a sample lacks
        an event) — imputation training data (KNN takes partial rows, METHODS.md §3.4)."""
        where, args = self._key_filter(app, platform, workload, interval)
        cur = self.conn.cursor()
        cur.execute(self._q(f"SELECT r.run_id FROM runs r WHERE {where} ORDER BY r.run_id DESC"), args)
        run_ids = [int(r[0]) for r in cur.fetchall()]
        if not run_ids:
            return [], np.zeros((0, 0))
        marks = ", ".join("?" * len(run_ids))
        cur.execute(self._q(f"SELECT DISTINCT event FROM events WHERE run_id IN ({marks}) ORDER BY event"), run_ids)
        names = [r[0] for r in cur.fetchall()]
        pos = {n: i for i, n in enumerate(names)}
        table: dict[tuple[int, float, str], np.ndarray] = {}
        for run_id in run_ids:  # newest run first, until enough rows
            cur.execute(
                self._q("SELECT ts, node, event, value FROM records WHERE run_id = ? ORDER BY ts DESC LIMIT ?"),
                (run_id, limit * max(len(names), 1)),
            )
            for ts, node, event, value in cur.fetchall():
                table.setdefault((run_id, ts, node), np.full(len(names), np.nan))[pos[event]] = value
            if sum((~np.isnan(r)).sum() >= 2 for r in table.values()) >= limit:
                break
        rows = [r for r in table.values() if (~np.isnan(r)).sum() >= 2][:limit]
        return names, np.array(rows) if rows else np.zeros((0, len(names)))

    def history(
        self, app: str, rows: int, platform: str = "", workload: str = "", interval: float | None = None
    ) -> KnowledgeHistory:
        """What :class:`~perfsift.operators.clean.clean.Clean` uses of a key: its events' historical
        maxima and up to ``rows`` recent samples of its runs."""
        names, reference = self.reference_rows(app, rows, platform, workload, interval)
        return KnowledgeHistory(self.maxima(app, platform, workload, interval), tuple(names), reference)


def clean_params(params: Mapping[str, Any]) -> dict[str, Any]:
    """A clean operator's constructor parameters from its pipeline-file (or command-line)
    parameters: ``kb`` (SQLite path or PostgreSQL DSN), ``app`` and optionally ``platform``,
    ``workload`` and ``interval`` (the key, METHODS.md §3.2) become the key's ``history``, read
    now, with as many reference rows as the operator's ``knn_window``."""
    keyed = ("kb", "app", "platform", "workload", "interval")
    out = {k: v for k, v in params.items() if k not in keyed}
    kb, app = params.get("kb"), params.get("app")
    if (kb is None) != (app is None):
        raise ValueError("kb and app go together: the knowledge base is looked up by application")
    if kb is None and any(params.get(k) is not None for k in keyed[2:]):
        raise ValueError("platform, workload and interval select runs of a knowledge base: give kb and app too")
    if kb is not None:
        from perfsift.operators.clean.clean import Clean  # here: it loads numba, which parsing a pipeline does not need

        rows = int(out.get("knn_window", inspect.signature(Clean.__init__).parameters["knn_window"].default))
        interval = params.get("interval")
        key = (
            str(params.get("platform") or ""),
            str(params.get("workload") or ""),
            None if interval is None else float(interval),
        )
        with KnowledgeBase(str(kb)) as base:
            out["history"] = base.history(str(app), rows, *key)
    return out
