"""The run list a sidebar needs, in one call: a window of the matching runs in a chosen order,
how many match, how many runs the whole store holds per status, and for each run of the window
a sparkline of one metric and its last value.

The work is done by SQLite in a fixed number of statements, whatever the window's size:

1. the light columns (id, status, heartbeat, host, pid) of every matching run, in order: the
   total, and the window's ids (liveness is decided in Python, as ``RunStore.is_live`` does:
   it needs the local process table);
2. the window's full rows;
3. per run of the window, its series' first and last iteration, last value and block range,
   by index seeks (``metrics_run_key_iteration``, ``metric_blocks``' key);
4. the sparklines: a series spanning at least ``(points - 1) // 2`` blocks is summarised from
   its blocks (``blocks.py``) — the lowest and the highest point of each of that many groups
   of blocks, so a spike survives — and its last point; a shorter one is sampled at
   ``points`` evenly spaced iterations, one index seek each. Neither reads a series' rows
   one by one.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable

from ..errors import RunStoreError
from .checks import damaged_row, refuse

#: orders a list can have: ``status`` orders by the stored status (a dead run sorts as running)
SORTS = {
    "newest": "created DESC, id DESC",
    "oldest": "created ASC, id ASC",
    "name": "name IS NULL, name COLLATE NOCASE ASC, created DESC, id DESC",
    "status": "status ASC, created DESC, id DESC",
}
#: the stored statuses a filter selects; those shown differently (running → dead) are decided
#: afterwards by liveness
_STORED = {"running": ("running",), "dead": ("running",), "live": ("running", "paused")}
#: the most points a sparkline may have
MAX_POINTS = 200


def listed(run_dict, row, is_live) -> dict:
    """``run_dict(row)``, or for a row that cannot be decoded (a damaged store) the record a
    list shows in its place: its plain columns, empty config, progress and tags, ``status``
    ``"damaged"`` (``stored_status``: the stored one) and ``damaged``: which column is not
    what it should be. Reading that run by itself stays a ``RunStoreError``."""
    try:
        return run_dict(row)
    except RunStoreError as e:
        if getattr(e, "reason", None) != "damaged":
            raise
        d = damaged_row(row, e.__cause__ or e, config={}, progress={}, tags=[])
        d["stored_status"] = row["status"] if isinstance(row["status"], str) else None
        return d


def listed_as(run: dict, is_live) -> str | None:
    """The status a filter selects ``run`` by: its own, or a damaged run's stored one
    (``dead`` for a running one that is not live), so that it stays where counts put it."""
    if "damaged" not in run:
        return run["status"]
    status = run["stored_status"]
    return "dead" if status == "running" and not is_live(run) else status


def _like(name: str) -> str:
    return "%" + str(name).replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"


def _shown(row: sqlite3.Row, is_live: Callable[[dict], bool]) -> str:
    """The status a run is listed with: ``dead`` for a running run that is not live."""
    status = row["status"]
    if status == "running" and not is_live(dict(row)):
        return "dead"
    return status


def matching(c: sqlite3.Connection, is_live, status: str | None, name: str | None,
             sort: str, text: str | None = None) -> list[str]:
    """The ids of the runs with ``status`` (one of the store's, ``dead`` or ``live``: running
    or paused, and training now) whose name holds ``name`` and whose name or id holds
    ``text`` (both literally, any case), in ``sort`` order."""
    where, args = [], []
    if name:
        where.append("name LIKE ? ESCAPE '\\'")
        args.append(_like(name))
    if text:
        where.append("(name LIKE ? ESCAPE '\\' OR id LIKE ? ESCAPE '\\')")
        args.extend([_like(text)] * 2)
    if status is not None:
        stored = _STORED.get(status, (status,))
        where.append(f"status IN ({','.join('?' * len(stored))})")
        args.extend(stored)
    q = "SELECT id, status, heartbeat, host, pid FROM runs"
    if where:
        q += " WHERE " + " AND ".join(where)
    rows = c.execute(q + " ORDER BY " + SORTS[sort], args).fetchall()  # noqa: S608 - fixed
    if status == "live":
        return [r["id"] for r in rows if is_live(dict(r))]
    if status in ("running", "dead"):
        return [r["id"] for r in rows if _shown(r, is_live) == status]
    return [r["id"] for r in rows]


def counts(c: sqlite3.Connection, is_live) -> dict[str, int]:
    """How many runs the store holds per listed status (``dead`` apart from ``running``), and
    ``live``: how many are training now (running or paused, with a fresh heartbeat)."""
    out = {s: n for s, n in c.execute("SELECT status, COUNT(*) FROM runs GROUP BY status")}
    out.pop("running", None)
    out["live"] = 0
    for r in c.execute("SELECT id, status, heartbeat, host, pid FROM runs WHERE status IN "
                       "('running', 'paused')"):
        live = is_live(dict(r))
        out["live"] += live
        if r["status"] == "running":
            key = "running" if live else "dead"
            out[key] = out.get(key, 0) + 1
    out.setdefault("running", 0)
    return out


def rows(c: sqlite3.Connection, ids: list[str]) -> list[sqlite3.Row]:
    """The full rows of ``ids``, in that order."""
    found = {r["id"]: r for r in c.execute(
        "SELECT * FROM runs WHERE id IN (SELECT value FROM json_each(?))", (json.dumps(ids),))}
    return [found[i] for i in ids if i in found]


def sparklines(c: sqlite3.Connection, ids: list[str], key: str,
               points: int = 40) -> dict[str, dict]:
    """``{run id: {"iteration": [...], "value": [...], "last": v, "last_iteration": i}}`` for
    the runs of ``ids`` that have the metric ``key``: at most ``points`` points each, in
    iteration order (NaN and infinities are stored as gaps, None)."""
    if not 2 <= points <= MAX_POINTS:
        raise refuse(f"sparklines: points must be from 2 to {MAX_POINTS}, got {points!r}",
                     "invalid")
    spans = c.execute(
        "SELECT j.value, "
        "(SELECT MIN(iteration) FROM metrics WHERE run_id = j.value AND key = ?1), "
        "(SELECT MAX(iteration) FROM metrics WHERE run_id = j.value AND key = ?1), "
        "(SELECT value FROM metrics WHERE run_id = j.value AND key = ?1 "
        " ORDER BY iteration DESC LIMIT 1), "
        "(SELECT MIN(block) FROM metric_blocks WHERE run_id = j.value AND key = ?1), "
        "(SELECT MAX(block) FROM metric_blocks WHERE run_id = j.value AND key = ?1) "
        "FROM json_each(?2) j", (key, json.dumps(ids))).fetchall()
    groups = (points - 1) // 2  # each group's two extremes, and the last point
    by_blocks, by_seeks, out = [], [], {}
    for rid, lo, hi, last, b0, b1 in spans:
        if lo is None:
            continue
        out[rid] = {"iteration": [], "value": [], "last": last, "last_iteration": hi}
        if b0 is not None and b1 - b0 + 1 >= groups:
            by_blocks.append([rid, b0, b1 - b0 + 1])
        else:
            by_seeks.append([rid, lo, hi])
    picked: dict[str, dict[int, float | None]] = {rid: {} for rid in out}
    if by_blocks:
        # NOTE: with one MIN() (or MAX()) in a grouped query, SQLite takes the bare column
        # (min_it) from the row that has the minimum: two statements, one per extreme
        for agg, it_col in (("MIN(b.min_v)", "b.min_it"), ("MAX(b.max_v)", "b.max_it")):
            for rid, it, v in c.execute(
                    "WITH w AS (SELECT json_extract(value, '$[0]') AS rid, "
                    "json_extract(value, '$[1]') AS b0, json_extract(value, '$[2]') AS nb "
                    "FROM json_each(?1)) "
                    f"SELECT w.rid, {it_col}, {agg} FROM w JOIN metric_blocks b ON "
                    "b.run_id = w.rid AND b.key = ?2 "
                    "GROUP BY w.rid, (b.block - w.b0) * ?3 / w.nb",
                    (json.dumps(by_blocks), key, groups)):
                picked[rid][it] = v
        # a group of blocks holding only gaps has no extreme: its gap is not drawn
    if by_seeks:
        for rid, it, v in c.execute(
                "WITH RECURSIVE k(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM k WHERE i < ?3 - 1), "
                "w AS (SELECT json_extract(value, '$[0]') AS rid, "
                "json_extract(value, '$[1]') AS lo, json_extract(value, '$[2]') AS hi "
                "FROM json_each(?1)), "
                "t AS (SELECT w.rid, w.lo + (w.hi - w.lo) * k.i / (?3 - 1) AS at FROM w, k) "
                "SELECT t.rid, m.iteration, m.value FROM t JOIN metrics m ON m.rowid = "
                "(SELECT rowid FROM metrics WHERE run_id = t.rid AND key = ?2 AND "
                " iteration >= t.at ORDER BY iteration LIMIT 1)",
                (json.dumps(by_seeks), key, points)):
            picked[rid][it] = v
    for rid, pts in picked.items():
        pts[out[rid]["last_iteration"]] = out[rid]["last"]
        its = sorted(pts)
        out[rid]["iteration"] = its
        out[rid]["value"] = [pts[i] for i in its]
    return out


def page(c: sqlite3.Connection, run_dict, is_live, *, status=None, name=None, text=None,
         sort="newest", offset=0, limit=None, metric=None, points=40, ids=False,
         max_ids=None) -> dict:
    """See ``RunStore.page``."""
    if sort not in SORTS:
        raise refuse(f"page: sort must be one of {list(SORTS)}, got {str(sort)[:40]!r}",
                     "invalid")
    if offset < 0 or (limit is not None and limit < 0):
        raise refuse(f"page: offset and limit must be at least 0, got {offset}, {limit}",
                     "invalid")
    every = matching(c, is_live, status, name, sort, text)
    window = every[offset:] if limit is None else every[offset:offset + limit]
    runs = [listed(run_dict, r, is_live) for r in rows(c, window)]
    if status is not None and status != "live":  # a run that died between the two reads
        runs = [r for r in runs if listed_as(r, is_live) == status]
    if metric is not None:
        lines = sparklines(c, [r["id"] for r in runs], metric, points)
        for r in runs:
            r["metric"] = lines.get(r["id"])
    out = {"runs": runs, "total": len(every), "offset": offset, "limit": limit,
           "counts": counts(c, is_live)}
    if ids:  # at most max_ids of them: a caller that wants more than that refuses by total
        out["ids"] = every if max_ids is None else every[:max_ids]
    return out


def folders(c: sqlite3.Connection) -> list[str]:
    """The folders the store names: the folder of each run's directory and each sweep's
    directory, absolute, without a trailing slash (what the REST API hides by name)."""
    # NOTE: rtrim(x, replace(x, '/', '')) drops x's last component: its folder, in SQL
    q = ("SELECT DISTINCT rtrim(directory, replace(directory, '/', '')) FROM runs "
         "WHERE typeof(directory) = 'text' UNION SELECT DISTINCT json_extract(settings, "
         "'$.directory') FROM sweeps WHERE json_valid(settings)")
    out = {f.rstrip("/") for (f,) in c.execute(q) if isinstance(f, str) and f.startswith("/")}
    return sorted(f for f in out if len(f) > 1)
