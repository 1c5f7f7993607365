"""A tensor the step names but never reads, whose ``.data`` or ``.grad`` it replaces (a buffer
kept for a plot, a copy of the weights): written back at each replay as the tensors it reads
are, where replays left the traced call's value (stale, silently); replaced by an array no
labkit op made, refused."""

import numpy as np
import pytest

import labkit as lk
import labkit.functions as F
from labkit.errors import CompileError


def test_data_and_grad_replaced_on_an_unread_tensor_follow_each_call(dev):
    W = lk.tensor(np.ones((3, 4), np.float32), device=dev, requires_grad=True)
    keep = lk.tensor(np.zeros((3, 4), np.float32), device=dev)
    opt = lk.optimizers.SGD(lr=0.1).setup({"W": W})

    def step(x):
        loss = (F.linear(lk.tensor(x, device=dev), W) ** 2).sum()
        opt.zero_grad()
        loss.backward()
        opt.update()
        keep.data = (W * 2).data
        keep.grad = W.grad * 3
        return loss

    c = lk.compile(step)
    for i in range(5):
        c(np.full((2, 4), 0.1 * (i + 1), np.float32))
        assert np.array_equal(keep.numpy(), 2 * W.numpy())
        assert np.allclose(keep.grad.numpy(), 3 * W.grad.numpy())
    assert c.stats["replays"] == 3


def test_data_replaced_by_raw_arrays_on_an_unread_tensor_is_refused(dev):
    keep = lk.tensor(np.zeros((3, 4), np.float32), device=dev)

    def step(x):
        keep.data = lk.tensor(np.ones((3, 4), np.float32), device=dev).data + 0
        return lk.tensor(x, device=dev).sum()

    c = lk.compile(step)
    with pytest.raises(CompileError, match="replaced the data of a tensor of shape"):
        for _ in range(3):
            c(np.ones((2, 4), np.float32))
