"""Gathering a sum of matrix products (a recurrent weight's gradient over the steps of an
unrolled loop) into one product of stacked operands: equal to eager to float32 rounding (the
sum is reassociated), and bit for bit with reassociate=False."""

import numpy as np
import pytest

import labkit as lk
import labkit.bricks as B
import labkit.functions as F
import labkit.optimizers as O


def _run(dev, compiled, **options):
    rng = np.random.default_rng(0)
    B.set_seed(0)
    rnn, head = B.LSTM(6, 8).to(dev), B.Linear(8, 3).to(dev)
    params = {**{f"r{k}": v for k, v in rnn.params().items()},
              **{f"h{k}": v for k, v in head.params().items()}}
    opt = O.Adam(0.01).setup(params)

    def step(x, y):
        opt.zero_grad()
        loss = F.softmax_cross_entropy(head(rnn(x)[:, -1]), y)
        loss.backward()
        opt.update()
        return loss

    f = lk.compile(step, **options) if compiled else step
    losses = []
    for _ in range(5):
        x = lk.tensor(rng.standard_normal((4, 9, 6)).astype(np.float32), device=dev)
        losses.append(f(x, rng.integers(0, 3, 4)).numpy())
    return f, np.array(losses), {k: v.numpy() for k, v in params.items()}


def test_a_loops_weight_gradient_is_one_product(dev):
    _, le, pe = _run(dev, False)
    f, lc, pc = _run(dev, True)
    assert "gathered: 1 sum(s) of matrix products" in f.explain(), f.explain()
    np.testing.assert_allclose(lc, le, rtol=1e-5, atol=1e-6)
    for k in pe:
        np.testing.assert_allclose(pc[k], pe[k], rtol=1e-4, atol=1e-6, err_msg=k)


@pytest.mark.parametrize("devname", ["cpu"])
def test_without_reassociation_the_replay_is_exact(devname):
    _, le, pe = _run(devname, False)
    f, lc, pc = _run(devname, True, reassociate=False)
    assert "gathered" not in f.explain()
    np.testing.assert_array_equal(lc, le)
    for k in pe:
        np.testing.assert_array_equal(pc[k], pe[k], err_msg=k)
