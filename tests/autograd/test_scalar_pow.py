"""``c ** tensor`` and ``tensor ** c`` with the scalar edge cases (a zero base, negative bases,
integer and fractional exponents) against NumPy, on cpu and cl: the same values and the same
nan/inf pattern, gradients against float64 central differences where they are finite, and
PyTorch's conventions where the derivative does not exist."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest

import labkit as lk
import labkit.functions as F

EXPONENTS = np.array([0.0, 1.0, 2.0, 3.0, -1.0, -2.0, 0.5, 2.5, -0.5], np.float32)
BASES = np.array([0.0, -0.0, 1.0, 2.0, -2.0, 0.5, -0.5, 3.0], np.float32)


def same(got, want, what):
    """NumPy's values: the same nan/inf positions and signs, and close finite values."""
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want), err_msg=f"{what}: nan")
    np.testing.assert_array_equal(np.isposinf(got), np.isposinf(want), err_msg=f"{what}: +inf")
    np.testing.assert_array_equal(np.isneginf(got), np.isneginf(want), err_msg=f"{what}: -inf")
    fin = np.isfinite(want)
    np.testing.assert_allclose(got[fin], want[fin], rtol=2e-6, atol=0, err_msg=what)


@pytest.mark.parametrize("c", [0.0, -0.0, 1.0, 2.0, -2.0, -0.5, 10.0, np.float64(2.0)],
                         ids=lambda c: f"{type(c).__name__}({c})")
def test_scalar_base(c, dev):
    t = lk.tensor(EXPONENTS, device=dev, requires_grad=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        want = np.float32(c) ** EXPONENTS
        y = c ** t  # was: "math domain error" for c <= 0 (exp(x * log(c)))
        y2 = F.pow(c, t)
        (g,) = lk.grad([y], [t], grad_outputs=[lk.tensor(np.ones(len(EXPONENTS), np.float32),
                                                          device=dev)])
    assert y.dtype == np.float32 and y.device == dev  # np.float64 bases do not promote
    same(y.numpy(), want, f"{c} ** x on {dev}")
    same(y2.numpy(), want, f"F.pow({c}, x) on {dev}")
    g = g.numpy()
    if c > 0:  # d/dx c^x = c^x ln c, against float64 central differences
        e = EXPONENTS.astype(np.float64)
        numeric = (float(c) ** (e + 1e-6) - float(c) ** (e - 1e-6)) / 2e-6
        np.testing.assert_allclose(g, numeric, rtol=1e-4)
        np.testing.assert_allclose(g, want * math.log(c), rtol=1e-5)
    elif c == 0:  # 0^x is constant for x > 0: PyTorch's zero gradient, never nan
        np.testing.assert_array_equal(g, np.zeros_like(g))
    else:  # a negative base has no real logarithm: nan, as PyTorch
        assert np.isnan(g).all()


@pytest.mark.parametrize("c", [0, 1, 2, 3, -1, -2, 0.5, -0.5, 2.5, 1.0, np.float64(3.0)],
                         ids=lambda c: f"{type(c).__name__}({c})")
def test_scalar_exponent(c, dev):
    t = lk.tensor(BASES, device=dev, requires_grad=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        want = BASES ** np.float32(c) if isinstance(c, float) else BASES ** c
        y = t ** c
        (g,) = lk.grad([y], [t], grad_outputs=[lk.tensor(np.ones(len(BASES), np.float32),
                                                          device=dev)])
        dwant = (np.float64(c) * BASES.astype(np.float64) ** (np.float64(c) - 1)
                 if c != 0 else np.zeros(len(BASES)))
    assert y.dtype == np.float32 and y.device == dev
    same(y.numpy(), want, f"x ** {c} on {dev}")
    # the derivative c x^(c-1), with its nan/inf where it does not exist (x <= 0)
    same(g.numpy(), dwant, f"d/dx x ** {c} on {dev}")


def test_integer_exponents_of_negative_bases_are_exact(dev):
    # a power, not exp(c log x): (-2)^3 = -8 exactly, and the same on both devices
    t = lk.tensor(np.array([-2.0, -3.0, -0.5], np.float32), device=dev)
    np.testing.assert_array_equal((t ** 3).numpy(), np.array([-8.0, -27.0, -0.125], np.float32))
    np.testing.assert_array_equal((-2.0 ** lk.tensor(np.array([3.0], np.float32),
                                                     device=dev)).numpy(), [-8.0])
    np.testing.assert_array_equal(((-2.0) ** lk.tensor(np.array([3.0, 2.0], np.float32),
                                                       device=dev)).numpy(), [-8.0, 4.0])


def test_scalar_base_double_backward(dev):
    # d2/dx2 c^x = c^x (ln c)^2: the gradient of the gradient
    t = lk.tensor(np.array([0.5, 1.5], np.float64), device=dev, requires_grad=True)
    (g,) = lk.grad([F.sum(3.0 ** t)], [t], create_graph=True)
    (gg,) = lk.grad([F.sum(g)], [t])
    np.testing.assert_allclose(gg.numpy(), 3.0 ** np.array([0.5, 1.5]) * math.log(3.0) ** 2,
                               rtol=1e-12)
