"""One process trains a run at a time, and a run that trains looks alive however long its
batches take; the store being busy does not end training, and a failure is recorded even when
the store fails too. From a probe that killed and raced processes (/tmp/probe13): a batch of
80 s showed the run dead (deletable without force, resumed by a second process, both then
trained it); two `labkit resume` at once both trained it; a store locked for 35 s by another
process ended the run, and its failure was not recorded."""

import fcntl
import subprocess
import sys
import time
from pathlib import Path

import pytest

import labkit as lk
from labkit.errors import RunStoreError, TrainingError
from labkit.runs.checks import refuse
from labkit.training import commands, recorder

from .helpers import make_loop

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def store(tmp_path):
    with lk.runs.use_store(tmp_path / "runs.sqlite") as s:
        yield s


def test_a_run_another_process_trains_is_refused_before_anything_is_recorded(store):
    loop = make_loop({"epochs": 1})
    rid = loop.ensure_run()
    claim = loop.recorder.directory / recorder.CLAIM
    claim.parent.mkdir(parents=True, exist_ok=True)
    holder = subprocess.Popen(
        [sys.executable, "-c", "import fcntl, sys\nf = open(sys.argv[1], 'a+')\n"
         "fcntl.flock(f, fcntl.LOCK_EX)\nf.seek(0); f.truncate(); f.write('4242'); f.flush()\n"
         "print('held', flush=True)\nsys.stdin.read()", str(claim)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(TrainingError, match=rf"run {rid} is being trained by another "
                                                r"process \(pid 4242 on this machine\)"):
            loop.run()
        run = store.get(rid)
        assert run["status"] == "created" and store.metric_keys(rid) == []
        assert loop.status["iteration"] == 0
    finally:
        holder.stdin.close()
        holder.wait(timeout=30)
    loop.run()  # the claim went with the other process
    assert store.get(rid)["status"] == "finished"


def test_the_claim_goes_with_a_killed_process_and_is_released_after_each_run(store):
    loop = make_loop({"epochs": 1})
    rid = loop.ensure_run()
    claim = loop.recorder.directory / recorder.CLAIM
    claim.parent.mkdir(parents=True, exist_ok=True)
    killed = subprocess.Popen([sys.executable, "-c", "import fcntl, sys, time\n"
                               "f = open(sys.argv[1], 'a+'); fcntl.flock(f, fcntl.LOCK_EX)\n"
                               "print('held', flush=True); time.sleep(600)", str(claim)],
                              stdout=subprocess.PIPE, text=True)
    assert killed.stdout.readline().strip() == "held"
    killed.kill()
    killed.wait(timeout=30)
    loop.run(max_iterations=3)
    with open(claim, "a+") as f:  # released when run() returned: another process may train
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        fcntl.flock(f, fcntl.LOCK_UN)
    loop.run()
    assert store.get(rid)["status"] == "finished"


def test_a_long_batch_keeps_the_run_alive(store, monkeypatch):
    monkeypatch.setattr(commands, "BEAT", 0.05)
    loop = make_loop({"epochs": 1})
    rid = loop.ensure_run()
    beats = []

    def long_batch(lp):
        if lp.status["iteration"] == 2:
            first = store.get(rid)["heartbeat"]
            deadline = time.monotonic() + 60
            while store.get(rid)["heartbeat"] <= first:  # the training thread is stuck here
                assert time.monotonic() < deadline, "no heartbeat while a batch ran"
                time.sleep(0.02)
            beats.append(store.get(rid)["heartbeat"] - first)

    loop.add(long_batch, event="after_batch")
    loop.run()
    assert beats and beats[0] > 0


def test_a_store_locked_for_a_while_does_not_end_training(store, monkeypatch):
    loop = make_loop({"epochs": 1})
    rid = loop.ensure_run()
    real, refused = store.add_metrics, []

    def add_metrics(run_id, rows):
        if len(refused) < 3:  # another process holds the store's write lock, then lets go
            refused.append(len(rows))
            e = refuse("runs.sqlite: the run store stayed locked by another process", "failed")
            e.locked = True
            raise e
        return real(run_id, rows)

    monkeypatch.setattr(store, "add_metrics", add_metrics)
    loop.run()
    assert len(refused) == 3 and store.get(rid)["status"] == "finished"
    assert store.metrics(rid, "loss")["loss"]["iteration"] == list(range(1, 13))  # none lost


def test_a_run_that_fails_with_the_store_records_how_it_ended(store, monkeypatch):
    loop = make_loop({"epochs": 1})
    rid = loop.ensure_run()

    def add_metrics(run_id, rows):
        raise refuse("runs.sqlite: cannot read or write the run store (disk full)", "failed")

    monkeypatch.setattr(store, "add_metrics", add_metrics)
    with pytest.raises(RunStoreError, match="disk full"):
        loop.run()
    run = store.get(rid)
    assert run["status"] == "failed" and "disk full" in run["error"]
