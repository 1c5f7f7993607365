"""The run store: one SQLite file (WAL) that every process, widget and tool reads and writes.

Tables (see ``schema.py`` for their versions): ``runs`` (status, times, heartbeat, host, pid,
source, config, lineage), ``metrics`` (run, iteration, epoch, key, value, time; one row per
run, key and iteration), ``checkpoints`` (run, iteration, epoch, path, size, metrics, valid),
``commands`` (pause, resume, stop, checkpoint: requested by anyone, taken and acknowledged by
the training loop between batches).

- Every write is one ``BEGIN IMMEDIATE`` transaction; a write for a run checks, inside it,
  that the run exists, so a run deleted meanwhile never leaves rows behind: the write raises
  ``RunStoreError`` (reason ``"deleted"``) instead.
- Every public method reports SQLite's errors, and rows a damaged file yields, as
  ``RunStoreError`` naming the file and what to do (``_db.guarded``).
- A run that is training (status running or paused, a fresh heartbeat, and on this host a live
  process) is not deleted unless ``force=True``.
"""

from __future__ import annotations

import json
import os
import socket
import sqlite3
import threading
import time
import warnings
from pathlib import Path

from ..config import home
from ..errors import RunStoreError
from . import blocks, launched, lineage, listing, records, schema
from ._db import connect, explain, guarded, pid_alive, transaction
from .checks import config_json, json_columns, refuse
from .downsample import minmax_indices
from .ids import new_run_id
from .notes import MAX_TRACEBACK, check_name, check_note, check_tag, check_tags
from .sweep_store import SweepRecords

__all__ = ["COMMANDS", "DEAD_AFTER", "STATUSES", "RunStore", "RunStoreError", "default_path",
           "new_run_id"]

STATUSES = ("created", "running", "paused", "finished", "failed", "interrupted")
#: a running run whose heartbeat is older than this many seconds is shown as dead
DEAD_AFTER = 60.0
#: what a training run can be asked to do (``RunStore.add_command``)
COMMANDS = ("pause", "resume", "stop", "checkpoint")
#: SQLite's integer range: query bounds outside it are clamped, not an OverflowError
_INT_MIN, _INT_MAX = -(2**63), 2**63 - 1
_UPDATABLE = ("name", "status", "started", "ended", "heartbeat", "pid", "host", "progress",
              "error", "config", "directory", "factory", "source", "traceback")


def default_path() -> Path:
    return home() / "runs.sqlite"


def _parsed(config):
    """A config given as JSON text (as older callers did) is checked like a dict."""
    if not isinstance(config, str):
        return config
    try:
        return json.loads(config)
    except ValueError:
        raise refuse(f"config must be a dict (a JSON object), got the text {config[:40]!r}",
                     "invalid") from None


def _strings(v, what: str) -> list:
    """One tag or a list of them."""
    if isinstance(v, str):
        return [v]
    if not isinstance(v, (list, tuple, set, frozenset)):
        raise refuse(f"{what} must be a tag or a list of tags, got {type(v).__name__}",
                     "invalid")
    return list(v)


def _float(v) -> float:
    """A metric as the store keeps it: an int too large for a float is +-inf (a count of
    2**1100 failed the run with an OverflowError)."""
    try:
        return float(v)
    except OverflowError:
        return float("inf") if v > 0 else float("-inf")


def _bound(v) -> int:
    return max(_INT_MIN, min(_INT_MAX, int(v)))


