"""The run store's tables, their version (``PRAGMA user_version``) and the migrations.

=======  ======================================================================================
version  what changed
=======  ======================================================================================
0        the first store (no version set): the step counter is ``step``; metric rows may repeat
2        ``step`` is ``iteration`` in ``metrics`` and ``checkpoints`` (one name for the counter,
         as in the loop and its log); one metric row per (run, key, iteration), written as an
         upsert; ``runs.parent_checkpoint_id`` (the checkpoint a fork started from, by id)
3        ``commands``: pause, resume, stop and checkpoint requests for a training run, from
         any process (a notebook button, the REST API, the CLI), acknowledged by the loop;
         ``metric_blocks``: each series summarised per 256 iterations (``blocks.py``), so a
         long series is downsampled without reading its rows
4        ``runs.tags`` (a JSON list of short labels), ``runs.note`` (free text) and
         ``runs.traceback`` (the tail of a failed run's traceback)
5        sweeps (``sweeps.py``): ``sweeps`` (a hyperparameter sweep: its space, settings,
         status, driver heartbeat and stop request), ``trials`` (each trial's parameters,
         status, rung results and attempts) and ``runs.sweep_id`` (a trial's run, grouped)
=======  ======================================================================================

An old store is migrated when a newer labkit first opens it, in one transaction: all of it or
none of it. A store written by a newer labkit is refused, not guessed at.
"""

from __future__ import annotations

import sqlite3

from . import blocks, sweeps
from ._db import transaction
from .checks import refuse

VERSION = 5

_TABLES = [
    """CREATE TABLE IF NOT EXISTS runs (
        id TEXT PRIMARY KEY, name TEXT, status TEXT NOT NULL, created REAL, started REAL,
        ended REAL, heartbeat REAL, host TEXT, pid INTEGER, source TEXT, factory TEXT,
        config TEXT, parent_run TEXT, parent_checkpoint TEXT, progress TEXT, error TEXT,
        directory TEXT, parent_checkpoint_id INTEGER, tags TEXT, note TEXT, traceback TEXT,
        sweep_id TEXT)""",
    """CREATE TABLE IF NOT EXISTS metrics (
        run_id TEXT NOT NULL, iteration INTEGER NOT NULL, epoch INTEGER, key TEXT NOT NULL,
        value REAL, time REAL)""",
    """CREATE TABLE IF NOT EXISTS checkpoints (
        id INTEGER PRIMARY KEY AUTOINCREMENT, run_id TEXT NOT NULL, iteration INTEGER,
        epoch INTEGER, path TEXT NOT NULL, size INTEGER, metrics TEXT, valid INTEGER,
        created REAL)""",
    """CREATE TABLE IF NOT EXISTS commands (
        id INTEGER PRIMARY KEY AUTOINCREMENT, run_id TEXT NOT NULL, command TEXT NOT NULL,
        created REAL NOT NULL, acked REAL, result TEXT, iteration INTEGER)""",
    blocks.TABLE,
    *sweeps.TABLES,
]
_INDEXES = [
    "CREATE UNIQUE INDEX IF NOT EXISTS metrics_run_key_iteration "
    "ON metrics (run_id, key, iteration)",
    "CREATE INDEX IF NOT EXISTS checkpoints_run_iteration ON checkpoints (run_id, iteration)",
    "CREATE INDEX IF NOT EXISTS runs_parent ON runs (parent_run)",
    "CREATE INDEX IF NOT EXISTS commands_run ON commands (run_id, acked)",
    *sweeps.INDEXES,
]


def _columns(c: sqlite3.Connection, table: str) -> list[str]:
    return [r[1] for r in c.execute(f"PRAGMA table_info({table})")]


def _from_0(c: sqlite3.Connection) -> None:
    """``step`` → ``iteration``; metric rows de-duplicated (the newest row of each run, key
    and iteration wins, as an upsert would have); ``parent_checkpoint_id`` filled in from the
    recorded path."""
    if "parent_checkpoint_id" not in _columns(c, "runs"):
        c.execute("ALTER TABLE runs ADD COLUMN parent_checkpoint_id INTEGER")
    if "step" in _columns(c, "metrics"):
        c.execute("DROP INDEX IF EXISTS metrics_run_key_step")
        c.execute("ALTER TABLE metrics RENAME TO metrics_v0")
        c.execute(_TABLES[1])
        c.execute("INSERT INTO metrics (run_id, iteration, epoch, key, value, time) "
                  "SELECT run_id, step, epoch, key, value, time FROM metrics_v0 WHERE rowid IN "
                  "(SELECT MAX(rowid) FROM metrics_v0 GROUP BY run_id, key, step) "
                  "ORDER BY rowid")
        c.execute("DROP TABLE metrics_v0")
    if "step" in _columns(c, "checkpoints"):
        c.execute("DROP INDEX IF EXISTS checkpoints_run")
        c.execute("ALTER TABLE checkpoints RENAME COLUMN step TO iteration")
    c.execute("UPDATE runs SET parent_checkpoint_id = (SELECT k.id FROM checkpoints k "
              "WHERE k.path = runs.parent_checkpoint ORDER BY k.id DESC LIMIT 1) "
              "WHERE parent_checkpoint IS NOT NULL AND parent_checkpoint_id IS NULL")


