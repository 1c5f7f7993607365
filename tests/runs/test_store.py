"""The run store: schema migration, one row per metric, run ids, bounded configs, deleting live
runs, orphans, fork's arguments, deleting checkpoints, and text for a terminal."""

import json
import multiprocessing as mp
import os
import socket
import sqlite3
import threading
import time

import numpy as np
import pytest

import labkit as lk
from labkit import checkpoint as ckpt
from labkit.runs import MAX_CONFIG_BYTES, RunStore, RunStoreError, is_run_id, printable, schema

# the schema labkit wrote before it had a version (copied from labkit/runs/store.py at f99ee2d)
OLD_SCHEMA = """
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
OLD_A, OLD_B, GONE = "20250101-120000-abc123", "20250101-120500-0f0f0f", "20250101-000000-dead00"


def old_store(path):
    """A store file as labkit wrote it before the schema had a version: two runs (B forked from
    A's checkpoint), metric rows repeated by a resume, rows of a deleted run."""
    c = sqlite3.connect(path)
    c.executescript(OLD_SCHEMA)
    run = ("INSERT INTO runs (id, name, status, created, config, parent_run, parent_checkpoint, "
           "directory) VALUES (?,?,?,?,?,?,?,?)")
    c.execute(run, (OLD_A, "a", "finished", 1.0, '{"lr": 0.1}', None, None, "/x/" + OLD_A))
    c.execute(run, (OLD_B, "b", "created", 2.0, '{"lr": 0.5}', OLD_A, "/x/ckpt-2", None))
    rows = [(OLD_A, s, 0, "loss", float(s), 0.0) for s in range(1, 5)]
    rows += [(OLD_A, s, 0, "loss", 10.0 * s, 1.0) for s in (3, 4)]  # logged again: newest wins
    rows += [(OLD_A, 4, 0, "acc", 0.5, 0.0), (GONE, 1, 0, "loss", 9.0, 0.0)]
    c.executemany("INSERT INTO metrics VALUES (?,?,?,?,?,?)", rows)
    c.execute("INSERT INTO checkpoints (run_id, step, epoch, path, size, metrics, valid, created) "
              "VALUES (?,?,?,?,?,?,?,?)", (OLD_A, 2, 0, "/x/ckpt-2", 10, '{"loss": 2.0}', 1, 3.0))
    c.commit()
    c.close()


def test_an_old_store_is_migrated_with_nothing_lost(tmp_path):
    path = tmp_path / "runs.sqlite"
    old_store(path)
    store = RunStore(path)
    assert store._conn().execute("PRAGMA user_version").fetchone()[0] == schema.VERSION
    assert [r["id"] for r in store.list()] == [OLD_B, OLD_A]  # old ids stay addressable
    assert store.get(OLD_A)["config"] == {"lr": 0.1} and store.get(OLD_B)["parent_run"] == OLD_A
    m = store.metrics(OLD_A)
    assert m["loss"]["iteration"] == [1, 2, 3, 4] and m["loss"]["value"] == [1, 2, 30, 40]
    assert m["acc"]["iteration"] == [4]
    (c,) = store.checkpoints(OLD_A)
    assert c["iteration"] == 2 and c["metrics"] == {"loss": 2.0} and "step" not in c
    assert store.get(OLD_B)["parent_checkpoint_id"] == c["id"]
    # the deleted run's rows were kept by the migration; remove_orphans removes them
    assert store.metrics(GONE)["loss"]["value"] == [9.0]
    assert store.remove_orphans() == {"metrics": 1, "checkpoints": 0}
    assert store.remove_orphans() == {"metrics": 0, "checkpoints": 0}
    # from now on one row per run, key and iteration
    store.add_metrics(OLD_A, [(4, 0, "loss", 44.0, 2.0)])
    assert store.metrics(OLD_A, "loss")["loss"]["value"] == [1, 2, 30, 44]
    store.close()
    assert RunStore(path).metrics(OLD_A, "loss")["loss"]["value"] == [1, 2, 30, 44]  # reopened


def test_a_migration_that_fails_changes_nothing(tmp_path, monkeypatch):
    path = tmp_path / "runs.sqlite"
    old_store(path)
    before = sorted(sqlite3.connect(path).iterdump())
    real = schema._from_0

    def fail_midway(c):
        real(c)
        raise sqlite3.OperationalError("disk I/O error (injected after the migration's work)")

    monkeypatch.setattr(schema, "_from_0", fail_midway)
    with pytest.raises(RunStoreError, match="cannot read or write"):
        RunStore(path)
    assert sorted(sqlite3.connect(path).iterdump()) == before  # one transaction: all or none
    monkeypatch.setattr(schema, "_from_0", real)
    assert RunStore(path).metrics(OLD_A, "loss")["loss"]["value"] == [1, 2, 30, 40]


def test_many_openers_of_an_old_store_migrate_it_once(tmp_path):
    path = tmp_path / "runs.sqlite"
    old_store(path)
    n = 6
    start, errors, stores = threading.Barrier(n), [], []

    def open_it():
        start.wait()
        try:
            stores.append(RunStore(path))
        except Exception as e:  # noqa: BLE001 - collected and asserted below
            errors.append(e)

    threads = [threading.Thread(target=open_it) for _ in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == [] and len(stores) == n
    assert all(s.metrics(OLD_A, "loss")["loss"]["value"] == [1, 2, 30, 40] for s in stores)


def test_a_store_from_a_newer_labkit_is_refused(tmp_path):
    path = tmp_path / "runs.sqlite"
    RunStore(path).close()
    c = sqlite3.connect(path)
    c.execute("PRAGMA user_version = 99")
    c.close()
    with pytest.raises(RunStoreError, match="newer labkit .*upgrade labkit"):
        RunStore(path)


def test_every_metric_row_is_stored_once_and_the_newest_wins(tmp_path):
    """A run killed after an epoch's metrics reached the store but before its next checkpoint
    logs those iterations again after resuming: the store keeps one row each."""
    store = RunStore(tmp_path / "runs.sqlite")
    rid = store.create_run("resumed")
    store.add_metrics(rid, [(i, i // 6, "loss", 1.0 / i, 0.0) for i in range(1, 13)])
    store.add_metrics(rid, [(i, i // 6, "loss", 2.0 / i, 1.0) for i in range(7, 13)])
    store.add_metrics(rid, [(13, 2, "loss", 5.0, 2.0), (13, 2, "loss", 6.0, 2.0)])
    m = store.metrics(rid)["loss"]
    assert m["iteration"] == list(range(1, 14))
    assert m["value"][6:12] == [2.0 / i for i in range(7, 13)] and m["value"][-1] == 6.0
    n = store._conn().execute("SELECT COUNT(*) FROM metrics").fetchone()[0]
    assert n == 13 and store.max_iteration(rid) == 13


def test_run_ids_are_unique_sortable_and_readable(tmp_path, monkeypatch):
    before = time.strftime("%Y%m%d", time.gmtime())
    ids = [lk.runs.new_run_id() for _ in range(20_000)]
    after = time.strftime("%Y%m%d", time.gmtime())  # NOTE: another day if midnight passed
    assert len(set(ids)) == len(ids) and all(is_run_id(i) for i in ids)
    assert len(ids[0]) == 32 and ids[0][:8] in (before, after)
    assert is_run_id("20261203-081500-3fa9c1")  # the ids of older stores stay valid
    for bad in ["20261203-081500-3FA9C1", "20261203-081500-3fa9c1\n", "../x", "", None, 7,
                "20261203-081500-3fa9c1d27b8e0a4", "20261203-081500-" + "a" * 17]:
        assert not is_run_id(bad), bad
    # sortable by creation time
    clock = iter([(2026, 1, 2, 3, 4, 5, 0, 0, 0), (2026, 1, 2, 3, 4, 6, 0, 0, 0)])
    monkeypatch.setattr(time, "gmtime", lambda *a: time.struct_time(next(clock)))
    a, b = lk.runs.new_run_id(), lk.runs.new_run_id()
    assert a.startswith("20260102-030405-") and a < b


def test_a_colliding_id_is_retried(tmp_path, monkeypatch):
    import sys

    store_module = sys.modules["labkit.runs.store"]  # (lk.runs.store is the function)
    store = RunStore(tmp_path / "runs.sqlite")
    taken = store.create_run("first")
    ids = iter([taken, taken, "20260101-000000-0123456789abcdef"])
    monkeypatch.setattr(store_module, "new_run_id", lambda: next(ids))
    assert store.create_run("second") == "20260101-000000-0123456789abcdef"


def create_runs(path, n, out):
    store = RunStore(path)
    out.put([store.create_run(f"r{i}") for i in range(n)])


def test_thousands_of_runs_created_at_once_by_processes_and_threads(tmp_path):
    path = tmp_path / "runs.sqlite"
    RunStore(path)
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    procs = [ctx.Process(target=create_runs, args=(path, 1500, q)) for _ in range(2)]
    for p in procs:
        p.start()
    threads = [threading.Thread(target=create_runs, args=(path, 500, q)) for _ in range(2)]
    for t in threads:
        t.start()
    got = [q.get(timeout=300) for _ in range(4)]
    for t in threads:
        t.join()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    ids = [i for part in got for i in part]
    assert len(ids) == 4000 == len(set(ids)) == len(RunStore(path).list())


@pytest.mark.parametrize("config, match", [
    ([1, 2], "must be a dict"),
    ("lr=0.1", "must be a dict"),
    ({1: "a"}, "keys must be strings"),
    ({"a": {2: "b"}}, "keys must be strings"),
    ({"lr": float("nan")}, "finite"),
    ({"lr": [1.0, float("inf")]}, "finite"),
    ({"w": np.zeros(3)}, "JSON values .*ndarray"),
    ({"s": {1, 2}}, "JSON values .*set"),
    ({"f": print}, "JSON values"),
    ({"big": "x" * MAX_CONFIG_BYTES}, "the limit is 65,536 .*MAX_CONFIG_BYTES"),
    ({"deep": json.loads("[" * 200 + "]" * 200)}, "deeper than 32"),
])
def test_configs_are_bounded_json_objects(tmp_path, config, match):
    store = RunStore(tmp_path / "runs.sqlite")
    with pytest.raises(RunStoreError, match=match) as e:
        store.create_run("bad", config=config)
    assert e.value.reason == "invalid" and store.list() == []
    rid = store.create_run("good", config={"lr": 0.1, "layers": [1, {"a": None}], "ok": True})
    with pytest.raises(RunStoreError, match=match):
        store.update_run(rid, config=config)
    assert store.get(rid)["config"] == {"lr": 0.1, "layers": [1, {"a": None}], "ok": True}


def test_a_config_with_a_deep_hostile_nesting_is_refused_not_a_recursion_error(tmp_path):
    store = RunStore(tmp_path / "runs.sqlite")
    deep: dict = {}
    d = deep
    for _ in range(100_000):
        d["x"] = {}
        d = d["x"]
    with pytest.raises(RunStoreError, match="deeper than"):
        store.create_run("deep", config=deep)


def live_run(store, **fields):
    rid = store.create_run("live")
    store.update_run(rid, **{"status": "running", "heartbeat": time.time(), "pid": os.getpid(),
                             "host": socket.gethostname(), **fields})
    return rid


def test_a_live_run_is_not_deleted_unless_forced(tmp_path):
    store = RunStore(tmp_path / "runs.sqlite")
    for fields in [{}, {"status": "paused"}, {"host": "another-machine", "pid": 1}]:
        rid = live_run(store, **fields)
        with pytest.raises(RunStoreError, match="is training .*force=True") as e:
            store.delete(rid)
        assert e.value.reason == "live" and store.get(rid)
        store.delete(rid, force=True)
        assert not store.exists(rid)
    # not live: stale heartbeat, a process that ended, a finished run
    p = mp.get_context("spawn").Process(target=time.sleep, args=(0,))
    p.start()
    p.join()
    for fields in [{"heartbeat": time.time() - 3600}, {"pid": p.pid}, {"status": "finished"}]:
        rid = live_run(store, **fields)
        store.delete(rid)
        assert not store.exists(rid)


def test_writes_for_a_deleted_run_create_no_rows(tmp_path):
    store = RunStore(tmp_path / "runs.sqlite")
    rid = store.create_run("doomed")
    store.add_metrics(rid, [(1, 0, "loss", 1.0, 0.0)])
    store.add_checkpoint(rid, 1, 0, tmp_path / "c", 1)
    store.delete(rid)
    writes = [lambda: store.add_metrics(rid, [(2, 0, "loss", 1.0, 0.0)]),
              lambda: store.add_checkpoint(rid, 2, 0, tmp_path / "c2", 1),
              lambda: store.update_run(rid, heartbeat=time.time())]
    for write in writes:
        with pytest.raises(RunStoreError, match="was deleted") as e:
            write()
        assert e.value.reason == "deleted"
    c = store._conn()
    assert c.execute("SELECT COUNT(*) FROM metrics").fetchone()[0] == 0
    assert c.execute("SELECT COUNT(*) FROM checkpoints").fetchone()[0] == 0


def test_a_writer_racing_a_deleter_leaves_no_orphans(tmp_path):
    store = RunStore(tmp_path / "runs.sqlite")
    rid = live_run(store)
    written = threading.Event()
    failures = []

    def write():
        i = 0
        try:
            while True:
                i += 1
                store.add_metrics(rid, [(i, 0, "loss", float(i), 0.0)])
                store.add_checkpoint(rid, i, 0, tmp_path / f"c{i}", 1)
                written.set()
        except RunStoreError as e:
            failures.append(e)

    t = threading.Thread(target=write)
    t.start()
    written.wait()
    with pytest.raises(RunStoreError):
        store.delete(rid)  # it is training
    store.delete(rid, force=True)
    t.join()
    assert failures and failures[0].reason == "deleted"
    assert store.remove_orphans() == {"metrics": 0, "checkpoints": 0}


def test_orphans_left_by_older_versions_are_removed(tmp_path):
    store = RunStore(tmp_path / "runs.sqlite")
    keep = store.create_run("kept")
    store.add_metrics(keep, [(1, 0, "loss", 1.0, 0.0)])
    c = store._conn()
    c.executemany("INSERT INTO metrics (run_id, iteration, epoch, key, value, time) "
                  "VALUES (?,?,?,?,?,?)", [(GONE, i, 0, "loss", 1.0, 0.0) for i in range(500)])
    c.executemany("INSERT INTO checkpoints (run_id, iteration, epoch, path, size) VALUES "
                  "(?,?,?,?,?)", [(GONE, i, 0, f"/x/{i}", 1) for i in range(3)])
    assert lk.runs.RunStore.remove_orphans(store) == {"metrics": 500, "checkpoints": 3}
    assert store.metrics(keep)["loss"]["value"] == [1.0]


def test_every_public_store_method_reports_damage_as_run_store_error():
    public = [n for n in dir(RunStore) if not n.startswith("_") and callable(getattr(RunStore, n))]
    assert len(public) >= 20
    assert all(getattr(getattr(RunStore, n), "guarded", False) for n in [*public, "__init__"])


def test_list_filters_by_status_and_a_literal_name(tmp_path):
    store = RunStore(tmp_path / "runs.sqlite")
    store.create_run("a_b")
    store.create_run("axb")
    store.create_run("100%")
    assert [r["name"] for r in store.list(name="a_b")] == ["a_b"]
    assert [r["name"] for r in store.list(name="0%")] == ["100%"]
    assert len(store.list(status="created")) == 3
    with pytest.raises(RunStoreError, match="status must be one of"):
        store.list(status="bogus")


@pytest.fixture
def home_store(tmp_path):
    with lk.runs.use_store(tmp_path / "runs.sqlite") as store:
        yield store


def run_with_checkpoints(store, tmp_path, n=2, config=None):
    """A run with a folder named after it and ``n`` real checkpoints in it."""
    rid = store.create_run("with checkpoints", config=config or {"lr": 0.1})
    folder = tmp_path / "runs" / rid
    store.update_run(rid, directory=str(folder), status="finished")
    ids = []
    for i in range(n):
        p = ckpt.save(folder / "checkpoints", {"w": np.arange(3.0) + i}, name=f"ckpt-{i:08d}")
        ids.append(store.add_checkpoint(rid, i, 0, p, 100))
    return rid, folder, ids


def test_fork_changes_any_config_key_also_checkpoint_and_run_id(home_store, tmp_path):
    config = {"lr": 0.1, "checkpoint": "a", "run_id": "b", "changes": 1}
    rid, _, (first, _) = run_with_checkpoints(home_store, tmp_path, config=config)
    # the changes dict holds any key (even "changes"); keywords are a shorthand for the rest
    child = lk.runs.fork(rid, first, {"checkpoint": "x", "run_id": "y", "changes": 2}, lr=0.5)
    rec = lk.runs.get(child)
    assert rec["config"] == {"lr": 0.5, "checkpoint": "x", "run_id": "y", "changes": 2}
    assert rec["parent_run"] == rid and rec["parent_checkpoint_id"] == first
    newest = lk.runs.get(lk.runs.fork(rid, None, {"checkpoint": "z"}))
    assert newest["parent_checkpoint_id"] == lk.runs.checkpoints(rid)[-1]["id"]
    assert newest["config"]["checkpoint"] == "z"
    with pytest.raises(TypeError, match="both in changes and as keyword"):
        lk.runs.fork(rid, None, {"lr": 1.0}, lr=2.0)
    with pytest.raises(TypeError, match="changes must be a dict"):
        lk.runs.fork(rid, None, [("lr", 1.0)])
    with pytest.raises(TypeError, match="checkpoint must be"):
        lk.runs.fork(rid, True)
    other, _, (theirs,) = run_with_checkpoints(home_store, tmp_path, n=1)
    with pytest.raises(RunStoreError, match=f"belongs to run {other}") as e:
        lk.runs.fork(rid, theirs)
    assert e.value.reason == "invalid"
    with pytest.raises(RunStoreError, match="not in the config"):
        lk.runs.fork(rid, None, {"nope": 1})
    with pytest.raises(RunStoreError, match="MAX_CONFIG_BYTES"):
        lk.runs.fork(rid, None, {"lr": "x" * MAX_CONFIG_BYTES})


def test_delete_checkpoint_removes_only_checkpoints_inside_their_run_folder(home_store,
                                                                          tmp_path):
    rid, folder, (first, second) = run_with_checkpoints(home_store, tmp_path)
    path = lk.runs.store().checkpoint(first)["path"]
    assert lk.runs.delete_checkpoint(first) is True
    assert not os.path.exists(path) and [c["id"] for c in lk.runs.checkpoints(rid)] == [second]
    # a record of another run that points into this run's folder (a fork's pruning): the
    # record goes, the files stay
    other = home_store.create_run("other")
    home_store.update_run(other, directory=str(tmp_path / "runs" / other))
    stray = home_store.add_checkpoint(other, 1, 0, lk.runs.store().checkpoint(second)["path"], 1)
    assert lk.runs.delete_checkpoint(stray) is False
    assert os.path.isdir(lk.runs.store().checkpoint(second)["path"])
    with pytest.raises(RunStoreError, match="no checkpoint"):
        lk.runs.store().checkpoint(stray)
    # a link inside the run folder, and a folder that is not a checkpoint
    (folder / "not-a-checkpoint").mkdir()
    (folder / "not-a-checkpoint" / "data.txt").write_text("keep me")
    os.symlink(tmp_path, folder / "link")
    for p in (folder / "not-a-checkpoint", folder / "link"):
        cid = home_store.add_checkpoint(rid, 9, 0, p, 1)
        assert lk.runs.delete_checkpoint(cid) is False and os.path.lexists(p)
    with pytest.raises(RunStoreError, match=f"run {other} has no checkpoint {second}"):
        lk.runs.delete_checkpoint(second, run_id=other)


def test_delete_removes_only_a_folder_named_after_the_run(home_store, tmp_path):
    rid, folder, _ = run_with_checkpoints(home_store, tmp_path)
    lk.runs.delete(rid)
    assert not folder.exists() and not home_store.exists(rid)
    precious = tmp_path / "precious"
    precious.mkdir()
    rid = home_store.create_run("pointing elsewhere", directory=precious)
    lk.runs.delete(rid)
    assert precious.is_dir() and not home_store.exists(rid)


def test_printable_escapes_what_a_terminal_would_obey():
    assert printable("plain é 中 😀 a\u200db") == "plain é 中 😀 a\u200db"
    assert printable("\x1b[2J\rx\x07") == "\\x1b[2J\\x0dx\\x07"
    assert printable("evil\u202egnp.exe\u2028\x85\ufeff") == \
        "evil\\u202egnp.exe\\u2028\\x85\\ufeff"
    assert printable(None) == "" and printable(12) == "12"
