"""Checkpoint folders that more than one writer uses: two Checkpoint extensions of one loop
(the rolling one pruned the per-epoch archive's), two runs given one ``directory=`` (the second
replaced the first's checkpoints, and the first then resumed or forked from the second's
weights), a run whose checkpoints are in its own ``directory=`` (resume by id found none), and
a run resumed while it trains in another process (two loops trained into one folder)."""

import os
import socket
import time
import warnings

import numpy as np
import pytest

import labkit as lk
from labkit import checkpoint as ckpt
from labkit import training as T
from labkit.errors import CheckpointError, TrainingError

from .helpers import make_loop


def make(config):
    """The helpers' loop with a Checkpoint every 2 iterations into ``config["ckdir"]``."""
    loop = make_loop({k: v for k, v in config.items() if k != "ckdir"})
    loop.add(T.Checkpoint(every=2, unit="iterations", keep_last=2, directory=config["ckdir"]))
    return loop


def _names(d):
    return sorted(p.name for p in ckpt.list_checkpoints(d))


def test_a_rolling_checkpoint_keeps_what_a_per_epoch_one_keeps(tmp_path):
    with lk.runs.use_store(tmp_path / "runs.sqlite"):
        loop = make_loop({"checkpoint_every": 1})          # every iteration, keep_last=2
        archive = loop.add(T.Checkpoint(every=1, unit="epochs", keep_last=5))
        loop.run()
        assert [s["name"] for s in archive.saved] == ["ckpt-00000012", "ckpt-00000024",
                                                      "ckpt-00000036"]
        assert _names(loop.checkpoint_dir) == ["ckpt-00000012", "ckpt-00000024",
                                               "ckpt-00000035", "ckpt-00000036"]
        assert sorted(c["iteration"] for c in lk.runs.checkpoints(loop.run_id)) == [12, 24, 35,
                                                                                     36]
        # NOTE: resumed, the archive still holds its three; the rolling one its newest two
        again = make_loop({"checkpoint_every": 1, "epochs": 4})
        again.add(T.Checkpoint(every=1, unit="epochs", keep_last=5))
        again.attach(lk.runs.get(loop.run_id))
        again.load_checkpoint()
        again.run()
        assert _names(loop.checkpoint_dir) == ["ckpt-00000012", "ckpt-00000024",
                                               "ckpt-00000036", "ckpt-00000047",
                                               "ckpt-00000048"]


def test_a_second_run_never_replaces_the_first_runs_checkpoint(tmp_path):
    shared = tmp_path / "shared"
    with lk.runs.use_store(tmp_path / "runs.sqlite"):
        first = T.build(make, {"ckdir": str(shared), "epochs": 1})
        first.run()
        before = {p.name: ckpt.manifest(p)["run_id"] for p in ckpt.list_checkpoints(shared)}
        assert set(before.values()) == {first.run_id} and len(before) == 2
        second = T.build(make, {"ckdir": str(shared), "epochs": 1, "lr": 0.1})
        with pytest.raises(CheckpointError, match=rf"ckpt-00000010 is run {first.run_id}'s "
                                                  r"checkpoint; refusing to replace it .* own "
                                                  "folder"):
            second.run()
        after = {p.name: ckpt.manifest(p)["run_id"] for p in ckpt.list_checkpoints(shared)}
        assert {k: after[k] for k in before} == before
        # NOTE: its checkpoints at iterations the first run pruned are its own, and resuming
        # the first run passes them over: it loads its own newest (12)
        assert {after[k] for k in after if k not in before} <= {second.run_id}
        resumed = lk.resume(first.run_id, run=False)
        assert resumed.status["iteration"] == 12
        assert resumed.status["resumed_from"].endswith("ckpt-00000012")


def test_a_run_resumes_by_id_from_its_own_checkpoint_folder(tmp_path):
    mine = tmp_path / "my-ckpts"
    with lk.runs.use_store(tmp_path / "runs.sqlite"):
        loop = T.build(make, {"ckdir": str(mine), "epochs": 2})
        loop.run(max_iterations=15)
        assert _names(mine) == ["ckpt-00000012", "ckpt-00000014"]
        resumed = lk.resume(loop.run_id)
        assert resumed.status["iteration"] == 24
        ref = T.build(make, {"ckdir": str(tmp_path / "ref"), "epochs": 2}).run()
        assert resumed.log.series("loss") == ref.log.series("loss")
        w, r = resumed.model.state_dict(), ref.model.state_dict()
        assert all(np.array_equal(w[k], r[k]) for k in w)


