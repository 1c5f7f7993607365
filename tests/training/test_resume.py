"""Exact resume: check_resume on both devices, SIGKILL at random moments (checkpoint writes
included), Ctrl-C once and twice, lk.resume and fork, and the CLI."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import labkit as lk
from labkit import checkpoint
from labkit import training as T

from .helpers import make_loop

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("at", [1, 7, 12, 13, 30])
def test_check_resume_is_identical(dev, at):
    r = T.check_resume(lambda: make_loop({"device": str(dev)}), at_batch=at)
    assert r.identical, r
    assert r.compared > 100 and "identical" in repr(r)


def test_check_resume_with_worker_processes():
    r = T.check_resume(lambda: make_loop({"workers": 2}), at_batch=10)
    assert r.identical, r


def test_check_resume_finds_a_difference():
    """State kept outside the checkpoint (here NumPy's global RNG) is caught and named."""
    def leaky():
        loop = make_loop()
        loss_fn = loop.loss_fn

        def noisy(model, batch):
            out = loss_fn(model, batch)
            out["noise"] = float(np.random.random())
            return out
        loop.loss_fn = noisy
        return loop
    np.random.seed(0)
    r = T.check_resume(leaky, at_batch=5)
    assert not r.identical
    assert "'noise'" in r.first_difference and "DIFFERENT" in repr(r)


def env():
    return {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}


CHILD = """
import sys
import labkit as lk
from tests.training.helpers import make_loop
if __name__ == "__main__":
    loop = lk.training.build(make_loop, {cfg})
    loop.run()
"""


def final_state(run_id):
    run = lk.runs.get(run_id)
    last = checkpoint.latest(Path(run["directory"]) / "checkpoints")
    state = checkpoint.load(last)
    losses = [r["loss"] for r in state["log"]["rows"]]
    return state["status"]["iteration"], state["model"], losses


def test_sigkill_at_random_moments_then_resume_is_bitwise_identical(tmp_path):
    # a model of ~1 M parameters, checkpointed every batch: about half the time is spent
    # writing checkpoints, so kills land in writes as well as in steps
    cfg = {"epochs": 4, "checkpoint_every": 1, "width": 2048}
    ref = T.build(make_loop, cfg)
    t = time.monotonic()
    ref.run()
    duration = time.monotonic() - t
    ref_params = ref.model.state_dict()
    ref_losses = ref.log.series("loss")[1]
    script = tmp_path / "train.py"
    script.write_text(CHILD.format(cfg=cfg))
    rng = np.random.default_rng(7)
    outcomes = []
    for trial in range(5):
        home = tmp_path / f"home{trial}"
        e = {**env(), "LABKIT_HOME": str(home)}
        p = subprocess.Popen([sys.executable, str(script)], env=e, cwd=ROOT,
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        db = home / "runs.sqlite"
        t0 = time.monotonic()
        while not list((home / "runs").glob("*/checkpoints/ckpt-*")) and p.poll() is None:
            time.sleep(0.01)
            assert time.monotonic() - t0 < 60
        time.sleep(rng.uniform(0.0, 0.7 * duration))
        p.send_signal(signal.SIGKILL)
        assert p.wait(10) == -signal.SIGKILL, "the run ended before it was killed"
        with lk.runs.use_store(db):
            (run,) = lk.runs.list()
            ckdir = Path(run["directory"]) / "checkpoints"
            # every checkpoint directory that is visible is complete and intact
            visible = checkpoint.list_checkpoints(ckdir)
            assert visible and all(checkpoint.verify(c) is None for c in visible), \
                [checkpoint.verify(c) for c in visible]
            killed_at = checkpoint.manifest(visible[-1])["step"]
            out = subprocess.run([sys.executable, "-m", "labkit.cli", "resume", run["id"]],
                                 env=e, cwd=ROOT, capture_output=True, text=True, timeout=120)
            assert out.returncode == 0, out.stderr
            it, params, losses = final_state(run["id"])
            assert lk.runs.get(run["id"])["status"] == "finished"
            steps = lk.runs.metrics(run["id"], ["loss"])["loss"]["step"]
        assert it == ref.status["iteration"]
        assert losses == ref_losses
        for k, v in ref_params.items():
            assert np.array_equal(params[k], v), (trial, k)
        assert steps == list(range(1, it + 1))  # the store has each step once, none lost
        outcomes.append(killed_at)
    print("killed after the checkpoints of steps", outcomes)
    assert len(set(outcomes)) > 1, f"the kills all landed at the same step: {outcomes}"


INTERRUPT = """
import sys, time
import labkit as lk
from tests.training.helpers import make_loop
if __name__ == "__main__":
    loop = lk.training.build(make_loop, {"epochs": 100000})
    slow = lambda loop: time.sleep(0.02)
    loop.add(slow, event="after_batch")
    loop.run()
    print("returned", loop.status["iteration"], loop.last_checkpoint, flush=True)
"""


def _interrupt(tmp_path, presses):
    script = tmp_path / "interrupt.py"
    script.write_text(INTERRUPT)
    home = tmp_path / "home"
    e = {**env(), "LABKIT_HOME": str(home)}
    p = subprocess.Popen([sys.executable, str(script)], env=e, cwd=ROOT, text=True,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    t0 = time.monotonic()
    while not (home / "runs.sqlite").exists() and time.monotonic() - t0 < 60:
        time.sleep(0.05)
    time.sleep(1.0)
    for _ in range(presses):
        p.send_signal(signal.SIGINT)
        time.sleep(0.005)
    out, err = p.communicate(timeout=60)
    with lk.runs.use_store(home / "runs.sqlite"):
        (run,) = lk.runs.list()
    return p.returncode, out, err, run


def test_ctrl_c_once_finishes_the_batch_checkpoints_and_stops(tmp_path):
    rc, out, err, run = _interrupt(tmp_path, 1)
    assert rc == 0, err
    assert "Ctrl-C: finishing the current batch, then writing a checkpoint and stopping" in err
    assert "Press Ctrl-C again to stop at once" in err
    assert run["status"] == "interrupted"
    it, path = out.split()[1:3]
    assert checkpoint.manifest(path)["step"] == int(it) > 0
    assert checkpoint.verify(path) is None


def test_ctrl_c_twice_stops_at_once(tmp_path):
    rc, out, err, run = _interrupt(tmp_path, 2)
    assert rc != 0 and "KeyboardInterrupt" in err
    assert "Ctrl-C again: stopping now; no checkpoint is written" in err
    assert "returned" not in out
    assert run["status"] == "interrupted"


def test_resume_by_run_id_and_fork(tmp_path):
    with lk.runs.use_store(tmp_path / "runs.sqlite"):
        loop = T.build(make_loop, {"epochs": 2})
        loop.run(max_batches=5)
        loop.save_checkpoint()
        assert lk.runs.get(loop.run_id)["status"] == "paused"
        resumed = lk.resume(loop.run_id)
        assert resumed.run_id == loop.run_id and resumed.status["iteration"] == 24
        ref = T.build(make_loop, {"epochs": 2}).run()
        assert resumed.log.series("loss") == ref.log.series("loss")
        # fork with a changed hyperparameter: a new run, lineage recorded, trained further
        child = lk.runs.fork(loop.run_id, epochs=3)
        rec = lk.runs.get(child)
        assert rec["parent_run"] == loop.run_id and rec["config"]["epochs"] == 3
        forked = lk.resume(child)
        assert forked.run_id == child and forked.status["iteration"] == 36
        assert lk.runs.get(child)["status"] == "finished"
        with pytest.raises(lk.runs.RunStoreError, match=r"\['lr_decay'\] are not in the config"):
            lk.runs.fork(loop.run_id, lr_decay=0.5)


def test_resume_needs_a_factory_for_notebook_loops(tmp_path):
    with lk.runs.use_store(tmp_path / "runs.sqlite"):
        loop = make_loop()  # not built with lk.training.build: no factory recorded
        loop.run(max_batches=3)
        loop.save_checkpoint()
        with pytest.raises(T.TrainingError, match="pass make_loop="):
            lk.resume(loop.run_id)
        again = lk.resume(loop.run_id, make_loop=lambda cfg: make_loop(cfg), run=False)
        assert again.status["iteration"] == 3


def test_loading_a_checkpoint_into_a_different_loop_is_refused(tmp_path):
    loop = make_loop()
    loop.run(max_batches=2)
    path = loop.save_checkpoint(tmp_path)
    other = make_loop()
    other.extensions = [e for e in other.extensions
                        if not isinstance(e, T.TrainingDataMonitoring)]
    with pytest.raises(lk.CheckpointError, match=r"state for extensions "
                                                 r"\['TrainingDataMonitoring'\], which this loop"):
        other.load_checkpoint(path)
    extra = make_loop()
    extra.add(T.EarlyStopping())
    with pytest.warns(UserWarning, match=r"\['EarlyStopping'\] are not in the checkpoint"):
        extra.load_checkpoint(path)
    wide = make_loop({"hidden": 8})
    with pytest.raises(lk.CheckpointError, match="shape mismatches"):
        wide.load_checkpoint(path)


def test_labkit_demo_trains_to_95_percent(tmp_path):
    e = {**env(), "LABKIT_HOME": str(tmp_path)}
    t = time.monotonic()
    out = subprocess.run([sys.executable, "-m", "labkit.cli", "demo"], env=e, cwd=ROOT,
                         capture_output=True, text=True, timeout=300)
    secs = time.monotonic() - t
    assert out.returncode == 0, out.stdout + out.stderr
    acc = float(out.stdout.split("test accuracy ")[1].split("%")[0]) / 100
    assert acc >= 0.95, out.stdout
    assert secs < 60
    run_id = out.stdout.split("\nrun ")[1].split(":")[0]
    shown = subprocess.run([sys.executable, "-m", "labkit.cli", "runs", "show", run_id], env=e,
                           cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert "status finished" in shown.stdout and "metric valid_accuracy" in shown.stdout
    assert "checkpoint step" in shown.stdout
    listed = subprocess.run([sys.executable, "-m", "labkit.cli", "runs"], env=e, cwd=ROOT,
                            capture_output=True, text=True, timeout=60)
    assert run_id in listed.stdout and "digits-mlp" in listed.stdout
    rm = subprocess.run([sys.executable, "-m", "labkit.cli", "runs", "rm", run_id], env=e,
                        cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert rm.returncode == 0 and not (tmp_path / "runs" / run_id).exists()
    missing = subprocess.run([sys.executable, "-m", "labkit.cli", "resume", run_id], env=e,
                             cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert missing.returncode == 1 and f"no run '{run_id}'" in missing.stderr
    json.dumps(acc)


DIE_IN_WRITE = """
import os, signal
import labkit as lk
import labkit.checkpoint as C
from tests.training.helpers import make_loop
real, calls = C._write_file, [0]

def dying(path, pieces):
    calls[0] += 1
    if calls[0] == 3 * 7 + 1:  # the tensors of the 8th checkpoint: half written, then killed
        data = b"".join(bytes(memoryview(p).cast("B")) for p in pieces)
        with open(path, "wb") as f:
            f.write(data[: len(data) // 2])
        os.kill(os.getpid(), signal.SIGKILL)
    return real(path, pieces)

C._write_file = dying
if __name__ == "__main__":
    lk.training.build(make_loop, {cfg}).run()
"""


def test_sigkill_in_the_middle_of_a_checkpoint_write(tmp_path):
    cfg = {"epochs": 2, "checkpoint_every": 1}
    ref = T.build(make_loop, cfg).run()
    script = tmp_path / "die.py"
    script.write_text(DIE_IN_WRITE.format(cfg=cfg))
    e = {**env(), "LABKIT_HOME": str(tmp_path / "home")}
    p = subprocess.run([sys.executable, str(script)], env=e, cwd=ROOT, timeout=120)
    assert p.returncode == -signal.SIGKILL
    with lk.runs.use_store(tmp_path / "home" / "runs.sqlite"):
        (run,) = lk.runs.list()
        assert run["status"] == "dead"  # "running" in the store, but its process is gone
        ckdir = Path(run["directory"]) / "checkpoints"
        leftovers = [c.name for c in ckdir.iterdir() if ".tmp-" in c.name]
        assert len(leftovers) == 1 and leftovers[0].startswith(".ckpt-00000008.tmp-")
        assert checkpoint.manifest(checkpoint.latest(ckdir))["step"] == 7
        resumed = lk.resume(run["id"])
    assert resumed.log.series("loss") == ref.log.series("loss")
    for k, v in ref.model.state_dict().items():
        assert np.array_equal(resumed.model.state_dict()[k], v)


def test_resume_skips_a_corrupted_newest_checkpoint_and_marks_it(tmp_path):
    with lk.runs.use_store(tmp_path / "runs.sqlite"):
        loop = T.build(make_loop, {"epochs": 2, "checkpoint_every": 4})
        loop.run(max_batches=9)
        newest = checkpoint.latest(loop.directory / "checkpoints")
        assert newest.name == "ckpt-00000008"
        f = newest / "tensors.safetensors"
        raw = f.read_bytes()
        f.write_bytes(raw[:-1] + bytes([raw[-1] ^ 1]))
        with pytest.warns(UserWarning, match="skipping checkpoint .*ckpt-00000008.*CRC-32"):
            resumed = lk.resume(loop.run_id, run=False)
        assert resumed.status["iteration"] == 4
        valid = {c["step"]: c["valid"] for c in lk.runs.checkpoints(loop.run_id)}
        assert valid == {4: True, 8: False}
