"""lk.autograd.gradcheck: the user's tool for checking a new op's backward."""

import numpy as np
import pytest

import labkit as lk
import labkit.functions as F


class WrongSquare(lk.Function):
    name = "wrong_square"

    def forward(self, x):
        return x * x

    def backward(self, inputs, gy):
        (x,) = inputs
        return gy * x * 3.0  # should be 2x


def test_gradcheck_passes_a_right_gradient_and_names_a_wrong_one(dev):
    x = np.random.default_rng(0).standard_normal((3, 4)).astype(np.float32)
    assert lk.autograd.gradcheck(lambda t: F.softplus(t) * t, [x], device=str(dev)) < 1e-2
    with pytest.raises(AssertionError, match=r"gradcheck: input 0, element \(\d, \d\): backward "
                                             r"gives .* central differences"):
        lk.autograd.gradcheck(lambda t: WrongSquare().apply((t,)), [x], device=str(dev))
