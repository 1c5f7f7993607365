"""Sweeps in the run store (schema version 5): the ``sweeps`` and ``trials`` tables.

A sweep's driver is the only process that writes them (its workers report to it): one writer
per database, whatever the filesystem the workers share. Each trial that has started has a
run (``runs.sweep_id`` = the sweep; config = its parameters), so every tool that shows runs
shows trials. Values are JSON text; the functions here take an open connection and are called
by ``RunStore``'s sweep methods inside its transactions.
"""

from __future__ import annotations

import json
import os
import socket
import time

from ..errors import RunStoreError
from .checks import TIMES, config_json, damaged_row, json_columns, refuse, typed_columns
from .ids import new_run_id

TABLES = [
    """CREATE TABLE IF NOT EXISTS sweeps (
        id TEXT PRIMARY KEY, name TEXT, status TEXT NOT NULL, created REAL, started REAL,
        ended REAL, heartbeat REAL, host TEXT, pid INTEGER, factory TEXT, space TEXT,
        settings TEXT, request TEXT, error TEXT)""",
    """CREATE TABLE IF NOT EXISTS trials (
        sweep_id TEXT NOT NULL, number INTEGER NOT NULL, run_id TEXT, params TEXT NOT NULL,
        status TEXT NOT NULL, rung INTEGER, results TEXT, value REAL, iteration INTEGER,
        epoch INTEGER, attempts INTEGER NOT NULL DEFAULT 0, error TEXT, updated REAL,
        PRIMARY KEY (sweep_id, number))""",
]
INDEXES = ["CREATE INDEX IF NOT EXISTS runs_sweep ON runs (sweep_id)"]

#: a sweep's status; "dead" is shown for a running or paused sweep whose driver is gone
SWEEP_STATUSES = ("running", "paused", "finished", "stopped", "failed", "interrupted")
#: what may be asked of a sweep's driver through the store (``request``), and the statuses a
#: sweep (as shown: a dead one takes none) must be in to take each
REQUEST_FROM = {"stop": ("running", "paused"), "pause": ("running",), "resume": ("paused",)}
SWEEP_REQUESTS = tuple(REQUEST_FROM)
#: a trial's status: waiting, training, stopped at a rung (it may be promoted), done, failed,
#: or interrupted (its driver stopped; a resumed sweep continues it from its checkpoint)
TRIAL_STATUSES = ("pending", "running", "stopped", "finished", "failed", "interrupted")
#: the searches a sweep's trials are drawn by, and its modes (lower or higher is better)
SEARCHES = ("grid", "random", "sobol")
MODES = ("min", "max")
_SWEEP_FIELDS = ("name", "status", "started", "ended", "heartbeat", "host", "pid", "request",
                 "error", "settings", "factory")
_TRIAL_FIELDS = ("run_id", "status", "rung", "results", "value", "iteration", "epoch",
                 "attempts", "error", "updated")


def _count(v, least: int) -> bool:
    return type(v) is int and v >= least  # NOTE: not isinstance: True is an int too


#: what each value of a sweep's settings must be, as ``lk.sweep.run`` writes them: (test,
#: what it must be). A key that is absent is not checked (the readers that need it name it).
SETTINGS = {
    "metric": (lambda v: isinstance(v, str) and v != "", "a metric's name (a string)"),
    "mode": (lambda v: v in MODES, f"one of {MODES}"),
    "trials": (lambda v: _count(v, 0), "a whole number >= 0"),
    "search": (lambda v: v in SEARCHES, f"one of {SEARCHES}"),
    "seed": (lambda v: _count(v, 0), "a whole number >= 0"),
    "engine": (lambda v: isinstance(v, str) and v != "",
               "'local', 'inprocess', 'client' or a scheduler address (a string)"),
    "workers": (lambda v: _count(v, 1), "a whole number >= 1"),
    "early_stopping": (lambda v: v is None or (
        isinstance(v, dict) and set(v) == {"asha"} and isinstance(v["asha"], dict)
        and set(v["asha"]) == {"grace", "reduction"} and _count(v["asha"]["grace"], 1)
        and _count(v["asha"]["reduction"], 2)),
        'null or {"asha": {"grace": a whole number >= 1, "reduction": one >= 2}}'),
    "directory": (lambda v: isinstance(v, str) and v != "", "a directory (a string)"),
}


