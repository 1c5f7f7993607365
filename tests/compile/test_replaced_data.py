"""A parameter's ``.data`` replaced inside a compiled step. Replaced by an op's result before
the optimizer updated it (``w.data = (w * 0.9).data`` then ``opt.update()``), every replay lost
the update (the optimizer updated the old array; the write-back at the end then dropped it)
on ``cpu``, and on ``cl`` the fused kernel took the array the update changes (a NameError in
the replay): it was refused, and now replays (a replay sets .data where the step set it).
Replaced after the update (weight clipping), it replays as the eager step does. A host step
that changes an intermediate in place replays with it."""

import numpy as np
import pytest

import labkit as lk
import labkit.functions as F
import labkit.optimizers as O
from labkit.errors import CompileError

W0 = np.array([0.5, -2.0, 3.0, 0.25], np.float32)
X = np.array([1.0, 2.0, -1.0, 4.0], np.float32)


def _setup(dev):
    w = lk.tensor(W0.copy(), device=dev, requires_grad=True)
    return w, O.SGD(lr=0.1).setup({"w": w}), lk.tensor(X, device=dev)


@pytest.mark.parametrize("fuse", [True, False])
@pytest.mark.parametrize("when", ["before", "after"])
def test_data_replaced_before_or_after_the_update_replays_as_the_eager_step(dev, when, fuse):
    """Before the update (``w.data = (w * 0.9).data``) it was refused until replays set .data
    where the step set it (compile/hooks.py SetData): the optimizer now updates the new array
    at each replay, as it does eagerly. After it: WGAN's weight clipping."""
    def make():
        w, opt, x = _setup(dev)

        def step(x):
            opt.zero_grad()
            if when == "before":
                w.data = (w * 0.9).data
            loss = F.sum(w * w * x)
            loss.backward()
            opt.update()
            if when == "after":
                w.data = F.clip(w, -1.0, 1.0).data
            return loss
        return w, step, x

    w, step, x = make()
    ew, estep, _ = make()
    compiled = lk.compile(step, fuse=fuse)
    for _ in range(6):
        loss, eloss = compiled(x), estep(x)
        assert np.array_equal(loss.numpy(), eloss.numpy())
        assert np.array_equal(w.numpy(), ew.numpy())
    assert compiled.stats["replays"] == 4


def test_an_intermediate_a_host_step_changes_in_place_replays():
    dev = lk.device("cl")
    seen = []

    def zero(a):
        seen.append(float(a.get().sum()))
        a.fill(0.0)

    @lk.compile
    def step(x):
        y = x * 2.0
        z = y + 1.0
        lk.compile.host(zero, y.data, effect=True, mutates=(y.data,))
        return z

    for i in range(4):
        x = lk.tensor(np.full(4, i, np.float32), device=dev)
        assert step(x).numpy().tolist() == [2 * i + 1.0] * 4
        assert seen[-1] == 8.0 * i
    assert step.stats["replays"] == 2


@pytest.mark.parametrize("held", ["array", "tensor", "argument"])
def test_a_host_function_holding_the_steps_own_array_is_refused(dev, held):
    # NOTE: replayed, it returned the traced call's value at every call (2, 2, 2 for 4, 6, 8)
    def step(x):
        y = x * 2.0
        a = {"array": y.data, "tensor": y, "argument": x.data}[held]
        return lk.Tensor(lk.compile.host(lambda: (a.data if held == "tensor" else a) * 1.0))

    compiled = lk.compile(step)
    x = lk.tensor(np.ones(3, np.float32), device=dev)
    with pytest.raises(CompileError, match=r"holds in its closure an array \(or a Tensor\) "
                                           r"that the step (computed|was given); .* Pass it as "
                                           r"an argument"):
        compiled(x)


def test_a_host_function_given_the_arrays_or_holding_constants_replays(dev):
    scale = np.float32(3.0) * np.ones(3, np.float32)

    def step(x):
        y = x * 2.0
        return lk.Tensor(lk.compile.host(lambda a: a * 1.0, y.data)), lk.Tensor(
            lk.compile.host(lambda: scale * 1.0))

    compiled = lk.compile(step)
    for i in range(1, 6):
        got, const = compiled(lk.tensor(np.full(3, i, np.float32), device=dev))
        assert got.numpy().tolist() == [2.0 * i] * 3 and const.numpy().tolist() == [3.0] * 3
    assert compiled.stats["replays"] == 3
