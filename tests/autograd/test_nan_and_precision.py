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
