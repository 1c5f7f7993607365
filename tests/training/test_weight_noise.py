"""``lk.regularizers.WeightNoise`` in a training loop: its draws are part of the model's random
state, so a run resumed from a checkpoint draws the noise the uninterrupted run drew."""


import numpy as np
import pytest

import labkit as lk
import labkit.bricks as B
import labkit.functions as F
from labkit import training as T
from labkit.backend.random import Generator
from labkit.regularizers import WeightNoise

from .helpers import dataset


def _loop(dev, compile=False, noise=True, seed=0, nested=False):
    lk.bricks.set_seed(1)
    model = B.Sequence(B.Flatten(), B.Linear(16, 12), B.Tanh(), B.Linear(12, 2)).to(dev)
    opt = lk.optimizers.SGD(lr=0.1).setup(model)
    wn = WeightNoise(model, 0.05, seed=seed) if noise else None
    inner = WeightNoise(model, 0.01, seed=seed) if nested else None
    stream = lk.data.DataStream(dataset(), batch_size=8, shuffle=True, seed=5)

    def loss_fn(model, batch):
        x = lk.tensor(batch["features"], device=dev)
        if wn is None:
            return F.softmax_cross_entropy(model(x), batch["targets"])
        with wn:
            if inner is None:
                return F.softmax_cross_entropy(model(x), batch["targets"])
            with inner:
                return F.softmax_cross_entropy(model(x), batch["targets"])
    return T.MainLoop(model, opt, stream, loss_fn, store=False, compile=compile,
                      extensions=[T.FinishAfter(iterations=12)])


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_a_run_under_weight_noise_resumes_exactly(dev, compiled):
    r = T.check_resume(lambda: _loop(str(dev), compiled), at_iteration=5)
    assert r.identical, r


def test_two_nested_noises_of_one_role_resume_exactly():
    """Two WeightNoise of one role and seed share the model's generator (one stream, saved
    once), where the second replaced the first's and the first's draws were not saved."""
    r = T.check_resume(lambda: _loop("cpu", nested=True), at_iteration=5)
    assert r.identical, r


def test_the_noise_generator_is_saved_with_the_model():
    loop = _loop("cpu")
    loop.run(max_iterations=3)
    state = loop.state_dict()
    (name,) = state["rng"]["bricks"]
    assert name == "/sequence._lk_noise_weight_0"
    # the saved counter is the generator's after three draws of each weight
    assert state["rng"]["bricks"][name] == loop.model._lk_noise_weight_0.state_dict()
    assert state["rng"]["bricks"][name]["counter"] > 0


def test_a_checkpoint_without_the_noise_state_loads_with_a_warning(tmp_path):
    """A checkpoint saved without the noise's state (an older labkit's): loaded, the noise
    starting from its seed as it then did, with a warning that says so."""
    plain = _loop("cpu", noise=False)
    plain.run(max_iterations=2)
    path = plain.save_checkpoint(tmp_path / "plain")
    noisy = _loop("cpu")
    with pytest.warns(UserWarning, match=r"WeightNoise generators \['/sequence._lk_noise_"):
        noisy.load_checkpoint(path)
    for k, v in noisy.model.state_dict().items():
        assert np.array_equal(v, plain.model.state_dict()[k]), k
    assert noisy.model._lk_noise_weight_0.counter == 0


def test_noises_of_other_roles_or_seeds_keep_their_own_generators():
    lk.bricks.set_seed(1)
    m = B.Sequence(B.Linear(4, 3), B.Linear(3, 2))
    a = WeightNoise(m, 0.1, seed=1)
    b = WeightNoise(m, 0.1, role=lk.roles.BIAS, seed=2)
    c = WeightNoise(m, 0.2, seed=3)
    again = WeightNoise(m, 0.3, seed=1)  # a notebook cell run again: the same stream
    assert len({id(a.generator), id(b.generator), id(c.generator)}) == 3
    assert again.generator is a.generator
    names = dict(T.state.brick_generators(m))
    assert names["/sequence._lk_noise_weight_1"] is a.generator
    assert names["/sequence._lk_noise_bias_2"] is b.generator
    assert names["/sequence._lk_noise_weight_3"] is c.generator


def test_the_models_own_attributes_and_children_are_left_alone():
    """The generator's name is labkit's own: a child brick or a setting the model calls
    ``weight_noise`` stays what it is; a role whose name is not an identifier is fine."""
    lk.bricks.set_seed(1)
    m = B.Sequence(B.Linear(4, 3))
    m.weight_noise = B.Linear(3, 3)
    m.noise_std = 0.05
    before = sorted(m.params())
    WeightNoise(m, m.noise_std)
    WeightNoise(m, 0.1, role=lk.roles.Role("input weights", lk.roles.WEIGHT))
    assert sorted(m.params()) == before and isinstance(m.weight_noise, B.Linear)
    assert m.noise_std == 0.05
    assert isinstance(m._lk_noise_input_weights_0, Generator)
    m._lk_noise_bias_0 = 1.5
    with pytest.raises(ValueError, match=r"_lk_noise_bias_0 is taken by a float"):
        WeightNoise(m, 0.1, role=lk.roles.BIAS)


def test_every_rank_of_a_data_parallel_run_draws_the_same_noise():
    """Data-parallel training shards the model's generators by batch rows (``shard``); a
    weight whose first dimension is the per-rank batch got other rows of noise on each rank
    (its gradient taken at other weights). Weight noise is drawn whole on every rank."""
    draws = []
    for shard in (None, (0, 8, 16), (8, 8, 16)):
        lk.bricks.set_seed(1)
        m = B.Sequence(B.Linear(8, 8))
        wn = WeightNoise(m, 0.1)
        for _, g in T.state.brick_generators(m):
            g.shard = shard
        with wn:
            draws.append(m.params()["/sequence/linear_0.W"].numpy().copy())
        assert wn.generator.shard == shard  # the loop's setting is left as it was
    assert np.array_equal(draws[0], draws[1]) and np.array_equal(draws[0], draws[2])
