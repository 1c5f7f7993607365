"""The run store: one SQLite file (WAL) that every process, widget and tool reads and writes.

Tables: ``runs`` (status, times, heartbeat, host, pid, source, config, lineage), ``metrics``
(run, step, epoch, key, value, time), ``checkpoints`` (run, step, path, size, metrics, valid).
Writes use ``BEGIN IMMEDIATE`` (a deferred transaction that reads and then writes can fail with
"database is locked" whatever the timeout), a busy timeout, and batches of metric rows.
"""

from __future__ import annotations

import json
import os
import secrets
import socket
import sqlite3
import threading
import time
from contextlib import contextmanager
from pathlib import Path

from ..config import home
from ..errors import RunStoreError

STATUSES = ("created", "running", "paused", "finished", "failed", "interrupted")
#: a running run whose heartbeat is older than this many seconds is shown as dead
DEAD_AFTER = 60.0

_SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
    id TEXT PRIMARY KEY, name TEXT, status TEXT NOT NULL, created REAL, started REAL,
    ended REAL, heartbeat REAL, host TEXT, pid INTEGER, source TEXT, factory TEXT,
    config TEXT, parent_run TEXT, parent_checkpoint TEXT, progress TEXT, error TEXT,
    directory TEXT
);
CREATE TABLE IF NOT EXISTS metrics (
    run_id TEXT NOT NULL, step INTEGER NOT NULL, epoch INTEGER, key TEXT NOT NULL,
    value REAL, time REAL
);
CREATE INDEX IF NOT EXISTS metrics_run_key_step ON metrics (run_id, key, step);
CREATE TABLE IF NOT EXISTS checkpoints (
    id INTEGER PRIMARY KEY AUTOINCREMENT, run_id TEXT NOT NULL, step INTEGER, epoch INTEGER,
    path TEXT NOT NULL, size INTEGER, metrics TEXT, valid INTEGER, created REAL
);
CREATE INDEX IF NOT EXISTS checkpoints_run ON checkpoints (run_id, step);
"""


def default_path() -> Path:
    return home() / "runs.sqlite"


def new_run_id() -> str:
    """Sortable by creation time, unique across processes: ``20261203-081500-3fa9c1``."""
    return time.strftime("%Y%m%d-%H%M%S") + "-" + secrets.token_hex(3)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, IndexError):
        return True


class RunStore:
    """The store at ``path`` (default ``$LABKIT_HOME/runs.sqlite``). Thread-safe; one
    connection per thread."""

    def __init__(self, path=None):
        self.path = Path(path) if path is not None else default_path()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._local = threading.local()
        self._conn().executescript(_SCHEMA)

    def _conn(self) -> sqlite3.Connection:
        c = getattr(self._local, "conn", None)
        if c is None or getattr(self._local, "pid", None) != os.getpid():
            try:
                c = sqlite3.connect(self.path, timeout=30.0, isolation_level=None,
                                    check_same_thread=False)
                c.execute("PRAGMA journal_mode=WAL")
                c.execute("PRAGMA synchronous=NORMAL")
                c.execute("PRAGMA busy_timeout=30000")
            except sqlite3.DatabaseError as e:
                raise RunStoreError(f"{self.path}: cannot open the run store ({e}); move the file "
                                    "away to start a new one") from None
            c.row_factory = sqlite3.Row
            self._local.conn, self._local.pid = c, os.getpid()
        return c

    @contextmanager
    def _write(self):
        c = self._conn()
        c.execute("BEGIN IMMEDIATE")
        try:
            yield c
        except BaseException:
            c.execute("ROLLBACK")
            raise
        else:
            c.execute("COMMIT")

    def close(self) -> None:
        c = getattr(self._local, "conn", None)
        if c is not None:
            c.close()
            self._local.conn = None

    # ---- runs ---------------------------------------------------------------------------
    def create_run(self, name=None, config=None, source=None, factory=None, parent_run=None,
                   parent_checkpoint=None, directory=None, status="created") -> str:
        rid = new_run_id()
        now = time.time()
        with self._write() as c:
            c.execute("INSERT INTO runs (id, name, status, created, host, pid, source, factory, "
                      "config, parent_run, parent_checkpoint, directory, heartbeat) VALUES "
                      "(?,?,?,?,?,?,?,?,?,?,?,?,?)",
                      (rid, name, status, now, socket.gethostname(), os.getpid(), source,
                       factory, json.dumps(config or {}), parent_run, parent_checkpoint,
                       str(directory) if directory else None, now))
        return rid

    def update_run(self, run_id: str, **fields) -> None:
        allowed = {"name", "status", "started", "ended", "heartbeat", "pid", "host", "progress",
                   "error", "config", "directory", "factory", "source"}
        bad = set(fields) - allowed
        if bad:
            raise ValueError(f"update_run: unknown fields {sorted(bad)}")
        if "status" in fields and fields["status"] not in STATUSES:
            raise ValueError(f"update_run: status must be one of {STATUSES}, got "
                             f"{fields['status']!r}")
        for k in ("progress", "config"):
            if k in fields and not isinstance(fields[k], str):
                fields[k] = json.dumps(fields[k])
        cols = ", ".join(f"{k} = ?" for k in fields)
        with self._write() as c:
            n = c.execute(f"UPDATE runs SET {cols} WHERE id = ?",  # noqa: S608 - names checked
                          (*fields.values(), run_id)).rowcount
        if not n:
            raise RunStoreError(f"no run {run_id!r} in {self.path}")

    def get(self, run_id: str) -> dict:
        row = self._conn().execute("SELECT * FROM runs WHERE id = ?", (run_id,)).fetchone()
        if row is None:
            raise RunStoreError(f"no run {run_id!r} in {self.path} (`labkit runs ls` lists them)")
        return self._run_dict(row)

    def list(self, status: str | None = None, name: str | None = None) -> list[dict]:
        """Runs, newest first; ``status`` may also be ``"dead"`` (running, heartbeat stopped)."""
        q, args = "SELECT * FROM runs", []
        if name:
            q += " WHERE name LIKE ?"
            args.append(f"%{name}%")
        rows = [self._run_dict(r) for r in
                self._conn().execute(q + " ORDER BY created DESC", args).fetchall()]
        return [r for r in rows if status is None or r["status"] == status]

    def _run_dict(self, row) -> dict:
        d = dict(row)
        d["config"] = json.loads(d["config"] or "{}")
        d["progress"] = json.loads(d["progress"]) if d.get("progress") else {}
        d["stored_status"] = d["status"]
        if d["status"] == "running":
            stale = time.time() - (d["heartbeat"] or 0) > DEAD_AFTER
            gone = d["host"] == socket.gethostname() and d["pid"] and not _pid_alive(d["pid"])
            if stale or gone:
                d["status"] = "dead"
        return d

    def delete(self, run_id: str) -> None:
        """Delete a run, its metrics and checkpoint records (and not the files: see
        ``labkit.runs.delete``)."""
        self.get(run_id)
        with self._write() as c:
            c.execute("DELETE FROM metrics WHERE run_id = ?", (run_id,))
            c.execute("DELETE FROM checkpoints WHERE run_id = ?", (run_id,))
            c.execute("DELETE FROM runs WHERE id = ?", (run_id,))

    # ---- metrics ------------------------------------------------------------------------
    def add_metrics(self, run_id: str, rows) -> None:
        """Insert ``(step, epoch, key, value, time)`` rows in one transaction."""
        rows = [(run_id, int(s), int(e) if e is not None else None, str(k), float(v), float(t))
                for s, e, k, v, t in rows]
        if rows:
            with self._write() as c:
                c.executemany("INSERT INTO metrics VALUES (?,?,?,?,?,?)", rows)

    def truncate_metrics(self, run_id: str, after_step: int) -> None:
        """Delete the metrics of ``run_id`` logged after ``after_step`` (before a resume)."""
        with self._write() as c:
            c.execute("DELETE FROM metrics WHERE run_id = ? AND step > ?", (run_id,
                                                                           int(after_step)))

    def max_step(self, run_id: str) -> int:
        row = self._conn().execute("SELECT MAX(step) FROM metrics WHERE run_id = ?",
                                   (run_id,)).fetchone()
        return -1 if row[0] is None else int(row[0])

    def metric_keys(self, run_id: str) -> list[str]:
        return [r[0] for r in self._conn().execute(
            "SELECT DISTINCT key FROM metrics WHERE run_id = ? ORDER BY key", (run_id,))]

    def metrics(self, run_id: str, keys=None, since_step: int | None = None,
                max_points: int | None = None) -> dict[str, dict[str, list]]:
        """``{key: {"step": [...], "epoch": [...], "value": [...], "time": [...]}}``, by step.

        ``max_points`` downsamples each key evenly (keeping the last point)."""
        keys = self.metric_keys(run_id) if keys is None else (
            [keys] if isinstance(keys, str) else list(keys))
        out = {}
        for k in keys:
            q = "SELECT step, epoch, value, time FROM metrics WHERE run_id = ? AND key = ?"
            args = [run_id, k]
            if since_step is not None:
                q += " AND step > ?"
                args.append(int(since_step))
            rows = self._conn().execute(q + " ORDER BY step, rowid", args).fetchall()
            if max_points and len(rows) > max_points > 1:
                n = len(rows)
                pick = sorted({round(i * (n - 1) / (max_points - 1)) for i in range(max_points)})
                rows = [rows[i] for i in pick]
            out[k] = {"step": [r[0] for r in rows], "epoch": [r[1] for r in rows],
                      "value": [r[2] for r in rows], "time": [r[3] for r in rows]}
        return out

    # ---- checkpoints --------------------------------------------------------------------
    def add_checkpoint(self, run_id, step, epoch, path, size, metrics=None, valid=True) -> int:
        with self._write() as c:
            return c.execute("INSERT INTO checkpoints (run_id, step, epoch, path, size, metrics, "
                             "valid, created) VALUES (?,?,?,?,?,?,?,?)",
                             (run_id, int(step), int(epoch), str(path), int(size),
                              json.dumps(metrics or {}), int(bool(valid)), time.time())).lastrowid

    def checkpoints(self, run_id: str) -> list[dict]:
        rows = self._conn().execute("SELECT * FROM checkpoints WHERE run_id = ? ORDER BY step, id",
                                    (run_id,)).fetchall()
        out = []
        for r in rows:
            d = dict(r)
            d["metrics"] = json.loads(d["metrics"] or "{}")
            d["valid"] = bool(d["valid"])
            out.append(d)
        return out

    def checkpoint(self, checkpoint_id: int) -> dict:
        r = self._conn().execute("SELECT * FROM checkpoints WHERE id = ?",
                                 (int(checkpoint_id),)).fetchone()
        if r is None:
            raise RunStoreError(f"no checkpoint {checkpoint_id!r} in {self.path}")
        d = dict(r)
        d["metrics"] = json.loads(d["metrics"] or "{}")
        d["valid"] = bool(d["valid"])
        return d

    def set_checkpoint(self, checkpoint_id: int, **fields) -> None:
        bad = set(fields) - {"valid", "path"}
        if bad:
            raise ValueError(f"set_checkpoint: unknown fields {sorted(bad)}")
        cols = ", ".join(f"{k} = ?" for k in fields)
        with self._write() as c:
            c.execute(f"UPDATE checkpoints SET {cols} WHERE id = ?",  # noqa: S608
                      (*fields.values(), int(checkpoint_id)))

    def remove_checkpoint(self, checkpoint_id: int) -> None:
        with self._write() as c:
            c.execute("DELETE FROM checkpoints WHERE id = ?", (int(checkpoint_id),))
