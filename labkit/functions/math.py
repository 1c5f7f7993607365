"""Arithmetic, elementwise math, reshape and transpose (broadcasting is in broadcast.py,
reductions in reduction.py, matmul in connection.py). Each op: its check, forward, backward
(in labkit functions, so it can be differentiated again) and the function users call."""

from __future__ import annotations

import math as _m

import numpy as np

from ..autograd.function import Function
from ..autograd.tensor import Tensor
from ..autograd.trace import host
from ..backend import zeros
from ..errors import DTypeError, ShapeError
from . import _check
from ._util import as_tensor, is_scalar, operands, sigmoid_array, xp_of
from .broadcast import BroadcastTo, SumTo, broadcast_to, sum_to  # noqa: F401 - re-exported


def _const_on(c, a):
    """A constant NumPy array moved to the device of array ``a`` (once; kept by the caller)."""
    if isinstance(c, np.ndarray) and not isinstance(a, np.ndarray) and c.ndim > 0:
        from ..backend import opencl

        return opencl.asarray(c, device=a.rt)
    return c


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


class SubConstant(Function):
    """``x - c`` for an integer ``x`` and a scalar ``c`` (``x + (-c)`` needs ``-c`` in x's
    dtype: a uint8 ``x - 1`` raised an OverflowError, where NumPy wraps around)."""

    name = "sub"

    def __init__(self, c):
        self.c = c

    def forward(self, a):
        return a - self.c

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


class DivConstant(Function):
    """``x / c`` for a scalar ``c``: a division, so ``x / 0.0`` is inf or nan as NumPy's (not
    a ZeroDivisionError from ``1 / c``), and each quotient is rounded once (``x * (1 / c)``
    was 1 ulp off for a third of float32 ``x / 3``, and inf where ``1 / c`` overflows)."""

    name = "div"

    def __init__(self, c):
        self.c = c

    def forward(self, a):
        return a / self.c

    def backward(self, inputs, gy):
        return sum_to(DivConstant(self.c).apply((gy,)), inputs[0].shape)


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
        if self.c == 0.5:
            # NOTE: NumPy computes x ** 0.5 as sqrt(x): nan for -inf, where pow() gives +inf
            return xp_of(x).sqrt(x)
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
        # NOTE: 0 where the derivative is 0 but its formula 0 * inf (as PyTorch masks them):
        # d/da where b == 0 (a ** 0 is 1), d/db where a == 0 and b >= 0 (0 ** b is 0 or 1);
        # learnable exponents of relu outputs got NaN gradients
        a, b = inputs
        b0 = host(lambda q: q == 0, b.data, name="pow.b_zero")
        a0 = host(lambda p, q: (p == 0) & (q >= 0), a.data, b.data, name="pow.a_zero")
        ga = gy * where(b0, 0.0, b * pow(a, b - 1.0))
        gb = gy * where(a0, 0.0, pow(a, b) * log(a))
        return sum_to(ga, a.shape), sum_to(gb, b.shape)


def _binary(x, y, op, cls, scalar_right, scalar_left):
    if isinstance(x, Tensor):
        if isinstance(y, Tensor):
            if x.shape != y.shape:
                _check.broadcast(op, x.shape, y.shape, ("x", "y"))
            return cls().apply((x, y))
        if is_scalar(y):
            return scalar_right(x, y)
        return _binary(x, as_tensor(y, x, op, "y"), op, cls, None, None)
    if isinstance(y, Tensor):
        if is_scalar(x):
            return scalar_left(x, y)
        return _binary(as_tensor(x, y, op, "x"), y, op, cls, None, None)
    raise DTypeError(f"{op}: expected at least one Tensor, got {type(x).__name__} and "
                     f"{type(y).__name__}; make one with lk.tensor(x, device=...)")


def add(x, y):
    """``x + y`` with broadcasting; either may be a scalar."""
    return _binary(x, y, "add", Add, lambda t, c: AddConstant(c).apply((t,)),
                   lambda c, t: AddConstant(c).apply((t,)))


def sub(x, y):
    return _binary(x, y, "sub", Sub,
                   lambda t, c: (SubConstant(c) if t.dtype.kind in "iu" else
                                 AddConstant(-c)).apply((t,)),
                   lambda c, t: AddConstant(c).apply((Neg().apply((t,)),)))


def mul(x, y):
    return _binary(x, y, "mul", Mul, lambda t, c: MulConstant(c).apply((t,)),
                   lambda c, t: MulConstant(c).apply((t,)))


