"""On the CPU, a weight's gradient at batch 1 (an outer product) and its plain SGD update as one
BLAS rank-1 update of the weight, the gradient made only where ``.grad`` is read
(compile/sgd.py ``_OuterUpdate``, ``OuterGrad``): the gradients are the eager step's bit for
bit, the weights within float32 rounding of it, and anything that reads or changes what the
update relies on gets the eager behaviour."""

import numpy as np
import pytest

import labkit as lk
import labkit.functions as F
from labkit.backend import blas
from labkit.compile.sgd import OuterGrad

pytestmark = pytest.mark.skipif(not blas.available(),
                                reason="NumPy is not built on its bundled OpenBLAS here")


def _setup(seed=0, optimizer=None):
    rng = np.random.default_rng(seed)
    P0 = [rng.standard_normal((96, 120)).astype(np.float32) * 0.1, np.zeros(96, np.float32),
          rng.standard_normal((80, 96)).astype(np.float32) * 0.1, np.zeros(80, np.float32),
          rng.standard_normal((10, 80)).astype(np.float32) * 0.1, np.zeros(10, np.float32)]
    ps = [lk.tensor(p, requires_grad=True) for p in P0]
    opt = (optimizer or lk.optimizers.SGD(lr=0.1)).setup({f"p{i}": p for i, p in enumerate(ps)})
    xs = [rng.standard_normal((1, 120)).astype(np.float32) for _ in range(8)]
    ys = [rng.integers(0, 10, 1) for _ in range(8)]
    return ps, opt, xs, ys


def _step(ps, opt):
    def step(x, y):
        h = F.relu(F.linear(lk.tensor(x), ps[0], ps[1]))
        h = F.relu(F.linear(h, ps[2], ps[3]))
        loss = F.softmax_cross_entropy(F.linear(h, ps[4], ps[5]), y)
        opt.zero_grad()
        loss.backward()
        opt.update()
        return loss
    return step


def _train(compiled, lrs=(0.1,) * 8, **kw):
    ps, opt, xs, ys = _setup(**kw)
    f = lk.compile(_step(ps, opt)) if compiled else _step(ps, opt)
    losses, grads = [], []
    for x, y, lr in zip(xs, ys, lrs):
        opt.lr = lr
        losses.append(float(f(x, y).item()))
        grads.append([p.grad.numpy().copy() for p in ps])
    return losses, grads, [p.numpy() for p in ps], f


def test_trains_as_the_eager_step_to_float32_rounding_with_rates_changed():
    lrs = (0.1, 0.1, 0.05, 0.3, 0.3, 0.01, 0.2, 0.2)
    le, ge, we, _ = _train(False, lrs)
    lc, gc, wc, f = _train(True, lrs)
    assert f.programs()[0].sgd == 2  # the two weights of 4,096 elements or more
    assert "plain SGD update of 2 weight(s)" in f.explain()
    np.testing.assert_allclose(lc, le, rtol=1e-5)
    for a, b in zip(wc, we):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7)
    assert not all(np.array_equal(a, b) for a, b in zip(wc, we))  # rounded otherwise
    for a, b in zip(gc, ge):
        for u, v in zip(a, b):
            np.testing.assert_allclose(u, v, rtol=1e-4, atol=1e-6)


def test_one_step_from_the_same_weights_gives_the_eager_gradient_bit_for_bit():
    ps, opt, xs, ys = _setup()
    f = lk.compile(_step(ps, opt))
    for x, y in zip(xs[:3], ys[:3]):
        f(x, y)  # traced twice, then a replay
    before = [p.numpy().copy() for p in ps]
    f(xs[3], ys[3])
    assert type(ps[0].grad) is OuterGrad and type(ps[2].grad) is OuterGrad
    got = [p.grad.numpy() for p in ps]
    after = [p.numpy() for p in ps]
    for p, b in zip(ps, before):
        p.data[...] = b
    _step(ps, opt)(xs[3], ys[3])
    for g, p in zip(got, ps):
        assert np.array_equal(g, p.grad.numpy())
    for a, p in zip(after, ps):
        np.testing.assert_allclose(a, p.numpy(), rtol=0, atol=2e-7)
        # NOTE: at most one rounding apart (the update rounds lr * b first)
        assert np.max(np.abs(a.view(np.int32) - p.numpy().view(np.int32))) <= 1


