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


def _cells(x, which="h", axis=1):
    """Three LSTM steps by hand: the stack of their ``which`` ("h", "c", or h, c, h) along
    ``axis``, and their hidden states."""
    n, h = x.shape[0], x.shape[1] // 4
    c = lk.tensor(np.zeros((n, h), np.float32), device=x.device)
    hs, cs = [], []
    for k in range(3):
        c, hk = F.lstm(c, x * (k + 1.0))
        hs.append(hk)
        cs.append(c)
    pieces = {"h": hs, "c": cs, "both": [hs[0], cs[1], hs[2]]}[which]
    return F.stack(pieces, axis=axis), hs


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
    xs = [rng.standard_normal((2, 32)).astype(np.float32) for _ in range(4)]
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
        x = lk.tensor(rng.standard_normal((2, 32)).astype(np.float32))
        assert f(x).item() == step(x).item()
    assert f.programs()[0].stacked == 3, f.explain()


def test_on_opencl_nothing_is_written_in_place():
    def step(x):
        st, _ = _cells(x)
        return (st * st).sum()

    f = lk.compile(step)
    x = lk.tensor(np.ones((2, 32), np.float32), device="cl")
    assert f(x).item() == step(x).item()
    f(x)
    assert f.programs()[0].stacked == 0


@pytest.mark.parametrize("which, axis, batch", [
    ("h", 0, 3), ("h", 1, 3), ("h", 2, 3), ("h", -1, 1), ("c", 1, 3), ("both", 0, 3),
    ("h", 2, 1)])
def test_only_an_output_an_op_can_write_and_a_place_laid_out_as_a_fresh_array(
        which, axis, batch):
    """The cell state c (the LSTM's output 0) is stacked as before, not given h's place (an
    assertion at the first replay, or with -O the wrong values); a place whose rows are not
    contiguous (a stack along the last axis) is not used: its readers would take other
    NumPy paths (``h @ U`` at batch 1 changed in the last bits). Bit for bit, every call."""
    rng = np.random.default_rng(4)
    u = lk.tensor(rng.standard_normal((8, 8)).astype(np.float32) * 0.3)

    def step(x):
        st, _ = _cells(x, which, axis)
        w = lk.tensor(np.arange(1, st.size + 1, dtype=np.float32).reshape(st.shape))
        return (st * w).sum(), F.matmul(F.unbind(st, axis=axis)[1], u)

    f = lk.compile(step, reassociate=False)
    xs = [rng.standard_normal((batch, 32)).astype(np.float32) for _ in range(4)]
    got = [f(lk.tensor(x)) for x in xs]
    for x, g in zip(xs, got):
        for a, b in zip(g, step(lk.tensor(x))):
            np.testing.assert_array_equal(a.numpy(), b.numpy())
    contiguous_rows = axis not in (2, -1)
    expected = {"h": 3, "c": 0, "both": 2}[which] if contiguous_rows else 0
    assert f.programs()[0].stacked == expected, f.explain()


def test_a_subclass_of_the_lstm_cell_keeps_its_own_forward():
    """Only the exact types write in place: a subclass's forward (here a forget-gate bias) is
    what a replay runs, not the base class's forward_into."""
    from labkit.functions import recurrent as rec

    class Biased(rec.LSTM):
        def forward(self, c_prev, x):
            x = x.copy()
            x[:, 2 * (x.shape[1] // 4):3 * (x.shape[1] // 4)] += 1.0
            return super().forward(c_prev, x)

    def step(x):
        c = lk.tensor(np.zeros((2, 8), np.float32))
        hs = []
        for k in range(3):
            c, hk = Biased().apply((c, x * (k + 1.0)))
            hs.append(hk)
        return (F.stack(hs, axis=1) * 2.0).sum()

    f = lk.compile(step)
    rng = np.random.default_rng(6)
    for _ in range(4):
        x = lk.tensor(rng.standard_normal((2, 32)).astype(np.float32))
        assert f(x).item() == step(x).item()
    assert f.programs()[0].stacked == 0


def test_an_array_a_users_function_keeps_is_never_written_again():
    """A Function of the user's may keep the arrays it gets (here in a list, as a logger
    might): neither a stack nor a ufunc's result it gets is a buffer a later replay writes."""
    kept = []

    class Keep(lk.Function):
        def forward(self, a):
            kept.append(a)
            return a * 2.0

        def backward(self, inputs, g):
            return g * 2.0

    def step(x):
        st, _ = _cells(x)
        return Keep().apply((st,)).sum() + Keep().apply((F.tanh(x) * 3.0,)).sum()

    rng = np.random.default_rng(2)
    xs = [lk.tensor(rng.standard_normal((2, 32)).astype(np.float32)) for _ in range(5)]
    f = lk.compile(step, reassociate=False)
    for x in xs:
        f(x)
    got = list(kept)  # NOTE: the arrays themselves, as the Function kept them
    kept.clear()
    for x in xs:
        step(x)
    assert len(got) == len(kept) == 10
    for a, b in zip(got, kept):
        np.testing.assert_array_equal(a, b)
