"""softplus, log_sigmoid and sigmoid_cross_entropy are smooth: their gradients are sigmoid(x)
(and sigmoid(x) - t) everywhere, x = 0 included. Composed of relu and abs they were 0 and -t
at x = 0 exactly, where a zero-initialised layer's logits start; and an infinite logit gave a
NaN loss where it is 0 or inf. Against float64 NumPy, on both devices, eager and compiled."""

from __future__ import annotations

import numpy as np
import pytest

import labkit as lk
import labkit.functions as F

inf = np.inf
X = np.array([0.0, -0.0, 1e-30, -1e-30, 0.5, -2.0, 17.0, -17.0, 90.0, -90.0], np.float32)


def _sigmoid64(x):
    x = np.asarray(x, np.float64)
    return np.where(x >= 0, 1 / (1 + np.exp(-np.abs(x))),
                    np.exp(-np.abs(x)) / (1 + np.exp(-np.abs(x))))


def _softplus64(x):
    x = np.asarray(x, np.float64)
    return np.maximum(x, 0) + np.log1p(np.exp(-np.abs(x)))


@pytest.mark.parametrize("fn,grad", [
    (F.softplus, _sigmoid64),
    (F.log_sigmoid, lambda x: 1 - _sigmoid64(x)),
], ids=["softplus", "log_sigmoid"])
def test_the_gradient_is_the_derivative_at_zero_and_everywhere(dev, fn, grad):
    x = lk.tensor(X, device=dev, requires_grad=True)
    fn(x).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), grad(X), rtol=1e-6, atol=1e-30)
    assert x.grad.numpy()[0] == 0.5


def test_softplus_values_and_infinities(dev):
    x = np.concatenate([X, np.array([inf, -inf], np.float32)])
    xt = lk.tensor(x, device=dev, requires_grad=True)
    y = F.softplus(xt)
    y.sum().backward()
    np.testing.assert_allclose(y.numpy(), _softplus64(x), rtol=1e-6)
    assert y.numpy()[-2] == inf and y.numpy()[-1] == 0
    np.testing.assert_array_equal(xt.grad.numpy()[-2:], [1, 0])


def test_softplus_second_derivative_at_zero(dev):
    x = lk.tensor(np.zeros(3, np.float32), device=dev, requires_grad=True)
    (g,) = lk.grad(F.softplus(x).sum(), [x], create_graph=True)
    np.testing.assert_allclose(g.numpy(), 0.5)
    g.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), 0.25)  # sigmoid'(0)


@pytest.mark.parametrize("reduce", ["none", "mean", "sum"])
def test_sigmoid_cross_entropy_gradient_at_zero_logits(dev, reduce):
    """A zero-initialised logistic regression's first step: sigmoid(0) - t = 1/2 - t."""
    t = np.array([1, 0, 1, 0.25], np.float32)
    x = lk.tensor(np.zeros(4, np.float32), device=dev, requires_grad=True)
    y = F.sigmoid_cross_entropy(x, lk.tensor(t, device=dev), reduce=reduce)
    (y.sum() if y.ndim else y).backward()
    np.testing.assert_allclose(x.grad.numpy(), (0.5 - t) / (4 if reduce == "mean" else 1))
    np.testing.assert_allclose(y.numpy().sum() / (1 if reduce == "mean" else 4), np.log(2),
                               rtol=1e-6)


def test_sigmoid_cross_entropy_against_float64_with_infinite_logits(dev):
    rng = np.random.default_rng(0)
    x = np.concatenate([X, [inf, -inf, inf, -inf, inf, -inf],
                        rng.standard_normal(20) * 5]).astype(np.float32)
    t = np.concatenate([rng.random(10), [1, 0, 0, 1, 0.5, 0.5],
                        rng.integers(0, 2, 20)]).astype(np.float32)
    xt = lk.tensor(x, device=dev, requires_grad=True)
    y = F.sigmoid_cross_entropy(xt, lk.tensor(t, device=dev), reduce="none")
    y.sum().backward()
    x64, t64 = x.astype(np.float64), t.astype(np.float64)
    with np.errstate(invalid="ignore"):
        want = _softplus64(x64) * (1 - t64) + _softplus64(-x64) * t64
    want[10:16] = [0, 0, inf, inf, inf, inf]
    got = y.numpy()
    assert not np.isnan(got).any()
    assert np.array_equal(got[10:16], want[10:16])
    # NOTE: x - x t cancels in float32 (as in every framework's form): within a few units of
    # x's last place, absolutely
    fin = np.isfinite(x)
    err = np.abs(got[fin] - want[fin])
    assert np.all(err <= 4 * np.finfo(np.float32).eps * (np.abs(x64[fin]) + 1)), err.max()
    np.testing.assert_allclose(xt.grad.numpy(), _sigmoid64(x) - t64, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("targets", ["tensor", "numpy", "float64"])
def test_a_compiled_logistic_regression_from_zero_takes_the_eager_steps(dev, targets):
    """New targets at every call (a tensor, a NumPy array, float64 ones cast to the logits'
    dtype): replayed, not refused (a cast outside the trace was) nor traced again."""
    rng = np.random.default_rng(1)
    batches = [(rng.standard_normal((32, 5)).astype(np.float32),
                rng.integers(0, 2, 32).astype(np.float32)) for _ in range(5)]

    def arg(tb):
        if targets == "tensor":
            return lk.tensor(tb, device=dev)
        return tb.astype(np.float64) if targets == "float64" else tb

    def run(compiled):
        w = lk.tensor(np.zeros(5, np.float32), device=dev, requires_grad=True)
        opt = lk.optimizers.SGD(0.5).setup({"w": w})

        def step(x, t):
            loss = F.sigmoid_cross_entropy(x @ w, t)
            opt.zero_grad()
            loss.backward()
            opt.update()
            return loss

        f = lk.compile(step) if compiled else step
        losses = [float(f(lk.tensor(xb, device=dev), arg(tb)).item()) for xb, tb in batches]
        return losses, w.numpy(), getattr(f, "stats", None)

    (le, we, _), (lc, wc, st) = run(False), run(True)
    assert st["traces"] == 2 and st["replays"] == 3, st
    np.testing.assert_allclose(lc, le, rtol=1e-6)
    np.testing.assert_allclose(wc, we, rtol=1e-6, atol=1e-7)
    # NOTE: the first step from w = 0: -0.5 * mean((1/2 - t) x)
    xb, tb = batches[0]
    w = lk.tensor(np.zeros(5, np.float32), device=dev, requires_grad=True)
    F.sigmoid_cross_entropy(lk.tensor(xb, device=dev) @ w, arg(tb)).backward()
    w1 = -0.5 * ((0.5 - tb.astype(np.float64))[:, None] * xb).mean(0)
    np.testing.assert_allclose(-0.5 * w.grad.numpy(), w1, rtol=1e-5, atol=1e-7)
