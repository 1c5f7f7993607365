"""Tensors a compiled step reads (parameters) that share one array, or stop sharing it,
between calls: each call computes what the eager step computes, and a step that makes two
parameters share an array is traced again, not refused."""

import numpy as np
import pytest

import labkit as lk
import labkit.functions as F


def _host(a):
    return a if isinstance(a, np.ndarray) else a.get()


def _model(dev, share_after_update):
    A = lk.tensor(np.ones((3,), np.float32), device=dev, requires_grad=True)
    B = lk.tensor(np.full((3,), 3.0, np.float32), device=dev, requires_grad=True)
    opt = lk.optimizers.SGD(lr=0.1).setup({"A": A, "B": B})

    def step(x):
        loss = F.sum((A * x - B) ** 2)
        opt.zero_grad()
        loss.backward()
        opt.update()
        if share_after_update:
            with lk.no_grad():
                y = (A + B) * 0.5
            A.data = y.data
            B.data = y.data
        return loss
    return step, A, B


def _x(dev):
    return lk.tensor(np.arange(3, dtype=np.float32), device=dev)


def _state(A, B):
    return [_host(A.data).copy(), _host(B.data).copy()]


def test_a_step_that_makes_two_parameters_share_an_array_is_traced_again(dev):
    """After call 1 A and B are one array (SGD then updates it twice a call): call 2 is
    another computation than call 1, so it is traced again, where it was refused ("did not
    do the same thing in two calls"), stopping training."""
    eager, Ae, Be = _model(dev, True)
    step, A, B = _model(dev, True)
    c = lk.compile(step)
    x = _x(dev)
    for _ in range(6):
        want, got = float(eager(x).item()), float(c(x).item())
        assert got == want
        for a, b in zip(_state(A, B), _state(Ae, Be)):
            assert np.array_equal(a, b)
    assert c.stats["replays"] >= 2


@pytest.mark.parametrize("change", ["unshare", "share"])
def test_parameters_that_share_an_array_or_stop_sharing_it_between_calls(dev, change):
    """A program traced with A and B on two arrays replayed once they are one (B.data =
    A.data), or traced on one array replayed once they are two again: each call is the eager
    step's, bit for bit."""
    eager, Ae, Be = _model(dev, False)
    step, A, B = _model(dev, False)
    c = lk.compile(step)
    x = _x(dev)
    if change == "unshare":
        B.data, Be.data = A.data, Ae.data
    for i in range(8):
        if i == 4:
            if change == "share":
                B.data, Be.data = A.data, Ae.data
            else:
                B.data, Be.data = B.data.copy(), Be.data.copy()
        want, got = float(eager(x).item()), float(c(x).item())
        assert got == want, i
        for a, b in zip(_state(A, B), _state(Ae, Be)):
            assert np.array_equal(a, b), i


def test_a_tensor_made_in_the_step_on_a_parameter_is_not_guarded(dev):
    """A mean-teacher step reads ema.detach() (a new tensor on ema's array at each call) and
    replaces ema.data: the detached tensor of the traced call is not a tensor the next call
    reads, so the step replays (it was traced at every call, as 'on one array when traced,
    two now')."""
    def model():
        A = lk.tensor(np.ones((3,), np.float32), device=dev, requires_grad=True)
        ema = lk.tensor(np.zeros((3,), np.float32), device=dev)
        opt = lk.optimizers.SGD(lr=0.1).setup({"A": A})

        def step(x):
            loss = F.sum((A * x - 1.0) ** 2) + F.sum((A - ema.detach()) ** 2)
            opt.zero_grad()
            loss.backward()
            opt.update()
            with lk.no_grad():
                ema.data = (ema * 0.9 + A * 0.1).data
            return loss
        return step, A, ema

    eager, Ae, Ee = model()
    step, A, E = model()
    c = lk.compile(step)
    x = _x(dev)
    for _ in range(6):
        assert float(c(x).item()) == float(eager(x).item())
        assert np.array_equal(_host(E.data), _host(Ee.data))
    assert c.stats["traces"] == 2 and c.stats["replays"] == 4
