"""Edges of the arithmetic against NumPy and float64 references, on both devices: a dot
product of two vectors with ``matmul`` (it raised a ShapeError), a division by a Python
scalar (``x / 0.0`` raised ZeroDivisionError; ``x * (1 / c)`` was 1 ulp off for a third of
``x / 3`` and inf where ``1 / c`` overflows), an unsigned integer minus a Python int (an
OverflowError: ``x + (-1)``), integers to a negative power (0 on OpenCL, an error on the
CPU and in NumPy), and the gradient of ``logsumexp`` over several axes (it lost the low bits
of a large log-sum-exp: gradients summing to 1 - 4e-4 at logits of 1e4)."""

from __future__ import annotations

import numpy as np
import pytest

import labkit as lk
import labkit.functions as F


def test_the_matmul_of_two_vectors_is_their_dot_product(dev):
    a, b = np.arange(1.0, 6.0), np.arange(2.0, 7.0)
    x = lk.tensor(a, device=dev, requires_grad=True)
    y = lk.tensor(b, device=dev, requires_grad=True)
    for out in (F.matmul(x, y), x @ y):
        assert out.shape == () and float(out.numpy()) == float(a @ b)
    F.matmul(x, y).backward()
    assert np.array_equal(x.grad.numpy(), b) and np.array_equal(y.grad.numpy(), a)
    assert lk.autograd.gradcheck(lambda p, q: F.matmul(p, q), [a, b], device=str(dev)) < 1e-6


@pytest.mark.parametrize("c", [0.0, 0, -0.0])
def test_a_division_by_a_scalar_zero_is_inf_and_nan(dev, c):
    x = np.array([1.0, -2.0, 0.0], np.float32)
    with np.errstate(divide="ignore", invalid="ignore"):  # NOTE: NumPy's warnings, as NumPy
        want = x / np.float32(c)
        results = [lk.tensor(x, device=dev) / c, F.div(lk.tensor(x, device=dev), c)]
    for got in results:
        assert np.array_equal(got.numpy(), want, equal_nan=True) and got.dtype == np.float32


def test_a_division_by_a_scalar_rounds_as_numpy_and_differentiates(dev):
    x = np.random.default_rng(0).standard_normal(4096).astype(np.float32)
    for c in (3.0, 7.0, 10.0, 1e-39):
        with np.errstate(over="ignore"):
            want = x / c
            got = lk.tensor(x, device=dev) / c
        assert np.array_equal(got.numpy(), want)
    t = lk.tensor(x[:5], device=dev, requires_grad=True)
    F.sum(t / 3.0).backward()
    assert np.array_equal(t.grad.numpy(), np.ones(5, np.float32) / 3.0)
    assert lk.autograd.gradcheck(lambda p: (p / 3.0) * p, [x[:5].astype(np.float64)],
                                 device=str(dev)) < 1e-6


@pytest.mark.parametrize("dtype", [np.uint8, np.uint32, np.int8])
def test_an_integer_minus_a_python_int_wraps_as_numpy(dev, dtype):
    x = np.array([0, 5, 100], dtype)
    for c in (1, 3, 100):
        got = lk.tensor(x, device=dev) - c
        assert got.dtype == dtype and np.array_equal(got.numpy(), x - c)


def test_integers_to_a_negative_integer_power_raise_as_numpy(dev):
    x = lk.tensor(np.array([1, -2, 3, 4]), device=dev)
    for p in (-1, np.int64(-2)):
        with pytest.raises(ValueError, match="Integers to negative integer powers"):
            x ** p
    with pytest.raises(ValueError, match="Integers to negative integer powers"):
        F.pow(x, lk.tensor(np.array([1, 0, -1, 2]), device=dev))
    assert np.array_equal((x ** 2).numpy(), [1, 4, 9, 16])
    assert np.array_equal(F.pow(x, lk.tensor(np.array([1, 0, 2, 1]), device=dev)).numpy(),
                          [1, 1, 9, 4])


