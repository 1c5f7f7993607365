"""Arithmetic, elementwise math, reductions and matmul. Each op: its check, forward, backward
(in labkit functions, so it can be differentiated again) and the function users call."""

from __future__ import annotations

import math as _m

import numpy as np

from ..autograd.function import Function
from ..autograd.tensor import Tensor
from ..errors import ShapeError
from ._util import as_tensor, is_scalar, normalize_axes, sigmoid_array, xp_of


def _const_on(c, a):
    """A constant NumPy array moved to the device of array ``a`` (once; kept by the caller)."""
    if isinstance(c, np.ndarray) and not isinstance(a, np.ndarray) and c.ndim > 0:
        from ..backend import opencl

        return opencl.asarray(c, device=a.rt)
    return c


# ---- broadcasting helpers ------------------------------------------------------------------


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
    shape = tuple(shape)
    if x.shape == shape:
        return x
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
    shape = tuple(shape)
    if x.shape == shape:
        return x
    return SumTo(shape).apply((x,))


# ---- arithmetic ----------------------------------------------------------------------------


class Add(Function):
    name = "add"

    def forward(self, a, b):
        return a + b

    def backward(self, inputs, gy):
        a, b = inputs
        return sum_to(gy, a.shape), sum_to(gy, b.shape)


class AddConstant(Function):
    name = "add"

    def __init__(self, c):
        self.c = c

    def forward(self, a):
        return a + self.c

    def backward(self, inputs, gy):
        return gy


class Sub(Function):
    name = "sub"

    def forward(self, a, b):
        return a - b

    def backward(self, inputs, gy):
        a, b = inputs
        return sum_to(gy, a.shape), sum_to(neg(gy), b.shape)


class Mul(Function):
    name = "mul"

    def forward(self, a, b):
        return a * b

    def backward(self, inputs, gy):
        a, b = inputs
        return sum_to(gy * b, a.shape), sum_to(gy * a, b.shape)


class MulConstant(Function):
    """``x * c`` for a scalar or a constant (non-differentiable) array ``c``."""

    name = "mul"

    def __init__(self, c):
        self.c = c

    def forward(self, a):
        self.c = _const_on(self.c, a)
        return a * self.c

    def backward(self, inputs, gy):
        c = self.c
        g = MulConstant(c).apply((gy,))
        return sum_to(g, inputs[0].shape)


class Div(Function):
    name = "div"

    def forward(self, a, b):
        return a / b

    def backward(self, inputs, gy):
        a, b = inputs
        ga = gy / b
        return sum_to(ga, a.shape), sum_to(neg(ga * a / b), b.shape)


class RDivConstant(Function):
    """``c / x`` for a scalar ``c``."""

    name = "div"

    def __init__(self, c):
        self.c = c

    def forward(self, x):
        return self.c / x

    def backward(self, inputs, gy):
        (x,) = inputs
        return mul(gy, -self.c) / (x * x)


class Neg(Function):
    name = "neg"

    def forward(self, x):
        return -x

    def backward(self, inputs, gy):
        return neg(gy)


class PowConstant(Function):
    name = "pow"

    def __init__(self, c):
        self.c = c

    def forward(self, x):
        return x ** self.c

    def backward(self, inputs, gy):
        (x,) = inputs
        c = self.c
        if c == 0:
            return mul(gy, 0.0)
        if c == 1:
            return gy
        if c == 2:
            return gy * x * 2.0
        return gy * pow(x, c - 1) * c


class Pow(Function):
    name = "pow"

    def forward(self, a, b):
        return a ** b

    def backward(self, inputs, gy):
        a, b = inputs
        ga = gy * b * pow(a, b - 1.0)
        gb = gy * pow(a, b) * log(a)
        return sum_to(ga, a.shape), sum_to(gb, b.shape)


def _binary(x, y, op, cls, scalar_right, scalar_left):
    if isinstance(x, Tensor):
        if isinstance(y, Tensor):
            return cls().apply((x, y))
        if is_scalar(y):
            return scalar_right(x, y)
        return cls().apply((x, as_tensor(y, x, op)))
    if isinstance(y, Tensor):
        if is_scalar(x):
            return scalar_left(x, y)
        return cls().apply((as_tensor(x, y, op), y))
    raise TypeError(f"{op}: expected at least one Tensor, got {type(x).__name__} and "
                    f"{type(y).__name__}; wrap arrays with lk.tensor(...)")