def check_settings(settings) -> None:
    """A ValueError naming the first value of a sweep's ``settings`` that is not what
    ``lk.sweep.run`` writes (``SETTINGS``): read back, such a row is damaged (a mode of 5
    sorted the trials as "min", a metric that is a list failed every reader)."""
    if not isinstance(settings, dict):
        raise ValueError("its settings is not a JSON object")
    for key, (ok, expected) in SETTINGS.items():
        if key in settings and not ok(settings[key]):
            raise ValueError(f"its settings' {key} is {_brief(settings[key])}, expected "
                             f"{expected}")


def _brief(v) -> str:
    r = repr(v)
    return r if len(r) <= 40 else r[:40] + "..."


def _checked_json(settings, what: str) -> str:
    try:
        check_settings(settings)
    except ValueError as e:
        raise refuse(f"{what}: {str(e).replace('its settings', 'settings', 1)}; "
                     "lk.sweep.run writes them checked", "invalid") from None
    return json.dumps(settings)


def create(c, name, factory, space: str, settings: dict, params: list[dict]) -> str:
    settings = _checked_json(settings, "create_sweep")
    sid = new_run_id()
    now = time.time()
    c.execute("INSERT INTO sweeps (id, name, status, created, started, heartbeat, host, pid, "
              "factory, space, settings) VALUES (?,?,?,?,?,?,?,?,?,?,?)",
              (sid, name, "running", now, now, now, socket.gethostname(), os.getpid(), factory,
               space, settings))
    c.executemany("INSERT INTO trials (sweep_id, number, params, status, updated) "
                  "VALUES (?,?,?,?,?)",
                  [(sid, i, json.dumps(p), "pending", now) for i, p in enumerate(params)])
    return sid


def add_trials(c, sweep_id: str, params: list[dict]) -> list[int]:
    """Append pending trials with ``params`` to sweep ``sweep_id`` (numbered after its last)
    and count them in its settings' ``trials``; returns their numbers."""
    row = c.execute("SELECT settings FROM sweeps WHERE id = ?", (str(sweep_id),)).fetchone()
    if row is None:
        raise refuse(f"no sweep {sweep_id!r}", "not_found")
    try:
        settings = json.loads(row[0] or "{}")
        check_settings(settings)
    except (TypeError, ValueError) as e:
        raise _damaged(f"sweep {sweep_id!r}", e) from e
    first = c.execute("SELECT COALESCE(MAX(number) + 1, 0) FROM trials WHERE sweep_id = ?",
                      (str(sweep_id),)).fetchone()[0]
    now = time.time()
    numbers = list(range(first, first + len(params)))
    c.executemany("INSERT INTO trials (sweep_id, number, params, status, updated) "
                  "VALUES (?,?,?,?,?)",
                  [(sweep_id, n, json.dumps(p), "pending", now) for n, p in zip(numbers, params)])
    settings["trials"] = first + len(params)
    c.execute("UPDATE sweeps SET settings = ? WHERE id = ?", (json.dumps(settings), sweep_id))
    return numbers


def _damaged(what: str, e: Exception):
    return refuse(f"{what} cannot be read ({e}): the run store is damaged there", "damaged")


def sweep_dict(row) -> dict:
    d = dict(row)
    try:
        json_columns(d, (("settings", dict), ("space", dict)))
        check_settings(d["settings"])
        typed_columns(d, text=("id", "name", "status", "host", "factory", "request", "error"),
                      integers=("pid",), times=TIMES)
        if d["status"] not in SWEEP_STATUSES:
            raise ValueError(f"its status {str(d['status'])[:40]!r} is not one of "
                             f"{SWEEP_STATUSES}")
    except ValueError as e:
        raise _damaged(f"sweep {d.get('id')!r}", e) from e
    return d


def listed(row) -> dict:
    """``sweep_dict(row)``, or for a row that cannot be decoded the record a list shows in its
    place (``checks.damaged_row``: ``status`` ``"damaged"``, ``damaged`` says why); reading
    that sweep by itself stays a ``RunStoreError``."""
    try:
        return sweep_dict(row)
    except RunStoreError as e:
        return damaged_row(row, e.__cause__ or e, settings={}, space={})


