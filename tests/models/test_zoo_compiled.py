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
