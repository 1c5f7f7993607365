"""Residual and BasicBlock against NumPy, on every device."""

import numpy as np

import labkit as lk
import labkit.bricks as B


def test_residual_forward_and_gradient_against_numpy(dev, rng):
    lk.bricks.set_seed(0)
    lin = B.Linear(4, 4)
    block = B.Residual(lin, activation=None).to(dev)
    x0 = rng.standard_normal((3, 4)).astype(np.float32)
    x = lk.tensor(x0, device=dev, requires_grad=True)
    y = block(x)
    W, b = lin.W.numpy(), lin.b.numpy()
    np.testing.assert_allclose(y.numpy(), x0 @ W.T + b + x0, rtol=1e-5, atol=1e-6)
    y.sum().backward()
    # d sum(xW^T + b + x) / dx = column sums of W, plus one from the identity path
    np.testing.assert_allclose(x.grad.numpy(), np.broadcast_to(W.sum(0) + 1, (3, 4)),
                               rtol=1e-5)
    relu = B.Residual(lin, shortcut=lambda t: t * 0.0).to(dev)(x)
    np.testing.assert_allclose(relu.numpy(), np.maximum(x0 @ W.T + b, 0), rtol=1e-5, atol=1e-6)


def test_basic_block_shapes_projection_and_modes(dev, rng):
    lk.bricks.set_seed(0)
    same, down = B.BasicBlock(8, 8), B.BasicBlock(8, 16, stride=2)
    # NOTE: built at construction, its parameters are on the host until moved
    assert same.shortcut is None and down.shortcut is not None and same.device.kind == "cpu"
    model = B.Sequence(same, down).to(dev)
    assert model.device == dev and down.shortcut.device == dev   # Brick.device, public
    x = lk.tensor(rng.standard_normal((5, 8, 6, 6)).astype(np.float32), device=dev)
    y = model(x)
    assert y.shape == (5, 16, 3, 3) and (y.numpy() >= 0).all()
    keys = model.state_dict()
    assert "/sequence/basicblock_1/shortcut/batchnorm_1.running_mean" in keys
    assert "/sequence/basicblock_0/body/conv2d_0.W" in keys
    model.eval()
    assert not np.allclose(model(x).numpy(), y.numpy())   # running statistics, not the batch's


def test_basic_block_is_the_same_on_cpu_and_cl(rng):
    x0 = rng.standard_normal((4, 3, 5, 5)).astype(np.float32)
    out = {}
    for dev in ("cpu", "cl"):
        lk.bricks.set_seed(1)
        block = B.BasicBlock(3, 6, stride=2).to(dev)
        x = lk.tensor(x0, device=dev, requires_grad=True)
        block(x).sum().backward()
        out[dev] = block(x).numpy(), x.grad.numpy()
    for a, b in zip(out["cpu"], out["cl"]):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-4)
