"""A summary of every metric series in blocks of ``BLOCK`` iterations — count, and the
iteration and value of its lowest and highest point — kept in the table ``metric_blocks`` in
the same transaction as the metrics themselves, so that a long series is downsampled by
reading its blocks instead of its rows: a million points are read as ~4,000 blocks.

Downsampling keeps what a plot needs (as ``downsample.minmax_indices`` does for rows): the
first and last points, and the lowest and highest point of each of ``(max_points - 2) // 2``
buckets of consecutive blocks.
"""

from __future__ import annotations

import json
import sqlite3

#: iterations per block
BLOCK = 256

TABLE = """CREATE TABLE IF NOT EXISTS metric_blocks (
    run_id TEXT NOT NULL, key TEXT NOT NULL, block INTEGER NOT NULL, n INTEGER NOT NULL,
    min_it INTEGER, min_v REAL, max_it INTEGER, max_v REAL,
    PRIMARY KEY (run_id, key, block)) WITHOUT ROWID"""


def refresh(c: sqlite3.Connection, run_id: str, touched) -> None:
    """Recompute the blocks ``touched`` — (key, block) pairs — of ``run_id`` from its rows
    (inside the caller's transaction)."""
    for key, b in sorted(set(touched)):
        rows = c.execute("SELECT iteration, value FROM metrics WHERE run_id = ? AND key = ? "
                         "AND iteration >= ? AND iteration < ?",
                         (run_id, key, b * BLOCK, (b + 1) * BLOCK)).fetchall()
        if not rows:
            c.execute("DELETE FROM metric_blocks WHERE run_id = ? AND key = ? AND block = ?",
                      (run_id, key, b))
            continue
        vals = [(v, it) for it, v in rows if v is not None]
        lo = min(vals) if vals else (None, rows[0][0])
        hi = max(vals, key=lambda p: (p[0], -p[1])) if vals else (None, rows[0][0])
        c.execute("INSERT OR REPLACE INTO metric_blocks VALUES (?,?,?,?,?,?,?,?)",
                  (run_id, key, b, len(rows), lo[1], lo[0], hi[1], hi[0]))


def truncate(c: sqlite3.Connection, run_id: str, after_iteration: int) -> None:
    """After ``DELETE FROM metrics ... iteration > after_iteration``: the blocks past it go,
    the one it falls in is recomputed."""
    last = after_iteration // BLOCK
    keys = [r[0] for r in c.execute("SELECT DISTINCT key FROM metric_blocks WHERE run_id = ? "
                                    "AND block >= ?", (run_id, last))]
    c.execute("DELETE FROM metric_blocks WHERE run_id = ? AND block > ?", (run_id, last))
    refresh(c, run_id, [(k, last) for k in keys])


def rebuild(c: sqlite3.Connection) -> None:
    """Every block of every series (migrating a store that had none)."""
    for run_id, key, b in c.execute("SELECT DISTINCT run_id, key, iteration / ? FROM metrics",
                                    (BLOCK,)).fetchall():
        refresh(c, run_id, [(key, b)])


def downsample(c: sqlite3.Connection, run_id: str, key: str, since: int | None,
               max_points: int) -> list | None:
    """The rows (iteration, epoch, value, time) to draw of one series, at most ``max_points``;
    None when its blocks cannot say (few rows, or fewer blocks than buckets): then the caller
    reads the rows (and downsamples them with ``downsample.minmax_indices``)."""
    if since is not None and since >= 2**63 - 1:
        return []  # NOTE: nothing comes after the largest iteration SQLite holds
    start = -(2**63) if since is None else since + 1
    first_block = start // BLOCK + 1 if since is not None else -(2**62)
    # the rows of a block that ``since`` cuts are counted and read as rows (the bound kept
    # within SQLite's integers)
    head = c.execute("SELECT iteration, value FROM metrics WHERE run_id = ? AND key = ? AND "
                     "iteration >= ? AND iteration < ?",
                     (run_id, key, start, min(max(start, first_block * BLOCK), 2**63 - 1))
                     ).fetchall() if since is not None else []
    blocks = c.execute("SELECT n, min_it, min_v, max_it, max_v FROM metric_blocks WHERE "
                       "run_id = ? AND key = ? AND block >= ? ORDER BY block",
                       (run_id, key, first_block)).fetchall()
    total = len(head) + sum(b[0] for b in blocks)
    buckets = (max_points - 2) // 2  # none for 2 or 3 points: the first and last only
    if total <= max_points or len(head) + len(blocks) < buckets:
        # few rows, or fewer blocks than buckets (each bucket would be a block or less): the
        # rows themselves are read (at most buckets * BLOCK of them)
        return None
    # the head's rows as blocks of one point each, then the blocks, in iteration order
    parts = [(1, it, v, it, v) for it, v in head] + [tuple(b) for b in blocks]
    keep = set()
    for i in range(buckets):
        group = parts[i * len(parts) // buckets:(i + 1) * len(parts) // buckets]
        lows = [(p[2], p[1]) for p in group if p[2] is not None]
        highs = [(p[4], -p[3]) for p in group if p[4] is not None]
        if lows:
            keep.add(min(lows)[1])
            keep.add(-max(highs)[1])
        elif group:
            keep.add(group[0][1])  # nothing but gaps: one point shows the gap
    # NOTE: two queries: MIN and MAX in one statement scan the range; apart, each is one
    # index lookup
    for f in ("MIN", "MAX"):
        end = c.execute(f"SELECT {f}(iteration) FROM metrics WHERE run_id = ? AND key = ? "  # noqa: S608
                        "AND iteration >= ?", (run_id, key, start)).fetchone()[0]
        if end is not None:
            keep.add(end)
    return c.execute("SELECT iteration, epoch, value, time FROM metrics WHERE run_id = ? AND "
                     "key = ? AND iteration IN (SELECT value FROM json_each(?)) ORDER BY "
                     "iteration", (run_id, key, json.dumps(sorted(keep)))).fetchall()