def get(c, sweep_id: str, path) -> dict:
    row = c.execute("SELECT * FROM sweeps WHERE id = ?", (str(sweep_id),)).fetchone()
    if row is None:
        raise refuse(f"no sweep {sweep_id!r} in {path} (`labkit sweep ls` lists them)",
                     "not_found")
    d = sweep_dict(row)
    d["counts"] = dict(c.execute("SELECT status, COUNT(*) FROM trials WHERE sweep_id = ? "
                                 "GROUP BY status", (d["id"],)).fetchall())
    return d


def listing(c) -> list[dict]:
    counts: dict = {}
    for sid, status, n in c.execute("SELECT sweep_id, status, COUNT(*) FROM trials "
                                    "GROUP BY sweep_id, status"):
        counts.setdefault(sid, {})[status] = n
    out = []
    for row in c.execute("SELECT * FROM sweeps ORDER BY created DESC, id DESC"):
        d = listed(row)
        d["counts"] = counts.get(d["id"], {})
        out.append(d)
    return out


def update(c, sweep_id: str, fields: dict) -> None:
    bad = set(fields) - set(_SWEEP_FIELDS)
    if bad:
        raise ValueError(f"update_sweep: unknown fields {sorted(bad)}")
    if "status" in fields and fields["status"] not in SWEEP_STATUSES:
        raise ValueError(f"update_sweep: status must be one of {SWEEP_STATUSES}")
    if fields.get("request") is not None and fields["request"] not in SWEEP_REQUESTS:
        raise ValueError(f"update_sweep: request must be one of {SWEEP_REQUESTS} or None")
    if "settings" in fields:
        fields["settings"] = _checked_json(fields["settings"], "update_sweep")
    cols = ", ".join(f"{k} = ?" for k in fields)
    n = c.execute(f"UPDATE sweeps SET {cols} WHERE id = ?",  # noqa: S608 - names checked
                  (*fields.values(), str(sweep_id))).rowcount
    if not n:
        raise refuse(f"no sweep {sweep_id!r}", "not_found")


def clear_request(c, sweep_id: str, request: str) -> bool:
    """Clear the sweep's request if it is still ``request`` (a driver that has acted on it);
    a newer request written meanwhile stays. Whether it was cleared."""
    return c.execute("UPDATE sweeps SET request = NULL WHERE id = ? AND request = ?",
                     (str(sweep_id), request)).rowcount == 1


def trial_dict(row) -> dict:
    d = dict(row)
    try:
        json_columns(d, (("params", dict), ("results", dict)))
        typed_columns(d, text=("sweep_id", "run_id", "status", "error"),
                      integers=("number", "rung", "iteration", "epoch", "attempts"),
                      times=("updated",))
        if d["status"] not in TRIAL_STATUSES:
            raise ValueError(f"its status {str(d['status'])[:40]!r} is not one of "
                             f"{TRIAL_STATUSES}")
        if d["value"] is not None and type(d["value"]) not in (int, float):
            raise ValueError(f"its value is not a number ({str(d['value'])[:40]!r})")
        d["results"] = {int(k): v for k, v in d["results"].items()}
    except (TypeError, ValueError) as e:
        raise _damaged(f"trial {d.get('number')!r} of sweep {d.get('sweep_id')!r}", e) from e
    return d


def trials(c, sweep_id: str, limit: int | None = None) -> list[dict]:
    """The sweep's trials by number; the first ``limit`` only, when given."""
    return [trial_dict(r) for r in c.execute(
        "SELECT * FROM trials WHERE sweep_id = ? ORDER BY number"
        + ("" if limit is None else " LIMIT ?"),
        (str(sweep_id),) + (() if limit is None else (int(limit),)))]


def update_trial(c, sweep_id: str, number: int, fields: dict) -> None:
    bad = set(fields) - set(_TRIAL_FIELDS)
    if bad:
        raise ValueError(f"update_trial: unknown fields {sorted(bad)}")
    if "status" in fields and fields["status"] not in TRIAL_STATUSES:
        raise ValueError(f"update_trial: status must be one of {TRIAL_STATUSES}")
    if "results" in fields:
        fields["results"] = json.dumps({str(k): v for k, v in fields["results"].items()})
    fields.setdefault("updated", time.time())
    cols = ", ".join(f"{k} = ?" for k in fields)
    n = c.execute(f"UPDATE trials SET {cols} WHERE sweep_id = ? AND number = ?",  # noqa: S608
                  (*fields.values(), str(sweep_id), int(number))).rowcount
    if not n:
        raise refuse(f"sweep {sweep_id!r} has no trial {number}", "not_found")