def div(x, y):
    return _binary(x, y, "div", Div, lambda t, c: DivConstant(c).apply((t,)),
                   lambda c, t: RDivConstant(c).apply((t,)))


def neg(x):
    return Neg().apply((_check.tensor(x, "neg"),))


class RPowConstant(Function):
    """``c ** x`` for a scalar base ``c``: computed as a power (not exp(x log c)), so ``0.0``,
    negative bases and integer exponents give NumPy's values."""

    name = "pow"

    def __init__(self, c):
        self.c = c

    def forward(self, x):
        c = x.dtype.type(self.c) if x.dtype.kind == "f" else self.c
        return xp_of(x).power(c, x)

    def backward(self, inputs, gy):
        (x,) = inputs
        c = self.c
        if c == 0:
            # NOTE: 0 ** x is constant (0) for x > 0; PyTorch's convention extends the zero
            # gradient to x <= 0, where ln(0) * 0 ** x would be nan
            return mul(gy, 0.0)
        # a negative base has no real logarithm: nan, as NumPy's log and PyTorch's gradient
        return mul(gy * pow(c, x), _m.log(c) if c > 0 else float("nan"))


def pow(x, y):  # noqa: A001 - the op's name
    """``x ** y`` with broadcasting; either may be a scalar (NumPy's values for a zero or
    negative base, and for integer exponents)."""
    # NOTE: a NumPy scalar as a Python one: np.float64(2) would promote float32 to float64
    if isinstance(y, np.generic):
        y = y.item()
    if isinstance(x, np.generic):
        x = x.item()
    if isinstance(x, Tensor) and is_scalar(y):
        return PowConstant(y).apply((x,))
    if is_scalar(x) and isinstance(y, Tensor):
        return RPowConstant(x).apply((y,))
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


class Expm1(_Unary):
    name = op = "expm1"

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
        if isinstance(x, (np.ndarray, np.generic)):  # NOTE: a 0-d result is a NumPy scalar
            x = np.asarray(x)
            from math import erf as _erf

            return np.vectorize(_erf, otypes=[x.dtype])(x) if x.size else x.copy()
        return xp_of(x).erf(x)

    def backward(self, inputs, gy):
        x = inputs[0]
        return gy * mul(exp(neg(x * x)), 2.0 / _m.sqrt(_m.pi))


class Erfc(_Unary):
    """1 - erf(x), precise where it is small (x > 3: 1 - erf(x) cancels to 0)."""

    name = op = "erfc"

    def forward(self, x):
        if isinstance(x, (np.ndarray, np.generic)):  # NOTE: a 0-d result is a NumPy scalar
            x = np.asarray(x)
            from math import erfc as _erfc

            return np.vectorize(_erfc, otypes=[x.dtype])(x) if x.size else x.copy()
        return xp_of(x).erfc(x)

    def backward(self, inputs, gy):
        x = inputs[0]
        return gy * mul(exp(neg(x * x)), -2.0 / _m.sqrt(_m.pi))


class Abs(_Unary):
    name = op = "abs"

    def backward(self, inputs, gy):
        x = inputs[0]
        # NOTE: host: a compiled step takes the sign of each call's x again
        return MulConstant(host(lambda d: xp_of(d).sign(d), x.data, name="abs.sign")).apply(
            (gy,))


def exp(x): return Exp().apply((_check.tensor(x, "exp"),))
def expm1(x): return Expm1().apply((_check.tensor(x, "expm1"),))
def log(x): return Log().apply((_check.tensor(x, "log"),))
def log1p(x): return Log1p().apply((_check.tensor(x, "log1p"),))
def sqrt(x): return Sqrt().apply((_check.tensor(x, "sqrt"),))
def sin(x): return Sin().apply((_check.tensor(x, "sin"),))
def cos(x): return Cos().apply((_check.tensor(x, "cos"),))
def tanh(x): return Tanh().apply((_check.tensor(x, "tanh"),))
def sigmoid(x): return Sigmoid().apply((_check.float_input(x, "sigmoid"),))
def erf(x): return Erf().apply((_check.tensor(x, "erf"),))
def erfc(x): return Erfc().apply((_check.tensor(x, "erfc"),))
def abs(x): return Abs().apply((_check.tensor(x, "abs"),))  # noqa: A001


