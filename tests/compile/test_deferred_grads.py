"""On OpenCL, a weight's gradient that nothing in a compiled step reads (only the optimizer's
step, whose plain SGD update is fused into the product: compile/sgd.py) is not written by the
product's kernel; its ``.grad`` is made where it is read, from the product's operands (those
the caller holds copied). The gradients are the eager step's bit for bit wherever they are
read: right after the call, after later calls, after the caller changed the batch or a
returned activation in place, and an eager backward adds to them."""

import numpy as np
import pytest

import labkit as lk
import labkit.functions as F
from labkit.compile.sgd import OuterGrad

from .test_sgd_products import _make_step as _step
from .test_sgd_products import _setup as _mlp


def _setup(batch, steps=6):
    """test_sgd_products' MLP (64-200, 32-64, 10-32 weights) and plain SGD, and ``steps``
    batches."""
    ps, opt, _, _ = _mlp("cl", batch)
    rng = np.random.default_rng(batch)
    data = [(rng.standard_normal((batch, 200)).astype(np.float32), rng.integers(0, 10, batch))
            for _ in range(steps)]
    return ps, opt, data


def _eager_grads(batch, upto, data=None):
    """The eager run's gradients after call ``upto`` (0-based), and the weights then."""
    ps, opt, d = _setup(batch)
    step = _step(ps, opt)
    for x, y in (data or d)[:upto + 1]:
        step(lk.tensor(x, device="cl"), lk.tensor(y, device="cl"))
    return [p.grad.numpy() for p in ps], [p.numpy() for p in ps]


@pytest.mark.parametrize("batch", [1, 8])
def test_gradients_not_read_in_the_step_are_made_where_read_bit_for_bit(batch):
    ps, opt, data = _setup(batch)
    f = lk.compile(_step(ps, opt))
    for k, (x, y) in enumerate(data):
        f(lk.tensor(x, device="cl"), lk.tensor(y, device="cl"))
        if k in (2, 5):
            assert all(type(p.grad) is OuterGrad for p in ps[0::2])  # NOTE: the weights'
            grads, weights = _eager_grads(batch, k)
            for p, g, w in zip(ps, grads, weights):
                np.testing.assert_array_equal(p.grad.numpy(), g)
                np.testing.assert_array_equal(p.numpy(), w)
    prog = f.programs()[0]
    assert prog.sgd == 3 and prog.deferred == 3
    assert "3 of these gradients, read by nothing in the step, not written" in f.explain()


def test_a_gradient_kept_past_later_calls_and_a_changed_batch_is_its_own_calls():
    """Made from the call's operands: a batch the caller changes in place afterwards (a
    loader reusing its buffer) is copied; the step's own arrays are new at every replay."""
    ps, opt, data = _setup(8)
    f = lk.compile(_step(ps, opt))
    xs = [lk.tensor(x, device="cl") for x, _ in data]
    for k, (x, (_, y)) in enumerate(zip(xs, data)):
        f(x, lk.tensor(y, device="cl"))
        if k == 2:
            kept = [p.grad for p in ps]
            x.data[...] = 7.0
    grads, _ = _eager_grads(8, 2)
    for g, want in zip(kept, grads):
        np.testing.assert_array_equal(g.numpy(), want)


def test_a_returned_activation_changed_in_place_does_not_change_the_gradient():
    ps, opt, data = _setup(8)
    f = lk.compile(_step(ps, opt, returns_h=True))
    for k, (x, y) in enumerate(data[:4]):
        _, h = f(lk.tensor(x, device="cl"), lk.tensor(y, device="cl"))
        h.data[...] = -3.0  # NOTE: h is W3's gradient's operand
        if k == 3:
            grads, _ = _eager_grads(8, 3)
            for p, g in zip(ps, grads):
                np.testing.assert_array_equal(p.grad.numpy(), g)
    assert f.programs()[0].deferred == 3


