"""Loop states whose values are each well typed but contradict each other: counters no loop
writes together, a log ahead of the loop, an optimizer behind a loop that updates it once per
iteration. Each is crafted by editing a real checkpoint's state and refused with a
CheckpointError that names the keys; the loop is left as it was (``refused_checkpoint``).

And the other side: every state a loop really writes (before training, at each event of each
epoch, at an epoch's end, with a short last batch or drop_last, after a resume, with batches
read from the stream between runs, with a step that updates every other iteration) loads, and
those taken where the loop checkpoints resume bit for bit."""

import copy

import numpy as np
import pytest

import labkit as lk
import labkit.bricks as B
import labkit.functions as F
from labkit import checkpoint as ckpt
from labkit import training as T
from labkit.data import DataStream, RandomFlip, ShuffledScheme
from labkit.errors import CheckpointError

from .helpers import dataset, make_loop, manifest_counters, refused_checkpoint, same_state


def small_loop(n=44, batch_size=10, drop_last=False, step_every=0, epochs=3):
    """A short loop with everything random; ``step_every``: a step= that updates the optimizer
    every that many iterations (gradient accumulation) instead of loss_fn."""
    lk.bricks.set_seed(1)
    model = B.Sequence(B.Flatten(), B.Linear(16, 8), B.Tanh(), B.Dropout(0.2), B.Linear(8, 2))
    opt = lk.optimizers.Adam(lr=0.01).setup(model)
    s = RandomFlip(DataStream(dataset(n), ShuffledScheme(n, batch_size, seed=5,
                                                         drop_last=drop_last)), seed=6)

    def loss_fn(model, batch):
        return F.softmax_cross_entropy(model(lk.tensor(batch["features"])), batch["targets"])

    def step(loop, batch):
        loss = loss_fn(loop.model, batch)
        loss.backward()
        if loop.status["iteration"] % step_every == step_every - 1:
            loop.optimizer.update()
            loop.optimizer.zero_grad()
        return {"loss": loss}

    kw = {"step": step} if step_every else {"loss_fn": loss_fn}
    return T.MainLoop(model, opt, s, extensions=[T.FinishAfter(epochs=epochs)], store=False,
                      **kw)


EVENTS = ("before_training", "before_epoch", "before_batch", "after_batch", "after_epoch")


def states_at_every_event(make):
    """The finished loop's parameters, and ``(event, iteration, state)`` at every event."""
    loop = make()
    taken = []
    for event in EVENTS:
        loop.add(lambda lp, e=event: taken.append((e, lp.status["iteration"],
                                                   copy.deepcopy(lp.state_dict()))),
                 event=event)
    loop.run()
    for _, _, state in taken:  # NOTE: the loops that load them have no such hooks
        state["extensions"] = {k: v for k, v in state["extensions"].items()
                               if not k.startswith("<lambda>")}
    return loop.model.state_dict(), taken


@pytest.mark.parametrize("config", [{}, {"drop_last": True}, {"n": 40},
                                    {"n": 40, "drop_last": True}, {"step_every": 2}],
                         ids=["short-last", "drop-last", "even", "even-drop-last", "accumulate"])
def test_every_state_a_loop_writes_loads_and_resumes_bit_for_bit(config):
    def make():
        return small_loop(**config)

    final, taken = states_at_every_event(make)
    assert {e for e, _, _ in taken} == set(EVENTS) and len(taken) > 30
    for event, it, state in taken:
        loop = make()
        loop.load_state_dict(copy.deepcopy(state))  # NOTE: every one loads
        assert loop.status["iteration"] == it
        if event == "before_batch":
            continue  # NOTE: the batch is read, not trained: a resume from here skips it
        if it % config.get("step_every", 1):
            continue  # NOTE: gradients accumulated by the step are not loop state
        loop.run()
        assert same_state(loop.model.state_dict(), final), (event, it)


def test_a_checkpoint_after_a_resume_and_after_reading_the_stream_between_runs_loads(tmp_path):
    """States a notebook writes: a resume from a checkpoint taken before training, and batches
    read from ``loop.stream`` by hand between two runs (the stream is then ahead of the loop's
    counters, in its epoch and position)."""
    first = small_loop()
    path = first.save_checkpoint(tmp_path / "a")
    loop = small_loop()
    loop.load_checkpoint(path)
    loop.run(max_iterations=3)
    for _ in zip(range(2), loop.stream):
        pass
    loop.run(max_iterations=4)  # the rest of epoch 0 and two batches of epoch 1
    for _ in loop.stream:
        pass  # and the rest of epoch 1, by hand
    state = loop.state_dict()
    assert state["status"]["epoch"] == 1 and state["stream"]["epoch"] == 2
    path = ckpt.save(tmp_path / "b", state, **manifest_counters(state))
    again = small_loop()
    again.load_checkpoint(path)
    assert same_state(again.state_dict()["stream"], state["stream"])


