"""Activations: relu, leaky_relu, elu, gelu, softmax, log_softmax (sigmoid and tanh are in
math)."""

from __future__ import annotations

import math as _m

import numpy as np

from ..autograd.function import Function
from ..autograd.trace import host
from ..backend.opencl import softmax as _sm
from ..backend.opencl.lse import logsumexp_parts
from . import _check
from ._util import row_max, xp_of
from .math import Erfc, MulConstant, erfc, exp, expm1, mul, where
from .reduction import sum as rsum


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
        if gy.dtype == self.x.dtype and gy.dtype.kind == "f":
            from ..backend.opencl.core import where_positive

            return where_positive(gy, self.x)  # one kernel
        return xp_of(gy).where(self.x > 0, gy, 0)

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
    # NOTE: expm1, not exp - 1: elu(-1e-6) was -9.54e-7 (5% off) from the cancellation
    neg_part = mul(expm1(where(pos, 0.0, x)), alpha)
    return where(pos, x, neg_part)


class GELU(Function):
    """x * Phi(x); at x = +-inf its limits x and 0, with gradients 1 and 0 (composed, both
    were inf * 0 = NaN: a masked -inf input poisoned the step)."""

    name = "gelu"

    def forward(self, x):
        xp = xp_of(x)
        # NOTE: Phi(x) as erfc(-x / sqrt 2) / 2, not (1 + erf(x / sqrt 2)) / 2, which cancels
        # for negative x (float32: 4% off at -5, 0 at -6 where the value is -3e-9)
        with np.errstate(invalid="ignore"):  # NOTE: -inf * 0, replaced below
            y = x * Erfc().forward(x * (-1 / _m.sqrt(2))) * 0.5
        return xp.where(xp.isinf(x), xp.maximum(x, 0), y)

    def backward(self, inputs, gy):
        # NOTE: Phi(x) + x phi(x), with x phi(x) taken as its limit 0 at +-inf
        (x,) = inputs
        # NOTE: asarray: NumPy's isinf of a 0-d array is a scalar, which where() refused
        inf = host(lambda d: xp_of(d).asarray(xp_of(d).isinf(d)), x.data, name="gelu.inf")
        finite = where(inf, 0.0, x)
        phi = exp(mul(finite * finite, -0.5)) * (1 / _m.sqrt(2 * _m.pi))
        return gy * (erfc(mul(x, -1 / _m.sqrt(2))) * 0.5 + finite * phi)


def gelu(x):
    """x * Phi(x) with the exact normal CDF (erf), as in PyTorch's default."""
    return GELU().apply((_check.tensor(x, "gelu"),))


def _softmax_array(x, axis, log: bool):
    """softmax (or log-softmax) of device array ``x`` over ``axis``: on ``cl`` one launch for
    a last axis (backend/opencl/softmax.py), else (x - m) - log(sum(exp(x - m))) (then exp),
    m the max (0 where it is not finite), as NumPy. Not x - logsumexp(x): that rounds the
    log-sum into a large max first (logits of 1e4: a softmax summing to 1 - 3e-4)."""
    if isinstance(x, np.ndarray):
        m = row_max(x) if axis == 1 else x.max(axis=axis, keepdims=True)
        m = np.where(np.isfinite(m), m, 0)
        z = x - m
        ls = z - np.log(np.exp(z).sum(axis=axis, keepdims=True))
        return ls if log else np.exp(ls)
    if _sm.fits(x, axis):
        return _sm.softmax(x, axis, log=log)
    xp = xp_of(x)
    shift, logsum = logsumexp_parts(x, axis)
    ls = xp.subtract(xp.subtract(x, shift), logsum)
    return ls if log else xp.exp(ls)


class _AlongAxis(Function):
    """An op on rows along ``axis`` (the softmax family)."""

    def __init__(self, axis):
        self.axis = axis


class LogSoftmax(_AlongAxis):
    """(x - max) - log(sum(exp(x - max))) over ``axis``; on ``cl`` bitwise equal to the
    composed form (backend/opencl/softmax.py)."""

    name = "log_softmax"

    def forward(self, x):
        return _softmax_array(x, self.axis, log=True)

    def backward(self, inputs, gy):
        y = Softmax(self.axis).apply(inputs)
        return LogSoftmaxGrad(self.axis).apply((y, gy))


class Softmax(_AlongAxis):
    """exp(log_softmax(x)) over ``axis``; on ``cl`` computed as exp(x - max) / sum."""

    name = "softmax"

    def forward(self, x):
        return _softmax_array(x, self.axis, log=False)

    def backward(self, inputs, gy):
        y = Softmax(self.axis).apply(inputs)
        return SoftmaxGrad(self.axis).apply((y, gy))


class LogSoftmaxGrad(_AlongAxis):
    """``g - y * sum(g)`` over ``axis``, from the softmax ``y``: log-softmax's gradient."""

    name = "log_softmax_grad"

    def forward(self, y, g):
        if _sm.grad_fits(y, g, self.axis):
            return _sm.grad(y, g, self.axis, log=True)
        xp = xp_of(y)
        return xp.subtract(g, xp.multiply(y, g.sum(axis=self.axis, keepdims=True)))

    def backward(self, inputs, gg):
        y, g = inputs
        return (-(gg * rsum(g, axis=self.axis, keepdims=True)),
                gg - rsum(gg * y, axis=self.axis, keepdims=True))


class SoftmaxGrad(_AlongAxis):
    """``y * (g - sum(g * y))`` over ``axis``: softmax's gradient."""

    name = "softmax_grad"

    def forward(self, y, g):
        if _sm.grad_fits(y, g, self.axis):
            return _sm.grad(y, g, self.axis, log=False)
        xp = xp_of(y)
        return xp.multiply(y, xp.subtract(g, xp.multiply(g, y).sum(axis=self.axis,
                                                                    keepdims=True)))

    def backward(self, inputs, gg):
        y, g = inputs
        d = rsum(g * y, axis=self.axis, keepdims=True)
        return (gg * (g - d) - g * rsum(gg * y, axis=self.axis, keepdims=True),
                SoftmaxGrad(self.axis).apply((y, gg)))


def log_softmax(x, axis=1):
    """x - logsumexp(x), computed as (x - max) - log(sum(exp(x - max))): stable and
    precise for logits of any size."""
    _check.axis(axis, _check.tensor(x, "log_softmax").ndim, "log_softmax", x.shape)
    # NOTE: x - max in an integer dtype wrapped; float32 at least: a sum of exponentials
    x = _check.float_input(x, "log_softmax", np.float32)
    if x.size == 0:
        return x * 1.0  # NOTE: nothing to normalise (the max had no value: a raw error)
    return LogSoftmax(axis % x.ndim).apply((x,))


def softmax(x, axis=1):
    _check.axis(axis, _check.tensor(x, "softmax").ndim, "softmax", x.shape)
    x = _check.float_input(x, "softmax", np.float32)
    if x.size == 0:
        return x * 1.0
    return Softmax(axis % x.ndim).apply((x,))
