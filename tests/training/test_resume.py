"""Exact resume: check_resume on both devices, SIGKILL at random moments (checkpoint writes
included), Ctrl-C once and twice, lk.resume and fork, and the CLI."""

import json
import os
import re
import signal
import subprocess
import sys
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
    r = T.check_resume(lambda: make_loop({"device": str(dev)}), at_iteration=at)
    assert r.identical, r
    assert r.compared > 100 and "identical" in repr(r)


def test_check_resume_with_worker_processes():
    r = T.check_resume(lambda: make_loop({"workers": 2}), at_iteration=10)
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
    r = T.check_resume(leaky, at_iteration=5)
    assert not r.identical
    assert "'noise'" in r.first_difference and "DIFFERENT" in repr(r)


def env():
    return {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}


KILL = """
import os, signal
import labkit as lk
import labkit.checkpoint as C
from tests.training.helpers import make_loop

AT, WHERE, NTH = {at!r}, {where!r}, {nth!r}


def die():
    os.kill(os.getpid(), signal.SIGKILL)


if __name__ == "__main__":
    loop = lk.training.build(make_loop, {cfg!r})
    if WHERE in ("before_batch", "after_batch"):  # in the middle of an iteration
        killer = loop.add(lambda loop: die() if loop.status["iteration"] == AT else None,
                          event=WHERE, priority=1000)
        killer.transient = True  # not part of the run: resume builds the loop without it
    else:  # inside the checkpoint write of iteration AT, at its NTH os.fsync or os.replace
        real, saving, calls = getattr(os, WHERE), [False], [0]

        def counted(*args, **kwargs):
            if saving[0]:
                calls[0] += 1
                if calls[0] == NTH:
                    die()
            return real(*args, **kwargs)

        setattr(os, WHERE, counted)
        real_save = C.save

        def save(*args, **kwargs):
            saving[0] = loop.status["iteration"] == AT
            try:
                return real_save(*args, **kwargs)
            finally:
                saving[0] = False

        C.save = save
    loop.run()
    raise SystemExit("the run ended before the chosen kill point")
"""

# where a process dies: in an iteration (before it, or after it was logged and before its
# metrics reached the store), or at the n-th fsync or rename of a checkpoint write
KILL_POINTS = [(3, "before_batch", 0), (7, "after_batch", 0), (12, "after_batch", 0),
               (5, "fsync", 1), (9, "fsync", 3), (10, "replace", 1), (14, "fsync", 5)]


def final_state(run_id):
    run = lk.runs.get(run_id)
    last = checkpoint.latest(Path(run["directory"]) / "checkpoints")
    state = checkpoint.load(last)
    losses = [r["loss"] for r in state["log"]["rows"]]
    return state["status"]["iteration"], state["model"], losses


@pytest.fixture(scope="module")
def uninterrupted():
    cfg = {"epochs": 3, "checkpoint_every": 1, "width": 256}
    ref = T.build(make_loop, cfg).run()
    ref.close()
    return cfg, ref