def add(x, y):
    """``x + y`` with broadcasting; either may be a scalar."""
    return _binary(x, y, "add", Add, lambda t, c: AddConstant(c).apply((t,)),
                   lambda c, t: AddConstant(c).apply((t,)))


def sub(x, y):
    return _binary(x, y, "sub", Sub, lambda t, c: AddConstant(-c).apply((t,)),
                   lambda c, t: AddConstant(c).apply((Neg().apply((t,)),)))


def mul(x, y):
    return _binary(x, y, "mul", Mul, lambda t, c: MulConstant(c).apply((t,)),
                   lambda c, t: MulConstant(c).apply((t,)))


def div(x, y):
    return _binary(x, y, "div", Div, lambda t, c: MulConstant(1.0 / c).apply((t,)),
                   lambda c, t: RDivConstant(c).apply((t,)))


def neg(x):
    return Neg().apply((x,))


def pow(x, y):  # noqa: A001 - the op's name
    if isinstance(x, Tensor) and is_scalar(y):
        return PowConstant(y).apply((x,))
    if is_scalar(x) and isinstance(y, Tensor):
        return exp(mul(y, _m.log(x)))
    return _binary(x, y, "pow", Pow, None, None)


# ---- elementwise math ----------------------------------------------------------------------


class _Unary(Function):
    op = None

    def forward(self, x):
        return getattr(xp_of(x), self.op)(x)


class Exp(_Unary):
    name = op = "exp"

    def backward(self, inputs, gy):
        return gy * exp(inputs[0])


class Log(_Unary):
    name = op = "log"

    def backward(self, inputs, gy):
        return gy / inputs[0]


class Log1p(_Unary):
    name = op = "log1p"

    def backward(self, inputs, gy):
        return gy / add(inputs[0], 1.0)


class Sqrt(_Unary):
    name = op = "sqrt"

    def backward(self, inputs, gy):
        return gy / mul(sqrt(inputs[0]), 2.0)


class Sin(_Unary):
    name = op = "sin"

    def backward(self, inputs, gy):
        return gy * cos(inputs[0])


class Cos(_Unary):
    name = op = "cos"

    def backward(self, inputs, gy):
        return neg(gy * sin(inputs[0]))


class Tanh(_Unary):
    name = op = "tanh"

    def backward(self, inputs, gy):
        y = tanh(inputs[0])
        return gy * sub(1.0, y * y)


class Sigmoid(Function):
    name = "sigmoid"

    def forward(self, x):
        return sigmoid_array(x)

    def backward(self, inputs, gy):
        y = sigmoid(inputs[0])
        return gy * y * sub(1.0, y)


class Erf(_Unary):
    name = op = "erf"

    def forward(self, x):
        if isinstance(x, np.ndarray):
            from math import erf as _erf

            return np.vectorize(_erf, otypes=[x.dtype])(x) if x.size else x.copy()
        return xp_of(x).erf(x)

    def backward(self, inputs, gy):
        x = inputs[0]
        return gy * mul(exp(neg(x * x)), 2.0 / _m.sqrt(_m.pi))


class Abs(_Unary):
    name = op = "abs"

    def backward(self, inputs, gy):
        x = inputs[0]
        return MulConstant(xp_of(x.data).sign(x.data)).apply((gy,))


def exp(x): return Exp().apply((x,))
def log(x): return Log().apply((x,))
def log1p(x): return Log1p().apply((x,))
def sqrt(x): return Sqrt().apply((x,))
def sin(x): return Sin().apply((x,))
def cos(x): return Cos().apply((x,))
def tanh(x): return Tanh().apply((x,))
def sigmoid(x): return Sigmoid().apply((x,))
def erf(x): return Erf().apply((x,))
def abs(x): return Abs().apply((x,))  # noqa: A001


def softplus(x):
    """log(1 + e^x), stable for any x. Composed (max(x, 0) + log1p(e^-|x|)): each part is
    stable and its gradient is sigmoid(x) without a class of its own."""
    from .activation import relu

    return relu(x) + log1p(exp(neg(abs(x))))