def test_a_run_training_in_another_process_is_not_resumed(tmp_path):
    with lk.runs.use_store(tmp_path / "runs.sqlite"):
        loop = T.build(make_loop, {"epochs": 2})
        loop.run(max_iterations=5)
        loop.save_checkpoint()
        loop.close()
        store = lk.runs.store()
        # NOTE: as another machine's process would leave it: running, a fresh heartbeat
        store.update_run(loop.run_id, status="running", heartbeat=time.time(), pid=1,
                         host="another-" + socket.gethostname())
        with pytest.raises(TrainingError, match=rf"run {loop.run_id} is training now .*stop "
                                                 r"it first"):
            lk.resume(loop.run_id)
        assert lk.runs.get(loop.run_id)["status"] == "running"
        assert [c["iteration"] for c in lk.runs.checkpoints(loop.run_id)] == [5]
        # NOTE: this process's own (a loop paused in a notebook) and a dead one: resumed
        store.update_run(loop.run_id, pid=os.getpid(), host=socket.gethostname())
        assert lk.resume(loop.run_id, run=False).status["iteration"] == 5
        store.update_run(loop.run_id, heartbeat=time.time() - 3600, host="another")
        assert lk.resume(loop.run_id).status["iteration"] == 24


def test_a_checkpoint_written_but_not_recorded_is_recorded_on_resume(tmp_path):
    # NOTE: a process killed between writing a checkpoint and recording it left one that no
    # pruning ever deleted (a SIGKILL there is what the record's removal stands for here)
    with lk.runs.use_store(tmp_path / "runs.sqlite"):
        loop = T.build(make_loop, {"epochs": 2, "checkpoint_every": 2})
        loop.run(max_iterations=10)
        store = lk.runs.store()
        newest = max(store.checkpoints(loop.run_id), key=lambda c: c["iteration"])
        assert newest["iteration"] == 10
        store.remove_checkpoint(newest["id"])
        loop.close()
        resumed = lk.resume(loop.run_id)
        assert resumed.status["resumed_from"].endswith("ckpt-00000010")
        assert _names(resumed.checkpoint_dir) == ["ckpt-00000022", "ckpt-00000024"]
        assert [c["iteration"] for c in store.checkpoints(loop.run_id)] == [22, 24]


def test_a_fork_may_change_its_pipelines_settings_a_resume_may_not(tmp_path):
    with lk.runs.use_store(tmp_path / "runs.sqlite"):
        loop = T.build(make_loop, {"epochs": 2, "checkpoint_every": 4, "flip_p": 0.5})
        loop.run(max_iterations=9)
        # the same run with another flip probability: refused at once (not each checkpoint
        # in turn: the loop is built otherwise), naming the setting
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            with pytest.raises(lk.CheckpointError, match="is not this loop's .*RandomFlip with "
                                                         "p = '0.5', this one has '0.9'"):
                lk.resume(loop.run_id, run=False,
                          make_loop=lambda cfg: make_loop({**cfg, "flip_p": 0.9}))
        assert all(c["valid"] for c in lk.runs.checkpoints(loop.run_id))  # none marked
        # a fork with it changed goes on from the parent's checkpoint with its own setting
        child = lk.runs.fork(loop.run_id, flip_p=0.9)
        forked = lk.resume(child, run=False)
        assert forked.stream.p == 0.9 and forked.status["iteration"] == 8
        forked.run()
        assert lk.runs.get(child)["status"] == "finished"


def test_a_loop_built_with_another_batch_size_is_told_at_once(tmp_path):
    """Each checkpoint was tried in turn, a warning each, and the error listed them all as
    if they were damaged: the loop is built otherwise, and nothing older would load."""
    with lk.runs.use_store(tmp_path / "runs.sqlite"):
        loop = T.build(make_loop, {"epochs": 2, "checkpoint_every": 4})
        loop.run(max_iterations=9)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            with pytest.raises(lk.CheckpointError, match=r"ckpt-00000008: .*the saved stream is "
                                                         r"not this loop's .*batch_size: saved 8, "
                                                         r"here 4"):
                lk.resume(loop.run_id, run=False,
                          make_loop=lambda cfg: make_loop({**cfg, "batch_size": 4}))
        assert [(c["iteration"], c["valid"]) for c in lk.runs.checkpoints(loop.run_id)] == [
            (4, True), (8, True)]
