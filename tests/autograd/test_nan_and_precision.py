"""maximum and minimum keep NaN as NumPy does (a diverged value clamped by maximum(x, 0) came
out as 0), and elu's negative side is expm1 (exp(x) - 1 cancelled near 0); on both devices."""

from __future__ import annotations

import numpy as np
import pytest

import labkit as lk
import labkit.functions as F

nan, inf = np.nan, np.inf


@pytest.mark.parametrize("fn,ref", [(F.maximum, np.maximum), (F.minimum, np.minimum)],
                         ids=["maximum", "minimum"])
def test_a_nan_on_either_side_is_kept(dev, fn, ref):
    a = np.array([nan, 1, nan, 2, -inf, 3], np.float32)
    b = np.array([1, nan, nan, 2, 0, inf], np.float32)
    at = lk.tensor(a, device=dev, requires_grad=True)
    bt = lk.tensor(b, device=dev, requires_grad=True)
    y = fn(at, bt)
    np.testing.assert_array_equal(y.numpy(), ref(a, b))  # NOTE: NaN == NaN here
    y.sum().backward()
    ga, gb = at.grad.numpy(), bt.grad.numpy()
    np.testing.assert_array_equal(ga + gb, np.ones(6))   # NOTE: each element's to one side
    assert ga[0] == 1 and gb[1] == 1 and ga[2] == 1       # NOTE: to the NaN
    assert ga[3] == 1                                     # NOTE: a tie goes to a


def test_maximum_with_zero_keeps_a_diverged_value(dev):
    x = lk.tensor(np.array([nan, -1, 2], np.float32), device=dev, requires_grad=True)
    y = F.maximum(x, 0.0)
    assert np.isnan(y.numpy()[0]) and np.isnan(F.relu(x).numpy()[0])
    y.sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [1, 0, 1])


def test_elu_near_zero_is_expm1(dev):
    x = np.array([-1e-6, -1e-8, -1e-3, -0.5, -30, 0, 1e-6], np.float32)
    for alpha in (1.0, 2.0):
        xt = lk.tensor(x, device=dev, requires_grad=True)
        y = F.elu(xt, alpha)
        y.sum().backward()
        x64 = x.astype(np.float64)
        want = np.where(x64 > 0, x64, alpha * np.expm1(x64))
        np.testing.assert_allclose(y.numpy(), want, rtol=2e-7, atol=0)
        np.testing.assert_allclose(xt.grad.numpy(), np.where(x64 > 0, 1, alpha * np.exp(x64)),
                                   rtol=2e-7)


def test_expm1_and_its_gradient(dev):
    x = np.array([-1e-7, 1e-7, 0, -20, 3, -inf], np.float32)
    xt = lk.tensor(x, device=dev, requires_grad=True)
    y = F.expm1(xt)
    y.sum().backward()
    np.testing.assert_allclose(y.numpy(), np.expm1(x.astype(np.float64)), rtol=2e-7)
    np.testing.assert_allclose(xt.grad.numpy(), np.exp(x.astype(np.float64)), rtol=2e-7)


def test_pow_of_two_tensors_at_a_zero_base(dev):
    """0 ** b: d/db is 0 for b >= 0 (not 0 * log 0 = NaN) and d/da is 0 where b == 0, as in
    PyTorch; elsewhere b a^(b-1) and a^b log a. Broadcast exponents sum their gradients."""
    a = np.array([0, 0, 0, 2, 0.5], np.float32)
    b = np.array([2, 0, 1, 3, -1], np.float32)
    at = lk.tensor(a, device=dev, requires_grad=True)
    bt = lk.tensor(b, device=dev, requires_grad=True)
    with np.errstate(all="ignore"):
        y = F.pow(at, bt)
        y.sum().backward()
    np.testing.assert_allclose(y.numpy(), [0, 1, 0, 8, 2])
    np.testing.assert_allclose(at.grad.numpy(), [0, 0, 1, 12, -4], rtol=1e-6)
    np.testing.assert_allclose(bt.grad.numpy(), [0, 0, 0, 8 * np.log(2), 2 * np.log(0.5)],
                               rtol=1e-6)
    at = lk.tensor(np.array([[0, 1], [2, 0]], np.float32), device=dev, requires_grad=True)
    bt = lk.tensor(np.array([2, 0], np.float32), device=dev, requires_grad=True)
    with np.errstate(all="ignore"):
        F.pow(at, bt).sum().backward()
    np.testing.assert_allclose(at.grad.numpy(), [[0, 0], [4, 0]])
    np.testing.assert_allclose(bt.grad.numpy(), [4 * np.log(2), 0], rtol=1e-6)


