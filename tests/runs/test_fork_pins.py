"""A checkpoint a fork starts from is kept by its run's pruning until the fork has a
checkpoint of its own (the parent's Checkpoint(keep_last=2) deleted it moments after a fork
of the live run, and the fork could never start); a fork whose checkpoint or parent went
meanwhile makes no run."""

from pathlib import Path

import pytest

import labkit as lk
from labkit import training as T

from ..training.helpers import make_loop


@pytest.fixture
def home_store(tmp_path):
    with lk.runs.use_store(tmp_path / "runs.sqlite") as store:
        yield store


def _ckpt(run_id, iteration):
    return next(c for c in lk.runs.checkpoints(run_id) if c["iteration"] == iteration)


def test_pruning_keeps_what_a_fork_starts_from_until_it_has_its_own(home_store):
    parent = T.build(make_loop, {"epochs": 3, "checkpoint_every": 2})
    parent.run(max_iterations=4)
    start = _ckpt(parent.run_id, 2)
    child = lk.runs.fork(parent.run_id, start["id"], epochs=1)
    parent.run(max_iterations=6)  # NOTE: to 10; keep_last=2 would prune iterations 2 to 6
    assert Path(start["path"]).is_dir()
    kept = sorted(c["iteration"] for c in lk.runs.checkpoints(parent.run_id))
    assert kept == [2, 8, 10]
    forked = lk.resume(child)  # NOTE: it starts from iteration 2 of the parent
    assert forked.status["iteration"] == 12 and lk.runs.checkpoints(child)
    parent.run(max_iterations=2)  # NOTE: the fork has its own now: pruned at last
    assert not Path(start["path"]).exists()
    assert sorted(c["iteration"] for c in lk.runs.checkpoints(parent.run_id)) == [10, 12]
    parent.close()


def test_a_fork_made_after_its_checkpoint_or_parent_went_is_refused(home_store):
    parent = T.build(make_loop, {"epochs": 1, "checkpoint_every": 2})
    parent.run(max_iterations=4)
    start = _ckpt(parent.run_id, 2)
    store = lk.runs.store()
    before = len(lk.runs.list())
    # NOTE: as if the prune came between the fork's look at the checkpoint and its run
    store.remove_checkpoint(start["id"])
    with pytest.raises(lk.runs.RunStoreError, match="was deleted meanwhile.*fork it again"):
        store.create_run(name="f", parent_run=parent.run_id, parent_checkpoint=start["path"],
                         parent_checkpoint_id=start["id"])
    with pytest.raises(lk.runs.RunStoreError, match="was deleted"):
        store.create_run(name="f", parent_run="20990101-000000-0123456789abcdef")
    assert len(lk.runs.list()) == before
    parent.close()


def test_deleting_a_run_a_waiting_fork_starts_from_is_refused_unforced(home_store):
    parent = T.build(make_loop, {"epochs": 1, "checkpoint_every": 2})
    parent.run()
    child = lk.runs.fork(parent.run_id, None, epochs=2)
    with pytest.raises(lk.runs.RunStoreError, match=rf"has forks that start from its "
                                                     rf"checkpoints .*\({child}\)") as e:
        lk.runs.delete(parent.run_id)
    assert e.value.reason == "live" and lk.runs.get(parent.run_id)
    lk.resume(child)  # NOTE: trained, it has its own checkpoints: the parent may go
    lk.runs.delete(parent.run_id)
    other = T.build(make_loop, {"epochs": 1, "checkpoint_every": 2})
    other.run()
    lk.runs.fork(other.run_id, None, epochs=2)
    lk.runs.delete(other.run_id, force=True)  # NOTE: asked for: gone
    with pytest.raises(lk.runs.RunStoreError):
        lk.runs.get(other.run_id)


def test_a_finished_fork_without_checkpoints_pins_nothing(home_store):
    """A fork that finished without a Checkpoint of its own needs its start no more: it kept
    the parent's checkpoint for ever (a review found it), and refused the parent's delete."""
    parent = T.build(make_loop, {"epochs": 3, "checkpoint_every": 2})
    parent.run(max_iterations=4)
    start = _ckpt(parent.run_id, 2)
    child = lk.runs.fork(parent.run_id, start["id"], epochs=1)
    lk.runs.store().update_run(child, status="finished")
    parent.run(max_iterations=2)
    assert not Path(start["path"]).exists()
    assert sorted(c["iteration"] for c in lk.runs.checkpoints(parent.run_id)) == [4, 6]
    parent.close()


def test_deleting_the_checkpoint_a_waiting_fork_starts_from_is_refused_unforced(home_store):
    """Asked for by a user (lk.runs.delete_checkpoint, the REST API, the CheckpointBrowser),
    as a run is: the files and the record stay, the message names the fork and the way out."""
    from labkit.notebook.checkpoints import CheckpointBrowser

    parent = T.build(make_loop, {"epochs": 1, "checkpoint_every": 2})
    parent.run(max_iterations=4)
    start, other = _ckpt(parent.run_id, 2), _ckpt(parent.run_id, 4)
    child = lk.runs.fork(parent.run_id, start["id"], epochs=1)
    with pytest.raises(lk.runs.RunStoreError, match=rf"is where run {child} starts.*"
                                                    r"force=True") as e:
        lk.runs.delete_checkpoint(start["id"])
    assert e.value.reason == "live"
    assert Path(start["path"]).is_dir() and _ckpt(parent.run_id, 2)["id"] == start["id"]
    browser = CheckpointBrowser(run_id=parent.run_id)
    browser._act(lambda: browser.delete(start["id"]))
    assert f"is where run {child} starts" in browser.message.value
    assert Path(start["path"]).is_dir()
    assert lk.runs.delete_checkpoint(other["id"])  # one no fork starts from goes as before
    assert lk.runs.delete_checkpoint(start["id"], force=True)
    assert not Path(start["path"]).exists()
    parent.close()