def test_a_gradient_kept_past_later_steps_and_changed_inputs_is_its_own_step():
    """The gradient is made from copies of its vectors: a later replay (which writes the
    same buffers) or a batch array changed in place after the call does not change it."""
    ps, opt, xs, ys = _setup()
    f = lk.compile(_step(ps, opt))
    for x, y in zip(xs[:3], ys[:3]):
        f(x, y)
    before = [p.numpy().copy() for p in ps]
    x = xs[3].copy()
    f(x, ys[3])
    kept = ps[0].grad
    x[...] = 7.0  # a loader reusing its batch buffer
    for xx, yy in zip(xs[4:], ys[4:]):
        f(xx, yy)
    for p, b in zip(ps, before):
        p.data[...] = b
    _step(ps, opt)(xs[3], ys[3])
    assert np.array_equal(kept.numpy(), ps[0].grad.numpy())
    assert kept.shape == (96, 120) and kept.dtype == np.float32


def test_an_eager_backward_after_a_replay_adds_to_the_made_gradient():
    ps, opt, xs, ys = _setup()
    f = lk.compile(_step(ps, opt))
    for x, y in zip(xs[:3], ys[:3]):
        f(x, y)
    g = ps[0].grad.numpy().copy()
    loss = F.softmax_cross_entropy(
        F.linear(F.relu(F.linear(F.relu(F.linear(lk.tensor(xs[4]), ps[0], ps[1])), ps[2],
                                 ps[3])), ps[4], ps[5]), ys[4])
    loss.backward()  # NOTE: accumulates into .grad, as after an eager step
    ps2 = [lk.tensor(p.numpy(), requires_grad=True) for p in ps]
    F.softmax_cross_entropy(
        F.linear(F.relu(F.linear(F.relu(F.linear(lk.tensor(xs[4]), ps2[0], ps2[1])), ps2[2],
                                 ps2[3])), ps2[4], ps2[5]), ys[4]).backward()
    assert np.array_equal(ps[0].grad.numpy(), g + ps2[0].grad.numpy())


@pytest.mark.parametrize("how", ["momentum", "unfused", "reassociate=False"])
def test_what_the_update_relies_on_gives_the_eager_way(how):
    """Momentum, an optimizer no longer fused, or reassociate=False: bit for bit the eager
    step, whose gradient is a plain array."""
    kw = {"optimizer": lk.optimizers.Momentum(lr=0.1, momentum=0.9)} if how == "momentum" else {}
    ps, opt, xs, ys = _setup(**kw)
    ref = _setup(**kw)
    f = lk.compile(_step(ps, opt), reassociate=how != "reassociate=False")
    g = _step(ref[0], ref[1])
    if how == "unfused":
        opt.fused = ref[1].fused = False
    for x, y in zip(xs, ys):
        a, b = f(x, y), g(x, y)
        assert np.array_equal(a.numpy(), b.numpy())
        for p, q in zip(ps, ref[0]):
            assert np.array_equal(p.numpy(), q.numpy())
            assert np.array_equal(p.grad.numpy(), q.grad.numpy())
    assert f.programs()[0].sgd == 0
    assert type(ps[0].grad) is lk.Tensor