class RunStore(SweepRecords):
    """The store at ``path`` (default ``$LABKIT_HOME/runs.sqlite``), created or migrated to
    the current schema when opened. Thread-safe (one connection per thread) and safe across
    processes."""

    def __init__(self, path=None):
        self.path = Path(path) if path is not None else default_path()
        self._local = threading.local()
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise refuse(f"{self.path}: cannot create the run store's folder ({e})",
                         "failed") from None
        self._conn()

    def __repr__(self):
        return f"RunStore({str(self.path)!r})"

    def _conn(self) -> sqlite3.Connection:
        c = getattr(self._local, "conn", None)
        if c is None or getattr(self._local, "pid", None) != os.getpid():
            c = connect(self.path)
            try:
                schema.ensure(c, self.path)
            except BaseException:
                c.close()
                raise
            self._local.conn, self._local.pid = c, os.getpid()
        return c

    def _damaged(self, what: str, e: Exception) -> RunStoreError:
        return explain(self.path, ValueError(f"{what} cannot be read: {e}"))

    def _require_run(self, c, run_id: str) -> None:
        """Inside a write: the run exists, or the write is refused (no orphan rows)."""
        if c.execute("SELECT 1 FROM runs WHERE id = ?", (str(run_id),)).fetchone() is None:
            raise refuse(f"run {run_id!r} was deleted (or never existed) in {self.path}: "
                         "nothing was written", "deleted")

    def close(self) -> None:
        """Close this thread's connection (a later call opens a new one)."""
        c = getattr(self._local, "conn", None)
        if c is not None:
            c.close()
            self._local.conn = None

    # ---- runs ---------------------------------------------------------------------------
    def create_run(self, name=None, config=None, source=None, factory=None, parent_run=None,
                   parent_checkpoint=None, directory=None, status="created",
                   parent_checkpoint_id=None) -> str:
        """A new run; its id is sortable by time and unique (see ``labkit.runs.ids``)."""
        text = config_json(config)
        if status not in STATUSES:
            raise ValueError(f"create_run: status must be one of {STATUSES}, got {status!r}")
        if name is not None and not isinstance(name, str):
            raise TypeError(f"create_run: name must be a string, got {type(name).__name__}")
        now = time.time()
        for _ in range(8):
            rid = new_run_id()
            try:
                with transaction(self._conn()) as c:
                    # NOTE: checked in the transaction that adds the run: a fork whose parent
                    # was deleted, or whose checkpoint was pruned, since it was looked at
                    # made a run that could never start
                    if parent_run is not None:
                        self._require_run(c, parent_run)
                    if parent_checkpoint_id is not None and c.execute(
                            "SELECT 1 FROM checkpoints WHERE id = ?",
                            (_bound(parent_checkpoint_id),)).fetchone() is None:
                        raise refuse(f"checkpoint {parent_checkpoint_id} of run {parent_run} "
                                     "was deleted meanwhile (pruned by its run, it may be); "
                                     "nothing was created: fork it again", "deleted")
                    c.execute("INSERT INTO runs (id, name, status, created, host, pid, source, "
                              "factory, config, parent_run, parent_checkpoint, "
                              "parent_checkpoint_id, directory, heartbeat) VALUES "
                              "(?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                              (rid, name, status, now, socket.gethostname(), os.getpid(), source,
                               factory, text, parent_run, parent_checkpoint,
                               parent_checkpoint_id, str(directory) if directory else None,
                               now))
                launched.note(self.path, rid)  # NOTE: for `labkit launch`, if it runs us
                return rid
            except sqlite3.IntegrityError as e:
                if "runs.id" not in str(e):
                    raise
        raise refuse(f"{self.path}: no unused run id in 8 tries (is the clock or the random "
                     "generator stuck?)", "failed")

    def update_run(self, run_id: str, **fields) -> None:
        """Set ``fields`` (name, status, started, ended, heartbeat, pid, host, progress,
        error, config, directory, factory, source) of an existing run."""
        bad = set(fields) - set(_UPDATABLE)
        if bad:
            raise ValueError(f"update_run: unknown fields {sorted(bad)}")
        if "status" in fields and fields["status"] not in STATUSES:
            raise ValueError(f"update_run: status must be one of {STATUSES}, got "
                             f"{fields['status']!r}")
        if "config" in fields:
            fields["config"] = config_json(_parsed(fields["config"]))
        if fields.get("traceback") is not None:
            fields["traceback"] = str(fields["traceback"])[-MAX_TRACEBACK:]
        if "progress" in fields and not isinstance(fields["progress"], str):
            fields["progress"] = json.dumps(fields["progress"])
        if not fields:
            return
        cols = ", ".join(f"{k} = ?" for k in fields)
        with transaction(self._conn()) as c:
            n = c.execute(f"UPDATE runs SET {cols} WHERE id = ?",  # noqa: S608 - names checked
                          (*fields.values(), str(run_id))).rowcount
            if not n:
                self._require_run(c, run_id)

    def annotate(self, run_id: str, *, name=None, tags=None, note=None, add_tags=(),
                 remove_tags=()) -> dict:
        """Rename ``run_id``, set its tags (``tags`` replaces them; ``add_tags`` and
        ``remove_tags`` change them) and its note, in one transaction; return the run. Each
        value is checked first (``notes.py``): a bad one changes nothing."""
        fields = {}
        if name is not None:
            fields["name"] = check_name(name)
        if note is not None:
            fields["note"] = check_note(note)
        add = [check_tag(t, "add") for t in _strings(add_tags, "add")]
        remove = [check_tag(t, "remove") for t in _strings(remove_tags, "remove")]
        if tags is not None:
            tags = check_tags(tags)
        with transaction(self._conn()) as c:
            self._require_run(c, run_id)
            if tags is not None or add or remove:
                if tags is None:
                    row = c.execute("SELECT tags FROM runs WHERE id = ?", (str(run_id),))
                    stored = {"tags": row.fetchone()[0]}
                    try:
                        json_columns(stored, (("tags", list),))
                    except ValueError as e:
                        raise self._damaged(f"the tags of run {run_id!r}", e) from e
                    tags = stored["tags"]
                tags = [t for t in tags if t not in remove]
                fields["tags"] = json.dumps(check_tags(tags + [t for t in add
                                                               if t not in tags]))
            if fields:
                cols = ", ".join(f"{k} = ?" for k in fields)
                c.execute(f"UPDATE runs SET {cols} WHERE id = ?",  # noqa: S608 - fixed names
                          (*fields.values(), str(run_id)))
        return self.get(run_id)

    def get(self, run_id: str) -> dict:
        row = self._conn().execute("SELECT * FROM runs WHERE id = ?", (str(run_id),)).fetchone()
        if row is None:
            raise refuse(f"no run {run_id!r} in {self.path} (`labkit runs ls` lists them)",
                         "not_found")
        return self._run_dict(row)

    def exists(self, run_id: str) -> bool:
        return self._conn().execute("SELECT 1 FROM runs WHERE id = ?",
                                    (str(run_id),)).fetchone() is not None

    def list(self, status: str | None = None, name: str | None = None) -> list[dict]:
        """Runs, newest first; ``status`` may also be ``"dead"`` (running, heartbeat stopped);
        ``name`` matches part of the name, literally. A run whose row cannot be read is listed
        with status ``"damaged"`` and ``damaged`` saying why (``listing.listed``)."""
        if status is not None and status not in (*STATUSES, "dead"):
            raise refuse(f"list: status must be one of {(*STATUSES, 'dead')}, got {status!r}",
                         "invalid")
        q, args = "SELECT * FROM runs", []
        if name:
            q += " WHERE name LIKE ? ESCAPE '\\'"
            args.append("%" + str(name).replace("\\", "\\\\").replace("%", "\\%")
                        .replace("_", "\\_") + "%")
        # NOTE: a damaged row is listed as such (listing.listed), not a reason to list nothing
        rows = [listing.listed(self._run_dict, r, self.is_live) for r in
                self._conn().execute(q + " ORDER BY created DESC, id DESC", args).fetchall()]
        return [r for r in rows if status is None or listing.listed_as(r, self.is_live) == status]

    def page(self, status: str | None = None, name: str | None = None, sort: str = "newest",
             offset: int = 0, limit: int | None = None, metric: str | None = None,
             points: int = 40, ids: bool = False, text: str | None = None,
             max_ids: int | None = None) -> dict:
        """A window of the runs ``list`` would give (``status`` may also be ``"live"``: running
        or paused, training now; ``text`` matches part of the name or id), ordered by ``sort``
        (newest, oldest, name, status), in a fixed number of statements (``listing.py``):
        ``{"runs": [...], "total": N, "offset", "limit", "counts": {status: n, "live": n}}``;
        each run has ``"metric"``, a sparkline of ``metric`` (at most ``points`` points,
        downsampled in SQLite) and its last value, or None; ``ids=True`` adds the ids of
        every matching run, in order (the first ``max_ids`` of them, if given)."""
        if status is not None and status not in (*STATUSES, "dead", "live"):
            raise refuse(f"page: status must be one of {(*STATUSES, 'dead', 'live')}, got "
                         f"{str(status)[:40]!r}", "invalid")
        return listing.page(self._conn(), self._run_dict, self.is_live, status=status,
                            name=name, text=text, sort=sort, offset=offset, limit=limit,
                            metric=metric, points=points, ids=ids, max_ids=max_ids)

    def lineage(self, run_id: str) -> dict:
        """The runs ``run_id`` was forked from and the tree forked from it (``lineage.py``)."""
        out = lineage.lineage(self._conn(), str(run_id), self.is_live)
        if out is None:
            raise refuse(f"no run {run_id!r} in {self.path}", "not_found")
        return out

    def children(self, run_id: str) -> list[str]:
        """The ids of the runs forked from ``run_id``, oldest first."""
        return [r[0] for r in self._conn().execute(
            "SELECT id FROM runs WHERE parent_run = ? ORDER BY created, id", (str(run_id),))]

    def _run_dict(self, row) -> dict:
        d = dict(row)
        try:
            records.check_run(d, STATUSES)
        except ValueError as e:
            raise self._damaged(f"run {d.get('id')!r}", e) from e
        d["stored_status"] = d["status"]
        # NOTE: only a running run can die: "paused" is also a run whose process ended
        # after run(max_iterations=N), waiting to be continued
        if d["status"] == "running" and not self.is_live(d):
            d["status"] = "dead"
        return d

    def is_live(self, run: dict) -> bool:
        """Whether ``run`` (a record from ``get``) is training now: running or paused, with a
        heartbeat from the last ``DEAD_AFTER`` seconds (a paused loop keeps beating) and, on
        this host, a live process. A running run that is not live is listed as ``dead``."""
        if run.get("stored_status", run.get("status")) not in ("running", "paused"):
            return False
        try:
            if time.time() - float(run.get("heartbeat") or 0) > DEAD_AFTER:
                return False
        except (TypeError, ValueError):
            return False
        return run.get("host") != socket.gethostname() or pid_alive(run.get("pid"))

    def delete(self, run_id: str, force: bool = False, check_only: bool = False) -> dict:
        """Delete a run, its metrics and checkpoint records (not its files: see
        ``labkit.runs.delete``), in one transaction; return the deleted record. A run that is
        training, or that a fork with no checkpoint of its own starts from, is refused (reason
        ``"live"``) unless ``force``. ``check_only``: only the checks; nothing is deleted."""
        with transaction(self._conn()) as c:
            row = c.execute("SELECT * FROM runs WHERE id = ?", (str(run_id),)).fetchone()
            if row is None:
                raise refuse(f"no run {run_id!r} in {self.path}", "not_found")
            run = listing.listed(self._run_dict, row, self.is_live)  # a damaged one too
            if not force and self.is_live(run):
                raise refuse(f"run {run_id} is training (pid {run['pid']} on {run['host']}, "
                             f"status {run['stored_status']}): stop it first, or delete it "
                             "with force=True (its trainer then fails at its next write)",
                             "live")
            sweep = self._live_sweep(c, row)
            if not force and sweep is not None:
                raise refuse(f"run {run_id} is a trial's run of sweep {sweep['id']} "
                             f"({sweep['name']}), which is {sweep['status']}: stop the sweep "
                             "first (lk.sweep.stop), or delete the run with force=True (the "
                             "trial then goes on unrecorded)", "live")
            if not force:
                # NOTE: a fork that has no checkpoint of its own starts from one of this run's:
                # deleted with it, the fork could never start
                waiting = [r[0] for r in c.execute(
                    "SELECT id FROM runs r WHERE r.parent_run = ? AND r.status != 'finished' "
                    "AND NOT EXISTS (SELECT 1 FROM checkpoints k WHERE k.run_id = r.id AND "
                    "k.valid = 1) LIMIT 4",
                    (str(run_id),))]
                if waiting:
                    raise refuse(f"run {run_id} has forks that start from its checkpoints and "
                                 f"have none of their own yet ({', '.join(waiting[:3])}"
                                 f"{', ...' if len(waiting) > 3 else ''}): train or delete them "
                                 "first, or delete it with force=True (they could then never "
                                 "start)", "live")
            if check_only:
                return run
            c.execute("DELETE FROM metrics WHERE run_id = ?", (str(run_id),))
            c.execute("DELETE FROM checkpoints WHERE run_id = ?", (str(run_id),))
            c.execute("DELETE FROM commands WHERE run_id = ?", (str(run_id),))
            c.execute("DELETE FROM metric_blocks WHERE run_id = ?", (str(run_id),))
            c.execute("DELETE FROM runs WHERE id = ?", (str(run_id),))
        return run

    def remove_orphans(self) -> dict:
        """Delete metric and checkpoint rows whose run no longer exists (older labkit left
        them when a run was deleted while it trained); return how many of each. The files of
        orphan checkpoints are not touched."""
        with transaction(self._conn()) as c:
            n = {t: c.execute(f"DELETE FROM {t} WHERE run_id NOT IN "  # noqa: S608 - fixed names
                              "(SELECT id FROM runs)").rowcount
                 for t in ("metrics", "checkpoints")}
            c.execute("DELETE FROM commands WHERE run_id NOT IN (SELECT id FROM runs)")
            c.execute("DELETE FROM metric_blocks WHERE run_id NOT IN (SELECT id FROM runs)")
        return n

    # ---- metrics ------------------------------------------------------------------------
    def add_metrics(self, run_id: str, rows) -> None:
        """Store ``(iteration, epoch, key, value, time)`` rows in one transaction. A row for a
        (key, iteration) the run already has replaces it: every row is stored once, the newest
        value wins (a resumed run may log an iteration again)."""
        rows = [(str(run_id), int(i), int(e) if e is not None else None, str(k), _float(v),
                 float(t)) for i, e, k, v, t in rows]
        if not rows:
            return
        with transaction(self._conn()) as c:
            self._require_run(c, run_id)
            c.executemany("INSERT INTO metrics (run_id, iteration, epoch, key, value, time) "
                          "VALUES (?,?,?,?,?,?) ON CONFLICT (run_id, key, iteration) DO UPDATE "
                          "SET epoch = excluded.epoch, value = excluded.value, "
                          "time = excluded.time", rows)
            blocks.refresh(c, str(run_id), {(r[3], r[1] // blocks.BLOCK) for r in rows})

    def truncate_metrics(self, run_id: str, after_iteration: int | None = None, *,
                         after_step: int | None = None) -> None:
        """Delete the metrics of ``run_id`` logged after ``after_iteration`` (before a resume).
        ``after_step`` is the old name (deprecated)."""
        if after_step is not None:
            warnings.warn("truncate_metrics(after_step=) is now after_iteration=",
                          DeprecationWarning, stacklevel=3)
            after_iteration = after_step
        if after_iteration is None:
            raise TypeError("truncate_metrics: give after_iteration")
        with transaction(self._conn()) as c:
            c.execute("DELETE FROM metrics WHERE run_id = ? AND iteration > ?",
                      (str(run_id), _bound(after_iteration)))
            blocks.truncate(c, str(run_id), _bound(after_iteration))

    def max_iteration(self, run_id: str) -> int:
        """The last iteration ``run_id`` has metrics for, or -1."""
        row = self._conn().execute("SELECT MAX(iteration) FROM metrics WHERE run_id = ?",
                                   (str(run_id),)).fetchone()
        if row[0] is None:
            return -1
        if not isinstance(row[0], int):  # a damaged page
            raise self._damaged(f"the metrics of run {run_id!r}", ValueError(repr(row[0])))
        return row[0]

    def max_step(self, run_id: str) -> int:
        """Deprecated name of ``max_iteration``."""
        warnings.warn("RunStore.max_step is now max_iteration", DeprecationWarning,
                      stacklevel=3)
        return self.max_iteration(run_id)

    def metric_keys(self, run_id: str) -> list[str]:
        return [r[0] for r in self._conn().execute(
            "SELECT DISTINCT key FROM metrics WHERE run_id = ? ORDER BY key", (str(run_id),))]

    def metrics(self, run_id: str, keys=None, since_iteration: int | None = None,
                max_points: int | None = None, *, since_step: int | None = None
                ) -> dict[str, dict[str, list]]:
        """``{key: {"iteration": [...], "epoch": [...], "value": [...], "time": [...]}}`` in
        iteration order, after ``since_iteration`` if given. ``max_points`` (at least 2)
        downsamples each key for drawing: the first and last points, and the lowest and highest
        of each bucket, read from the series' summary blocks (``blocks.py``), not its rows.
        ``since_step`` is the old name (deprecated)."""
        if since_step is not None:
            warnings.warn("metrics(since_step=) is now since_iteration=", DeprecationWarning,
                          stacklevel=3)
            since_iteration = since_step
        if max_points is not None and (isinstance(max_points, bool) or int(max_points) < 2):
            raise refuse(f"metrics: max_points must be at least 2, got {max_points!r}",
                         "invalid")
        keys = self.metric_keys(run_id) if keys is None else (
            [keys] if isinstance(keys, str) else [str(k) for k in keys])
        out = {}
        for k in keys:
            q = "SELECT iteration, epoch, value, time FROM metrics WHERE run_id = ? AND key = ?"
            args = [str(run_id), k]
            if since_iteration is not None:
                q += " AND iteration > ?"
                args.append(_bound(since_iteration))
            rows = None
            if max_points:  # from the blocks, without reading every row
                rows = blocks.downsample(self._conn(), str(run_id), k, None if since_iteration
                                         is None else _bound(since_iteration), int(max_points))
            if rows is None:
                rows = self._conn().execute(q + " ORDER BY iteration", args).fetchall()
                if max_points and len(rows) > max_points:
                    rows = [rows[i] for i in minmax_indices([r[2] for r in rows], max_points)]
            bad = records.bad_metric_row(rows)
            if bad:
                raise self._damaged(f"metric {k[:40]!r} of run {run_id}", ValueError(bad))
            out[k] = records.Renamed(iteration=[r[0] for r in rows], epoch=[r[1] for r in rows],
                                      value=[r[2] for r in rows], time=[r[3] for r in rows])
        return out

    # ---- commands -----------------------------------------------------------------------
    def add_command(self, run_id: str, command: str) -> int:
        """Ask the loop training ``run_id`` to ``command`` (one of ``COMMANDS``) after its
        current batch; returns the command's id. The loop acknowledges it (``command(id)``
        then has ``acked``, ``result`` and the ``iteration`` it acted at)."""
        if command not in COMMANDS:
            raise refuse(f"command must be one of {list(COMMANDS)}, got {str(command)[:40]!r}",
                         "invalid")
        with transaction(self._conn()) as c:
            self._require_run(c, run_id)
            cur = c.execute("INSERT INTO commands (run_id, command, created) VALUES (?,?,?)",
                            (str(run_id), command, time.time()))
            return int(cur.lastrowid)

    def pending_commands(self, run_id: str) -> list[dict]:
        """The commands for ``run_id`` not yet acknowledged, oldest first."""
        rows = self._conn().execute(
            "SELECT * FROM commands WHERE run_id = ? AND acked IS NULL ORDER BY id",
            (str(run_id),)).fetchall()
        return [self._command_dict(r) for r in rows]

    def ack_command(self, command_id: int, result: str, iteration: int | None = None) -> None:
        """Mark a command done: ``result`` says what the loop did (or why it did not)."""
        with transaction(self._conn()) as c:
            c.execute("UPDATE commands SET acked = ?, result = ?, iteration = ? WHERE id = ? "
                      "AND acked IS NULL", (time.time(), str(result)[:500],
                                            None if iteration is None else _bound(iteration),
                                            _bound(command_id)))

    def command(self, command_id: int) -> dict:
        row = self._conn().execute("SELECT * FROM commands WHERE id = ?",
                                   (_bound(command_id),)).fetchone()
        if row is None:
            raise refuse(f"no command {command_id!r} in {self.path}", "not_found")
        return self._command_dict(row)

    def _command_dict(self, row) -> dict:
        d = dict(row)
        if d["command"] not in COMMANDS or not isinstance(d["created"], (int, float)):
            raise self._damaged(f"command {d.get('id')!r}", ValueError(repr(d["command"])))
        return d

    # ---- checkpoints --------------------------------------------------------------------
    def add_checkpoint(self, run_id, iteration, epoch, path, size, metrics=None,
                       valid=True) -> int:
        """Record a checkpoint written at ``iteration``; return its id."""
        values = (str(run_id), int(iteration), int(epoch), str(path), int(size),
                  json.dumps(metrics or {}), int(bool(valid)), time.time())
        with transaction(self._conn()) as c:
            self._require_run(c, run_id)
            # NOTE: the same checkpoint written again (Checkpoint pressed twice at one
            # iteration) is one record: two rows of one path, and deleting one orphaned the other
            row = c.execute("SELECT id FROM checkpoints WHERE run_id = ? AND path = ?",
                            (str(run_id), str(path))).fetchone()
            if row is not None:
                c.execute("UPDATE checkpoints SET iteration = ?, epoch = ?, size = ?, "
                          "metrics = ?, valid = ?, created = ? WHERE id = ?",
                          values[1:3] + values[4:] + (row[0],))
                return row[0]
            return c.execute("INSERT INTO checkpoints (run_id, iteration, epoch, path, size, "
                             "metrics, valid, created) VALUES (?,?,?,?,?,?,?,?)",
                             values).lastrowid

    def _checkpoint_dict(self, row) -> dict:
        try:
            return records.checkpoint(row)
        except ValueError as e:
            raise self._damaged(f"checkpoint {row['id']!r}", e) from e

    def _checkpoint_listed(self, row) -> dict:
        """``_checkpoint_dict(row)``, or for a row that cannot be decoded the record a list
        shows in its place (``records.damaged_checkpoint``: one damaged row does not hide the
        others)."""
        try:
            return records.checkpoint(row)
        except ValueError as e:
            return records.damaged_checkpoint(row, e)

    def checkpoints(self, run_id: str) -> list[dict]:
        """The checkpoints of ``run_id``, oldest first: id, run_id, iteration, epoch, path,
        size, metrics, valid, created (a damaged record: ``_checkpoint_listed``)."""
        rows = self._conn().execute("SELECT * FROM checkpoints WHERE run_id = ? "
                                    "ORDER BY iteration, id", (str(run_id),)).fetchall()
        return [self._checkpoint_listed(r) for r in rows]

    def checkpoint(self, checkpoint_id: int, listed: bool = False) -> dict:
        """Checkpoint ``checkpoint_id``; a damaged record raises (reason ``"damaged"``), or
        with ``listed`` is returned as a list shows it (``damaged`` says why)."""
        r = self._conn().execute("SELECT * FROM checkpoints WHERE id = ?",
                                 (_bound(checkpoint_id),)).fetchone()
        if r is None:
            raise refuse(f"no checkpoint {checkpoint_id!r} in {self.path}", "not_found")
        return self._checkpoint_listed(r) if listed else self._checkpoint_dict(r)

    def set_checkpoint(self, checkpoint_id: int, **fields) -> None:
        bad = set(fields) - {"valid", "path"}
        if bad:
            raise ValueError(f"set_checkpoint: unknown fields {sorted(bad)}")
        if not fields:
            return
        cols = ", ".join(f"{k} = ?" for k in fields)
        with transaction(self._conn()) as c:
            c.execute(f"UPDATE checkpoints SET {cols} WHERE id = ?",  # noqa: S608
                      (*fields.values(), _bound(checkpoint_id)))

    def remove_checkpoint_unless_forked(self, checkpoint_id: int, path) -> str | None:
        """Delete a checkpoint's record, in one transaction with the look for a run forked from
        it that has not finished and has no valid checkpoint of its own (it starts from this
        one): the id of such a run (nothing removed), else None."""
        with transaction(self._conn()) as c:
            row = c.execute(
                "SELECT id FROM runs r WHERE (r.parent_checkpoint_id = ? OR "
                "r.parent_checkpoint = ?) AND r.status != 'finished' AND NOT EXISTS (SELECT 1 "
                "FROM checkpoints k WHERE k.run_id = r.id AND k.valid = 1) LIMIT 1",
                (_bound(checkpoint_id), str(path))).fetchone()
            if row is not None:
                return str(row[0])
            c.execute("DELETE FROM checkpoints WHERE id = ?", (_bound(checkpoint_id),))
            return None

    def remove_checkpoint(self, checkpoint_id: int) -> bool:
        """Delete a checkpoint's record (not its files: see ``labkit.runs.delete_checkpoint``);
        False if there was none."""
        with transaction(self._conn()) as c:
            return c.execute("DELETE FROM checkpoints WHERE id = ?",
                             (_bound(checkpoint_id),)).rowcount > 0


# every public method (and opening) reports damage as RunStoreError: one wrapper, not copies
for _name, _fn in list(vars(RunStore).items()):
    if callable(_fn) and (not _name.startswith("_") or _name == "__init__"):
        setattr(RunStore, _name, guarded(_fn))
del _name, _fn