#: the columns version 4 added to ``runs``
_V4_COLUMNS = ("tags", "note", "traceback")


def _from_3(c: sqlite3.Connection) -> None:
    """``runs`` gains ``tags``, ``note`` and ``traceback`` (NULL for the runs it holds)."""
    have = _columns(c, "runs")
    for col in _V4_COLUMNS:
        if col not in have:
            c.execute(f"ALTER TABLE runs ADD COLUMN {col} TEXT")


def _from_4(c: sqlite3.Connection) -> None:
    """``runs`` gains ``sweep_id`` (NULL: a run outside any sweep)."""
    if "sweep_id" not in _columns(c, "runs"):
        c.execute("ALTER TABLE runs ADD COLUMN sweep_id TEXT")


_EXPECTED: dict[str, set[str]] = {}


def _expected() -> dict[str, set[str]]:
    """Each table of a store at ``VERSION`` and its columns."""
    if not _EXPECTED:
        mem = sqlite3.connect(":memory:")
        try:
            for statement in _TABLES:
                mem.execute(statement)
            _EXPECTED.update({t: set(_columns(mem, t)) for (t,) in mem.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE "
                "'sqlite_%'")})
        finally:
            mem.close()
    return _EXPECTED


def check_structure(c: sqlite3.Connection, path, tables: bool = True) -> None:
    """A store at ``VERSION`` has labkit's tables, each with its columns, and no view or
    trigger (labkit creates none). A file that does not (crafted, or altered by hand: a view
    named ``runs`` that recurses for ever, a trigger that rewrites what labkit writes, a
    dropped column) is refused before anything is read from it. ``tables=False``: only the
    views and triggers (a store before its migration)."""
    def refused(what):
        return refuse(f"{path}: {what}, which labkit never makes: this run store was altered "
                      "or crafted. Move it aside (labkit then starts a new one there) and "
                      "keep it only if you know where it came from", "damaged")

    kinds = {}
    for kind, name in c.execute("SELECT type, name FROM sqlite_master"):
        if kind in ("view", "trigger"):
            raise refused(f"it has a {kind} {str(name)[:40]!r}")
        kinds[name] = kind
    for table, columns in (_expected() if tables else {}).items():
        if kinds.get(table) != "table":
            raise refused(f"it has no table {table!r}")
        missing = columns - set(_columns(c, table))
        if missing:
            raise refused(f"its table {table!r} lacks the columns {sorted(missing)}")


def ensure(c: sqlite3.Connection, path) -> None:
    """Create the tables of a new store, or migrate an old one to ``VERSION``; then check
    its structure (``check_structure``)."""
    version = c.execute("PRAGMA user_version").fetchone()[0]
    if version == VERSION:
        check_structure(c, path)
        return
    if version > VERSION:  # NOTE: first: a newer labkit's store is not called crafted
        raise refuse(f"{path}: this run store was written by a newer labkit (schema version "
                     f"{version}; this labkit knows {VERSION}): upgrade labkit", "failed")
    check_structure(c, path, tables=False)  # NOTE: a migration's statements would run them
    with transaction(c):
        # another process may have migrated it while this one waited for the write lock
        version = c.execute("PRAGMA user_version").fetchone()[0]
        if version < VERSION:
            old = {r[0] for r in c.execute("SELECT name FROM sqlite_master WHERE type='table'")}
            if "runs" in old:
                _from_0(c)
                _from_4(c)  # before the indexes: one of them is on runs.sweep_id
            for statement in _TABLES + _INDEXES:
                c.execute(statement)
            if "runs" in old and version < 3:
                blocks.rebuild(c)
            if "runs" in old:
                _from_3(c)
            c.execute(f"PRAGMA user_version = {VERSION}")
    check_structure(c, path)