def test_an_optimizer_changed_after_compiling_updates_as_the_eager_step():
    """opt.fused = False, or momentum state, after the program fused the update: each replay
    looks again, and from the same weights gives the eager step bit for bit."""
    ps, opt, xs, ys = _setup()
    f = lk.compile(_step(ps, opt))
    for x, y in zip(xs[:3], ys[:3]):
        f(x, y)
    assert f.programs()[0].sgd == 2
    opt.fused = False
    for x, y in zip(xs[3:6], ys[3:6]):
        before = [p.numpy().copy() for p in ps]
        f(x, y)
        assert type(ps[0].grad) is lk.Tensor
        got = [(p.numpy().copy(), p.grad.numpy()) for p in ps]
        ref = [lk.tensor(b, requires_grad=True) for b in before]
        o = lk.optimizers.SGD(lr=0.1).setup({f"p{i}": p for i, p in enumerate(ref)})
        o.fused = False
        _step(ref, o)(x, y)
        for (w, gr), q in zip(got, ref):
            assert np.array_equal(w, q.numpy()) and np.array_equal(gr, q.grad.numpy())


def test_a_tensor_tied_to_the_weight_after_compiling_sees_it_before_the_update():
    """M, read by the step's backward after the weight's gradient, made the weight's array
    after compiling: the replay does not update early (the eager step's gradients; an early
    update gave gradients off by thousands)."""
    n = 64
    rng = np.random.default_rng(0)

    def params():
        r = np.random.default_rng(1)
        return [lk.tensor((r.standard_normal((n, n)) * 0.1).astype(np.float32),
                          requires_grad=True) for _ in range(3)]

    def make(ps, opt):
        W0, W1, M = ps

        def step(x):
            h = F.relu(F.linear(lk.tensor(x), W1))
            a = F.linear(h, M)
            c = F.linear(lk.tensor(x), W0)  # W0's gradient comes first in the backward
            loss = F.sum(a * a) + F.sum(c * c)
            opt.zero_grad()
            loss.backward()
            opt.update()
            return loss
        return step

    pc, pe = params(), params()
    oc = lk.optimizers.SGD(lr=0.1).setup({"W0": pc[0], "W1": pc[1]})
    oe = lk.optimizers.SGD(lr=0.1).setup({"W0": pe[0], "W1": pe[1]})
    pc[2].requires_grad = pe[2].requires_grad = False
    f, g = lk.compile(make(pc, oc)), make(pe, oe)
    xs = [rng.standard_normal((1, n)).astype(np.float32) for _ in range(5)]
    for x in xs[:3]:
        f(x)
        g(x)
    assert f.programs()[0].sgd == 2
    for p, q in zip(pc, pe):
        p.data[...] = q.data
    pc[2].data, pe[2].data = pc[0].data, pe[0].data
    for x in xs[3:]:
        for p, q in zip(pc[:2], pe[:2]):  # NOTE: from the same weights at each step
            p.data[...] = q.data
        f(x)
        g(x)
        for p, q in zip(pc[:2], pe[:2]):
            assert np.array_equal(p.grad.numpy(), q.grad.numpy())
            # NOTE: W1 is still updated by its rank-1 update (its last bit may differ)
            np.testing.assert_allclose(p.numpy(), q.numpy(), rtol=1e-5, atol=1e-5)
        assert np.array_equal(pc[0].numpy(), pe[0].numpy())  # W0: the eager update


def test_a_gradient_written_as_another_tensors_data_is_an_array():
    """keep.data = W.grad.data inside the step: the gradient is made, not left to be made
    where it is read (it was a placeholder object in keep.data)."""
    ps, opt, xs, ys = _setup()
    keep = lk.tensor(np.zeros((96, 120), np.float32))
    inner = _step(ps, opt)

    def step(x, y):
        loss = inner(x, y) + F.sum(keep) * 0.0
        keep.data = ps[0].grad.data
        return loss

    f = lk.compile(step)
    for x, y in zip(xs, ys):
        f(x, y)
        assert type(keep.data) is np.ndarray
        assert np.array_equal(keep.numpy(), ps[0].grad.numpy())
