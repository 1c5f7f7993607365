"""On an OpenCL device the parameters' fused updates share kernels (labkit/backend/opencl
/fused.run_many): each parameter's update is the number its own kernel computes, bit for bit,
whatever the grouping (all in one launch, split by the argument limit, or one each)."""

import numpy as np
import pytest

import labkit as lk
from labkit.backend.opencl import fused as cl_fused

OPTIMIZERS = {
    "sgd": lambda: lk.optimizers.SGD(lr=0.1),
    "momentum": lambda: lk.optimizers.Momentum(lr=0.1, momentum=0.9),
    "adam": lambda: lk.optimizers.Adam(lr=1e-2),
}


def _train(make, arg_bytes, monkeypatch, steps=3):
    monkeypatch.setattr(cl_fused, "ARG_BYTES", arg_bytes)
    rng = np.random.default_rng(0)
    shapes = [(7, 5), (5,), (300,), (1,), (16, 16)] * 5  # 25 parameters of other sizes
    params = {f"p{i}": lk.tensor(rng.standard_normal(s).astype(np.float32), device="cl",
                                 requires_grad=True) for i, s in enumerate(shapes)}
    opt = make().setup(params)
    for step in range(steps):
        for k, p in params.items():
            g = np.random.default_rng(step * 100 + int(k[1:])).standard_normal(p.shape)
            p.grad = lk.tensor(g.astype(np.float32), device="cl")
        opt.update()
    return {k: p.numpy() for k, p in params.items()}


@pytest.mark.parametrize("name", list(OPTIMIZERS))
def test_grouped_updates_equal_one_kernel_per_parameter(name, monkeypatch):
    one_each = _train(OPTIMIZERS[name], 1, monkeypatch)          # every group of one
    few = _train(OPTIMIZERS[name], 300, monkeypatch)             # groups of a few
    together = _train(OPTIMIZERS[name], 10 ** 6, monkeypatch)    # all in one launch
    for k, want in one_each.items():
        assert np.array_equal(few[k].view(np.uint32), want.view(np.uint32)), k
        assert np.array_equal(together[k].view(np.uint32), want.view(np.uint32)), k


def test_a_launch_respects_the_argument_limit(monkeypatch):
    launched = []
    real = cl_fused._launch_many
    monkeypatch.setattr(cl_fused, "_launch_many",
                        lambda *a: launched.append(len(a[-2])) or real(*a))
    _train(OPTIMIZERS["adam"], cl_fused.ARG_BYTES, monkeypatch, steps=1)
    assert launched and max(launched) < 25  # Adam's 25 updates need more than one launch
    assert sum(launched) <= 25
