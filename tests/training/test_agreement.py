"""A checkpoint's parts against each other and against the loop: an EarlyStopping's best
iteration and a Checkpoint extension's saved iterations against the loop's iteration. A crafted
or mismatched one is refused with a CheckpointError naming both sides, the loop left as it was
(the manifest's counters are the caller's label: a loop state saved by hand under any loads).
Every state a run writes (at each event, with checkpoints, after a resume and
after a fork) still loads. And a loop resumed from a checkpoint taken before training started
starts training as a fresh one does."""

import copy

import pytest

import labkit as lk
from labkit import checkpoint as ckpt
from labkit import training as T
from labkit.data import DataStream

from .helpers import dataset, make_loop, refused_checkpoint, same_state
from .test_contradictions import EVENTS


@pytest.fixture(scope="module")
def mid():
    """A real state in epoch 1, three iterations into it, with a Checkpoint extension (saved
    at 8 and 12) and an EarlyStopping (best at 12)."""
    loop = make_loop({"epochs": 2, "checkpoint_every": 4, "early_stopping": True})
    loop.run(max_iterations=15)
    state = loop.state_dict()
    assert state["status"]["iteration"] == 15 and state["status"]["epoch"] == 1
    assert [s["iteration"] for s in state["extensions"]["Checkpoint"]["saved"]] == [8, 12]
    assert state["extensions"]["EarlyStopping"]["best_iteration"] == 12
    return state


EXT = {"checkpoint_every": 4, "early_stopping": True}


# ---- the manifest against the state ---------------------------------------------------------
@pytest.mark.parametrize("counters", [{"iteration": 15}, {}, {"iteration": 15, "epoch": 1},
                                      {"iteration": 99, "epoch": 0}])
def test_a_loop_state_saved_by_hand_loads_whatever_the_manifest_says(tmp_path, mid, counters):
    """``lk.checkpoint.save(dir, loop.state_dict(), iteration=...)`` leaves the manifest's
    epoch 0 (and without ``iteration=``, both 0): the manifest is the caller's label, and the
    loop's own state says where it is. (A comparison of the two refused such checkpoints, and
    ``latest`` skipped them: a review found it, and it was taken out.)"""
    path = ckpt.save(tmp_path, mid, **counters)
    assert ckpt.verify(path) is None and ckpt.latest(tmp_path, warn=False) == path
    fresh = make_loop({"epochs": 2, **EXT})
    fresh.load_checkpoint(path)
    assert fresh.status["iteration"] == 15 and fresh.status["epoch"] == 1
    fresh.run()
    assert fresh.status["epoch"] == 2


# ---- extensions against the loop's iteration ------------------------------------------------
@pytest.mark.parametrize("best", [16, 2 ** 62])
def test_a_best_iteration_after_the_loops_own_is_refused(tmp_path, mid, best):
    state = copy.deepcopy(mid)
    state["extensions"]["EarlyStopping"]["best_iteration"] = best
    message = refused_checkpoint(tmp_path, state, EXT)
    assert f"EarlyStopping: 'best_iteration' is {best}, after status['iteration'] 15" in message
    assert "damaged or was edited" in message


@pytest.mark.parametrize("index,value", [(1, 16), (0, 2 ** 62)])
def test_a_saved_checkpoint_after_the_loops_own_iteration_is_refused(tmp_path, mid, index,
                                                                     value):
    state = copy.deepcopy(mid)
    state["extensions"]["Checkpoint"]["saved"][index]["iteration"] = value
    message = refused_checkpoint(tmp_path, state, EXT)
    assert f"Checkpoint: saved[{index}]['iteration'] is {value}, after status['iteration'] " \
           "15" in message


def test_extension_iterations_up_to_the_loops_own_load(mid):
    state = copy.deepcopy(mid)
    state["extensions"]["EarlyStopping"]["best_iteration"] = 15
    state["extensions"]["Checkpoint"]["saved"][1]["iteration"] = 15
    loop = make_loop({"epochs": 2, **EXT})
    loop.load_state_dict(state)
    assert loop.find(T.EarlyStopping)[0].best_iteration == 15


def _take_states_at_every_event(loop, taken):
    for event in EVENTS + ("on_resumption", "after_training"):
        hook = loop.add(lambda lp, e=event: taken.append((e, copy.deepcopy(lp.state_dict()))),
                        event=event)
        hook.transient = True