class Softplus(Function):
    """log(1 + e^x) as max(x, 0) + log1p(e^-|x|), stable for any x; its gradient is
    sigmoid(x) everywhere. Composed of relu, abs and log1p (as it was), the gradient at x = 0
    exactly was 0 instead of 1/2: relu's and abs's gradients there are conventions, not the
    derivative of the smooth sum, and logits start at 0 in a zero-initialised layer."""

    name = "softplus"

    def forward(self, x):
        xp = xp_of(x)
        return xp.maximum(x, 0) + xp.log1p(xp.exp(-xp.abs(x)))

    def backward(self, inputs, gy):
        return gy * sigmoid(inputs[0])


def softplus(x):
    """log(1 + e^x), stable for any x; the gradient is sigmoid(x)."""
    return Softplus().apply((_check.float_input(x, "softplus"),))


def log_sigmoid(x):
    """log(sigmoid(x)) = -softplus(-x), stable for any x."""
    return neg(softplus(neg(_check.float_input(x, "log_sigmoid"))))


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
        # NOTE: zeros, not gy * 0: the branch not taken gets 0 even where gy is nan or inf
        z = Tensor(zeros(gy.shape, gy.dtype, gy.data))
        return (sum_to(Where(self.cond).apply((gy, z)), a.shape),
                sum_to(Where(self.cond).apply((z, gy)), b.shape))


def where(cond, a, b):
    """Elementwise ``a if cond else b``; ``cond`` is a boolean array or tensor (not
    differentiated)."""
    a, b = operands(a, b, "where")
    c = _check.data(cond, a, "where", "cond")
    if c.dtype.kind != "b":
        raise DTypeError(f"where: cond must be boolean, got dtype {c.dtype}; compare first "
                         f"(e.g. cond != 0)")
    _check.broadcast("where", tuple(c.shape), _check.broadcast("where", a.shape, b.shape),
                     ("cond", "a and b"))
    return Where(c).apply((a, b))


def maximum(a, b):
    """Elementwise max, NaN where either is NaN (as ``np.maximum``); the gradient goes to
    ``a`` where a >= b or a is NaN, else to ``b``. (Without the NaN test, a NaN in ``a``
    lost to any ``b``: ``maximum(x, 0)`` turned a diverged value into 0.)"""
    a, b = operands(a, b, "maximum")
    return where(host(lambda p, q: (p >= q) | (p != p), a.data, b.data, name="maximum.mask"),
                 a, b)


def minimum(a, b):
    """Elementwise min, as :func:`maximum` (NaN kept; the gradient to ``a`` on a tie)."""
    a, b = operands(a, b, "minimum")
    return where(host(lambda p, q: (p <= q) | (p != p), a.data, b.data, name="minimum.mask"),
                 a, b)


class Clip(Function):
    """A class, not x * inside + clipped * outside: that gives nan for an infinite x (inf * 0)
    and for a nan gradient outside [lo, hi]."""

    name = "clip"

    def __init__(self, lo, hi):
        self.lo, self.hi = lo, hi

    def forward(self, x):
        xp = xp_of(x)
        self.inside = xp.logical_and(x >= self.lo, x <= self.hi)
        return xp.clip(x, x.dtype.type(self.lo), x.dtype.type(self.hi))

    def backward(self, inputs, gy):
        return Where(self.inside).apply((gy, Tensor(zeros(gy.shape, gy.dtype, gy.data))))


def clip(x, lo, hi):
    """Clamp to [lo, hi]; the gradient passes where lo <= x <= hi (0 elsewhere, and for nan)."""
    _check.floating(x, "clip")
    _check.scalar(lo, "clip", "lo")
    _check.scalar(hi, "clip", "hi")
    if not lo <= hi:
        raise ValueError(f"clip: lo must be at most hi, got lo={lo}, hi={hi}")
    return Clip(lo, hi).apply((x,))


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
    """``x`` with the same elements in ``shape`` (one entry may be -1: inferred)."""
    if not isinstance(x, Tensor):
        _check.tensor(x, "reshape")
    if x.shape == shape:
        return x
    shape = _check.shape(shape, "reshape", allow_minus_one=True)
    if x.shape == shape:
        return x
    known = _m.prod(d for d in shape if d != -1)
    if (known != x.size) if -1 not in shape else (known == 0 or x.size % known):
        raise ShapeError(f"reshape: x of shape {x.shape} has {x.size} elements, which do not "
                         f"fill shape {shape}; the sizes must multiply to {x.size}")
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
    """``x`` with its axes permuted by ``axes`` (default: reversed)."""
    _check.tensor(x, "transpose")
    axes = (tuple(range(x.ndim))[::-1] if axes is None else
            _check.permutation(axes, x.ndim, "transpose", x.shape))
    return Transpose(axes).apply((x,))
