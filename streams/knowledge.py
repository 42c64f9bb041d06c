"""The knowledge base (Zhu's two-tier design, METHODS.md §3.2): a primary table describing every
recorded run and event (application, event, time range, count, min, max, mean, sd) and a record
table with the data. SQLite by default (a file path); PostgreSQL when given a ``postgresql://``
DSN (needs ``psycopg``: ``pip install 'perfsift[postgres]'``).

The clean operator opens no database: it gets what it needs of an application - the historical
maxima of its events (thresholds) and recent complete samples (imputation training data when a
run has too little of its own) - as a :class:`~perfsift.operators.clean.KnowledgeHistory`, made by
:meth:`KnowledgeBase.history`. A pipeline file names the knowledge base and the application on the
clean operator (``kb:``, ``app:``); :func:`clean_params` turns them into that history.
"""

from __future__ import annotations

import inspect
import math
import sqlite3
import time
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np
from perfsift.operators.clean import Clean, KnowledgeHistory

SCHEMA = (
    """CREATE TABLE IF NOT EXISTS runs (
        run_id INTEGER PRIMARY KEY, app TEXT NOT NULL, source TEXT, added_at REAL,
        start_ts REAL, end_ts REAL, samples INTEGER)""",
    """CREATE TABLE IF NOT EXISTS events (
        run_id INTEGER NOT NULL REFERENCES runs(run_id), event TEXT NOT NULL, n INTEGER,
        min REAL, max REAL, mean REAL, sd REAL, PRIMARY KEY (run_id, event))""",
    """CREATE TABLE IF NOT EXISTS records (
        run_id INTEGER NOT NULL REFERENCES runs(run_id), ts REAL NOT NULL, node TEXT NOT NULL,
        event TEXT NOT NULL, value REAL)""",
    "CREATE INDEX IF NOT EXISTS records_run ON records (run_id, ts)",
    "CREATE INDEX IF NOT EXISTS runs_app ON runs (app)",
)


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
            cur.execute(stmt)
        self.conn.commit()

    def _q(self, sql: str) -> str:
        return sql.replace("?", self.ph)

    def close(self) -> None:
        self.conn.close()

    def __enter__(self) -> KnowledgeBase:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- writing -------------------------------------------------------------------------------------
    def add_run(self, app: str, samples: Iterable[dict[str, Any]], source: str = "") -> int:
        """Store a run's samples; returns its run id. Events' statistics go to the primary table."""
        cur = self.conn.cursor()
        cur.execute(self._q("INSERT INTO runs (app, source, added_at) VALUES (?, ?, ?)"), (app, source, time.time()))
        run_id = int(cur.lastrowid) if cur.lastrowid is not None else self._last_id(cur)
        stats: dict[str, list[float]] = {}  # event -> [n, min, max, sum, sumsq-shifted...] (Welford below)
        n_samples = 0
        t_min, t_max = math.inf, -math.inf
        batch: list[tuple[int, float, str, str, float]] = []
        for s in samples:
            n_samples += 1
            ts = float(s["ts"])
            t_min, t_max = min(t_min, ts), max(t_max, ts)
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
        cur.execute(
            self._q("UPDATE runs SET start_ts = ?, end_ts = ?, samples = ? WHERE run_id = ?"),
            (t_min if n_samples else None, t_max if n_samples else None, n_samples, run_id),
        )
        self.conn.commit()
        return run_id

    def _last_id(self, cur: Any) -> int:
        cur.execute("SELECT MAX(run_id) FROM runs")
        return int(cur.fetchone()[0])

    # -- reading -------------------------------------------------------------------------------------
    def runs(self) -> list[dict[str, Any]]:
        cur = self.conn.cursor()
        cur.execute(
            "SELECT r.run_id, r.app, r.source, r.start_ts, r.end_ts, r.samples, COUNT(e.event) "
            "FROM runs r LEFT JOIN events e ON e.run_id = r.run_id GROUP BY r.run_id ORDER BY r.run_id"
        )
        keys = ("run", "app", "source", "start", "end", "samples", "events")
        return [dict(zip(keys, row, strict=True)) for row in cur.fetchall()]

    def events(self, run_id: int) -> list[dict[str, Any]]:
        cur = self.conn.cursor()
        cur.execute(
            self._q("SELECT event, n, min, max, mean, sd FROM events WHERE run_id = ? ORDER BY event"), (run_id,)
        )
        keys = ("event", "n", "min", "max", "mean", "sd")
        return [dict(zip(keys, row, strict=True)) for row in cur.fetchall()]

    def maxima(self, app: str) -> dict[str, float]:
        """Historical maximum of every event of an application (over all its runs)."""
        cur = self.conn.cursor()
        sql = (
            "SELECT e.event, MAX(e.max) FROM events e JOIN runs r ON r.run_id = e.run_id "
            "WHERE r.app = ? GROUP BY e.event"
        )
        cur.execute(self._q(sql), (app,))
        return {event: float(mx) for event, mx in cur.fetchall()}

    def reference_rows(self, app: str, limit: int) -> tuple[list[str], np.ndarray]:
        """Up to ``limit`` recent complete (ts, node) samples of the application's newest run, as
        (event names, rows × events) — imputation training data."""
        cur = self.conn.cursor()
        cur.execute(self._q("SELECT MAX(run_id) FROM runs WHERE app = ?"), (app,))
        row = cur.fetchone()
        if row is None or row[0] is None:
            return [], np.zeros((0, 0))
        run_id = int(row[0])
        cur.execute(self._q("SELECT event FROM events WHERE run_id = ? ORDER BY event"), (run_id,))
        names = [r[0] for r in cur.fetchall()]
        cur.execute(
            self._q("SELECT ts, node, event, value FROM records WHERE run_id = ? ORDER BY ts DESC LIMIT ?"),
            (run_id, limit * max(len(names), 1)),
        )
        pos = {n: i for i, n in enumerate(names)}
        table: dict[tuple[float, str], np.ndarray] = {}
        for ts, node, event, value in cur.fetchall():
            table.setdefault((ts, node), np.full(len(names), np.nan))[pos[event]] = value
        rows = [r for r in table.values() if not np.isnan(r).any()][:limit]
        return names, np.array(rows) if rows else np.zeros((0, len(names)))

    def history(self, app: str, rows: int) -> KnowledgeHistory:
        """What :class:`~perfsift.operators.clean.Clean` uses of an application: its events'
        historical maxima and up to ``rows`` recent complete samples."""
        names, reference = self.reference_rows(app, rows)
        return KnowledgeHistory(self.maxima(app), tuple(names), reference)


def clean_params(params: Mapping[str, Any]) -> dict[str, Any]:
    """A clean operator's constructor parameters from its pipeline-file (or command-line)
    parameters: ``kb`` (SQLite path or PostgreSQL DSN) and ``app`` become the application's
    ``history``, read now, with as many reference rows as the operator's ``knn_window``."""
    out = {k: v for k, v in params.items() if k not in ("kb", "app")}
    kb, app = params.get("kb"), params.get("app")
    if (kb is None) != (app is None):
        raise ValueError("kb and app go together: the knowledge base is looked up by application")
    if kb is not None:
        rows = int(out.get("knn_window", inspect.signature(Clean.__init__).parameters["knn_window"].default))
        with KnowledgeBase(str(kb)) as base:
            out["history"] = base.history(str(app), rows)
    return out
