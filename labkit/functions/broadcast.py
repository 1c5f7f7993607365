"""Broadcasting and its adjoint: ``broadcast_to`` and ``sum_to`` (every binary op's backward
sums its gradient back to its operand's shape)."""

from __future__ import annotations

from ..autograd.function import Function
from ..autograd.tensor import Tensor
from ..errors import ShapeError
from . import _check
from ._util import xp_of


class BroadcastTo(Function):
    name = "broadcast_to"

    def __init__(self, shape):
        self.shape = tuple(shape)

    def forward(self, x):
        self.in_shape = x.shape
        return xp_of(x).broadcast_to(x, self.shape)

    def backward(self, inputs, gy):
        return sum_to(gy, self.in_shape)


def broadcast_to(x, shape):
    """``x`` repeated along axes of size 1 and new leading axes to ``shape`` (NumPy's rule)."""
    if not isinstance(x, Tensor):
        _check.tensor(x, "broadcast_to")
    if x.shape == shape:  # NOTE: first: the common case in backward passes costs nothing more
        return x
    shape = _check.shape(shape, "broadcast_to")
    if x.shape == shape:
        return x
    if len(shape) < x.ndim or _check.broadcast("broadcast_to", x.shape, shape,
                                               ("x", "shape")) != shape:
        raise ShapeError(f"broadcast_to: x of shape {x.shape} cannot be broadcast to {shape}; "
                         f"each axis of x must be 1 or equal the target's trailing axes")
    return BroadcastTo(shape).apply((x,))


class SumTo(Function):
    """Sum ``x`` down to ``shape`` (undoes broadcasting in backward)."""

    name = "sum_to"

    def __init__(self, shape):
        self.shape = tuple(shape)

    def forward(self, x):
        self.in_shape = x.shape
        lead = x.ndim - len(self.shape)
        axes = tuple(range(lead)) + tuple(
            lead + i for i, d in enumerate(self.shape) if d == 1 and x.shape[lead + i] != 1)
        y = x.sum(axis=axes, keepdims=True) if axes else x
        if lead:
            y = y.reshape(self.shape)
        return y

    def backward(self, inputs, gy):
        return broadcast_to(gy, self.in_shape)


def sum_to(x, shape):
    """``x`` summed down to ``shape`` (the adjoint of broadcast_to: ``x.shape`` must be
    ``shape`` broadcast)."""
    if not isinstance(x, Tensor):
        _check.tensor(x, "sum_to")
    if x.shape == shape:  # NOTE: first: every binary op's backward calls sum_to
        return x
    shape = _check.shape(shape, "sum_to")
    if x.shape == shape:
        return x
    if len(shape) > x.ndim or _check.broadcast("sum_to", shape, x.shape,
                                               ("shape", "x")) != x.shape:
        raise ShapeError(f"sum_to: x of shape {x.shape} is not {shape} broadcast; each axis "
                         f"of shape must be 1 or equal x's trailing axes")
    return SumTo(shape).apply((x,))