def test_batch_norm_refuses_one_value_per_channel_in_training(dev):
    """As PyTorch: one value per channel has no spread (the output was beta and the running
    variance drained towards 0 at every step); inference, and two values, are fine."""
    bn = lk.bricks.BatchNorm(3).to(dev)
    one = lk.tensor(np.ones((1, 3), np.float32), device=dev)
    with pytest.raises(lk.errors.ShapeError, match="more than 1 value per channel"):
        bn(one)
    np.testing.assert_array_equal(bn.running_var.get() if dev.kind == "cl" else bn.running_var,
                                  np.ones(3, np.float32))  # NOTE: nothing changed
    assert bn(lk.tensor(np.ones((1, 3, 2, 1), np.float32), device=dev)).shape == (1, 3, 2, 1)
    F.batch_normalization(one, lk.tensor(np.ones(3, np.float32), device=dev),
                          lk.tensor(np.zeros(3, np.float32), device=dev), training=False,
                          running_mean=bn.running_mean, running_var=bn.running_var)


@pytest.mark.parametrize("fn", [F.max, F.min], ids=["max", "min"])
def test_a_nan_extreme_takes_the_gradient_not_the_whole_row(dev, fn):
    """max and min of a row with NaN are NaN, and the gradient goes to the NaN elements
    (shared, as ties are); it was NaN in every element of the row (0/0 shares)."""
    x = lk.tensor(np.array([[0, nan, 1, nan], [1, 3, 3, 0]], np.float32), device=dev,
                  requires_grad=True)
    y = fn(x, axis=1)
    assert np.isnan(y.numpy()[0])
    y.sum().backward()
    g = x.grad.numpy()
    np.testing.assert_array_equal(g[0], [0, 0.5, 0, 0.5])
    np.testing.assert_array_equal(g[1], [0, 0.5, 0.5, 0] if fn is F.max else [0, 0, 0, 1])


@pytest.mark.parametrize("shape,k,stride,pad", [
    ((1, 2, 4, 16), 2, 2, 0),    # tiled on cpu; on cl the 2x2 vector kernel and its tail
    ((1, 2, 5, 7), 3, 2, 1),     # the general paths (windows, padding)
], ids=["tiled", "general"])
def test_max_pool_sends_a_nan_windows_gradient_to_its_nans(dev, shape, k, stride, pad):
    """A window with a NaN pools to NaN and its gradient goes to its NaN(s), shared as ties;
    the other windows are untouched (the whole window's gradient was NaN)."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal(shape).astype(np.float32)
    x[0, 0, 0, 0] = nan
    x[0, 1, 1, 1] = x[0, 1, 0, 0] = nan
    xt = lk.tensor(x, device=dev, requires_grad=True)
    y = F.max_pool2d(xt, k, stride, pad)
    y.sum().backward()
    g = xt.grad.numpy()
    assert not np.isnan(g).any()
    assert g[0, 0, 0, 0] >= 1 and g[0, 1, 1, 1] + g[0, 1, 0, 0] >= 1
    # NOTE: each window hands its whole gradient (1 here) to its winners
    np.testing.assert_allclose(g.sum(), y.numpy().size, rtol=1e-6)
    ref = F.max_pool2d(lk.tensor(x), k, stride, pad).numpy()
    np.testing.assert_array_equal(np.isnan(y.numpy()), np.isnan(ref))
    assert np.isnan(ref).any()


def test_gelu_at_infinities_is_its_limit(dev):
    """gelu(-inf) = 0 and gelu(inf) = inf, gradients 0 and 1 (x * Phi(x) composed gave
    -inf * 0 = NaN for both, and NaN gradients at +-inf); elsewhere as before, against
    float64."""
    from math import erf, exp, pi, sqrt

    x = np.array([-inf, -40, -3, -1e-3, 0, 0.5, 3, 40, inf], np.float32)
    x64 = x.astype(np.float64)
    want = [0.0 if v == -inf else v if v == inf else v * 0.5 * (1 + erf(v / sqrt(2)))
            for v in x64]
    dwant = [0.0 if v == -inf else 1.0 if v == inf else
             0.5 * (1 + erf(v / sqrt(2))) + v * exp(-v * v / 2) / sqrt(2 * pi) for v in x64]
    xt = lk.tensor(x, device=dev, requires_grad=True)
    y = F.gelu(xt)
    y.sum().backward()
    np.testing.assert_allclose(y.numpy(), want, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(xt.grad.numpy(), dwant, rtol=1e-5, atol=1e-7)
