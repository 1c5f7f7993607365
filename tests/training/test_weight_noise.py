"""``lk.regularizers.WeightNoise`` in a training loop: its draws are part of the model's random
state, so a run resumed from a checkpoint draws the noise the uninterrupted run drew."""

import numpy as np
import pytest

import labkit as lk
import labkit.bricks as B
import labkit.functions as F
from labkit import training as T
from labkit.errors import CheckpointError

from .helpers import dataset


def _loop(dev, compile=False, noise=True, seed=0):
    lk.bricks.set_seed(1)
    model = B.Sequence(B.Flatten(), B.Linear(16, 12), B.Tanh(), B.Linear(12, 2)).to(dev)
    opt = lk.optimizers.SGD(lr=0.1).setup(model)
    wn = lk.regularizers.WeightNoise(model, 0.05, seed=seed) if noise else None
    stream = lk.data.DataStream(dataset(), batch_size=8, shuffle=True, seed=5)

    def loss_fn(model, batch):
        x = lk.tensor(batch["features"], device=dev)
        if wn is None:
            return F.softmax_cross_entropy(model(x), batch["targets"])
        with wn:
            return F.softmax_cross_entropy(model(x), batch["targets"])
    return T.MainLoop(model, opt, stream, loss_fn, store=False, compile=compile,
                      extensions=[T.FinishAfter(iterations=12)])


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_a_run_under_weight_noise_resumes_exactly(dev, compiled):
    r = T.check_resume(lambda: _loop(str(dev), compiled), at_iteration=5)
    assert r.identical, r


def test_the_noise_generator_is_saved_with_the_model():
    loop = _loop("cpu")
    loop.run(max_iterations=3)
    state = loop.state_dict()
    (name,) = state["rng"]["bricks"]
    assert name.endswith(".weight_noise")
    # the saved counter is the generator's after three draws of each weight
    assert state["rng"]["bricks"][name] == loop.model.weight_noise.state_dict()


def test_a_checkpoint_without_the_noise_state_is_refused(tmp_path):
    """A loop that draws weight noise does not load a checkpoint of one that did not: its
    noise would restart from the seed and the resumed run would differ."""
    plain = _loop("cpu", noise=False)
    plain.run(max_iterations=2)
    path = plain.save_checkpoint(tmp_path / "plain")
    noisy = _loop("cpu")
    before = {k: v.copy() for k, v in noisy.model.state_dict().items()}
    with pytest.raises(CheckpointError, match="weight_noise"):
        noisy.load_checkpoint(path)
    for k, v in noisy.model.state_dict().items():
        assert np.array_equal(v, before[k]), k


def test_two_noises_on_one_model_keep_their_own_generators():
    lk.bricks.set_seed(1)
    m = B.Sequence(B.Linear(4, 3), B.Linear(3, 2))
    a = lk.regularizers.WeightNoise(m, 0.1, seed=1)
    b = lk.regularizers.WeightNoise(m, 0.1, role=lk.roles.BIAS, seed=2)
    assert a.generator is not b.generator
    names = dict(T.state.brick_generators(m))
    assert names["/sequence.weight_noise"] is a.generator
    assert names["/sequence.weight_noise_bias"] is b.generator