def log_sigmoid(x):
    """log(sigmoid(x)) = -softplus(-x), stable for any x."""
    return neg(softplus(neg(x)))


class Where(Function):
    """``where(cond, a, b)`` with a constant (non-differentiable) condition."""

    name = "where"

    def __init__(self, cond):
        self.cond = cond

    def forward(self, a, b):
        self.cond = _const_on(self.cond, a)
        return xp_of(a).where(self.cond, a, b)

    def backward(self, inputs, gy):
        a, b = inputs
        z = MulConstant(0.0).apply((gy,))
        return (sum_to(Where(self.cond).apply((gy, z)), a.shape),
                sum_to(Where(self.cond).apply((z, gy)), b.shape))


def where(cond, a, b):
    """Elementwise ``a if cond else b``; ``cond`` is a boolean array or tensor (not
    differentiated)."""
    c = cond.data if isinstance(cond, Tensor) else cond
    like = a if isinstance(a, Tensor) else b
    if not isinstance(like, Tensor):
        raise TypeError("where: a or b must be a Tensor")
    a = as_tensor(a, like, "where")
    b = as_tensor(b, like, "where")
    return Where(c).apply((a, b))


def maximum(a, b):
    """Elementwise max; the gradient goes to ``a`` where a >= b, else to ``b``."""
    like = a if isinstance(a, Tensor) else b
    a, b = as_tensor(a, like, "maximum"), as_tensor(b, like, "maximum")
    return where(a.data >= b.data, a, b)


def minimum(a, b):
    like = a if isinstance(a, Tensor) else b
    a, b = as_tensor(a, like, "minimum"), as_tensor(b, like, "minimum")
    return where(a.data <= b.data, a, b)


def clip(x, lo, hi):
    """Clamp to [lo, hi]; the gradient passes where lo <= x <= hi."""
    d = x.data
    xp = xp_of(d)
    y = xp.clip(d, lo, hi)
    inside = (d >= lo) & (d <= hi) if xp is np else xp.logical_and(d >= lo, d <= hi)
    return add(MulConstant(inside.astype(d.dtype)).apply((x,)),
               Tensor(y * xp.logical_not(inside).astype(d.dtype)))


# ---- reductions ----------------------------------------------------------------------------


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


def sum(x, axis=None, keepdims=False):  # noqa: A001
    return Sum(axis, keepdims).apply((x,))


def mean(x, axis=None, keepdims=False):
    axes = normalize_axes(axis, x.ndim)
    n = 1
    for a in axes:
        n *= x.shape[a]
    return mul(sum(x, axis=axis, keepdims=keepdims), 1.0 / n if n else float("nan"))


def var(x, axis=None, keepdims=False):
    d = x - mean(x, axis=axis, keepdims=True)
    return mean(d * d, axis=axis, keepdims=keepdims)


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
        # ties share the gradient equally
        m = (x.data == self.y).astype(x.dtype)
        m = m / m.sum(axis=axes, keepdims=True)
        g = broadcast_to(reshape(gy, _keep_shape(x.shape, axes)), x.shape)
        return MulConstant(m).apply((g,))


class Max(_Extreme):
    name = "max"
    op = "max"


class Min(_Extreme):
    name = "min"
    op = "min"


def max(x, axis=None, keepdims=False):  # noqa: A001
    return Max(axis, keepdims).apply((x,))


def min(x, axis=None, keepdims=False):  # noqa: A001
    return Min(axis, keepdims).apply((x,))


class LogSumExp(Function):
    name = "logsumexp"

    def __init__(self, axis, keepdims):
        self.axis, self.keepdims = axis, keepdims

    def forward(self, x):
        xp = xp_of(x)
        axes = normalize_axes(self.axis, x.ndim)
        m = x.max(axis=axes, keepdims=True)
        m = xp.where(xp.isfinite(m), m, 0)
        y = xp.log(xp.exp(x - m).sum(axis=axes, keepdims=True)) + m
        return y if self.keepdims else y.reshape(
            tuple(d for i, d in enumerate(y.shape) if i not in axes))

    def backward(self, inputs, gy):
        (x,) = inputs
        axes = normalize_axes(self.axis, x.ndim)
        y = logsumexp(x, axis=self.axis, keepdims=True)
        g = broadcast_to(reshape(gy, _keep_shape(x.shape, axes)), x.shape)
        return g * exp(x - y)


