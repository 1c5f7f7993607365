"""Shape and indexing ops: reshape, transpose, broadcast_to, expand_dims, squeeze, flatten,
concat, stack, split, unbind, getitem (slices, integer arrays, boolean masks), pad, cast,
to_device."""

from __future__ import annotations

import itertools

import numpy as np

from ..autograd.function import Function
from ..autograd.tensor import Tensor
from ..backend import full, split_bounds, zeros
from ..backend import opencl as cl
from ..errors import DeviceError, DTypeError, ShapeError
from . import _check
from ._util import xp_of
from .math import broadcast_to, reshape, transpose  # noqa: F401 - part of this family


def expand_dims(x, axis):
    """``x`` with new axes of size 1 at ``axis`` (an int or a tuple; positions in the
    result)."""
    _check.tensor(x, "expand_dims")
    nd = x.ndim + (len(axis) if isinstance(axis, (tuple, list)) else 1)
    axes = _check.axes(axis, nd, "expand_dims", x.shape)
    shape = list(x.shape)
    for a in axes:
        shape.insert(a, 1)
    return reshape(x, tuple(shape))


def squeeze(x, axis=None):
    """``x`` without the axes of size 1 in ``axis`` (default: every one)."""
    _check.tensor(x, "squeeze")
    if axis is None:
        return reshape(x, tuple(d for d in x.shape if d != 1))
    axes = _check.axes(axis, x.ndim, "squeeze", x.shape)
    for a in axes:
        if x.shape[a] != 1:
            raise ShapeError(f"squeeze: axis {a} has size {x.shape[a]}, not 1 (shape {x.shape})")
    return reshape(x, tuple(d for i, d in enumerate(x.shape) if i not in axes))


def flatten(x):
    """All but the first axis merged: (N, ...) -> (N, prod(...)); 1-D and 0-D give 1-D."""
    if _check.tensor(x, "flatten").ndim <= 1:
        return reshape(x, (-1,))
    return reshape(x, (x.shape[0], -1))


# ---- getitem -------------------------------------------------------------------------------


def _raw_key(key):
    if isinstance(key, tuple):
        return tuple(k.data if isinstance(k, Tensor) else k for k in key)
    return key.data if isinstance(key, Tensor) else key


def _is_adv(k):
    if isinstance(k, cl.ndarray):
        return True
    return isinstance(k, (np.ndarray, list)) and np.ndim(k) > 0


class GetItem(Function):
    name = "getitem"

    def __init__(self, key):
        self.key = key

    def forward(self, x):
        self.in_shape, self.in_dtype = x.shape, x.dtype
        return x[self.key]

    def backward(self, inputs, gy):
        return GetItemGrad(self.key, self.in_shape).apply((gy,))


class GetItemGrad(Function):
    """The adjoint of getitem: ``gy`` scattered (and summed where indices repeat) into zeros."""

    name = "getitem_grad"

    def __init__(self, key, shape):
        self.key, self.shape = key, shape

    def forward(self, gy):
        xp = xp_of(gy)
        out = zeros(self.shape, gy.dtype, gy)
        key = self.key if isinstance(self.key, tuple) else (self.key,)
        adv = [i for i, k in enumerate(key) if _is_adv(k)]
        if not adv:
            out[self.key] = gy
            return out
        if xp is np:
            np.add.at(out, self.key, gy)
            return out
        lead = key[:adv[0]]
        simple = (len(adv) == 1 and adv[0] == len(key) - 1 and np.ndim(key[adv[0]]) >= 1
                  and all(isinstance(k, slice) and k == slice(None) for k in lead)
                  and _int_index(key[adv[0]]))
        if simple:
            xp.scatter_add(out, key[adv[0]], gy, axis=len(lead))
            return out
        # general keys: flat positions of the selected elements, then one scatter-add
        flat_pos = np.arange(int(np.prod(self.shape)), dtype=np.int64).reshape(self.shape)
        hkey = tuple(k.get() if isinstance(k, cl.ndarray) else k for k in key)
        pos = flat_pos[hkey]
        flat = out.reshape(-1)
        xp.scatter_add(flat, pos.reshape(-1), gy.reshape(-1), axis=0)
        return out

    def backward(self, inputs, ggy):
        return GetItem(self.key).apply((ggy,))


def _int_index(k):
    dt = k.dtype if isinstance(k, (np.ndarray, cl.ndarray)) else np.asarray(k).dtype
    return dt.kind in "iu"


def getitem(x, key):
    """``x[key]`` with slices, ints, None, Ellipsis, integer arrays and boolean masks (bounds
    as NumPy: IndexError)."""
    return GetItem(_raw_key(key)).apply((_check.tensor(x, "getitem"),))


# ---- concat / stack / split / unbind / pad ---------------------------------------------------


