"""The model zoo's ``loss_fn`` compiled by ``MainLoop(compile=True)``: trained bit for bit as
eagerly. The keys of their result dicts ("accuracy", "reconstruction") were refused as Python
values a replay would return unchanged, and the VAE's binarized batch was the traced calls'."""

import numpy as np
import pytest

from labkit import training as T
from labkit.models import charlstm, cnn, resnet, vae

SMALL = {cnn: {"channels": 8}, resnet: {"width": 8}, vae: {"hidden": 32},
         charlstm: {"hidden": 32, "embed": 8}}


def _run(mod, device, compile):
    base = mod.make_loop({**SMALL[mod], "device": device, "batch_size": 16})
    loop = T.MainLoop(base.model, base.optimizer, base.stream, mod.loss_fn, store=False,
                      compile=compile, extensions=[T.FinishAfter(iterations=5)])
    loop.run()
    return loop


@pytest.mark.parametrize("mod", [cnn, resnet, vae, charlstm], ids=lambda m: m.__name__)
def test_a_zoo_loss_fn_compiles_and_trains_as_eagerly(mod):
    eager, comp = _run(mod, "cpu", False), _run(mod, "cpu", True)
    assert comp.compiled.stats["replays"] == 3 and comp.compiled.stats["retraces"] == 0
    assert [r["loss"] for r in comp.log.rows] == [r["loss"] for r in eager.log.rows]
    for k, v in eager.model.state_dict().items():
        assert np.array_equal(v, comp.model.state_dict()[k]), k


@pytest.mark.parametrize("mod", [cnn, vae], ids=lambda m: m.__name__)
def test_a_zoo_loss_fn_compiles_on_cl(mod):
    eager, comp = _run(mod, "cl", False), _run(mod, "cl", True)
    assert comp.compiled.stats["replays"] == 3
    assert [r["loss"] for r in comp.log.rows] == [r["loss"] for r in eager.log.rows]


def test_a_python_value_equal_to_a_constant_of_labkit_is_still_refused(dev):
    """Labkit's strings make a result's dict keys plain, not its values: a flag from the
    optimizer's state (False in both traced calls, as constants of the loss function labkit
    runs are) would be returned unchanged by every replay."""
    import labkit as lk
    from labkit.errors import CompileError
    from labkit.functions import softmax_cross_entropy

    W = lk.tensor(np.full((4, 3), 0.1, np.float32), device=dev, requires_grad=True)
    opt = lk.optimizers.SGD(lr=0.1).setup({"W": W})

    def step(x, t):
        loss = softmax_cross_entropy(x @ W, t)
        opt.zero_grad()
        loss.backward()
        opt.update()
        return {"loss": loss, "warm": opt.state_dict()["t"] > 3}

    x = lk.tensor(np.ones((2, 4), np.float32), device=dev)
    with pytest.raises(CompileError, match=r"returns the Python bool False \(in the "
                                           r"result\['warm'\]\)"):
        lk.compile(step)(x, np.array([0, 2]))
