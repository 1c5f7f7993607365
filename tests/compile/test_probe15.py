"""A differential probe of compiled steps against eager ones (/tmp/probe15): a dropout whose
result is unused was pruned (the masks after it, and the generator's state, differed from
eager); a 0-d value a lowered NumPy op made came back a NumPy scalar, which where, maximum,
erf and erfc failed on at the first replay (cpu); gelu of a 0-d tensor failed eagerly (cpu)."""

import math

import numpy as np
import pytest

import labkit as lk
import labkit.functions as F


def _twin_steps(dev, body):
    def make():
        gen = lk.Generator(0, device=dev)
        w = lk.tensor(np.array([1.0, 2.0, 3.0, 4.0], np.float32), device=dev,
                      requires_grad=True)

        def step(x):
            w.grad = None
            loss = F.sum(body(x * w, gen))
            loss.backward()
            return loss
        return step, gen, w
    return make(), make()


def test_an_unused_dropout_still_draws_its_mask_in_a_compiled_step(dev):
    def body(h, gen):
        F.dropout(h, 0.5, generator=gen)  # unused: its draw still moves the generator
        return F.dropout(h, 0.5, generator=gen)

    (eager, ge, we), (step, gc, wc) = _twin_steps(dev, body)
    compiled = lk.compile(step)
    x = lk.tensor(np.ones(4, np.float32), device=dev)
    for _ in range(6):
        assert float(eager(x).numpy()) == float(compiled(x).numpy())
        np.testing.assert_array_equal(we.grad.numpy(), wc.grad.numpy())
    np.testing.assert_array_equal(np.asarray(lk.tensor(ge.bernoulli((16,), 0.5)).numpy()),
                                  np.asarray(lk.tensor(gc.bernoulli((16,), 0.5)).numpy()))


BODIES = {
    "where": lambda m, x: F.where(np.array([True, False, True, False]), m, x),
    "maximum": lambda m, x: F.maximum(m, x * 3.0),
    "erf": lambda m, x: F.erf(m) * x,
    "erfc": lambda m, x: F.erfc(m) * x,
    "gelu": lambda m, x: F.gelu(m) * x,
}


@pytest.mark.parametrize("name", list(BODIES))
def test_a_zero_d_value_of_a_lowered_op_feeds_any_op_in_a_replay(dev, name):
    body = BODIES[name]

    def make():
        w = lk.tensor(np.array([1.0, 2.0, 3.0, 4.0], np.float32), device=dev,
                      requires_grad=True)

        def step(x):
            w.grad = None
            m = F.mean(x * w) * 2.0  # 0-d: on cpu a lowered NumPy multiply
            loss = F.sum(body(m, x))
            loss.backward()
            return loss
        return step, w

    (eager, we), (step, wc) = make(), make()
    compiled = lk.compile(step)
    x = lk.tensor(np.arange(4, dtype=np.float32) / 4, device=dev)
    for _ in range(4):
        np.testing.assert_allclose(float(compiled(x).numpy()), float(eager(x).numpy()),
                                   rtol=1e-6)
        np.testing.assert_allclose(wc.grad.numpy(), we.grad.numpy(), rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("v", [-3.0, -0.5, 0.0, 0.5, 4.0])
def test_gelu_of_a_zero_d_tensor_and_its_gradient(dev, v):
    x = lk.tensor(np.float32(v), device=dev, requires_grad=True)
    y = F.gelu(x)
    y.backward()
    phi = 0.5 * math.erfc(-v / math.sqrt(2))
    np.testing.assert_allclose(float(y.numpy()), v * phi, rtol=1e-6, atol=1e-7)
    grad = phi + v * math.exp(-v * v / 2) / math.sqrt(2 * math.pi)
    np.testing.assert_allclose(float(x.grad.numpy()), grad, rtol=1e-5, atol=1e-6)
