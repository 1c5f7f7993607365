"""Recurrent steps: lstm (Chainer's convention: the four gates concatenated)."""

from __future__ import annotations

from ..errors import ShapeError
from . import _check
from .array import split
from .math import sigmoid, tanh


def lstm(c_prev, x):
    """One LSTM step. ``x`` (N, 4H) holds the pre-activations of the cell input a and of the
    input, forget and output gates i, f, o; returns (c, h), each (N, H)."""
    _check.tensor(c_prev, "lstm", "c_prev")
    _check.tensor(x, "lstm", "x")
    _check.same_dtype("lstm", c_prev=c_prev, x=x)
    if x.ndim != 2:
        raise ShapeError(f"lstm: x must be (N, 4H), got x.shape={x.shape}")
    n, h4 = x.shape
    if h4 % 4 or c_prev.shape != (n, h4 // 4):
        raise ShapeError(f"lstm: x must be (N, 4H) and c_prev (N, H); got x.shape={x.shape}, "
                         f"c_prev.shape={c_prev.shape}")
    a, i, f, o = split(x, 4, axis=1)
    c = tanh(a) * sigmoid(i) + sigmoid(f) * c_prev
    h = sigmoid(o) * tanh(c)
    return c, h
