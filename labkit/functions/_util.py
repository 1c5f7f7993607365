"""Helpers shared by the function families."""

from __future__ import annotations

import numbers

import numpy as np

from ..autograd.tensor import Tensor
from ..autograd.trace import host, tracer
from ..backend import opencl as cl
from ..errors import DeviceMismatchError, DTypeError


def is_scalar(x) -> bool:
    t = type(x)
    # NOTE: a Python float or int first: the ABC's isinstance is about 0.3 us
    return t is float or t is int or isinstance(x, (numbers.Number, np.generic))


def as_tensor(x, like: Tensor, op: str, name: str = "operand") -> Tensor:
    """A Tensor for the constant operand ``x`` of an op whose other operand is ``like``.

    Scalars and lists are values: they become an array on ``like``'s device (floats in its
    dtype, and Python ints in an integer one: weak, as NumPy 2's). Arrays are data with a
    place: a NumPy array beside a tensor on an OpenCL device is an error, not a hidden
    host-to-device copy per op (0-d arrays excepted)."""
    if isinstance(x, Tensor):
        return x
    if isinstance(x, cl.ndarray):
        return _wrapped(x)
    if isinstance(x, np.ndarray):
        if x.dtype.kind not in "biuf":
            raise DTypeError(f"{op}: {name} must hold numbers, got dtype {x.dtype}")
        if isinstance(like.data, cl.ndarray) and x.ndim > 0:
            raise DeviceMismatchError(
                f"{op}: got a NumPy array (cpu) and a tensor on {like.device}; make it a "
                f"tensor there with lk.tensor(x, device='{like.device}')")
        if isinstance(like.data, cl.ndarray):
            rt = like.data.rt
            # NOTE: a replay of a compiled step copies that call's array (an argument)
            return Tensor(host(lambda a: cl.asarray(a, device=rt), x, name=f"upload {name}"))
        return _wrapped(x)
    if not isinstance(x, (list, tuple, numbers.Number, np.generic)):
        raise DTypeError(f"{op}: {name} must be a Tensor, a number or a list of numbers, got "
                         f"{type(x).__name__}; make it a tensor with lk.tensor(x, "
                         f"device='{like.device}')")
    if type(x) is int and like.dtype.kind in "iu":
        # NOTE: a Python int is weak, as in NumPy 2 and labkit's arithmetic (x + 1 stays int8):
        # where(c, x_int8, 0) and maximum(x_int8, 0) were int64; out of range: OverflowError
        from ..backend.opencl.promotion import check_int_range

        check_int_range(x, like.dtype, op)
        arr = np.asarray(x, dtype=like.dtype)
    else:
        arr = np.asarray(x, dtype=like.dtype if like.dtype.kind == "f" else None)
    if arr.dtype.kind not in "biuf":
        raise DTypeError(f"{op}: {name} must hold numbers, got {x!r}")
    if isinstance(like.data, cl.ndarray):
        return Tensor(cl.asarray(arr, device=like.data.rt))
    return Tensor(arr)


def _wrapped(x) -> Tensor:
    """A Tensor made here for the array operand ``x``; inside ``lk.compile``'s trace it is
    marked as made by the step, so that an argument array it wraps stays that argument (not a
    tensor the step reads, whose data the next call's argument would have to be: every call
    was traced again, with MSE targets or a mask passed as a NumPy array)."""
    t = Tensor(x)
    mark = getattr(tracer(), "made_here", None)
    if mark is not None:
        mark(t)
    return t


def operands(a, b, op: str, names=("a", "b")):
    """``a`` and ``b`` as Tensors, one of which must already be a Tensor (the arithmetic ops'
    rule: the other may be a number, a list or an array on the same device)."""
    if isinstance(a, Tensor):
        return a, as_tensor(b, a, op, names[1])
    if isinstance(b, Tensor):
        return as_tensor(a, b, op, names[0]), b
    raise DTypeError(f"{op}: expected at least one Tensor, got {type(a).__name__} and "
                     f"{type(b).__name__}; make one with lk.tensor(x, device=...)")


def xp_of(a):
    return cl if isinstance(a, cl.ndarray) else np


def strided_view(a, shape, strides, offset=0):
    """A view of contiguous ``a`` with element strides (NumPy: as_strided)."""
    if isinstance(a, np.ndarray):
        it = a.itemsize
        base = a.reshape(-1)[offset:]
        return np.lib.stride_tricks.as_strided(base, shape, tuple(s * it for s in strides),
                                               writeable=False)
    return a._view(tuple(shape), tuple(strides), a.offset + offset)


_UINT = {4: np.uint32, 8: np.uint64}


def sigmoid_array(x):
    if isinstance(x, np.ndarray):
        # NOTE: from e = exp(-|x|), which never overflows: 1 / (1 + e) for x >= 0 and
        # e / (1 + e) below, so a very negative x keeps its relative precision (the former
        # (1 + tanh(x / 2)) / 2 cancelled to 0 from x = -17 in float32, making log(sigmoid)
        # -inf where it is finite); the same form as the OpenCL kernel's
        if x.ndim == 0:  # NOTE: ufuncs return scalars for 0-d arrays, which out= refuses
            return sigmoid_array(x.reshape(1)).reshape(())
        if x.dtype.kind != "f" or x.dtype.itemsize not in _UINT:
            e = np.exp(-np.abs(x))
            d = e + 1
            out = e / d
            np.divide(1, d, out=out, where=x >= 0)
            return out
        # NOTE: both quotients, then picked by a mask of all-ones bits where x >= 0: the same
        # values as divide(where=), which was 3x slower ((32, 384) gates of an LSTM step:
        # 83 us -> 30 us); no temporary beyond e, d and the mask
        e = np.abs(x)
        np.negative(e, out=e)
        np.exp(e, out=e)
        d = e + 1
        out = np.divide(e, d, out=e)   # e / (1 + e), for x < 0
        np.divide(1, d, out=d)         # 1 / (1 + e), for x >= 0
        u = _UINT[x.dtype.itemsize]
        m = np.empty(x.shape, u)
        np.greater_equal(x, 0, out=m, casting="unsafe")
        np.negative(m, out=m)
        ob, db = out.view(u), d.view(u)
        np.bitwise_and(db, m, out=db)
        np.invert(m, out=m)
        np.bitwise_and(ob, m, out=ob)
        np.bitwise_or(ob, db, out=ob)
        return out
    return cl.sigmoid(x)


def row_max(x):
    """``x.max(axis=1, keepdims=True)`` of a NumPy array; for short rows (a classifier's
    logits) through the transpose, whose reduction runs along contiguous columns: (256, 10)
    13.5 -> 2.1 us. The same values (a maximum is exact, NaN included)."""
    if x.ndim == 2 and x.shape[1] <= 64 and x.shape[0] >= 16:
        return np.ascontiguousarray(x.T).max(axis=0)[:, None]
    return x.max(axis=1, keepdims=True)


def normalize_axes(axis, ndim):
    if axis is None:
        return tuple(range(ndim))
    axes = axis if isinstance(axis, (tuple, list)) else (axis,)
    return tuple(sorted(a % ndim for a in axes)) if ndim else ()
