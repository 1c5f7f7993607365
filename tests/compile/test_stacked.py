"""A stack's pieces written into their place by the ops that make them (compile/stacked.py,
CPU): the same bits as the eager step, and never in an array a result keeps."""

import numpy as np
import pytest

import labkit as lk
import labkit.bricks as B
import labkit.functions as F
import labkit.optimizers as O


def _lstm_run(compiled, **options):
    rng = np.random.default_rng(3)
    B.set_seed(3)
    rnn = B.LSTM(5, 8)
    opt = O.SGD(lr=0.1).setup(rnn)
    y = lk.tensor(rng.standard_normal((4, 8)).astype(np.float32))

    def step(x):
        opt.zero_grad()
        loss = F.mean_squared_error(rnn(x)[:, -1], y)
        loss.backward()
        opt.update()
        return loss

    f = lk.compile(step, **options) if compiled else step
    losses = [f(lk.tensor(rng.standard_normal((4, 7, 5)).astype(np.float32))).numpy()
              for _ in range(5)]
    return f, np.array(losses), [p.numpy() for p in rnn.params().values()]


@pytest.mark.parametrize("reassociate", [False, True])
def test_an_lstm_steps_gradients_are_written_into_their_stack(reassociate):
    """The step gradients' stack (and, gathered, the hidden states'): each piece written in
    place, and with reassociate=False (no other change) every bit as the eager step's."""
    _, le, pe = _lstm_run(False)
    f, lc, pc = _lstm_run(True, reassociate=reassociate)
    p = f.programs()[0]
    assert p.stacked == (7 + 6 if reassociate else 7), p.stacked  # NOTE: h_0 is no op's
    assert f"stacked: {p.stacked} piece(s)" in f.explain(), f.explain()
    if reassociate:
        np.testing.assert_allclose(lc, le, rtol=1e-5, atol=1e-7)
        for a, b in zip(pc, pe):
            np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-7)
    else:
        np.testing.assert_array_equal(lc, le)
        for a, b in zip(pc, pe):
            np.testing.assert_array_equal(a, b)


def _cells(x, pieces_out=False):
    """Three LSTM steps by hand, their hidden states stacked."""
    n, h = x.shape[0], x.shape[1] // 4
    c = lk.tensor(np.zeros((n, h), np.float32), device=x.device)
    hs = []
    for k in range(3):
        c, hk = F.lstm(c, x * (k + 1.0))
        hs.append(hk)
    st = F.stack(hs, axis=1)
    return st, hs


@pytest.mark.parametrize("what", ["stack", "piece", "both", "reshaped"])
def test_a_stack_or_piece_the_step_returns_is_never_a_kept_array(what):
    """A result is the caller's: the next replay must not write into it. A returned stack (or
    a view of it) keeps its own array each call, a returned piece stays no stack's view; the
    other pieces are still written in place."""
    rng = np.random.default_rng(0)

    def step(x):
        st, hs = _cells(x)
        s = (st * st).sum()
        if what == "stack":
            return s, st
        if what == "piece":
            return s, hs[1]
        if what == "both":
            return s, st, hs[2]
        return s, st.reshape(-1)

    f = lk.compile(step)
    xs = [rng.standard_normal((2, 12)).astype(np.float32) for _ in range(4)]
    got = [f(lk.tensor(x)) for x in xs]
    want = [step(lk.tensor(x)) for x in xs]
    for g, w in zip(got, want):  # NOTE: after all the calls: none overwrote an earlier one
        for a, b in zip(g, w):
            np.testing.assert_array_equal(a.numpy(), b.numpy())
    expected = {"stack": 0, "piece": 2, "both": 0, "reshaped": 0}[what]
    assert f.programs()[0].stacked == expected, f.explain()


def test_pieces_of_ops_that_cannot_write_in_place_are_stacked_as_before():
    def step(x):
        return F.stack([F.tanh(x), F.sigmoid(x), x * 2.0], axis=0).sum()

    f = lk.compile(step)
    for k in range(3):
        x = lk.tensor(np.full((2, 3), 0.1 * k, np.float32))
        assert f(x).item() == step(x).item()
    assert f.programs()[0].stacked == 0
    assert "stack (in place)" not in [n.name for n in f.programs()[0].nodes]


def test_a_piece_in_two_stacks_is_written_into_one():
    """One output has one place: the second stack copies it."""
    rng = np.random.default_rng(1)

    def step(x):
        st, hs = _cells(x)
        other = F.stack(hs[::-1], axis=0)
        return (st * st).sum() + (other * 3.0).sum()

    f = lk.compile(step)
    for _ in range(3):
        x = lk.tensor(rng.standard_normal((2, 12)).astype(np.float32))
        assert f(x).item() == step(x).item()
    assert f.programs()[0].stacked == 3, f.explain()


def test_on_opencl_nothing_is_written_in_place():
    def step(x):
        st, _ = _cells(x)
        return (st * st).sum()

    f = lk.compile(step)
    x = lk.tensor(np.ones((2, 12), np.float32), device="cl")
    assert f(x).item() == step(x).item()
    f(x)
    assert f.programs()[0].stacked == 0
