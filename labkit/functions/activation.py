"""Activations: relu, leaky_relu, elu, gelu, softmax, log_softmax (sigmoid and tanh are in
math)."""

from __future__ import annotations

import math as _m

import numpy as np

from ..autograd.function import Function
from ..autograd.trace import host
from . import _check
from ._util import xp_of
from .math import MulConstant, erf, exp, mul, where
from .reduction import logsumexp


class ReLU(Function):
    """A class (not maximum(x, 0)) because it is the commonest op: one kernel forward, one
    masked multiply backward."""

    name = "relu"

    def forward(self, x):
        return xp_of(x).maximum(x, 0)

    def backward(self, inputs, gy):
        return ReLUGrad(inputs[0].data).apply((gy,))


class ReLUGrad(Function):
    """``gy`` where x > 0, else 0. Its own backward is the same masking, so relu stays twice
    differentiable (the second derivative is zero)."""

    name = "relu_grad"

    def __init__(self, x):
        self.x = x

    def forward(self, gy):
        if isinstance(gy, np.ndarray):
            # NOTE: gy's bits ANDed with a mask of all-ones where x > 0, written in x's memory
            # layout (a convolution's output is (C, N, H, W) in memory): as fast as the float
            # mask multiplied in place (55 us against 60 us for (256, 512)), and like the cl
            # kernel it gives exactly gy where x > 0 and 0 elsewhere, where a product gave
            # nan for a nan or inf gy (0 * inf). np.where and np.copyto(where=) measured 15x
            # slower.
            out = (np.empty_like(self.x, dtype=gy.dtype) if gy.shape == self.x.shape
                   else np.empty(np.broadcast_shapes(gy.shape, self.x.shape), gy.dtype))
            bits = out.view(_BITS[gy.dtype.itemsize])
            np.greater(self.x, 0, out=bits, casting="unsafe")  # 1 where x > 0
            np.negative(bits, out=bits)                        # all ones there
            np.bitwise_and(bits, gy.view(bits.dtype), out=bits)
            return out
        return xp_of(gy).where(self.x > 0, gy, 0)  # one kernel

    def backward(self, inputs, ggy):
        return ReLUGrad(self.x).apply((ggy,))


_BITS = {2: np.int16, 4: np.int32, 8: np.int64}


def relu(x):
    """max(x, 0); the gradient is the upstream gradient where x > 0 (nan and inf included)
    and 0 elsewhere, on every device."""
    return ReLU().apply((_check.tensor(x, "relu"),))


def leaky_relu(x, slope=0.2):
    _check.tensor(x, "leaky_relu")
    _check.scalar(slope, "leaky_relu", "slope")
    d = x.data
    # NOTE: the mask in x's dtype and the slope as a Python float (weakly typed): under
    # NumPy 2's rules bool * 0.8 and float32 * np.float64(0.8) are float64
    s = float(slope)
    # NOTE: host: a compiled step computes each call's slopes again
    return MulConstant(host(lambda a: (a > 0).astype(a.dtype) * (1 - s) + s, d,
                            name="leaky_relu.slopes")).apply((x,))


def elu(x, alpha=1.0):
    _check.tensor(x, "elu")
    _check.scalar(alpha, "elu", "alpha")
    # NOTE: where(), not a mask product: exp(x) overflows for large x and inf * 0 is nan.
    pos = host(lambda d: d > 0, x.data, name="elu.mask")  # each call's (compiled: host)
    neg_part = mul(exp(where(pos, 0.0, x)) - 1.0, alpha)
    return where(pos, x, neg_part)


def gelu(x):
    """x * Phi(x) with the exact normal CDF (erf), as in PyTorch's default."""
    _check.tensor(x, "gelu")
    return x * (erf(mul(x, 1 / _m.sqrt(2))) + 1.0) * 0.5


def log_softmax(x, axis=1):
    """x - logsumexp(x): stable for logits of any size."""
    _check.axis(axis, _check.tensor(x, "log_softmax").ndim, "log_softmax", x.shape)
    return x - logsumexp(x, axis=axis, keepdims=True)


def softmax(x, axis=1):
    _check.axis(axis, _check.tensor(x, "softmax").ndim, "softmax", x.shape)
    return exp(log_softmax(x, axis=axis))
