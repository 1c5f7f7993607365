"""Helpers shared by the function families."""

from __future__ import annotations

import numbers

import numpy as np

from ..autograd.tensor import Tensor
from ..backend import opencl as cl
from ..errors import DeviceMismatchError


def is_scalar(x) -> bool:
    return isinstance(x, (numbers.Number, np.generic))


def as_tensor(x, like: Tensor, op: str) -> Tensor:
    """A Tensor for ``x`` on ``like``'s device (arrays must already be there)."""
    if isinstance(x, Tensor):
        return x
    if isinstance(x, cl.ndarray):
        return Tensor(x)
    if isinstance(x, np.ndarray):
        if isinstance(like.data, cl.ndarray) and x.ndim > 0:
            raise DeviceMismatchError(
                f"{op}: got a NumPy array (cpu) and a tensor on {like.device}; make it a "
                f"tensor there with lk.tensor(x, device='{like.device}')")
        if isinstance(like.data, cl.ndarray):
            return Tensor(cl.asarray(x, device=like.data.rt))
        return Tensor(x)
    arr = np.asarray(x, dtype=like.dtype if like.dtype.kind == "f" else None)
    return as_tensor(arr, like, op)


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


def sigmoid_array(x):
    if isinstance(x, np.ndarray):
        # NOTE: 0.5 * (1 + tanh(x / 2)) is exact algebra and never overflows, unlike 1/(1+e^-x)
        return (np.tanh(x * x.dtype.type(0.5)) + 1) * x.dtype.type(0.5)
    return cl.sigmoid(x)


def normalize_axes(axis, ndim):
    if axis is None:
        return tuple(range(ndim))
    axes = axis if isinstance(axis, (tuple, list)) else (axis,)
    return tuple(sorted(a % ndim for a in axes)) if ndim else ()