# ---- refused: the counters --------------------------------------------------------------
@pytest.fixture(scope="module")
def mid():
    """A real state in epoch 1, three iterations into it (iteration 15 of 12 a epoch)."""
    loop = make_loop({"epochs": 2})
    loop.run(max_iterations=15)
    state = loop.state_dict()
    assert state["status"]["epoch"] == 1 and state["status"]["epoch_iteration"] == 3
    return state


def _edited(state, **status):
    out = copy.deepcopy(state)
    out["status"].update(status)
    return out


def test_iterations_in_an_epoch_that_has_not_started_are_refused(tmp_path, mid):
    message = refused_checkpoint(tmp_path, _edited(mid, epoch_started=False))
    assert "status['epoch_iteration'] is 3 but status['epoch_started'] is false" in message
    assert "damaged or was edited" in message


@pytest.mark.parametrize("change", [{"epoch": 0}, {"epoch": 0, "iteration": 4},
                                    {"epoch": 0, "epoch_iteration": 2}])
def test_iterations_of_earlier_epochs_in_the_first_epoch_are_refused(tmp_path, mid, change):
    state = _edited(mid, **change)
    it, in_epoch = state["status"]["iteration"], state["status"]["epoch_iteration"]
    message = refused_checkpoint(tmp_path, state)
    assert f"status['iteration'] is {it} but status['epoch_iteration'] is {in_epoch} in " \
           "epoch 0" in message


@pytest.mark.parametrize("key,value", [("iteration", 16), ("iteration", 2 ** 62),
                                       ("epoch", 2)])
def test_a_log_row_after_the_loops_own_counters_is_refused(tmp_path, mid, key, value):
    state = copy.deepcopy(mid)
    state["log"]["rows"][-1][key] = value
    i = len(state["log"]["rows"]) - 1
    message = refused_checkpoint(tmp_path, state)
    assert f"log row {i} has {key}={value}, after status['{key}'] {mid['status'][key]}" \
        in message


@pytest.mark.parametrize("t", [0, 14])
def test_an_optimizer_behind_a_loop_that_updates_it_every_iteration_is_refused(tmp_path, mid,
                                                                                t):
    state = copy.deepcopy(mid)
    assert state["optimizer"]["t"] == 15
    state["optimizer"]["t"] = t
    message = refused_checkpoint(tmp_path, state)
    assert f"optimizer['t'] is {t}" in message and "status['iteration'] 15" in message


def test_an_optimizer_ahead_of_the_loop_loads(mid):
    """Stepped before the loop was built (or by an extension): not a contradiction."""
    state = copy.deepcopy(mid)
    state["optimizer"]["t"] = 40
    loop = make_loop({"epochs": 2})
    loop.load_state_dict(state)
    assert loop.optimizer.t == 40


def test_a_loop_with_a_step_that_updates_less_often_loads_there_not_into_a_loss_fn_loop(
        tmp_path):
    loop = small_loop(step_every=2)
    loop.run(max_iterations=5)
    state = loop.state_dict()
    assert state["optimizer"]["t"] == 2
    small_loop(step_every=2).load_state_dict(copy.deepcopy(state))
    fresh = small_loop()
    before = fresh.state_dict()
    with pytest.raises(CheckpointError, match=r"optimizer\['t'\] is 2 .* fewer than "
                                              r"status\['iteration'\] 5.*loop with step="):
        fresh.load_state_dict(state)
    assert same_state(fresh.state_dict(), before)


# ---- refused: arrays and positions that do not fit (checked by the parts themselves) --------
@pytest.mark.parametrize("what", ["shape", "dtype"])
@pytest.mark.parametrize("part", ["model", "optimizer"])
def test_state_arrays_of_another_shape_or_dtype_than_their_parameter_are_refused(
        tmp_path, mid, part, what):
    state = copy.deepcopy(mid)
    if part == "model":
        holder, key = state["model"], sorted(state["model"])[0]
    else:
        name = sorted(state["optimizer"]["state"])[0]
        holder = state["optimizer"]["state"][name]
        key = sorted(holder)[0]
    a = holder[key]
    holder[key] = a.reshape(-1)[:-1] if what == "shape" else a.astype(np.float64)
    message = refused_checkpoint(tmp_path, state)
    assert key in message and ("float64" in message if what == "dtype" else
                               str(holder[key].shape) in message)


@pytest.mark.parametrize("position", [13, 10 ** 6])
def test_a_data_position_beyond_the_epochs_batches_is_refused(tmp_path, mid, position):
    state = copy.deepcopy(mid)
    state["stream"]["position"] = position
    message = refused_checkpoint(tmp_path, state)
    assert f"['position'] = {position}: expected 0..12" in message


@pytest.mark.parametrize("counter", [2 ** 63, 2 ** 64 - 1])
def test_a_generator_counter_at_the_end_of_its_blocks_is_refused_in_a_loop(tmp_path, mid,
                                                                          counter):
    state = copy.deepcopy(mid)
    (name,) = state["rng"]["bricks"]
    state["rng"]["bricks"][name]["counter"] = counter
    assert "'counter' must be an integer in [0, 2**63)" in refused_checkpoint(tmp_path, state)