def start_trial_run(c, sweep_id: str, number: int, name, config: dict, factory, directory_of):
    """The run of trial ``number`` (created, linked to the sweep and recorded in the trial's
    row, in the caller's transaction); returns its id."""
    now = time.time()
    rid = new_run_id()
    c.execute("INSERT INTO runs (id, name, status, created, host, pid, source, factory, config, "
              "directory, heartbeat, sweep_id) VALUES (?,?,?,?,?,?,?,?,?,?,?,?)",
              (rid, name, "created", now, socket.gethostname(), os.getpid(), f"sweep {sweep_id}",
               factory, config_json(config), str(directory_of(rid)), now, sweep_id))
    update_trial(c, sweep_id, number, {"run_id": rid})
    return rid


# ---- reads for the REST API and the Runs sidebar ---------------------------------------------
#: a trial that has ended for now: finished, stopped at a rung, or failed
DONE = ("finished", "stopped", "failed")


def driver_alive(rec: dict, dead_after: float) -> bool:
    """Whether the driver of sweep record ``rec`` still beats: its heartbeat is recent and, on
    this host, its process exists (a driver on another host is trusted while it beats)."""
    beat = rec.get("heartbeat")
    if type(beat) not in (int, float) or time.time() - beat > dead_after:
        return False  # NOTE: no beat, or one that is not a number (a damaged row): not alive
    if rec.get("host") != socket.gethostname():
        return True
    from .._proc import alive

    return alive(rec.get("pid"))


def shown_status(rec: dict, dead_after: float) -> str:
    """The sweep's status as people see it: ``dead`` for a running or paused sweep whose
    driver is gone."""
    if rec["status"] in ("running", "paused") and not driver_alive(rec, dead_after):
        return "dead"
    return rec["status"]


def best_value(values: dict, mode: str):
    """The best finite value of the finished trials (of the stopped ones if none finished):
    ``values`` maps status to ``(min, max)``, as ``Sweep.best`` chooses."""
    for status in ("finished", "stopped"):
        lo_hi = values.get(status)
        if lo_hi and lo_hi[0] is not None:
            return lo_hi[1] if mode == "max" else lo_hi[0]
    return None


def summaries(c, limit: int, dead_after: float) -> dict:
    """The newest ``limit`` sweeps, each ``{id, name, status, counts, trials, done, best,
    metric, mode, created, error}`` (``done``: trials finished, stopped or failed; a sweep
    whose row cannot be read: status ``damaged`` and ``damaged``, why), and ``total``."""
    total = c.execute("SELECT COUNT(*) FROM sweeps").fetchone()[0]
    rows = [listed(r) for r in c.execute(
        "SELECT * FROM sweeps ORDER BY created DESC, id DESC LIMIT ?", (int(limit),))]
    ids = [r["id"] for r in rows]
    counts: dict = {}
    values: dict = {}
    if ids:
        marks = ",".join("?" * len(ids))
        for sid, status, n in c.execute(
                f"SELECT sweep_id, status, COUNT(*) FROM trials WHERE sweep_id IN ({marks}) "  # noqa: S608
                "GROUP BY sweep_id, status", ids):
            counts.setdefault(sid, {})[status] = n
        # NOTE: ABS(value) < 1e308 keeps finite values only (NaN is stored as NULL)
        for sid, status, lo, hi in c.execute(
                f"SELECT sweep_id, status, MIN(value), MAX(value) FROM trials "  # noqa: S608
                f"WHERE sweep_id IN ({marks}) AND status IN ('finished', 'stopped') "
                "AND ABS(value) < 1e308 GROUP BY sweep_id, status", ids):
            values.setdefault(sid, {})[status] = (lo, hi)
    out = []
    for r in rows:
        mode = r["settings"].get("mode")
        n = counts.get(r["id"], {})
        out.append({"id": r["id"], "name": r["name"], "status": shown_status(r, dead_after),
                    "counts": n, "trials": sum(n.values()),
                    "done": sum(n.get(s, 0) for s in DONE),
                    "best": None if "damaged" in r else best_value(values.get(r["id"], {}),
                                                                     mode),
                    "metric": r["settings"].get("metric"), "mode": mode,
                    "created": r["created"], "error": r["error"],
                    **({"damaged": r["damaged"]} if "damaged" in r else {})})
    return {"sweeps": out, "total": total}