def test_an_eager_backward_after_a_replay_adds_to_the_made_gradient():
    ps, opt, data = _setup(8)
    f = lk.compile(_step(ps, opt))
    for x, y in data[:3]:
        f(lk.tensor(x, device="cl"), lk.tensor(y, device="cl"))
    g = ps[0].grad.numpy().copy()
    x, y = (lk.tensor(v, device="cl") for v in data[3])
    twin = [lk.tensor(p.numpy(), device="cl", requires_grad=True) for p in ps]

    def loss_of(q):
        h = F.relu(F.linear(F.relu(F.linear(x, q[0], q[1])), q[2], q[3]))
        return F.softmax_cross_entropy(F.linear(h, q[4], q[5]), y)
    loss_of(ps).backward()  # NOTE: accumulates into .grad, as after an eager step
    loss_of(twin).backward()
    np.testing.assert_array_equal(ps[0].grad.numpy(), g + twin[0].grad.numpy())


def test_a_gradient_read_in_the_step_is_written():
    """A step that returns a weight's gradient, or reads it (a norm), gets it written by the
    product as before."""
    ps, opt, data = _setup(8)
    inner = _step(ps, opt)

    def step(x, y):
        loss = inner(x, y)
        return loss, ps[2].grad

    f = lk.compile(step)
    for x, y in data[:3]:
        _, g = f(lk.tensor(x, device="cl"), lk.tensor(y, device="cl"))
    assert type(g) is not OuterGrad and type(ps[2].grad) is not OuterGrad
    grads, _ = _eager_grads(8, 2)
    np.testing.assert_array_equal(g.numpy(), grads[2])
    assert f.programs()[0].deferred == 2


def _same_grads_after(make, change, calls=4):
    """``make()`` -> (step, params, batches): the params' gradients after each call, with
    ``change(params)`` run after it (the caller's), eager and compiled."""
    got = []
    for compiled in (False, True):
        step, ps, batches = make()
        f = lk.compile(step) if compiled else step
        grads = []
        for args in batches[:calls]:
            f(*args)
            change(ps)
            grads.append([p.grad.numpy().copy() for p in ps])
        got.append(grads)
    for a, b in zip(*got):
        for u, v in zip(a, b):
            np.testing.assert_array_equal(u, v)


def test_an_operand_that_is_another_tensors_grad_is_copied():
    """A full-shape additive parameter's ``.grad`` is the logits' gradient, W's operand: the
    caller zeroing it after the call does not change W's gradient (it did, /tmp/adv41)."""
    def make():
        rng = np.random.default_rng(3)
        W = lk.tensor(rng.standard_normal((16, 40)).astype(np.float32) * 0.1, device="cl",
                      requires_grad=True)
        B = lk.tensor(np.zeros((8, 16), np.float32), device="cl", requires_grad=True)
        opt = lk.optimizers.SGD(lr=0.1).setup({"W": W, "B": B})
        data = [(lk.tensor(np.full((8, 40), k * 0.1 - 0.2, np.float32), device="cl"),
                 lk.tensor(np.arange(8) % 16, device="cl")) for k in range(4)]

        def step(x, y):
            loss = F.softmax_cross_entropy(F.linear(x, W) + B, y)
            opt.zero_grad()
            loss.backward()
            opt.update()
            return loss
        return step, [W, B], data

    def zero_b(ps):
        ps[1].grad.data[...] = 0.0
    _same_grads_after(make, zero_b)


def test_an_operand_a_host_function_returns_is_copied():
    """A loader's device buffer handed in by ``lk.compile.host`` and refilled after the
    call: W1's gradient is the call's batch's (it was the next batch's, /tmp/adv41)."""
    from labkit.backend import opencl as cp

    def make():
        ps, opt, data = _setup(8)
        buf = cp.asarray(data[0][0])

        def step(y):
            x = lk.Tensor(lk.compile.host(lambda: buf))
            return _step(ps, opt)(x, y)
        batches = [(lk.tensor(y, device="cl"),) for _, y in data]
        make.k, make.buf, make.data = 0, buf, data
        return step, ps, batches

    def refill(ps):
        make.k += 1
        make.buf[...] = cp.asarray(make.data[make.k % len(make.data)][0])
    _same_grads_after(make, refill)
