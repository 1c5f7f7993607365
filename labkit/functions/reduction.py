"""Reductions: sum, mean, var, max, min, logsumexp. Each op: its check, forward, backward (in
labkit functions, so it can be differentiated again) and the function users call; axes are
checked (an axis out of range or named twice is an error, never wrapped)."""

from __future__ import annotations

import numpy as np

from ..autograd.function import Function
from ..autograd.trace import host
from ..errors import ShapeError
from . import _check
from ._util import normalize_axes, xp_of
from .math import MulConstant, broadcast_to, exp, mul, reshape


def _keep_shape(shape, axes):
    return tuple(1 if i in axes else d for i, d in enumerate(shape))


class Sum(Function):
    name = "sum"

    def __init__(self, axis, keepdims):
        self.axis, self.keepdims = axis, keepdims

    def forward(self, x):
        self.in_shape = x.shape
        return x.sum(axis=self.axis, keepdims=self.keepdims)

    def backward(self, inputs, gy):
        axes = normalize_axes(self.axis, len(self.in_shape))
        return broadcast_to(reshape(gy, _keep_shape(self.in_shape, axes)), self.in_shape)


def _reduction(x, axis, op, empty_ok=True):
    """The checked axes of a reduction of ``x`` (None: all); a max or min over no elements
    is an error (it has no value)."""
    _check.tensor(x, op)
    axes = None if axis is None else _check.axes(axis, x.ndim, op, x.shape)
    if not empty_ok and x.size == 0:
        empty = [a for a in (range(x.ndim) if axes is None else axes) if x.shape[a] == 0]
        if axes is None or empty:  # (a reduction over non-empty axes of an empty x is empty)
            raise ShapeError(f"{op}: x of shape {x.shape} has no elements along axis "
                             f"{empty[0] if empty else axis}; a {op} of nothing has no value")
    return axes


def sum(x, axis=None, keepdims=False):  # noqa: A001
    return Sum(_reduction(x, axis, "sum"), keepdims).apply((x,))


def mean(x, axis=None, keepdims=False):
    axes = normalize_axes(_reduction(x, axis, "mean"), x.ndim)
    n = 1
    for a in axes:
        n *= x.shape[a]
    return mul(sum(x, axis=axes, keepdims=keepdims), 1.0 / n if n else float("nan"))


def var(x, axis=None, keepdims=False):
    axes = _reduction(x, axis, "var")
    d = x - mean(x, axis=axes, keepdims=True)
    return mean(d * d, axis=axes, keepdims=keepdims)


class _Extreme(Function):
    def __init__(self, axis, keepdims):
        self.axis, self.keepdims = axis, keepdims

    def forward(self, x):
        self.y = y = getattr(x, self.op)(axis=self.axis, keepdims=True)
        return y if self.keepdims else y.reshape(
            tuple(d for i, d in enumerate(y.shape)
                  if i not in normalize_axes(self.axis, x.ndim)))

    def backward(self, inputs, gy):
        (x,) = inputs
        axes = normalize_axes(self.axis, x.ndim)
        # ties share the gradient equally (host: a compiled step finds each call's ties)
        m = host(lambda d, y: _ties(d, y, axes), x.data, self.y, name=f"{self.name}.ties")
        g = broadcast_to(reshape(gy, _keep_shape(x.shape, axes)), x.shape)
        return MulConstant(m).apply((g,))


def _ties(d, y, axes):
    # NOTE: a NaN is the extreme it made (NaN == NaN is false: with no winner the shares
    # were 0/0, NaN for the whole row); where the result is not NaN no element is
    m = ((d == y) | (d != d)).astype(d.dtype)
    return m / m.sum(axis=axes, keepdims=True)


class Max(_Extreme):
    name = "max"
    op = "max"


class Min(_Extreme):
    name = "min"
    op = "min"


def max(x, axis=None, keepdims=False):  # noqa: A001
    return Max(_reduction(x, axis, "max", empty_ok=False), keepdims).apply((x,))


def min(x, axis=None, keepdims=False):  # noqa: A001
    return Min(_reduction(x, axis, "min", empty_ok=False), keepdims).apply((x,))


class LogSumExp(Function):
    name = "logsumexp"

    def __init__(self, axis, keepdims):
        self.axis, self.keepdims = axis, keepdims

    def forward(self, x):
        xp = xp_of(x)
        axes = normalize_axes(self.axis, x.ndim)
        if xp is not np:  # NOTE: one kernel over trailing axes (backend's logsumexp)
            return xp.logsumexp(x, axis=axes, keepdims=self.keepdims)
        m = x.max(axis=axes, keepdims=True)
        m = xp.where(xp.isfinite(m), m, 0)
        y = xp.log(xp.exp(x - m).sum(axis=axes, keepdims=True)) + m
        return y if self.keepdims else y.reshape(
            tuple(d for i, d in enumerate(y.shape) if i not in axes))

    def backward(self, inputs, gy):
        (x,) = inputs
        axes = normalize_axes(self.axis, x.ndim)
        g = broadcast_to(reshape(gy, _keep_shape(x.shape, axes)), x.shape)
        if x.dtype.kind == "f" and len(axes) == 1:
            # NOTE: the softmax, not exp(x - logsumexp(x)), which loses the low bits of a
            # large log-sum-exp (logits of 1e4: gradients summing to 1 - 3e-4)
            from .activation import softmax

            return g * softmax(x, axis=axes[0])
        if x.dtype.kind == "f" and all(x.shape[a] for a in axes):
            # NOTE: several axes (or all): the softmax over them as one, the reduced axes
            # moved last and flattened (the same loss of low bits otherwise: 4e-4 at 1e4)
            from .activation import softmax
            from .math import transpose

            rest = [i for i in range(x.ndim) if i not in axes]
            order = rest + list(axes)
            xt = transpose(x, order)
            flat = reshape(xt, xt.shape[:len(rest)] + (int(np.prod([x.shape[a] for a in axes])),))
            p = transpose(reshape(softmax(flat, axis=-1), xt.shape),
                          tuple(int(i) for i in np.argsort(order)))
            return g * p
        return g * exp(x - logsumexp(x, axis=self.axis, keepdims=True))


def logsumexp(x, axis=None, keepdims=False):
    """log(sum(exp(x))), stable for any magnitude (the max is subtracted first); over no
    elements, -inf (the log of an empty sum, as SciPy's and PyTorch's)."""
    axes = _reduction(x, axis, "logsumexp")
    # NOTE: x - max in an integer dtype wrapped; float32 at least: a sum of exponentials
    x = _check.float_input(x, "logsumexp", np.float32)
    if any(x.shape[a] == 0 for a in (
            range(x.ndim) if axes is None else normalize_axes(axes, x.ndim))):
        # NOTE: the max had no value (a raw NumPy or OpenCL error); differentiable: the
        # gradient of a sum over nothing is empty
        return sum(x, axis=axis, keepdims=keepdims) + float("-inf")
    return LogSumExp(axes, keepdims).apply((x,))