class Concat(Function):
    name = "concat"

    def __init__(self, axis):
        self.axis = axis

    def forward(self, *xs):
        self.sizes = [x.shape[self.axis] for x in xs]
        return xp_of(xs[0]).concatenate(xs, axis=self.axis)

    def backward(self, inputs, gy):
        return Split(self.axis, list(itertools.accumulate(self.sizes, initial=0))).apply((gy,))


def concat(xs, axis=0):
    """Tensors of one dtype joined along ``axis``; every other axis must match."""
    xs = _check.tensors(xs, "concat")
    nd = xs[0].ndim
    ax = _check.axis(axis, nd, "concat", xs[0].shape, what="xs[0]")
    for i, x in enumerate(xs):
        if x.ndim != nd or any(a != b for k, (a, b) in enumerate(zip(x.shape, xs[0].shape))
                               if k != ax):
            raise ShapeError(f"concat: tensor {i} has shape {x.shape} but tensor 0 has "
                             f"{xs[0].shape}; all dimensions except axis {axis} must match")
    return Concat(ax).apply(tuple(xs))


def stack(xs, axis=0):
    """Tensors of one shape and dtype joined along a new ``axis``."""
    xs = _check.tensors(xs, "stack")
    ax = _check.axis(axis, xs[0].ndim + 1, "stack", xs[0].shape, what="xs[0]")
    for i, x in enumerate(xs):
        if x.shape != xs[0].shape:
            raise ShapeError(f"stack: tensor {i} has shape {x.shape} but tensor 0 has "
                             f"{xs[0].shape}; stacked tensors must have one shape")
    return Stack(ax).apply(tuple(xs))


# NOTE: split and unbind are one node with one output per piece, so their backward is one
# concat (stack) of the pieces' gradients; cutting by getitem, each piece's gradient was a zero
# array of the whole input's shape, summed by the engine: O(T^2) over a sequence of T steps.
class Split(Function):
    name = "split"

    def __init__(self, axis, edges):
        self.axis, self.edges = axis, edges
        self.n_out = len(edges) - 1

    def forward(self, x):
        pre = (slice(None),) * self.axis
        ys = tuple(x[pre + (slice(s, e),)] for s, e in zip(self.edges[:-1], self.edges[1:]))
        return ys if self.n_out != 1 else ys[0]

    def backward(self, inputs, gys):
        gys = gys if self.n_out != 1 else (gys,)
        x = inputs[0]
        n = x.shape[self.axis]
        # NOTE: each piece is x[s:e] as a Python slice (NumPy's split: a negative index counts
        # from the end, one past it is clipped): where it starts in x
        e = self.edges
        starts = [slice(a, b).indices(n)[0] for a, b in zip(e[:-1], e[1:])]
        ends = [lo + g.shape[self.axis] for lo, g in zip(starts, gys)]
        if starts[0] == 0 and ends[-1] == n and all(
                b == a for a, b in zip(ends[:-1], starts[1:])):
            return Concat(self.axis).apply(gys)
        # NOTE: indices that go back (split(x, [3, 1]), as NumPy allows): pieces overlap or
        # are empty, so their gradients do not tile x; each is added at its place
        total = Tensor(zeros(x.shape, x.dtype, x.data))
        for g, lo in zip(gys, starts):
            size = g.shape[self.axis]
            if size:
                pw = [(0, 0)] * g.ndim
                pw[self.axis] = (lo, n - lo - size)
                total = total + Pad(tuple(pw), 0.0).apply((g,))
        return total


class Stack(Function):
    name = "stack"

    def __init__(self, axis):
        self.axis = axis

    def forward(self, *xs):
        return xp_of(xs[0]).stack(xs, axis=self.axis)

    def backward(self, inputs, gy):
        return Unbind(self.axis, len(inputs)).apply((gy,))


class Unbind(Function):
    name = "unbind"

    def __init__(self, axis, n):
        self.axis, self.n_out = axis, n

    def forward(self, x):
        pre = (slice(None),) * self.axis
        ys = tuple(x[pre + (i,)] for i in range(self.n_out))
        return ys if self.n_out != 1 else ys[0]

    def backward(self, inputs, gys):
        return Stack(self.axis).apply(gys if self.n_out != 1 else (gys,))


def _pieces(out):
    return out if isinstance(out, tuple) else (out,)


def unbind(x, axis=0):
    """The slices of ``x`` along ``axis``, each without that axis: a tuple of ``x.shape[axis]``
    tensors (the inverse of ``stack``).

    Examples
    --------
    >>> import labkit as lk
    >>> import labkit.functions as F
    >>> a, b = F.unbind(lk.tensor([[1.0, 2.0], [3.0, 4.0]]), axis=1)
    >>> a.numpy()
    array([1., 3.], dtype=float32)
    """
    ax = _check.axis(axis, _check.tensor(x, "unbind").ndim, "unbind", x.shape)
    if x.shape[ax] == 0:
        return ()
    return _pieces(Unbind(ax, x.shape[ax]).apply((x,)))


