"""The loop's parts and its public surface: dispatch after extensions come and go, the log's
cursors, pause events, the writer thread's lifetime, the step counter's one name, a failed load
that changes nothing, pruning that never touches another run's checkpoints, and a run deleted
while it trains."""

import threading
from pathlib import Path

import numpy as np
import pytest

import labkit as lk
from labkit import checkpoint
from labkit import training as T

from .helpers import make_loop


class Counter(T.Extension):
    every = None

    def __init__(self, name):
        super().__init__(name=name)
        self.calls = 0

    def after_batch(self, loop):
        self.calls += 1


def test_dispatch_follows_extensions_that_come_and_go():
    """A widget closed and another opened (same number of extensions): the new one is called,
    the closed one is not (the dispatch plan was cached by the list's id and length)."""
    loop = make_loop({"epochs": 1})
    first = loop.add(Counter("first"))
    loop.run(max_iterations=2)
    assert first.calls == 2
    loop.remove(first)
    second = loop.add(Counter("second"))
    loop.run(max_iterations=3)
    assert (first.calls, second.calls) == (2, 3)


def test_log_cursors_see_each_value_once():
    log = T.Log()
    c = log.cursor()
    log.new_row(1, 0, {"loss": 1.0})
    log.report(acc=0.5)
    assert c.read() == [(1, 0, "loss", 1.0), (1, 0, "acc", 0.5)]
    log.report(valid_loss=2.0)  # a value added later to the same row
    log.new_row(2, 0, {"loss": 0.5})
    assert c.read() == [(1, 0, "valid_loss", 2.0), (2, 0, "loss", 0.5)]
    assert c.read() == []
    late = log.cursor(at_end=True)
    log.report(acc=0.7)
    assert late.read() == [(2, 0, "acc", 0.7)] and c.read() == [(2, 0, "acc", 0.7)]
    log.load_state_dict({"rows": [{"iteration": 5, "epoch": 1, "loss": 3.0}]})
    assert c.read() == []  # a loaded log is history: the cursor moves to its end
    with pytest.raises(lk.CheckpointError, match="row 1 goes back from iteration 5 to 4"):
        log.load_state_dict({"rows": [{"iteration": 5, "epoch": 1}, {"iteration": 4,
                                                                        "epoch": 1}]})
    with pytest.raises(lk.CheckpointError, match=r"iteration='5'"):
        log.load_state_dict({"rows": [{"iteration": "5", "epoch": 1}]})


def test_pause_and_unpause_are_ordinary_events(tmp_path):
    assert "on_pause" in T.EVENTS and "on_unpause" in T.EVENTS
    loop = make_loop({"epochs": 1})
    seen, paused = [], threading.Event()

    class Watch(T.Extension):
        every = None

        def on_pause(self, loop):
            seen.append(("pause", loop.status["iteration"]))
            paused.set()

        def on_unpause(self, loop):
            seen.append(("unpause", loop.status["iteration"]))

    loop.add(Watch())
    loop.add(lambda loop: loop.pause() if loop.status["iteration"] == 2 else None,
             event="after_batch")
    loop.start()
    assert paused.wait(60)
    assert lk.runs.get(loop.run_id)["status"] == "paused"
    loop.resume()
    loop.wait(60)
    assert seen == [("pause", 2), ("unpause", 2)]


def _store_threads():
    return [t for t in threading.enumerate() if t.name == "labkit-run-store" and t.is_alive()]


def test_no_writer_thread_is_left_behind():
    before = len(_store_threads())
    for _ in range(3):
        loop = make_loop({"epochs": 1})
        loop.run()
        loop.close()
    assert len(_store_threads()) == before


def test_one_name_for_the_step_counter():
    loop = make_loop({"epochs": 5})
    loop.extensions = [e for e in loop.extensions if not isinstance(e, T.FinishAfter)]
    loop.add(T.FinishAfter(iterations=7))
    loop.run()
    assert loop.status["iteration"] == 7 and loop.log[-1]["iteration"] == 7
    assert lk.runs.metrics(loop.run_id, ["loss"])["loss"]["iteration"] == list(range(1, 8))
    assert lk.runs.get(loop.run_id)["progress"]["iteration"] == 7
    ckpt = loop.save_checkpoint()
    assert lk.runs.checkpoints(loop.run_id)[-1]["iteration"] == 7
    assert ckpt.name == "ckpt-00000007"
    # the older spellings still work
    with pytest.deprecated_call():
        assert T.FinishAfter(batches=3).iterations == 3
    with pytest.deprecated_call():
        assert T.Extension(every=2, unit="batches").unit == "iterations"
    with pytest.raises(lk.TrainingError, match="not both"), pytest.deprecated_call():
        T.FinishAfter(iterations=3, batches=3)
    with pytest.raises(lk.TrainingError, match="positive integer, got 0"):
        T.FinishAfter(epochs=0)
    with pytest.raises(lk.TrainingError, match="max_iterations must be an integer >= 0"):
        loop.run(max_iterations=-1)


def _params(loop):
    return {k: v.copy() for k, v in loop.model.state_dict().items()}


