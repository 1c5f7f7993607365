"""Stabilisation rewrites: log(exp(z)), log(1 + x), log(sigmoid(x)), log(softmax(x)) and the
(g / e) * e and softmax_grad(y, g / y) their gradients leave, against float64 references where
eager float32 gives -inf or nan."""

import numpy as np
import pytest

import labkit as lk
import labkit.functions as F


def _step(x):
    a = F.log(F.softmax(x, axis=1))          # log(softmax(x))
    b = F.log(1.0 + x * 1e-4)                 # log(1 + x)
    c = F.log(F.sigmoid(x))                   # log(sigmoid(x))
    d = F.log(F.exp(F.log_softmax(x, axis=1)))  # log(exp(z))
    (a.sum() + b.sum() + c.sum() + d.sum()).backward()
    return a, b, c, d, x.grad


def _reference(v):
    x = v.astype(np.float64)
    top = x.max(1, keepdims=True)
    ls = x - (np.log(np.exp(x - top).sum(1, keepdims=True)) + top)
    sm = np.exp(ls)
    a = ls
    b = np.log1p(x * 1e-4)
    c = np.minimum(x, 0) - np.log1p(np.exp(-np.abs(x)))
    grad = 2 * (1 - x.shape[1] * sm) + 1e-4 / (1 + x * 1e-4) + (1 - 1 / (1 + np.exp(-x)))
    return a, b, c, ls, grad


def test_rewrites_make_finite_what_eager_overflows(dev):
    v = np.array([[-200.0, 0.5, 100.0], [3.0, -1.0, 0.25]], np.float32)
    with np.errstate(all="ignore"):  # NOTE: eager overflows here, on purpose
        eager = _step(lk.tensor(v, device=dev, requires_grad=True))
    assert not np.isfinite(eager[0].numpy()).all() and np.isnan(eager[4].numpy()).any()
    step = lk.compile(_step)
    with np.errstate(all="ignore"):  # the two traced calls run eagerly
        for _ in range(3):
            got = step(lk.tensor(v, device=dev, requires_grad=True))
    assert step.stats["replays"] == 1
    for name, g, want in zip("abcd", got[:4], _reference(v)[:4]):
        np.testing.assert_allclose(g.numpy(), want, rtol=1e-5, atol=1e-5, err_msg=name)
    np.testing.assert_allclose(got[4].numpy(), _reference(v)[4], rtol=1e-4, atol=1e-4)
    text = step.explain()
    for r in ("log(exp(z)) -> z", "log(1 + x) -> log1p(x)",
              "log(sigmoid(x)) -> -softplus(-x)", "(g / e) * e -> g",
              "log(softmax(x)) -> log_softmax(x)", "softmax_grad(y, g / y) -> g - y * sum(g)"):
        assert r in text, text


@pytest.mark.parametrize("stabilize", [True, False])
def test_where_eager_is_finite_the_rewrites_agree_with_it(dev, stabilize):
    rng = np.random.default_rng(0)
    step = lk.compile(_step, stabilize=stabilize)
    for _ in range(4):
        v = rng.uniform(-3, 3, (4, 5)).astype(np.float32)
        got = step(lk.tensor(v, device=dev, requires_grad=True))
        want = _step(lk.tensor(v, device=dev, requires_grad=True))
        for g, w in zip(got, want):
            if stabilize:
                np.testing.assert_allclose(g.numpy(), w.numpy(), rtol=2e-5, atol=2e-6)
            else:  # NOTE: without the rewrites a replay is the eager computation, bit for bit
                np.testing.assert_array_equal(g.numpy(), w.numpy())
    assert ("stabilised" in step.explain()) == stabilize


def test_a_duplicate_merged_into_a_rewritten_value_is_still_returned(dev):
    """Merge makes the second log(exp(x)) an alias of the first, then the rewrite makes the
    first an alias of x: the chain is followed (the second result's slot was read from no
    node: a NameError in the replay)."""
    def f(x):
        return F.log(F.exp(x)), F.log(F.exp(x)), F.log(F.exp(x)) * 2

    v = np.array([1.0, -2.0, 0.5], np.float32)
    step = lk.compile(f)
    for _ in range(3):
        a, b, c = step(lk.tensor(v, device=dev))
    assert step.stats["replays"] == 1
    for got in (a, b):
        np.testing.assert_allclose(got.numpy(), v, rtol=1e-6)
    np.testing.assert_allclose(c.numpy(), 2 * v, rtol=1e-6)
    a.data[...] = 7  # NOTE: results alias neither the argument nor each other
    np.testing.assert_allclose(b.numpy(), v, rtol=1e-6)
