"""The NumPy-only fast paths against references.

conv2d's one-node path (Conv2d, Conv2dGradX, Conv2dGradW) against the direct definition and
the same node on ``cl`` (its OpenCL kernels): both memory layouts of x, padding, stride and
dilation, and gradients of gradients. Outer products (an inner dimension of 1) through BLAS:
the same values as NumPy's own loop. NumPy's sigmoid picking its quotients by a bit mask."""

import numpy as np
import pytest

import labkit as lk
import labkit.functions as F
from labkit.functions.connection import Conv2d

from .test_functions import np_conv2d

CASES = [dict(stride=1, pad=1), dict(stride=2, pad=0), dict(stride=2, pad=1, dilation=2)]


@pytest.mark.parametrize("cfg", CASES)
@pytest.mark.parametrize("layout", ["nchw", "cnhw"])
def test_values_and_gradients_match_the_definition_and_cl(cfg, layout, rng):
    x = rng.standard_normal((2, 3, 7, 6))
    if layout == "cnhw":  # as a previous convolution leaves it
        x = np.ascontiguousarray(x.transpose(1, 0, 2, 3)).transpose(1, 0, 2, 3)
    W, b = rng.standard_normal((4, 3, 3, 3)), rng.standard_normal(4)
    tx, tW, tb = (lk.tensor(a, requires_grad=True) for a in (x, W, b))
    y = F.conv2d(tx, tW, tb, **cfg)
    assert isinstance(y.creator, Conv2d)  # one node
    np.testing.assert_allclose(y.numpy(), np_conv2d(x, W, b, cfg.get("stride", 1),
                                                    cfg.get("pad", 0), cfg.get("dilation", 1)),
                               rtol=1e-10, atol=1e-12)
    cl = lk.device("cl")
    cx, cW, cb = (lk.tensor(a.astype(np.float32), device=cl, requires_grad=True)
                  for a in (x, W, b))
    cy = F.conv2d(cx, cW, cb, **cfg)
    np.testing.assert_allclose(cy.numpy(), y.numpy(), rtol=1e-4, atol=1e-4)
    u, v = rng.standard_normal(y.shape), rng.standard_normal(x.shape)
    # first and second order, on both paths: g = d/d(x, W) <u, y>, then d/d(x, W) of
    # <v, gx> + |gW|^2
    grads = []
    for xs, dev in (((tx, tW, tb), "cpu"), ((cx, cW, cb), cl)):
        yy = F.conv2d(*xs, **cfg)
        gx, gW = lk.grad([(yy * lk.tensor(u, device=dev)).sum()], list(xs[:2]),
                         create_graph=True)
        hx, hW = lk.grad([(gx * lk.tensor(v, device=dev)).sum() + (gW * gW).sum()],
                         list(xs[:2]))
        grads.append([a.numpy() for a in (gx, gW, hx, hW)])
    for a, b_ in zip(*grads):
        np.testing.assert_allclose(b_, a, rtol=2e-3, atol=2e-3)


def test_a_bad_window_is_a_clear_error():
    with pytest.raises(lk.ShapeError, match="does not fit an input of 2x2"):
        F.conv2d(lk.tensor(np.zeros((1, 1, 2, 2))), lk.tensor(np.zeros((1, 1, 3, 3))))


def test_outer_products_through_blas_are_exact(rng):
    from labkit.functions.connection import MatMul

    a = rng.standard_normal((512, 1)).astype(np.float32)
    b = rng.standard_normal((1, 784)).astype(np.float32)
    a[0, 0] = 0.0
    y = MatMul().forward(a, b)
    np.testing.assert_array_equal(y, np.multiply(a, b))  # bit for bit
    assert y.shape == (512, 784) and y.dtype == np.float32
    # a weight gradient at batch 1 goes that way, and matches the reference
    x = lk.tensor(b, requires_grad=False)
    W = lk.tensor(rng.standard_normal((512, 784)).astype(np.float32), requires_grad=True)
    F.linear(x, W).sum().backward()
    np.testing.assert_array_equal(W.grad.numpy(), np.broadcast_to(b, (512, 784)))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_sigmoid_picks_its_two_quotients_bit_for_bit(dtype, rng):
    """NumPy's sigmoid computes 1 / (1 + e) and e / (1 + e) (e = exp(-|x|)) everywhere and
    picks by a bit mask: the same values as dividing where x >= 0, in any layout, special
    values included; and a 0-d array works (ufuncs hand back scalars there)."""
    from labkit.functions._util import sigmoid_array

    def reference(x):
        e = np.exp(-np.abs(x))
        d = e + 1
        out = e / d
        np.divide(1, d, out=out, where=x >= 0)
        return out

    u = np.uint32 if dtype == np.float32 else np.uint64
    big = (rng.standard_normal((16, 48)) * 30).astype(dtype)
    big.flat[:7] = [np.nan, np.inf, -np.inf, -0.0, 0.0, -100, 100]
    for x in (big, big[:, 12:], big.T, big[::2, ::-3]):
        got = sigmoid_array(x)
        assert got.shape == x.shape and got.dtype == dtype
        assert np.array_equal(got.view(u), reference(x).view(u))
    got = sigmoid_array(big[0, 9].reshape(()))
    assert got.shape == () and got == reference(big[0, 9:10])[0]
    t = lk.tensor(dtype(0.5), requires_grad=True)
    F.sigmoid(t).backward()
    np.testing.assert_allclose(t.grad.numpy(), 0.25 * (1 - np.tanh(0.25) ** 2), rtol=1e-6)