@pytest.mark.parametrize("damage", [
    lambda s: s["status"].__setitem__("iteration", "12"),
    lambda s: s["status"].__setitem__("finished", 1),
    lambda s: s["status"].pop("epoch"),
    lambda s: s["optimizer"].clear(),
    lambda s: s["stream"].clear(),
    lambda s: s["log"].__setitem__("rows", {"0": 1}),
    lambda s: s["extensions"]["TrainingDataMonitoring"].__setitem__("sums", [1, 2]),
    lambda s: s["rng"].__setitem__("bricks", {"x": 3}),
    lambda s: s.__setitem__("model", []),
])
def test_a_state_that_does_not_fit_changes_nothing(damage):
    """Damaged values anywhere in a loop's state: a CheckpointError naming the part, and the
    loop exactly as it was (no half-loaded model, optimizer or log)."""
    src = make_loop({"epochs": 1})
    src.run(max_iterations=5)
    state = src.state_dict()
    damage(state)
    loop = make_loop({"epochs": 1})
    loop.run(max_iterations=2)
    params, status, log = _params(loop), dict(loop.status), list(loop.log.rows)
    opt = loop.optimizer.state_dict()
    with pytest.raises(lk.CheckpointError, match="MainLoop.load_state_dict"):
        loop.load_state_dict(state)
    assert loop.status == status and loop.log.rows == log
    for k, v in params.items():
        assert np.array_equal(loop.model.state_dict()[k], v)
    after = loop.optimizer.state_dict()
    assert after.keys() == opt.keys()
    loop.run(max_iterations=1)  # and it still trains
    assert loop.status["iteration"] == 3


def test_a_fork_never_deletes_its_parents_checkpoints(tmp_path):
    """The parent keeps two checkpoints; the child resumes from the newest, inherits the
    parent's list of saved checkpoints, and prunes with keep_last=2 and keep_best: every
    parent checkpoint and its store row survive."""
    with lk.runs.use_store(tmp_path / "runs.sqlite"):
        parent = T.build(make_loop, {"epochs": 2, "checkpoint_every": 3})
        parent.run()
        parent.close()
        before = {c["id"]: c["path"] for c in lk.runs.checkpoints(parent.run_id)}
        assert len(before) == 2 and all(Path(p).is_dir() for p in before.values())
        child = lk.runs.fork(parent.run_id, changes={"epochs": 5})
        loop = lk.resume(child)
        loop.close()
        assert loop.status["epoch"] == 5
        mine = lk.runs.checkpoints(child)
        assert len(mine) == 2 and all(Path(c["path"]).parent == loop.checkpoint_dir
                                      for c in mine)
        after = {c["id"]: c["path"] for c in lk.runs.checkpoints(parent.run_id)}
        assert after == before
        assert all(checkpoint.verify(p) is None for p in after.values())


def test_a_checkpoints_state_cannot_name_a_directory_to_delete(tmp_path):
    """A saved Checkpoint state that names a path outside the run, or a sibling directory of
    another run, is refused or ignored: pruning never deletes it."""
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "manifest.json").write_text("{}")
    ext = T.Checkpoint(keep_last=1)
    for bad in ("../../victim", str(victim), "a/b", ".hidden", ""):
        with pytest.raises(lk.CheckpointError, match="name of a checkpoint directory"):
            ext.load_state_dict({"saved": [{"iteration": 1, "metric": None, "name": bad}]})
    # an older state holding absolute paths: only the name is kept, and only this run's
    # checkpoints are pruned
    with lk.runs.use_store(tmp_path / "runs.sqlite"):
        other = T.build(make_loop, {"epochs": 1, "checkpoint_every": 2})
        other.run()
        theirs = [c["path"] for c in lk.runs.checkpoints(other.run_id)]
        loop = T.build(make_loop, {"epochs": 2, "checkpoint_every": 2})
        loop.run(max_iterations=3)
        state = loop.state_dict()
        state["extensions"]["Checkpoint"]["saved"] = [
            {"step": 2, "metric": None, "path": theirs[0]}] + state["extensions"][
            "Checkpoint"]["saved"]
        path = checkpoint.save(tmp_path / "crafted", state, iteration=3, run_id=loop.run_id)
        again = T.build(make_loop, {"epochs": 2, "checkpoint_every": 2})
        again.attach(lk.runs.get(loop.run_id))
        again.load_checkpoint(path)
        again.run()
        assert all(Path(p).is_dir() for p in theirs)
        assert {c["path"] for c in lk.runs.checkpoints(other.run_id)} == set(theirs)


def test_a_run_deleted_while_it_trains_stops_cleanly(tmp_path, capsys):
    """Deleting a live run is refused; forced, the trainer stops after that batch without an
    error, writes nothing more (no checkpoint, no rows without a run)."""
    with lk.runs.use_store(tmp_path / "runs.sqlite") as store:
        loop = T.build(make_loop, {"epochs": 3, "checkpoint_every": 2})
        refused = []

        def delete(loop):
            if loop.status["iteration"] == 5:
                try:
                    lk.runs.delete(loop.run_id)
                except lk.RunStoreError as e:
                    refused.append(str(e))
                lk.runs.delete(loop.run_id, force=True)

        loop.add(delete, event="after_batch")
        loop.run()
        loop.close()
        assert refused and "training" in refused[0]
        # the next checkpoint (iteration 6) finds the run gone: nothing written, loop stopped
        assert loop.status["iteration"] == 6 and loop.recorder.deleted
        assert "was deleted from the run store" in capsys.readouterr().err
        assert not store.exists(loop.run_id)
        assert store.remove_orphans() == {"metrics": 0, "checkpoints": 0}
        assert not loop.directory.exists()
