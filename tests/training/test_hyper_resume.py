"""An optimizer's hyper-parameters changed during a run (``opt.lr = ...`` from an extension,
a notebook cell between chunks) are in its checkpoints: a resumed run trains with them, as
the uninterrupted run did, while a fork built with other values keeps its own."""

import json

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
    assert h == {"0.lr": {"rule": "Adam", "value": 0.05, "built": ["number", "0.1"]},
                 "0.beta2": {"rule": "Adam",
                             "value": {"dtype": "float32", "value": float(np.float32(0.99))},
                             "built": ["number", "0.999"]}}
    fresh = lk.optimizers.Adam(lr=0.1).setup({"w": lk.tensor(np.ones(3, np.float32),
                                                             requires_grad=True)})
    fresh.load_state_dict(opt.state_dict())
    assert fresh.lr == 0.05 and type(fresh.lr) is float
    b2 = fresh.rules[0].hyper["beta2"]
    assert type(b2) is np.float32 and b2 == np.float32(0.99)


def test_what_a_state_saves_it_loads_and_forks_built_otherwise_keep_their_own():
    """A review of the first version: an infinite value was saved and then refused (every
    later checkpoint unloadable); a run built from NumPy numbers (a grid) lost its changed lr
    (the built value came back a Python float); two different schedules counted as alike; a
    fork with another chain of rules was refused; float16 values were not saved."""
    w = {"w": lk.tensor(np.ones(3, np.float32), requires_grad=True)}
    clip = lk.optimizers.chain(lk.optimizers.GradientClipping(1.0),
                               lk.optimizers.SGD(lr=np.float64(0.1))).setup(w)
    clip.rules[0].hyper["max_norm"] = float("inf")
    clip.lr = np.float16(0.03)
    state = json.loads(json.dumps(clip.state_dict(), allow_nan=True))  # NOTE: as a file
    again = lk.optimizers.chain(lk.optimizers.GradientClipping(1.0),
                                lk.optimizers.SGD(lr=0.1)).setup(w)
    again.load_state_dict(state)
    assert again.rules[0].hyper["max_norm"] == float("inf")
    assert again.lr == np.float16(0.03) and type(again.lr) is np.float16
    sgd = lk.optimizers.SGD(lr=0.1).setup(w)  # NOTE: another chain: keeps its own, loads
    sgd.load_state_dict(state)
    assert sgd.lr == 0.1
    cos = lk.optimizers.SGD(lr=lk.optimizers.Cosine(0.1, total=30)).setup(w)
    cos.lr = 0.05
    other = lk.optimizers.SGD(lr=lk.optimizers.Exponential(0.1, 0.9)).setup(w)
    other.load_state_dict(cos.state_dict())
    assert isinstance(other.rules[0].hyper["lr"], lk.optimizers.Exponential)
    same = lk.optimizers.SGD(lr=lk.optimizers.Cosine(0.1, total=30)).setup(w)
    same.load_state_dict(cos.state_dict())
    assert same.rules[0].hyper["lr"] == 0.05


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
    ({"0.lr": {"value": "fast", "built": None}}, "'value'"),
    ({"0.lr": {"value": {"dtype": "object", "value": 1}, "built": None}}, "dtype"),
    ({"0.lr": {"value": {"dtype": "int8", "value": 300}, "built": None}}, "not a int8 value"),
    ({"0.lr": {"value": 0.1}}, "'built'"),
    ({"0.lr": [0.1]}, "0.lr"),
    ({"lr": {"value": 0.1, "built": None}}, "'rule_index.name'"),
    ({"9" * 5000 + ".lr": {"value": 0.1, "built": None}}, "'rule_index.name'"),
    ({"\u0663.lr": {"value": 0.1, "built": None}}, "'rule_index.name'"),
    ([1], "'hyper'"),
    ({f"0.x{i}": {"value": 1.0, "built": None} for i in range(10_000)}, "10000 entries"),
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
