"""Downsampling from the summary blocks (``labkit/runs/blocks.py``) against the rows it
stands for: at most max_points points, all of them real rows in order, the first and last,
the lowest and highest value; the blocks kept right through upserts, truncation, deletion and
migration."""

import math
import random

import pytest

from labkit.runs import blocks
from labkit.runs.store import RunStore


@pytest.fixture
def store(tmp_path):
    return RunStore(tmp_path / "runs.sqlite")


def rows_of(store, rid, key, since=None):
    q = "SELECT iteration, value FROM metrics WHERE run_id = ? AND key = ?"
    args = [rid, key]
    if since is not None:
        q += " AND iteration > ?"
        args.append(since)
    return store._conn().execute(q + " ORDER BY iteration", args).fetchall()


def check(store, rid, key, max_points, since=None):
    got = store.metrics(rid, [key], since_iteration=since, max_points=max_points)[key]
    rows = rows_of(store, rid, key, since)
    its, vals = got["iteration"], got["value"]
    assert len(its) <= max_points
    assert its == sorted(set(its)), "points out of order or twice"
    truth = dict((it, v) for it, v in rows)
    assert all(truth[it] == v for it, v in zip(its, vals)), "a point that is not a row"
    if rows:
        assert its[0] == rows[0][0] and its[-1] == rows[-1][0], "first or last point lost"
        finite = [v for _, v in rows if v is not None]
        if finite and max_points >= 4:  # room for one bucket's lowest and highest
            assert min(finite) in vals and max(finite) in vals, "the extremes were dropped"
    return its


def blocks_match_rows(store, rid):
    """The stored blocks equal blocks recomputed from the rows."""
    c = store._conn()
    stored = sorted(tuple(r) for r in c.execute(
        "SELECT key, block, n, min_v, max_v FROM metric_blocks WHERE run_id = ?", (rid,)))
    want = {}
    for key, it, v in c.execute("SELECT key, iteration, value FROM metrics WHERE run_id = ?",
                                (rid,)):
        b = want.setdefault((key, it // blocks.BLOCK), [0, []])
        b[0] += 1
        if v is not None:
            b[1].append(v)
    assert stored == sorted((k, b, n, min(vs) if vs else None, max(vs) if vs else None)
                            for (k, b), (n, vs) in want.items())


def test_random_series_downsample_to_real_rows_keeping_ends_and_extremes(store):
    rng = random.Random(0)
    rid = store.create_run("r")
    for trial in range(30):
        key = f"k{trial}"
        n = rng.choice([1, 5, 300, 1000, 5000, 20_000])
        start = rng.randrange(0, 700)
        step = rng.choice([1, 1, 3, 257])
        rows = []
        for i in range(n):
            v = rng.gauss(0, 1) * math.exp(-i / (n + 1))
            if rng.random() < 0.01:
                v = float("nan")  # stored as NULL: a gap
            elif rng.random() < 0.001:
                v = 1e6  # a spike
            rows.append((start + i * step, 0, key, v, 0.0))
        store.add_metrics(rid, rows)
        for mp in (2, 3, 10, 101, 2000):
            check(store, rid, key, mp)
            since = rng.choice([None, start - 1, start + n * step // 3, start + n * step])
            check(store, rid, key, mp, since)
    blocks_match_rows(store, rid)


def test_blocks_follow_upserts_truncation_deletion(store):
    rid = store.create_run("r")
    store.add_metrics(rid, [(i, 0, "loss", float(i % 97), 0.0) for i in range(3000)])
    store.add_metrics(rid, [(1000, 0, "loss", -5.0, 0.0), (2999, 0, "loss", 500.0, 0.0)])
    blocks_match_rows(store, rid)
    assert -5.0 in store.metrics(rid, ["loss"], max_points=10)["loss"]["value"]
    store.truncate_metrics(rid, after_iteration=1500)
    blocks_match_rows(store, rid)
    its = check(store, rid, "loss", 10)
    assert its[-1] == 1500
    store.add_metrics(rid, [(i, 0, "loss", 1.0, 0.0) for i in range(1501, 1600)])
    blocks_match_rows(store, rid)
    store.delete(rid)
    assert store._conn().execute("SELECT COUNT(*) FROM metric_blocks").fetchone()[0] == 0


def test_a_store_without_blocks_gets_them_when_migrated(tmp_path):
    import sqlite3

    from labkit.runs import schema

    path = tmp_path / "runs.sqlite"
    s = RunStore(path)
    rid = s.create_run("r")
    s.add_metrics(rid, [(i, 0, "loss", float(-i), 0.0) for i in range(2000)])
    s.close()
    c = sqlite3.connect(path)  # as a version-2 store had it: no blocks
    c.execute("DROP TABLE metric_blocks")
    c.execute("PRAGMA user_version = 2")
    c.commit()
    c.close()
    s = RunStore(path)
    assert s._conn().execute("PRAGMA user_version").fetchone()[0] == schema.VERSION
    blocks_match_rows(s, rid)
    assert check(s, rid, "loss", 20)[-1] == 1999