def test_every_state_a_run_with_these_extensions_writes_loads(tmp_path):
    """Checkpoints every 5 iterations and at the end, EarlyStopping each epoch: every state
    taken at every event loads, before and after a resume from a mid-epoch checkpoint, and
    in a fork of the run; the resumed run ends as the uninterrupted one did."""
    config = {"epochs": 3, "checkpoint_every": 5, "early_stopping": True}
    with lk.runs.use_store(tmp_path / "runs.sqlite"):
        straight = T.build(make_loop, config)
        straight.run()
        loop = T.build(make_loop, config)
        taken = []
        _take_states_at_every_event(loop, taken)
        loop.run(max_iterations=17)
        resumed = lk.resume(loop.run_id, run=False)
        assert resumed.status["iteration"] == 15
        _take_states_at_every_event(resumed, taken)
        resumed.run()
        assert same_state(resumed.model.state_dict(), straight.model.state_dict())
        child = lk.runs.fork(loop.run_id, epochs=4)
        forked = lk.resume(child, run=False)
        _take_states_at_every_event(forked, taken)
        forked.run()
    assert {e for e, _ in taken} == set(EVENTS) | {"on_resumption", "after_training"}
    assert any(s["extensions"]["Checkpoint"]["saved"] and
               s["extensions"]["EarlyStopping"]["best_iteration"] for _, s in taken)
    for event, state in taken:
        fresh = make_loop({"epochs": 4, **config})
        fresh.load_state_dict(state)
        assert fresh.status["iteration"] == state["status"]["iteration"], event


# ---- resumed before training started --------------------------------------------------------
def test_a_loop_resumed_from_before_training_starts_as_a_fresh_one(tmp_path):
    """A checkpoint written before ``run()`` (``training_started`` false) is a loop that has
    not started: resumed, it starts training as a fresh loop does (``before_training`` runs,
    so a validation before training is in the log), and says it started."""
    def make():
        loop = make_loop({"epochs": 1})
        valid = DataStream(dataset(32, seed=1), batch_size=16)
        loop.add(T.DataStreamMonitoring(valid, before_training=True))
        return loop

    straight = make()
    straight.run()
    assert "valid_loss" in straight.log.rows[0] and straight.log.rows[0]["iteration"] == 0
    first = make()
    path = first.save_checkpoint(tmp_path)
    assert not ckpt.load(path)["status"]["training_started"]
    resumed = make()
    resumed.load_checkpoint(path)
    seen = []
    resumed.add(lambda lp: seen.append(lp.status["training_started"]), event="before_training")
    resumed.run()
    assert seen == [True] and resumed.status["training_started"]
    assert resumed.log.rows[0].get("valid_loss") == straight.log.rows[0]["valid_loss"]
    assert ckpt.load(resumed.save_checkpoint(tmp_path / "after"))["status"]["training_started"]


def test_a_started_loop_saved_without_the_flag_does_not_start_again(tmp_path):
    """A state that trained without ``training_started`` (what a loop resumed from before
    training wrote until now) loads, and is not started a second time: no ``before_training``
    in the middle of a run."""
    loop = make_loop({"epochs": 2})
    loop.run(max_iterations=5)
    state = loop.state_dict()
    state["status"]["training_started"] = False
    again = make_loop({"epochs": 2})
    again.load_state_dict(state)
    calls = []
    again.add(lambda lp: calls.append(1), event="before_training")
    again.run(max_iterations=1)
    assert calls == [] and again.status["training_started"]


def test_a_finished_loop_trained_further_is_not_finished_until_it_finishes_again():
    """A fork of a finished run (or run() again) that is stopped early is not finished: the
    flag came over from the finished state (the notebook dashboard said 'finished' while it
    trained, and a sweep trial loaded from such a state was taken as finished)."""
    loop = make_loop({"epochs": 1})
    loop.run()
    assert loop.status["finished"]
    state = loop.state_dict()
    fork = make_loop({"epochs": 3})
    fork.load_state_dict(state)
    seen = []
    fork.add(lambda lp: seen.append(lp.status["finished"]), event="after_batch")
    fork.run(max_iterations=5)
    assert seen and not any(seen) and not fork.status["finished"]
    assert not fork.state_dict()["status"]["finished"]
    fork.run()
    assert fork.status["finished"] and fork.status["epoch"] == 3
