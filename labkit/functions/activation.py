"""Activations: relu, leaky_relu, elu, gelu, softmax, log_softmax (sigmoid and tanh are in
math)."""

from __future__ import annotations

import math as _m

from ..autograd.function import Function
from ._util import xp_of
from .math import MulConstant, erf, exp, logsumexp, mul, where


class ReLU(Function):
    """A class (not maximum(x, 0)) because it is the commonest op: one kernel forward, one
    masked multiply backward."""

    name = "relu"

    def forward(self, x):
        return xp_of(x).maximum(x, 0)

    def backward(self, inputs, gy):
        x = inputs[0].data
        return MulConstant((x > 0).astype(x.dtype)).apply((gy,))


def relu(x):
    return ReLU().apply((x,))


def leaky_relu(x, slope=0.2):
    d = x.data
    return MulConstant(((d > 0) * (1 - slope) + slope).astype(d.dtype)).apply((x,))


def elu(x, alpha=1.0):
    # NOTE: where(), not a mask product: exp(x) overflows for large x and inf * 0 is nan.
    neg_part = mul(exp(where(x.data > 0, 0.0, x)) - 1.0, alpha)
    return where(x.data > 0, x, neg_part)


def gelu(x):
    """x * Phi(x) with the exact normal CDF (erf), as in PyTorch's default."""
    return x * (erf(mul(x, 1 / _m.sqrt(2))) + 1.0) * 0.5


def log_softmax(x, axis=1):
    """x - logsumexp(x): stable for logits of any size."""
    return x - logsumexp(x, axis=axis, keepdims=True)


def softmax(x, axis=1):
    return exp(log_softmax(x, axis=axis))
