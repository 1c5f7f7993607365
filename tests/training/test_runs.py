"""The run store: concurrent writers lose no rows, dead runs are shown dead, queries."""

import multiprocessing as mp
import os
import time

import pytest

import labkit as lk
from labkit.runs import RunStore, RunStoreError


def writer(path, run_id, n, worker):
    store = RunStore(path)
    rows = []
    for i in range(n):
        rows.append((i, 0, f"w{worker}", float(i), time.time()))
        if len(rows) == 50:
            store.add_metrics(run_id, rows)
            store.update_run(run_id, heartbeat=time.time())
            rows = []
    store.add_metrics(run_id, rows)


def test_four_processes_write_at_once_and_lose_nothing(tmp_path):
    path = tmp_path / "runs.sqlite"
    store = RunStore(path)
    rid = store.create_run("concurrent")
    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=writer, args=(path, rid, 10_000, w)) for w in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
        assert p.exitcode == 0
    m = store.metrics(rid)
    assert sorted(m) == ["w0", "w1", "w2", "w3"]
    assert all(m[k]["iteration"] == list(range(10_000)) for k in m)
    assert store._conn().execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_status_dead_when_the_process_or_the_heartbeat_is_gone(tmp_path):
    store = RunStore(tmp_path / "runs.sqlite")
    alive = store.create_run("alive")
    store.update_run(alive, status="running", heartbeat=time.time(), pid=os.getpid())
    p = mp.get_context("spawn").Process(target=time.sleep, args=(0,))
    p.start()
    p.join()
    gone = store.create_run("gone")
    store.update_run(gone, status="running", heartbeat=time.time(), pid=p.pid)
    stale = store.create_run("stale")
    store.update_run(stale, status="running", heartbeat=time.time() - 3600, pid=os.getpid())
    assert store.get(alive)["status"] == "running"
    assert store.get(gone)["status"] == "dead" and store.get(gone)["stored_status"] == "running"
    assert store.get(stale)["status"] == "dead"
    # a paused run is live while its process is (a paused loop keeps its heartbeat); one whose
    # process ended (run(max_iterations=N) returned) is still paused, waiting to be continued
    paused = store.create_run("paused")
    store.update_run(paused, status="paused", heartbeat=time.time(), pid=os.getpid())
    ended = store.create_run("paused, process ended")
    store.update_run(ended, status="paused", heartbeat=time.time(), pid=p.pid)
    assert store.get(paused)["status"] == "paused" and store.is_live(store.get(paused))
    assert store.get(ended)["status"] == "paused" and not store.is_live(store.get(ended))
    assert {r["name"] for r in store.list(status="dead")} == {"gone", "stale"}


def test_metrics_queries_and_errors(tmp_path):
    store = RunStore(tmp_path / "runs.sqlite")
    rid = store.create_run("q", config={"lr": 0.1})
    store.add_metrics(rid, [(i, i // 10, "loss", 1.0 / (i + 1), 0.0) for i in range(100)])
    store.add_metrics(rid, [(i, i // 10, "acc", i / 100, 0.0) for i in range(0, 100, 10)])
    m = store.metrics(rid, ["loss"], since_iteration=89)
    assert m["loss"]["iteration"] == list(range(90, 100)) and m["loss"]["epoch"][0] == 9
    d = store.metrics(rid, "loss", max_points=6)["loss"]
    # first, last, and each of 2 buckets' lowest and highest (loss falls: its two ends)
    assert d["iteration"] == [0, 1, 49, 50, 98, 99]
    store.add_metrics(rid, [(37, 3, "loss", 5.0, 0.0)])  # a spike survives downsampling
    assert 37 in store.metrics(rid, "loss", max_points=6)["loss"]["iteration"]
    assert store.metric_keys(rid) == ["acc", "loss"]
    assert store.get(rid)["config"] == {"lr": 0.1}
    store.truncate_metrics(rid, after_iteration=49)
    assert store.max_iteration(rid) == 49
    with pytest.raises(RunStoreError, match="no run 'nope'"):
        store.get("nope")
    with pytest.raises(ValueError, match="status must be one of"):
        store.update_run(rid, status="exploded")
    store.delete(rid)
    assert store.list() == []


def test_a_loop_mirrors_its_log_to_the_store(tmp_path):
    from .helpers import make_loop

    with lk.runs.use_store(tmp_path / "runs.sqlite"):
        loop = make_loop({"epochs": 2})
        loop.run()
        rec = lk.runs.get(loop.run_id)
        m = lk.runs.metrics(loop.run_id)
    assert rec["status"] == "finished" and rec["name"] == "helper"
    assert rec["progress"]["iteration"] == 24 and rec["progress"]["epoch_length"] == 12
    assert m["loss"]["value"] == loop.log.series("loss")[1]
    assert m["train_loss"]["iteration"] == [12, 24]


def test_the_old_step_names_still_work_for_now(tmp_path):
    """Deprecated aliases, until every caller says ``iteration``: ``max_step``,
    ``truncate_metrics(after_step=)``, ``metrics(since_step=)`` and records' ``["step"]``."""
    store = RunStore(tmp_path / "runs.sqlite")
    rid = store.create_run("old names")
    store.add_metrics(rid, [(i, 0, "loss", float(i), 0.0) for i in range(10)])
    store.add_checkpoint(rid, 9, 0, tmp_path / "ckpt", 1)
    with pytest.deprecated_call():
        assert store.max_step(rid) == 9
    with pytest.deprecated_call():
        store.truncate_metrics(rid, after_step=7)
    with pytest.deprecated_call():
        assert store.metrics(rid, since_step=5)["loss"]["step"] == [6, 7]
    with pytest.deprecated_call():
        assert store.checkpoints(rid)[0]["step"] == 9
    assert "step" not in store.checkpoints(rid)[0]  # an alias, not a key: JSON never sees it


def test_a_corrupt_store_file_is_reported(tmp_path):
    bad = tmp_path / "runs.sqlite"
    bad.write_bytes(b"this is not sqlite" * 100)
    with pytest.raises(RunStoreError, match="run store is damaged.*Move the file away") as e:
        RunStore(bad)
    assert str(bad) in str(e.value) and e.value.reason == "damaged"