@pytest.mark.parametrize("at,where,nth", KILL_POINTS)
def test_sigkill_then_resume_is_bitwise_identical(tmp_path, uninterrupted, at, where, nth):
    """SIGKILL at a chosen point (deterministic: the child kills itself there), then
    ``labkit resume``: the run ends bit for bit as if nothing happened, every metric is in the
    store exactly once, and nothing the kill left behind is taken for a checkpoint."""
    cfg, ref = uninterrupted
    script = tmp_path / "train.py"
    script.write_text(KILL.format(at=at, where=where, nth=nth, cfg=cfg))
    home = tmp_path / "home"
    e = {**env(), "LABKIT_HOME": str(home)}
    p = subprocess.run([sys.executable, str(script)], env=e, cwd=ROOT, capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == -signal.SIGKILL, p.stderr
    with lk.runs.use_store(home / "runs.sqlite"):
        (run,) = lk.runs.list()
        assert run["status"] == "dead"  # "running" in the store, but its process is gone
        ckdir = Path(run["directory"]) / "checkpoints"
        visible = checkpoint.list_checkpoints(ckdir)
        assert visible and all(checkpoint.verify(c) is None for c in visible), \
            [checkpoint.verify(c) for c in visible]
        out = subprocess.run([sys.executable, "-m", "labkit.cli", "resume", run["id"]],
                             env=e, cwd=ROOT, capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stderr
        it, params, losses = final_state(run["id"])
        assert lk.runs.get(run["id"])["status"] == "finished"
        stored = lk.runs.metrics(run["id"])
    assert it == ref.status["iteration"]
    assert losses == ref.log.series("loss")[1]
    for k, v in ref.model.state_dict().items():
        assert np.array_equal(params[k], v), k
    for key in ref.log.keys():
        if key.startswith("time"):
            continue
        want_its, want = ref.log.series(key)
        assert stored[key]["iteration"] == want_its, key  # each value once, none lost
        assert stored[key]["value"] == pytest.approx(want, rel=0, abs=0), key


INTERRUPT = """
import sys
import labkit as lk
from tests.training.helpers import make_loop


def handshake(loop):
    if loop.status["iteration"] == 5:
        print("READY", flush=True)
        sys.stdin.readline()  # the test sends Ctrl-C now, then a line


if __name__ == "__main__":
    loop = lk.training.build(make_loop, {"epochs": 100000})
    loop.add(handshake, event="after_batch")
    loop.run()
    print("returned", loop.status["iteration"], loop.last_checkpoint, flush=True)
"""


def _interrupt(tmp_path, presses):
    """Ctrl-C ``presses`` times while the child waits inside iteration 5 (deterministic: each
    press is sent after the child answered the one before)."""
    script = tmp_path / "interrupt.py"
    script.write_text(INTERRUPT)
    home = tmp_path / "home"
    e = {**env(), "LABKIT_HOME": str(home)}
    p = subprocess.Popen([sys.executable, str(script)], env=e, cwd=ROOT, text=True,
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert p.stdout.readline().strip() == "READY"
        err = []
        for i in range(presses):
            p.send_signal(signal.SIGINT)
            want = "Ctrl-C again" if i else "Ctrl-C: finishing"
            while not any(want in line for line in err):
                line = p.stderr.readline()
                assert line, "".join(err)
                err.append(line)
        if presses == 1:
            p.stdin.write("go\n")
            p.stdin.flush()
        out, rest = p.communicate(timeout=120)
    finally:
        if p.poll() is None:
            p.kill()
    with lk.runs.use_store(home / "runs.sqlite"):
        (run,) = lk.runs.list()
    return p.returncode, out, "".join(err) + rest, run


def test_ctrl_c_once_finishes_the_batch_checkpoints_and_stops(tmp_path):
    rc, out, err, run = _interrupt(tmp_path, 1)
    assert rc == 0, err
    assert "Ctrl-C: finishing the current batch, then writing a checkpoint and stopping" in err
    assert "Press Ctrl-C again to stop at once" in err
    assert run["status"] == "interrupted"
    it, path = out.split()[1:3]
    assert it == "5"  # the batch it was in finished; no other started
    assert checkpoint.manifest(path)["iteration"] == 5
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
        loop.run(max_iterations=5)
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
        loop.run(max_iterations=3)
        loop.save_checkpoint()
        with pytest.raises(T.TrainingError, match="pass make_loop="):
            lk.resume(loop.run_id)
        again = lk.resume(loop.run_id, make_loop=lambda cfg: make_loop(cfg), run=False)
        assert again.status["iteration"] == 3


def test_loading_a_checkpoint_into_a_different_loop_is_refused(tmp_path):
    loop = make_loop()
    loop.run(max_iterations=2)
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
    out = subprocess.run([sys.executable, "-m", "labkit.cli", "demo"], env=e, cwd=ROOT,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    acc = float(out.stdout.split("test accuracy ")[1].split("%")[0]) / 100
    assert acc >= 0.95, out.stdout
    run_id = out.stdout.split("\nrun ")[1].split(":")[0]
    shown = subprocess.run([sys.executable, "-m", "labkit.cli", "runs", "show", run_id], env=e,
                           cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert "status finished" in shown.stdout and "metric valid_accuracy" in shown.stdout
    assert "checkpoint at iteration" in shown.stdout
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


def test_resume_skips_a_corrupted_newest_checkpoint_and_marks_it(tmp_path):
    with lk.runs.use_store(tmp_path / "runs.sqlite"):
        loop = T.build(make_loop, {"epochs": 2, "checkpoint_every": 4})
        loop.run(max_iterations=9)
        newest = checkpoint.latest(loop.directory / "checkpoints")
        assert newest.name == "ckpt-00000008"
        f = newest / "tensors.safetensors"
        raw = f.read_bytes()
        f.write_bytes(raw[:-1] + bytes([raw[-1] ^ 1]))
        with pytest.warns(UserWarning, match="skipping checkpoint .*ckpt-00000008.*CRC-32"):
            resumed = lk.resume(loop.run_id, run=False)
        assert resumed.status["iteration"] == 4
        valid = {c["iteration"]: c["valid"] for c in lk.runs.checkpoints(loop.run_id)}
        assert valid == {4: True, 8: False}


# ---- a newest checkpoint whose state the loop refuses: passed over like a damaged one ----------
def _refuse_counters(state):
    state["status"]["epoch_iteration"] = state["status"]["iteration"] + 5  # contradicts


def _refuse_late(state):
    # NOTE: refused by the Checkpoint extension's own load, after the model and the optimizer
    # were loaded: what was loaded must be put back before the older checkpoint is taken
    state["extensions"]["Checkpoint"] = {"saved": "ckpt-00000004"}


def _run_with_edited_newest(tmp_path, edit):
    """A run with checkpoints at iterations 4 and 8, the newest's state edited by ``edit``
    and saved again in its place (its files intact, labkit's manifest)."""
    loop = T.build(make_loop, {"epochs": 2, "checkpoint_every": 4})
    loop.run(max_iterations=9)
    newest = checkpoint.latest(loop.checkpoint_dir)
    assert newest.name == "ckpt-00000008"
    state = checkpoint.load(newest)
    edit(state)
    checkpoint.save(loop.checkpoint_dir, state, iteration=8, epoch=0, run_id=loop.run_id)
    return loop, newest


def _as_loaded_from(path, config):
    ref = make_loop(config)
    ref.load_checkpoint(path)
    return ref.state_dict()


@pytest.mark.parametrize("edit,why", [(_refuse_counters, r"status\['epoch_iteration'\] is 13"),
                                      (_refuse_late, "Checkpoint: the saved state must be")],
                         ids=["counters", "late"])
@pytest.mark.parametrize("by", ["run id", "run directory"])
def test_resume_skips_a_newest_checkpoint_whose_state_is_refused_and_marks_it(tmp_path, edit,
                                                                               why, by):
    """As a damaged one is: a warning naming it and why, the next older one loaded whole (not
    a part of the refused one left in the loop), the refused one marked invalid; named by its
    path, it is still refused."""
    from .helpers import same_state

    with lk.runs.use_store(tmp_path / "runs.sqlite"):
        loop, newest = _run_with_edited_newest(tmp_path, edit)
        with pytest.warns(UserWarning, match=f"skipping checkpoint .*ckpt-00000008: .*{why}"):
            resumed = lk.resume(loop.run_id if by == "run id" else loop.directory, run=False)
        older = loop.checkpoint_dir / "ckpt-00000004"
        assert resumed.status["iteration"] == 4
        assert resumed.status["resumed_from"] == str(older)
        want = _as_loaded_from(older, resumed.config)
        got = resumed.state_dict()
        for part in ("status", "model", "optimizer", "stream", "rng", "log", "extensions"):
            assert same_state(got[part], want[part]), part
        valid = {c["iteration"]: c["valid"] for c in lk.runs.checkpoints(loop.run_id)}
        assert valid == {4: True, 8: False}
        assert newest.is_dir()  # passed over, never deleted
        named = make_loop(resumed.config)
        before = named.state_dict()
        with pytest.raises(lk.CheckpointError, match=f"ckpt-00000008: .*{why}"):
            named.load_checkpoint(newest)
        assert same_state(named.state_dict(), before)


def test_resume_with_every_checkpoint_refused_raises_with_every_reason(tmp_path):
    from .helpers import same_state

    with lk.runs.use_store(tmp_path / "runs.sqlite"):
        loop, _ = _run_with_edited_newest(tmp_path, _refuse_counters)
        older = loop.checkpoint_dir / "ckpt-00000004"
        state = checkpoint.load(older)
        _refuse_late(state)
        checkpoint.save(loop.checkpoint_dir, state, iteration=4, run_id=loop.run_id)
        fresh = make_loop(loop.config)
        fresh.attach(lk.runs.get(loop.run_id))
        before = fresh.state_dict()
        with pytest.warns(UserWarning, match="skipping checkpoint"), \
                pytest.raises(lk.CheckpointError, match="no checkpoint that loads") as e:
            fresh.load_checkpoint()
        assert re.search(r"ckpt-00000008: .*status\['epoch_iteration'\] is 13", str(e.value))
        assert re.search(r"ckpt-00000004: .*Checkpoint: the saved state must be", str(e.value))
        assert same_state(fresh.state_dict(), before)
        assert all(c["valid"] for c in lk.runs.checkpoints(loop.run_id))


def test_a_state_of_another_loop_is_refused_at_once_not_passed_over(tmp_path):
    """A loop built otherwise (an extension less) than the one that saved the run: the newest
    checkpoint is refused with the fix, no older one is tried and none is marked invalid."""
    import warnings

    with lk.runs.use_store(tmp_path / "runs.sqlite"):
        loop = T.build(make_loop, {"epochs": 2, "checkpoint_every": 4})
        loop.run(max_iterations=9)
        other = make_loop(loop.config)
        other.extensions = [e for e in other.extensions
                            if not isinstance(e, T.TrainingDataMonitoring)]
        other.attach(lk.runs.get(loop.run_id))
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            with pytest.raises(lk.CheckpointError, match=r"ckpt-00000008: .*state for extensions "
                                                         r"\['TrainingDataMonitoring'\].*build "
                                                         "the loop as it was"):
                other.load_checkpoint()
        assert other.status["iteration"] == 0
        assert all(c["valid"] for c in lk.runs.checkpoints(loop.run_id))
