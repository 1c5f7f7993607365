"""A loop's stacked outputs read at one step (``rnn(x)[:, -1]``): the compiled program reads
that step's output directly, and the backward's zero pieces and the additions of them are
gone (passes.one_piece). Bit for bit eager (assert_array_equal: a zero's sign may differ)."""

import numpy as np
import pytest

import labkit as lk
import labkit.functions as F
from labkit.functions import array as fa
from labkit.functions import math as m


def _ops(step):
    return [type(n.fn) for n in step.programs()[0].nodes if n.kind == "op"]


def _loop(key, axis, extra):
    def step(x, u):
        h, hs = None, []
        for xt in F.unbind(x, axis=axis):
            h = F.tanh(xt * u if h is None else xt + h * u)
            hs.append(h)
        out = F.stack(hs, axis=axis)
        y = out[key]
        loss = (y * y).sum() + (out.sum() if extra else 0)
        loss.backward()
        return loss, y * 1.0, x.grad, u.grad  # NOTE: y itself leaving is left alone
    return step


@pytest.mark.parametrize("key, axis, extra, count", [
    ((slice(None), -1), 1, False, 2),           # the last step, as an RNN's head reads it
    (-1, 0, False, 2),                          # time first
    ((slice(None), 2), 1, False, 2),            # a middle step: the later steps' zeros stay
    ((slice(None), -1), 1, True, 1),            # the whole stack is read too: the slice only
    ((slice(None), slice(2, 4)), 1, False, 0),  # a range of steps: not one piece
    ((0, -1), 1, False, 0),                     # one batch row as well: not one piece
])
def test_one_step_of_a_stack(dev, key, axis, extra, count):
    rng = np.random.default_rng(0)
    shape = (3, 5, 4) if axis == 1 else (5, 3, 4)
    step = _loop(key, axis, extra)
    compiled = lk.compile(step)
    for _ in range(4):
        xv = rng.standard_normal(shape).astype(np.float32)
        uv = rng.standard_normal(4).astype(np.float32)

        def args(xv=xv, uv=uv):
            return (lk.tensor(xv, device=dev, requires_grad=True),
                    lk.tensor(uv, device=dev, requires_grad=True))
        got, want = compiled(*args()), step(*args())
        for g, w in zip(got, want):
            np.testing.assert_array_equal(g.numpy(), w.numpy())
    assert compiled.stats["replays"] == 2
    text = compiled.explain()
    assert (f"one piece: {count} slice(s)" in text) if count else "one piece" not in text, text
    ops = _ops(compiled)
    # NOTE: the gradients of the steps after a middle one are zeros all through: their
    # backward still runs on them (0 * inf is not 0)
    zeros_left = count < 2 or key == (slice(None), 2)
    assert (fa.GetItemGrad in ops) == zeros_left
    assert ops.count(fa.Stack) == 2 - (count > 0 and not extra)  # NOTE: one is x.grad
    if not zeros_left:
        assert ops.count(m.Add) < 2 * shape[axis]


def test_an_lstm_head_reads_the_last_step(dev):
    """The LSTM brick's output sliced at the last step: no stack of its outputs, no zeros
    of their shape, and the training step as eager."""
    import labkit.bricks as B

    rng = np.random.default_rng(1)
    B.set_seed(0)
    net = B.LSTM(3, 6).to(dev)
    opt = lk.optimizers.SGD(0.1).setup(net)

    def step(x, y):
        opt.zero_grad()
        loss = F.mean_squared_error(net(x)[:, -1], y)
        loss.backward()
        opt.update()
        return loss

    compiled = lk.compile(step)
    xv = rng.standard_normal((4, 7, 3)).astype(np.float32)
    yv = rng.standard_normal((4, 6)).astype(np.float32)
    losses = [compiled(lk.tensor(xv, device=dev), lk.tensor(yv, device=dev)).numpy()
              for _ in range(3)]
    B.set_seed(0)
    net2 = B.LSTM(3, 6).to(dev)
    opt = lk.optimizers.SGD(0.1).setup(net2)
    net, saved = net2, net
    eager = [step(lk.tensor(xv, device=dev), lk.tensor(yv, device=dev)).numpy()
             for _ in range(3)]
    np.testing.assert_allclose(losses, eager, rtol=1e-5)
    for a, b in zip(saved.params().values(), net2.params().values()):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-5, atol=1e-6)
    ops = _ops(compiled)
    assert fa.GetItemGrad not in ops and fa.Stack not in ops[:len(ops) // 2], ops
    assert "one piece" in compiled.explain()
