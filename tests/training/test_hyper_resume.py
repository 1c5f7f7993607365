"""An optimizer's hyper-parameters changed during a run (``opt.lr = ...`` from an extension,
a notebook cell between chunks) are in its checkpoints: a resumed run trains with them, as
the uninterrupted run did, while a fork built with other values keeps its own."""

import numpy as np
import pytest

import labkit as lk
from labkit import training as T
from labkit.errors import CheckpointError

from .helpers import make_loop


def halving_loop(config=None):
    """make_loop's, whose learning rate (and Adam's beta1) change once, at iteration 4: a
    change made by code that does not run again after a resume from a later checkpoint."""
    loop = make_loop(config)

    def decay(loop):
        if loop.status["iteration"] == 4:
            loop.optimizer.lr = loop.optimizer.lr / 4
            loop.optimizer.rules[1].hyper["beta1"] = np.float32(0.5)
    loop.add(decay, every=1)
    return loop


@pytest.mark.parametrize("at", [2, 7])
def test_resume_after_a_changed_learning_rate_is_identical(at):
    r = T.check_resume(halving_loop, at_iteration=at)
    assert r.identical, r


def test_hyper_parameters_in_the_state_only_when_changed():
    opt = lk.optimizers.Adam(lr=0.1).setup({"w": lk.tensor(np.ones(3, np.float32),
                                                           requires_grad=True)})
    assert "hyper" not in opt.state_dict()
    opt.lr = 0.05
    opt.rules[0].hyper["beta2"] = np.float32(0.99)
    h = opt.state_dict()["hyper"]
    assert h == {"0.lr": {"value": 0.05, "built": 0.1},
                 "0.beta2": {"value": {"dtype": "float32", "value": float(np.float32(0.99))},
                             "built": 0.999}}
    fresh = lk.optimizers.Adam(lr=0.1).setup({"w": lk.tensor(np.ones(3, np.float32),
                                                             requires_grad=True)})
    fresh.load_state_dict(opt.state_dict())
    assert fresh.lr == 0.05 and type(fresh.lr) is float
    b2 = fresh.rules[0].hyper["beta2"]
    assert type(b2) is np.float32 and b2 == np.float32(0.99)


def test_a_fork_built_with_another_value_keeps_its_own():
    w = {"w": lk.tensor(np.ones(3, np.float32), requires_grad=True)}
    opt = lk.optimizers.SGD(lr=0.1).setup(w)
    opt.lr = 0.01
    state = opt.state_dict()
    other = lk.optimizers.SGD(lr=0.3).setup(w)  # a fork's config: lr 0.3
    other.load_state_dict(state)
    assert other.lr == 0.3
    same = lk.optimizers.SGD(lr=0.1).setup(w)
    same.load_state_dict(state)
    assert same.lr == 0.01


@pytest.mark.parametrize("hyper, words", [
    ({"5.lr": {"value": 0.1, "built": 0.1}}, "5.lr"),
    ({"0.momentum": {"value": 0.1, "built": 0.1}}, "0.momentum"),
    ({"0.lr": {"value": "fast", "built": 0.1}}, "'value'"),
    ({"0.lr": {"value": float("nan"), "built": 0.1}}, "finite"),
    ({"0.lr": {"value": {"dtype": "object", "value": 1}, "built": 0.1}}, "dtype"),
    ({"0.lr": {"value": {"dtype": "float16", "value": 0.1}, "built": 0.1}}, "float16"),
    ({"0.lr": {"value": 0.1}}, "'built'"),
    ({"0.lr": [0.1]}, "0.lr"),
    ([1], "'hyper'"),
    ({"9" * 5000 + ".lr": {"value": 0.1, "built": 0.1}}, "lack"),
    ({"٣.lr": {"value": 0.1, "built": 0.1}}, "lack"),
    ({f"0.x{i}": {"value": 1.0, "built": 1.0} for i in range(10_000)}, "10000 entries"),
])
def test_damaged_hyper_parameters_are_refused(hyper, words):
    w = {"w": lk.tensor(np.ones(3, np.float32), requires_grad=True)}
    opt = lk.optimizers.SGD(lr=0.1).setup(w)
    with pytest.raises(CheckpointError) as e:
        opt.load_state_dict({"t": 3, "state": {}, "hyper": hyper})
    assert words in str(e.value) and "hyper" in str(e.value)
    assert opt.lr == 0.1 and opt.t == 0


@pytest.mark.parametrize("where", ["iteration", "t", "counter"])
def test_counters_without_room_to_train_are_refused(tmp_path, where):
    """A counter a step short of 2**63 loaded, then overflowed the run store at the first
    iteration (a raw OverflowError, the run left running) or made a checkpoint its own loader
    refused."""
    from .helpers import refused_checkpoint

    loop = make_loop({"epochs": 1})
    loop.run(max_iterations=3)
    state = loop.state_dict()
    big = 2**63 - 1
    if where == "iteration":
        state["status"]["iteration"] = state["status"]["epoch_iteration"] = big
        state["optimizer"]["t"] = big
        words = "is 9223372036854775807: no run counts to 2**62"
    elif where == "t":
        state["optimizer"]["t"] = big
        words = "integer in [0, 2**62)"
    else:
        gens = state["rng"]["bricks"]
        gens[next(iter(gens))]["counter"] = big
        words = "no run draws 2**62 blocks"
    assert words in refused_checkpoint(tmp_path, state)


def test_resume_of_a_path_that_is_no_run_says_so(tmp_path):
    (tmp_path / "notes").mkdir()
    for p in (tmp_path / "notes", "/etc"):
        with pytest.raises(CheckpointError, match="is neither a checkpoint directory .* nor "
                                                  "a run's folder"):
            lk.resume(str(p))