def split(x, indices_or_sections, axis=0):
    """``x`` cut along ``axis`` into equal sections (an int) or at the given indices."""
    ax = _check.axis(axis, _check.tensor(x, "split").ndim, "split", x.shape)
    n = x.shape[ax]
    if isinstance(indices_or_sections, (tuple, list)):
        ios = [_check.integer(i, "split", "indices") for i in indices_or_sections]
    else:
        ios = _check.integer(indices_or_sections, "split", "indices_or_sections")
        if ios <= 0:
            raise ValueError(f"split: the number of sections must be positive, got {ios}")
    bounds = split_bounds(n, ios, ax)
    return _pieces(Split(ax, [0] + bounds + [n]).apply((x,)))


class Pad(Function):
    name = "pad"

    def __init__(self, pad_width, value):
        self.pad_width, self.value = pad_width, value

    def forward(self, x):
        shape = tuple(d + lo + hi for d, (lo, hi) in zip(x.shape, self.pad_width))
        out = full(shape, self.value, x.dtype, x)
        out[self._center(x.shape)] = x
        return out

    def _center(self, shape):
        return tuple(slice(lo, lo + d) for d, (lo, _) in zip(shape, self.pad_width))

    def backward(self, inputs, gy):
        return getitem(gy, self._center(inputs[0].shape))


def pad(x, pad_width, value=0.0):
    """Constant padding; ``pad_width`` is an int, a (before, after) pair, or one per axis."""
    _check.tensor(x, "pad")
    _check.scalar(value, "pad", "value")
    if isinstance(pad_width, int):
        pw = ((pad_width, pad_width),) * x.ndim
    elif len(pad_width) == 2 and all(isinstance(p, int) for p in pad_width):
        pw = (tuple(pad_width),) * x.ndim
    else:
        pw = tuple(tuple(p) for p in pad_width)
    if len(pw) != x.ndim or any(len(p) != 2 or not all(isinstance(v, (int, np.integer))
                                                       for v in p) for p in pw) or any(
            lo < 0 or hi < 0 for lo, hi in pw):
        raise ShapeError(f"pad: pad_width {pad_width} does not fit a tensor of shape {x.shape}")
    return Pad(pw, value).apply((x,))


# ---- dtype and device ----------------------------------------------------------------------


class Cast(Function):
    name = "cast"

    def __init__(self, dtype):
        self.dtype = np.dtype(dtype)

    def forward(self, x):
        self.in_dtype = x.dtype
        return x.astype(self.dtype)

    def backward(self, inputs, gy):
        return cast(gy, self.in_dtype)


def cast(x, dtype):
    """``x`` as ``dtype`` (the gradient is cast back)."""
    _check.tensor(x, "cast")
    try:
        dtype = np.dtype(dtype)
    except TypeError:
        raise DTypeError(f"cast: {dtype!r} is not a dtype; give one such as np.float32") from None
    if x.dtype == dtype:
        return x
    return Cast(dtype).apply((x,))


class ToDevice(Function):
    name = "to_device"

    def __init__(self, device):
        self.device = device

    def forward(self, x):
        from ..backend import asarray

        self.src = "cpu" if isinstance(x, np.ndarray) else f"cl:{x.rt.info.index}"
        return asarray(x, device=self.device)

    def backward(self, inputs, gy):
        return to_device(gy, self.src)


def to_device(x, device):
    """``x`` on ``device`` (``"cpu"``, ``"cl"``, ``"cl:N"`` or a Device); the gradient goes
    back."""
    from ..backend.device import device as _device

    _check.tensor(x, "to_device")
    try:
        dev = _device(device)
    except DeviceError as e:
        raise type(e)(f"to_device: {e}") from None
    return ToDevice(dev).apply((x,))


__all__ = ["broadcast_to", "cast", "concat", "expand_dims", "flatten", "getitem", "pad",
           "reshape", "split", "squeeze", "stack", "to_device", "transpose", "unbind"]


class Contiguous(Function):
    """``x``'s values in a new C-contiguous array (what lk.compile puts before the products
    that read a transposed weight on an OpenCL device: one copy, by 16 x 16 tiles, instead of
    one per product). Its gradient is the incoming one."""

    name = "contiguous"

    def forward(self, x):
        if isinstance(x, np.ndarray):
            return np.ascontiguousarray(x)
        return xp_of(x).ascontiguousarray(x)  # NOTE: a transposed matrix by tiles (core.copy)

    def backward(self, inputs, gy):
        return gy
