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


def _gathered_nodes(f):
    return [n.name for n in f.programs()[0].nodes if n.sig and n.sig[0] == "gathered"]


def test_the_recurrent_gradient_reads_the_stack_of_step_gradients(dev):
    """The LSTM's step gradients are stacked once (for the input projection's gradient); the
    gathered recurrent gradient reads that stack, with the hidden states stacked the same
    way, and the first step's product (from the initial state, not a transpose) joins it."""
    _, le, pe = _run(dev, False)
    f, lc, pc = _run(dev, True)
    names = _gathered_nodes(f)
    kinds = [n.name for n in f.programs()[0].nodes]
    if dev.kind == "cpu":  # NOTE: stacks whose pieces are written in place (stacked.py)
        assert "concat" not in names and names.count("stack (in place)") == 1, names
        assert names[0] == "transpose", names  # NOTE: the first step's x, from the initial state
        # NOTE: the step gradients', and the a's
        assert kinds.count("stack (in place)") == 2, kinds
    else:  # NOTE: OpenCL concatenates contiguous pieces 8 to a launch: the pieces, as before
        assert names.count("concat") == 2 and "stack" not in names, names
    np.testing.assert_allclose(lc, le, rtol=1e-5, atol=1e-6)
    for k in pe:
        np.testing.assert_allclose(pc[k], pe[k], rtol=1e-4, atol=1e-6, err_msg=k)


def _sums(kind):
    def fn(a1, a2, a3, b1, b2, b3):
        if kind == "plain":        # no transposes: a forward sum of products, left alone
            return sum((F.transpose(a) * 1.0) @ b for a, b in ((a2, b2), (a3, b3))) + (
                F.transpose(a1) * 1.0) @ b1
        if kind == "same_b":       # one b for every term: each term keeps its a
            return a1.T @ b1 + a2.T @ b1 + a3.T @ b1
        # the b's stacked by the step too, in another order
        return a1.T @ b1 + a2.T @ b2 + a3.T @ b3, F.stack([b3, b1, b2], axis=1)
    return fn


@pytest.mark.parametrize("kind, gathered", [
    ("plain", False), ("same_b", True), ("stacked", True)])
def test_gathered_sums_with_shared_and_stacked_operands(dev, kind, gathered):
    rng = np.random.default_rng(5)
    A = [rng.standard_normal((4, 3)).astype(np.float32) for _ in range(3)]
    Bs = [rng.standard_normal((4, 6)).astype(np.float32) for _ in range(3)]

    def make():
        return tuple(lk.tensor(v, device=dev) for v in A + Bs)
    fn = _sums(kind)
    want = fn(*make())
    f = lk.compile(fn)
    for _ in range(3):
        got = f(*make())
    want, got = (want, got) if isinstance(want, tuple) else ((want,), (got,))
    for w, g in zip(want, got):
        np.testing.assert_allclose(g.numpy(), w.numpy(), rtol=1e-5, atol=1e-5)
    assert ("gathered" in f.explain()) == gathered, f.explain()
    if kind == "stacked":
        names = _gathered_nodes(f)
        assert ("concat" not in names and "stack" in names) == (dev.kind == "cpu"), names
