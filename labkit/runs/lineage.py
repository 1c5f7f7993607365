"""A run's lineage: the chain of runs it was forked from, and the tree of runs forked from it,
bounded so that a store with a long or bushy history answers in a few statements.

Each node is ``{"id", "name", "status", "parent_run", "checkpoint": {"id", "iteration"} | None}``
(the checkpoint of its parent the fork started from); descendants nest under ``"children"``.
Ancestors are read one parent at a time by primary key, descendants one level at a time through
the ``runs_parent`` index.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable

#: the most ancestors a lineage lists (the nearest first)
MAX_ANCESTORS = 50
#: the deepest level of descendants, and the most descendants, a lineage lists
MAX_DEPTH = 20
MAX_DESCENDANTS = 500

_COLUMNS = ("SELECT r.id, r.name, r.status, r.heartbeat, r.host, r.pid, r.parent_run, "
            "r.parent_checkpoint_id, c.iteration AS checkpoint_iteration FROM runs r "
            "LEFT JOIN checkpoints c ON c.id = r.parent_checkpoint_id ")


def _node(row: sqlite3.Row, is_live: Callable[[dict], bool]) -> dict:
    status = row["status"]
    if status == "running" and not is_live(dict(row)):
        status = "dead"
    cid = row["parent_checkpoint_id"]
    return {"id": row["id"], "name": row["name"], "status": status,
            "parent_run": row["parent_run"],
            "checkpoint": None if cid is None or row["parent_run"] is None
            else {"id": cid, "iteration": row["checkpoint_iteration"]}}


def lineage(c: sqlite3.Connection, run_id: str, is_live: Callable[[dict], bool], *,
            max_ancestors: int = MAX_ANCESTORS, max_depth: int = MAX_DEPTH,
            max_descendants: int = MAX_DESCENDANTS) -> dict | None:
    """``{"run": node, "ancestors": [parent, grandparent, ...], "children": [node with
    "children", ...], "truncated": bool}`` for ``run_id`` (None if there is no such run).
    ``truncated`` says a cap cut the listing short (an ancestor or a descendant left out); a
    parent that was deleted ends the chain with a node ``{"id", "deleted": True}``."""
    row = c.execute(_COLUMNS + "WHERE r.id = ?", (str(run_id),)).fetchone()  # noqa: S608
    if row is None:
        return None
    me = _node(row, is_live)
    truncated = False
    ancestors, seen = [], {me["id"]}
    parent = me["parent_run"]
    while parent is not None:
        if len(ancestors) >= max_ancestors or parent in seen:  # NOTE: a cycle is damage
            truncated = True
            break
        row = c.execute(_COLUMNS + "WHERE r.id = ?", (parent,)).fetchone()  # noqa: S608
        if row is None:
            ancestors.append({"id": parent, "deleted": True})
            break
        seen.add(parent)
        ancestors.append(_node(row, is_live))
        parent = ancestors[-1]["parent_run"]
    me["children"] = []
    level, count = [me], 0
    for _ in range(max_depth):
        by_id = {n["id"]: n for n in level}
        rows = c.execute(_COLUMNS + "WHERE r.parent_run IN (SELECT value FROM json_each(?)) "  # noqa: S608
                         "ORDER BY r.created, r.id", (json.dumps(list(by_id)),)).fetchall()
        level = []
        for r in rows:
            if r["id"] in seen:
                continue
            if count >= max_descendants:
                truncated = True
                break
            node = _node(r, is_live)
            node["children"] = []
            by_id[r["parent_run"]]["children"].append(node)
            seen.add(r["id"])
            level.append(node)
            count += 1
        if not level:
            break
    else:
        truncated = truncated or bool(c.execute(
            "SELECT 1 FROM runs WHERE parent_run IN (SELECT value FROM json_each(?)) LIMIT 1",
            (json.dumps([n["id"] for n in level]),)).fetchone())
    children = me.pop("children")
    return {"run": me, "ancestors": ancestors, "children": children,
            "truncated": truncated, "descendants": count}