@pytest.mark.parametrize("axis", [None, (0, 1), (0, 2), (1, 2), (2, 0)])
@pytest.mark.parametrize("offset", [0.0, 1e4, 1e5])
def test_the_gradient_of_logsumexp_over_several_axes_keeps_its_precision(dev, axis, offset):
    rng = np.random.default_rng(1)
    x = (rng.standard_normal((3, 4, 5)) + offset).astype(np.float32)
    t = lk.tensor(x, device=dev, requires_grad=True)
    F.sum(F.logsumexp(t, axis=axis)).backward()
    x64 = x.astype(np.float64)
    m = x64.max(axis=axis, keepdims=True)
    want = np.exp((x64 - m) - np.log(np.exp(x64 - m).sum(axis=axis, keepdims=True)))
    assert np.max(np.abs(t.grad.numpy() - want) / want) < 1e-6  # NOTE: 4e-4 at 1e4 before


def test_the_gradient_of_logsumexp_over_several_axes_differentiates_again(dev):
    rng = np.random.default_rng(2)
    x, r = rng.standard_normal((2, 3, 4)), rng.standard_normal((2, 3, 4))

    def first(a):  # NOTE: d/dx of sum(lse(x, (0, 2)) ** 2), in float64 NumPy
        m = a.max(axis=(0, 2), keepdims=True)
        e = np.exp(a - m)
        lse = np.log(e.sum(axis=(0, 2), keepdims=True)) + m
        return 2 * lse * e / e.sum(axis=(0, 2), keepdims=True)

    t = lk.tensor(x, device=dev, requires_grad=True)
    (g1,) = lk.autograd.grad(F.sum(F.logsumexp(t, axis=(0, 2)) ** 2), [t], create_graph=True)
    assert np.allclose(g1.numpy(), first(x), rtol=1e-12, atol=1e-12)
    (g2,) = lk.autograd.grad(F.sum(g1 * lk.tensor(r, device=dev)), [t])
    eps, want = 1e-6, np.zeros_like(x)
    for i in np.ndindex(x.shape):
        d = np.zeros_like(x)
        d[i] = eps
        want[i] = ((first(x + d) - first(x - d)) * r).sum() / (2 * eps)
    assert np.allclose(g2.numpy(), want, rtol=1e-6, atol=1e-7)


def test_softmax_and_logsumexp_over_an_empty_axis(dev):
    # NOTE: a raw "zero-size array to reduction operation maximum" from NumPy or OpenCL
    x = lk.tensor(np.zeros((3, 0), np.float32), device=dev, requires_grad=True)
    lse = F.logsumexp(x, axis=1)
    assert lse.shape == (3,) and np.array_equal(lse.numpy(), np.full(3, -np.inf, np.float32))
    assert F.logsumexp(x).numpy() == -np.inf and F.logsumexp(x, axis=0).shape == (0,)
    for f in (F.softmax, F.log_softmax):
        y = f(x, axis=1)
        assert y.shape == (3, 0) and y.dtype == np.float32
    F.sum(F.softmax(x, axis=1)).backward()
    assert x.grad.shape == (3, 0)


def test_gelu_keeps_its_relative_precision_for_negative_inputs(dev):
    # NOTE: (1 + erf(x / sqrt 2)) / 2 cancelled: float32 4% off at -5, and 0 at -6
    import math

    x = np.array([-1.0, -3.0, -4.0, -5.0, -6.0, -8.0], np.float32)
    want = np.array([v * 0.5 * math.erfc(-v / math.sqrt(2)) for v in x.astype(np.float64)])
    t = lk.tensor(x, device=dev, requires_grad=True)
    y = F.gelu(t)
    assert np.max(np.abs(y.numpy() - want) / np.abs(want)) < 1e-5
    F.sum(y).backward()
    dwant = np.array([0.5 * math.erfc(-v / math.sqrt(2)) + v * math.exp(-v * v / 2)
                      / math.sqrt(2 * math.pi) for v in x.astype(np.float64)])
    assert np.allclose(t.grad.numpy(), dwant, rtol=1e-4, atol=1e-12)
