"""Faults against the run store: damaged database files and concurrent writers, readers and
deleters (threads and processes).

- Damage: a store with runs, metrics and checkpoints is written, then copies of its file are
  damaged (each page zeroed and overwritten with noise, each byte of the 100-byte header
  flipped, sampled bytes flipped, the file truncated). Every public ``RunStore`` method is
  called on each copy: it returns, or raises ``RunStoreError``; never a raw ``sqlite3`` error,
  another exception, or a hang.
- Concurrency: writers, readers and a deleter race; no metric row of a surviving run is lost
  or doubled, no row outlives its run, nothing raises anything but ``RunStoreError``.

Each test counts its cases in a ``Tally`` (``damage.py``): the suite prints cases tried, held
and time at the end of the session.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import random
import shutil
import socket
import sqlite3
import threading
import time
import traceback
from pathlib import Path

import pytest

from labkit.errors import RunStoreError
from labkit.runs import RunStore

from .damage import Tally

PAGE = 4096
HANG = 60.0  # seconds one case may take before it counts as a hang


# ---- small helpers -----------------------------------------------------------------------
def build_store(path: Path) -> dict:
    """A store worth damaging: 3 runs (one forked), 3,000 metric rows, checkpoints; the WAL
    folded into the main file and every connection closed."""
    store = RunStore(path)
    ids = [store.create_run(f"run{i}", config={"lr": 0.1 * i, "layers": [64, 32]})
           for i in range(3)]
    for rid in ids:
        store.update_run(rid, status="finished", progress={"iteration": 1000, "epoch": 2},
                         directory=f"/nowhere/{rid}")
        store.add_metrics(rid, [(i, i // 500, k, 1.0 / i, float(i)) for i in range(1, 501)
                                for k in ("loss", "acc")])
        for it in (250, 500):
            store.add_checkpoint(rid, it, it // 500, f"/nowhere/{rid}/ckpt-{it}", 1000,
                                 {"loss": 0.1})
    child = store.create_run("child", config={"lr": 0.5, "layers": [64, 32]}, parent_run=ids[0])
    sweep = store.create_sweep("sweep", None, "{}", {"metric": "loss", "mode": "min"},
                               [{"lr": 0.1}, {"lr": 0.2}])
    store.update_trials(sweep, {0: {"status": "finished", "value": 0.5}})
    c = store._conn()
    c.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    store.close()
    return {"runs": [*ids, child], "checkpoint": 1, "sweep": sweep,
            "folder": str(path.parent / "trial-runs")}


def calls(store: RunStore, ids: dict) -> list:
    """One call of every public RunStore method (names checked against the class below)."""
    rid, cid, sid = ids["runs"][0], ids["checkpoint"], ids["sweep"]
    run = {"status": "running", "heartbeat": time.time(), "host": "elsewhere", "pid": 1}
    return [
        ("list", lambda: store.list()),
        ("list", lambda: store.list(status="dead", name="run")),
        ("get", lambda: store.get(rid)),
        ("exists", lambda: store.exists(rid)),
        ("children", lambda: store.children(rid)),
        ("metric_keys", lambda: store.metric_keys(rid)),
        ("metrics", lambda: store.metrics(rid)),
        ("metrics", lambda: store.metrics(rid, ["loss"], since_iteration=100, max_points=7)),
        ("max_iteration", lambda: store.max_iteration(rid)),
        ("max_step", lambda: store.max_iteration(rid)),
        ("checkpoints", lambda: store.checkpoints(rid)),
        ("checkpoint", lambda: store.checkpoint(cid)),
        ("is_live", lambda: store.is_live(run)),
        ("add_metrics", lambda: store.add_metrics(rid, [(501, 1, "loss", 0.5, 0.0)])),
        ("truncate_metrics", lambda: store.truncate_metrics(rid, 400)),
        ("update_run", lambda: store.update_run(rid, heartbeat=time.time(),
                                                progress={"iteration": 2})),
        ("add_checkpoint", lambda: store.add_checkpoint(rid, 600, 1, "/nowhere/c", 1)),
        ("add_command", lambda: store.add_command(rid, "pause")),
        ("pending_commands", lambda: store.pending_commands(rid)),
        ("command", lambda: store.command(1)),
        ("ack_command", lambda: store.ack_command(1, "paused", 3)),
        ("set_checkpoint", lambda: store.set_checkpoint(cid, valid=0)),
        ("remove_checkpoint", lambda: store.remove_checkpoint(cid)),
        ("remove_checkpoint_unless_forked",
         lambda: store.remove_checkpoint_unless_forked(cid, "/nowhere")),
        ("create_run", lambda: store.create_run("new", config={"a": 1})),
        ("remove_orphans", lambda: store.remove_orphans()),
        ("delete", lambda: store.delete(ids["runs"][1], force=True)),
        ("page", lambda: store.page(status="live", limit=5, metric="loss", ids=True)),
        ("annotate", lambda: store.annotate(rid, name="renamed", tags=["a"], note="n")),
        ("annotate", lambda: store.annotate(rid, add_tags="b", remove_tags=["a"])),
        ("lineage", lambda: store.lineage(rid)),
        ("get_sweep", lambda: store.get_sweep(sid)),
        ("list_sweeps", lambda: store.list_sweeps()),
        ("sweep_summaries", lambda: store.sweep_summaries(limit=5)),
        ("trials", lambda: store.trials(sid)),
        ("update_sweep", lambda: store.update_sweep(sid, heartbeat=time.time())),
        ("update_trials", lambda: store.update_trials(sid, {1: {"status": "running"}})),
        ("start_trial_run", lambda: store.start_trial_run(sid, 1, "t1", {"lr": 0.2}, None,
                                                          ids["folder"])),
        ("add_trials", lambda: store.add_trials(sid, [{"lr": 0.3}])),
        ("clear_sweep_request", lambda: store.clear_sweep_request(sid, "pause")),
        ("claim_sweep", lambda: store.claim_sweep(sid, lambda rec: None, heartbeat=time.time())),
        ("create_sweep", lambda: store.create_sweep("s2", None, "{}", {"metric": "loss"},
                                                    [{"lr": 1}])),
        ("close", lambda: store.close()),
    ]


def public_methods() -> set[str]:
    return {n for n in dir(RunStore) if not n.startswith("_") and callable(getattr(RunStore, n))}


def damages(pristine: bytes, rng: random.Random):
    """(name, damaged bytes) for every page zeroed and filled with noise, every header byte
    flipped, 150 sampled single-byte flips, 30 sampled 16-byte smears, 5 truncations."""
    n_pages = len(pristine) // PAGE
    for p in range(n_pages):
        page = slice(p * PAGE, (p + 1) * PAGE)
        for kind, fill in (("zeroed", bytes(PAGE)), ("noise", rng.randbytes(PAGE))):
            b = bytearray(pristine)
            b[page] = fill
            yield f"page {p} {kind}", bytes(b)
    for i in range(100):
        b = bytearray(pristine)
        b[i] ^= 0xFF
        yield f"header byte {i} flipped", bytes(b)
    for _ in range(150):
        b = bytearray(pristine)
        i = rng.randrange(len(b))
        b[i] ^= rng.randrange(1, 256)
        yield f"byte {i} flipped", bytes(b)
    for _ in range(30):
        b = bytearray(pristine)
        i = rng.randrange(len(b) - 16)
        b[i:i + 16] = rng.randbytes(16)
        yield f"bytes {i}..{i + 16} smeared", bytes(b)
    for frac in (0.0, 0.1, 0.5, 0.9, 0.99):
        yield f"truncated to {frac:.0%}", pristine[:int(len(pristine) * frac)]


def run_case(path: Path, ids: dict) -> list[str]:
    """Open the damaged store and make every call; the problems found (empty: it held)."""
    problems = []
    try:
        store = RunStore(path)
    except RunStoreError as e:
        return [] if str(path) in str(e) else [f"open: RunStoreError without the file: {e}"]
    except BaseException as e:  # noqa: BLE001 - any other exception is what this test finds
        return [f"open: {type(e).__module__}.{type(e).__name__}: {e}"]
    try:
        for name, call in calls(store, ids):
            try:
                call()
            except RunStoreError as e:
                if getattr(e, "reason", None) in ("damaged", "failed") and str(path) not in str(e):
                    problems.append(f"{name}: damage reported without the file: {e}")
            except BaseException as e:  # noqa: BLE001
                problems.append(f"{name}: {type(e).__module__}.{type(e).__name__}: {e}\n"
                                f"{traceback.format_exc(limit=-3)}")
    finally:
        store.close()
    return problems


def with_watchdog(fn, *args):
    """``fn(*args)`` on a thread; ("hang", None) if it takes longer than HANG seconds."""
    out = {}
    t = threading.Thread(target=lambda: out.setdefault("r", fn(*args)), daemon=True)
    t.start()
    t.join(HANG)
    return ("hang", None) if t.is_alive() else ("done", out.get("r", ["the case raised"]))


# ---- damaged files -----------------------------------------------------------------------
def test_every_call_on_a_damaged_store_returns_or_raises_run_store_error(tmp_path):
    ids = build_store(tmp_path / "pristine.sqlite")
    covered = {name for name, _ in calls(RunStore(tmp_path / "pristine.sqlite"), ids)}
    assert covered == public_methods(), "a public method has no call in this test"
    pristine = (tmp_path / "pristine.sqlite").read_bytes()
    assert len(pristine) >= 8 * PAGE
    # the undamaged store answers every call
    shutil.copy(tmp_path / "pristine.sqlite", tmp_path / "check.sqlite")
    assert run_case(tmp_path / "check.sqlite", ids) == []
    tally = Tally("run store: damaged database files, every public call")
    for i, (what, data) in enumerate(damages(pristine, random.Random(20261203))):
        path = tmp_path / f"case{i}.sqlite"
        path.write_bytes(data)
        state, problems = with_watchdog(run_case, path, ids)
        if state == "hang":
            tally.record(what, f"no answer within {HANG:.0f} s")
            break
        tally.record(what, " | ".join(problems[:3]) if problems else None)
        for suffix in ("", "-wal", "-shm"):
            Path(f"{path}{suffix}").unlink(missing_ok=True)
    assert tally.held == tally.tried >= 300, tally.report()


def test_damage_reports_name_the_file_and_what_to_do(tmp_path):
    ids = build_store(tmp_path / "runs.sqlite")
    data = bytearray((tmp_path / "runs.sqlite").read_bytes())
    data[2 * PAGE:] = bytes(len(data) - 2 * PAGE)  # every page after the second zeroed
    (tmp_path / "runs.sqlite").write_bytes(bytes(data))
    store = RunStore(tmp_path / "runs.sqlite")
    with pytest.raises(RunStoreError) as e:
        store.metrics(ids["runs"][0])
        store.list()
    assert e.value.reason == "damaged"
    assert str(tmp_path / "runs.sqlite") in str(e.value) and "Move the file away" in str(e.value)
    assert isinstance(e.value.__cause__, sqlite3.DatabaseError)


# ---- concurrency: threads ----------------------------------------------------------------
def live(store, name):
    rid = store.create_run(name)
    store.update_run(rid, status="running", heartbeat=time.time(), pid=os.getpid(),
                     host=socket.gethostname())
    return rid


def test_threads_write_read_and_delete_at_once(tmp_path):
    store = RunStore(tmp_path / "runs.sqlite")
    n_writers, n_rows, batch = 6, 3000, 50
    runs = [live(store, f"w{i}") for i in range(n_writers)]
    victims = set(runs[::2])  # deleted while their writers write
    started = [threading.Event() for _ in runs]
    stop_reading = threading.Event()
    errors, outcome = [], {}

    def writer(i, rid):
        try:
            for start in range(0, n_rows, batch):
                # every batch is sent twice (a resumed run logs iterations again)
                rows = [(it, it // 1000, "loss", it * 0.5, 0.0)
                        for it in range(start, start + batch)]
                store.add_metrics(rid, rows)
                store.add_metrics(rid, rows)
                if start % 500 == 0:
                    store.add_checkpoint(rid, start, 0, f"/nowhere/{rid}/{start}", 1)
                store.update_run(rid, heartbeat=time.time())
                started[i].set()
            outcome[rid] = "complete"
        except RunStoreError as e:
            outcome[rid] = e.reason
        except BaseException as e:  # noqa: BLE001
            errors.append(f"writer {i}: {type(e).__name__}: {e}")
        finally:
            started[i].set()

    def reader():
        reads = 0
        try:
            while not stop_reading.is_set():
                for r in store.list():
                    store.metrics(r["id"], max_points=50)
                    store.checkpoints(r["id"])
                reads += 1
        except RunStoreError as e:
            if e.reason not in ("not_found",):
                errors.append(f"reader: {e}")
        except BaseException as e:  # noqa: BLE001
            errors.append(f"reader: {type(e).__name__}: {e}")

    def deleter():
        try:
            for i, rid in enumerate(runs):
                if rid in victims:
                    started[i].wait()
                    try:
                        store.delete(rid)
                        errors.append(f"deleter: {rid} was deleted while it trained")
                    except RunStoreError as e:
                        if e.reason != "live":
                            raise
                    store.delete(rid, force=True)
        except BaseException as e:  # noqa: BLE001
            errors.append(f"deleter: {type(e).__name__}: {e}")

    tally = Tally("run store: threads writing, reading and deleting at once (runs)")
    threads = [threading.Thread(target=writer, args=(i, r)) for i, r in enumerate(runs)]
    threads += [threading.Thread(target=reader) for _ in range(2)]
    threads.append(threading.Thread(target=deleter))
    for t in threads:
        t.start()
    for t in threads[:n_writers]:
        t.join()
    threads[-1].join()
    stop_reading.set()
    for t in threads:
        t.join()
    check_store(store, runs, victims, n_rows, outcome, errors, tally)


def check_store(store, runs, victims, n_rows, outcome, errors, tally) -> None:
    """No raw errors, survivors complete and exact, victims gone without orphans."""
    c = store._conn()
    for rid in runs:
        n = tuple(c.execute("SELECT COUNT(*), COUNT(DISTINCT iteration) FROM metrics "
                            "WHERE run_id = ?", (rid,)).fetchone())
        if rid in victims:
            ok = not store.exists(rid) and n == (0, 0) and outcome.get(rid) in ("deleted",
                                                                                "complete")
        else:
            ok = outcome.get(rid) == "complete" and n == (n_rows, n_rows) and \
                store.metrics(rid)["loss"]["iteration"] == list(range(n_rows))
        tally.record(f"{'deleted' if rid in victims else 'kept'} run {rid}",
                     None if ok else f"outcome {outcome.get(rid)}, rows (all, distinct) {n}")
    orphans = [c.execute(f"SELECT COUNT(*) FROM {t} WHERE run_id NOT IN "  # noqa: S608
                         "(SELECT id FROM runs)").fetchone()[0] for t in ("metrics", "checkpoints")]
    tally.record("no orphan rows", None if orphans == [0, 0] else f"orphans {orphans}")
    tally.record("no raw errors", None if not errors else "; ".join(errors[:5]))
    assert tally.held == tally.tried, tally.report()


# ---- concurrency: processes --------------------------------------------------------------
def proc_writer(path, rid, n_rows, started, deleted, results):
    """Write ``n_rows`` rows (half of them twice); a victim (``deleted`` given) waits after its
    first batch until the deleter has deleted its run, then writes on."""
    store = RunStore(path)
    store.update_run(rid, status="running", heartbeat=time.time(), pid=os.getpid(),
                     host=socket.gethostname())
    try:
        for start in range(0, n_rows, 100):
            rows = [(it, 0, "loss", float(it), 0.0) for it in range(start, start + 100)]
            store.add_metrics(rid, rows)
            store.add_metrics(rid, rows[:50])
            store.update_run(rid, heartbeat=time.time())
            started.set()
            if deleted is not None:
                deleted.wait(120)
        store.update_run(rid, status="finished")
        results.put((rid, "complete"))
    except RunStoreError as e:
        results.put((rid, e.reason))
    except BaseException as e:  # noqa: BLE001
        results.put((rid, f"raw {type(e).__name__}: {e}"))
    finally:
        started.set()


def proc_reader(path, stop, results):
    store = RunStore(path)
    try:
        while not stop.is_set():
            for r in store.list():
                store.metrics(r["id"], ["loss"], max_points=20)
        results.put(("reader", "complete"))
    except RunStoreError as e:
        results.put(("reader", "complete" if e.reason == "not_found" else f"raw {e}"))
    except BaseException as e:  # noqa: BLE001
        results.put(("reader", f"raw {type(e).__name__}: {e}"))


def proc_deleter(path, victims, started, deleted, results):
    store = RunStore(path)
    try:
        for rid in victims:
            started[rid].wait(120)
            try:
                store.delete(rid)
                results.put(("deleter", f"{rid} deleted while it trained"))
                return
            except RunStoreError as e:
                if e.reason != "live":
                    raise
            store.delete(rid, force=True)
            deleted[rid].set()
        results.put(("deleter", "complete"))
    except BaseException as e:  # noqa: BLE001
        results.put(("deleter", f"raw {type(e).__name__}: {e}"))


def test_processes_write_read_and_delete_at_once(tmp_path):
    path = tmp_path / "runs.sqlite"
    store = RunStore(path)
    n_rows = 3000
    runs = [store.create_run(f"p{i}") for i in range(4)]
    victims = runs[1::2]
    ctx = mp.get_context("spawn")
    results, stop = ctx.Queue(), ctx.Event()
    started = {rid: ctx.Event() for rid in runs}
    deleted = {rid: ctx.Event() for rid in victims}
    tally = Tally("run store: processes writing, reading and deleting at once (runs)")
    procs = [ctx.Process(target=proc_writer, args=(path, rid, n_rows, started[rid],
                                                   deleted.get(rid), results)) for rid in runs]
    procs.append(ctx.Process(target=proc_reader, args=(path, stop, results)))
    procs.append(ctx.Process(target=proc_deleter,
                             args=(path, victims, started, deleted, results)))
    for p in procs:
        p.start()
    got = dict(results.get(timeout=300) for _ in range(len(runs) + 1))  # writers + deleter
    stop.set()
    got.update([results.get(timeout=60)])
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    errors = [f"{k}: {v}" for k, v in got.items() if v not in ("complete", "deleted")]
    got.pop("reader")
    got.pop("deleter")
    tally.record("every victim's writer was told its run was deleted",
                 None if all(got[v] == "deleted" for v in victims) else str(got))
    check_store(store, runs, set(victims), n_rows, got, errors, tally)