def logsumexp(x, axis=None, keepdims=False):
    """log(sum(exp(x))), stable for any magnitude (the max is subtracted first)."""
    return LogSumExp(axis, keepdims).apply((x,))


# ---- matmul --------------------------------------------------------------------------------


def _swap_last(x):
    axes = list(range(x.ndim))
    axes[-1], axes[-2] = axes[-2], axes[-1]
    return transpose(x, axes)


def _outer_product_blas(a, b):
    """``a @ b`` for NumPy arrays when the inner dimension is 1, through BLAS.

    NOTE: NumPy's matmul does not call BLAS when the inner dimension is 1 (an outer product,
    e.g. a weight gradient at batch 1): 456 us for (512, 1) @ (1, 784) here, and 33 us with an
    inner dimension of 2. So a zero column and row are appended: every element is
    ``a_i * b_j + 0 * 0``, the same value (only a -0.0 becomes +0.0)."""
    a2 = np.zeros((a.shape[0], 2), a.dtype)
    a2[:, :1] = a
    b2 = np.zeros((2, b.shape[1]), b.dtype)
    b2[:1] = b
    return a2 @ b2


class MatMul(Function):
    name = "matmul"

    def forward(self, a, b):
        if (type(a) is np.ndarray and a.ndim == 2 and b.ndim == 2 and a.shape[1] == 1
                and a.dtype == b.dtype and a.shape[0] * b.shape[1] >= 4096):
            return _outer_product_blas(a, b)
        return a @ b

    def backward(self, inputs, gy):
        a, b = inputs
        return (sum_to(matmul(gy, _swap_last(b)), a.shape) if a.requires_grad else None,
                sum_to(matmul(_swap_last(a), gy), b.shape) if b.requires_grad else None)


def matmul(a, b):
    """Matrix product with NumPy's rules: 1-D operands are promoted, batch dims broadcast."""
    like = a if isinstance(a, Tensor) else b
    a, b = as_tensor(a, like, "matmul"), as_tensor(b, like, "matmul")
    if a.ndim == 0 or b.ndim == 0:
        raise ShapeError(f"matmul: operands need at least one dimension, got shapes {a.shape} "
                         f"and {b.shape}; use mul for scalars")
    ka = a.shape[-1]
    kb = b.shape[0] if b.ndim == 1 else b.shape[-2]
    if ka != kb:
        raise ShapeError(f"matmul: a has {ka} columns but b has {kb} rows; a.shape={a.shape}, "
                         f"b.shape={b.shape}")
    if a.ndim == 1:
        return reshape(matmul(reshape(a, (1, -1)), b), b.shape[:-2] + b.shape[-1:])
    if b.ndim == 1:
        return reshape(matmul(a, reshape(b, (-1, 1))), a.shape[:-1])
    return MatMul().apply((a, b))


# ---- shape (used above; the rest of the family is in array.py) -----------------------------


class Reshape(Function):
    name = "reshape"

    def __init__(self, shape):
        self.shape = shape

    def forward(self, x):
        self.in_shape = x.shape
        return x.reshape(self.shape)

    def backward(self, inputs, gy):
        return reshape(gy, self.in_shape)


def reshape(x, shape):
    shape = tuple(shape) if isinstance(shape, (tuple, list)) else (shape,)
    if x.shape == shape:
        return x
    return Reshape(shape).apply((x,))


class Transpose(Function):
    name = "transpose"

    def __init__(self, axes):
        self.axes = axes

    def forward(self, x):
        return x.transpose(self.axes)

    def backward(self, inputs, gy):
        inv = tuple(np.argsort(self.axes).tolist())
        return transpose(gy, inv)


def transpose(x, axes=None):
    axes = tuple(range(x.ndim))[::-1] if axes is None else tuple(a % x.ndim for a in axes)
    return Transpose(axes).apply((x,))
