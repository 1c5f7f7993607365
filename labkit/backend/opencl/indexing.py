"""Indexing: basic indexing (views), take, a deterministic scatter-add (``add.at``),
concatenate, stack, split. Kernels in kernels_cl/indexing.cl. Getitem and setitem, with
NumPy's advanced indexing, build on these in advanced.py.

Every index array is checked against the size of the axis it indexes before a kernel reads
through it: host arrays on the host, device arrays by one reduction and one read back of its
result. ``LABKIT_CHECK_INDICES=off`` skips the device check (the kernels clamp, so an index out
of range then reads a wrong element, never memory outside the array).
"""

from __future__ import annotations

import builtins
import operator
from string import Template

import numpy as np

from ...config import get as setting
from ...errors import DeviceMismatchError, IndexingError, ShapeError
from .context import defer_check, deferring
from .core import add as _add
from .core import (
    asarray,
    assign,
    astype,
    full,
    greater_equal,
    less,
    logical_or,
    result_type,
)
from .elementwise import VECTOR_WIDTH
from .ndarray import CTYPES, IDX_NP, check_writeable, index_ctype, ndarray, same_device
from .program import header, kernels, source
from .reduce import any as any_
from .shapes import normalize_axis, split_bounds

_TAKE_ARGS = [np.int64] * 4 + [None, None, np.int64, None, np.int64]
_SCATTER_ARGS = [np.int64] * 4 + [None, np.int64, None, np.int64, None, None]


def _program(rt, dt, it):
    ct, ci = CTYPES[np.dtype(dt)], CTYPES[np.dtype(it)]
    src = header(rt, (ct, ci), {"T": ct, "I": ci}, what="indexing") + source("common") + \
        source("indexing")
    return kernels(rt, src, {"take": _TAKE_ARGS, "scatter_add": _SCATTER_ARGS},
                   name=f"indexing.cl ({ct}, {ci})")


# ---- index arrays -------------------------------------------------------------------------------
def _check_host(h: np.ndarray, size: int, axis: int, op: str) -> None:
    if h.size and (h.min() < -size or h.max() >= size):
        first = h[(h < -size) | (h >= size)].flat[0]
        raise IndexingError(f"{op}: index {first} is out of bounds for axis {axis} with size "
                            f"{size}")


def index_array(idx, rt, size: int, axis: int, op: str) -> ndarray:
    """``idx`` as a contiguous int64 array on ``rt``, every entry checked to lie in
    ``[-size, size)`` (``axis`` and ``op`` name the culprit in the error)."""
    if isinstance(idx, ndarray):
        if idx.dtype.kind not in "iu":
            raise IndexingError(f"{op}: indices must be integers, got {idx.dtype}")
        if idx.rt is not rt:
            raise DeviceMismatchError(
                f"{op}: the indices are on cl:{idx.rt.info.index} but the array on "
                f"cl:{rt.info.index}; move them with .to('cl:{rt.info.index}')")
        dev = idx if idx.dtype == np.int64 and idx.is_contiguous else astype(idx, np.int64)
        if dev.size and setting("LABKIT_CHECK_INDICES"):
            bad = any_(logical_or(less(dev, -size), greater_equal(dev, size)))
            if deferring():  # NOTE: a compiled step's replay: looked at before any update
                defer_check(bad, lambda: _check_host(dev.get(), size, axis, op))
            elif bad.item():
                _check_host(dev.get(), size, axis, op)
        return dev
    h = np.asarray(idx)
    if h.dtype == object:
        raise IndexingError(f"{op}: invalid index {idx!r}")
    if h.dtype.kind == "b":
        raise IndexingError(f"{op}: boolean indices are handled by getitem, not take")
    if h.size and h.dtype.kind not in "iu":
        raise IndexingError(f"{op}: indices must be integers, got {h.dtype}")
    h = h.astype(np.int64)
    _check_host(h, size, axis, op)
    return asarray(h, device=rt)


# ---- take and scatter_add -----------------------------------------------------------------------
def take(a, indices, axis=None):
    """NumPy's take: ``a.shape[:axis] + indices.shape + a.shape[axis+1:]``."""
    if axis is None:
        a, axis = a.reshape(-1), 0
    axis = normalize_axis(axis, a.ndim, "take")
    return _take(a, index_array(indices, a.rt, a.shape[axis], axis, "take"), axis)


def _take(a, idx, axis):
    """take with ``idx`` already a checked int64 device array."""
    rt = a.rt
    A = a.shape[axis]
    inner = int(np.prod(a.shape[axis + 1:], dtype=np.int64))
    out = ndarray(rt, a.shape[:axis] + idx.shape + a.shape[axis + 1:], a.dtype)
    n = out.size
    if n == 0:
        return out
    if A == 0:
        raise IndexingError(f"take: cannot take from an empty axis {axis} (shape {a.shape})")
    src = a if a.is_contiguous else a.copy()
    prg = _program(rt, a.dtype, np.int64)
    gs = -(-n // 256) * 256
    with rt.lock:
        prg.take(rt.queue, (gs,), None, n, A, idx.size, inner, out.data, src.data, src.offset,
                 idx.data, idx.offset)
    return out


def scatter_add(out, indices, values, axis=0):
    """``out[..., indices[j], ...] += values[..., j, ...]`` along ``axis``, in place.

    Repeated indices accumulate (the gradient of :func:`take`). Deterministic: the sums are
    done in a fixed order, without atomics. The indices are read back to the host to be
    sorted (stable), so this waits for the work queued before it.
    """
    axis = normalize_axis(axis, out.ndim, "scatter_add")
    check_writeable(out, "scatter_add")
    rt = out.rt
    same_device("scatter_add", (out, values, *(
        [indices] if isinstance(indices, ndarray) else [])))
    A = out.shape[axis]
    h = indices.get() if isinstance(indices, ndarray) else np.asarray(indices)
    if h.size and h.dtype.kind not in "iu":
        raise IndexingError(f"scatter_add: indices must be integers, got {h.dtype}")
    ishape = np.shape(h)
    h = h.astype(np.int64).reshape(-1)
    _check_host(h, A, axis, "scatter_add")  # NOTE: always: the indices are on the host anyway
    h = np.where(h < 0, h + A, h)
    J = h.size
    want = out.shape[:axis] + (J,) + out.shape[axis + 1:]
    if not isinstance(values, ndarray):
        values = full(want, values, out.dtype, rt)
    # NOTE: NumPy's rule: the values broadcast to the indexed shape (indices of any shape in
    # place of the axis); a values array of the right size but another shape was reshaped,
    # and a smaller one filled part of the target
    indexed = out.shape[:axis] + ishape + out.shape[axis + 1:]
    if values.shape != indexed:
        try:
            values = values.broadcast_to(indexed)
        except ShapeError:
            raise ShapeError(f"scatter_add: values of shape {values.shape} do not broadcast "
                             f"to the indexed shape {indexed}") from None
    if values.shape != want:
        values = values.reshape(want)
    if values.dtype != out.dtype:
        values = values.astype(out.dtype)
    if not values.is_contiguous:
        values = values.copy()
    if out.size == 0 or J == 0:
        return out
    perm = np.argsort(h, kind="stable")
    starts = np.searchsorted(h[perm], np.arange(A + 1)).astype(np.int64)
    target = out if out.is_contiguous else out.copy()
    inner = int(np.prod(out.shape[axis + 1:], dtype=np.int64))
    prg = _program(rt, out.dtype, np.int64)
    n = target.size
    dperm, dstarts = asarray(perm.astype(np.int64), device=rt), asarray(starts, device=rt)
    with rt.lock:
        prg.scatter_add(rt.queue, (-(-n // 256) * 256,), None, n, A, J, inner, target.data,
                        target.offset, values.data, values.offset, dperm.data, dstarts.data)
    if target is not out:
        assign(out, target)
    return out


class with_at:
    """A NumPy-ufunc-like wrapper: ``add(a, b)`` and ``add.at(a, index, b)`` (scatter-add)."""

    def __init__(self, f):
        self._f = f
        self.__name__ = f.__name__
        self.__doc__ = f.__doc__

    def __call__(self, *args, **kwargs):
        return self._f(*args, **kwargs)

    def at(self, a, index, b):
        """``a[index] += b`` with repeated indices accumulating. ``index`` is an integer array
        (axis 0) or a tuple of full slices followed by one integer array."""
        if not isinstance(index, tuple):
            index = (index,)
        axis = 0
        for k in index[:-1]:
            if not (isinstance(k, slice) and k == slice(None)):
                raise NotImplementedError("add.at: only full slices may precede the index "
                                          "array, e.g. add.at(a, (slice(None), idx), b)")
            axis += 1
        scatter_add(a, index[-1], b, axis=axis)

    def __repr__(self):
        return f"<labkit.backend.opencl ufunc {self.__name__!r}>"


#: NumPy's add, with ``add.at(a, index, b)`` as a deterministic scatter-add
add = with_at(_add)


def concatenate(arrays, axis=0):
    arrays = list(arrays)
    if not arrays:
        raise ValueError("concatenate: need at least one array")
    rt = same_device("concatenate", arrays)
    first = arrays[0]
    if first.ndim == 0:
        raise ShapeError("concatenate: zero-dimensional arrays cannot be concatenated")
    axis = normalize_axis(axis, first.ndim, "concatenate")
    for i, x in enumerate(arrays):
        if x.ndim != first.ndim or any(
                d != e for k, (d, e) in enumerate(zip(x.shape, first.shape)) if k != axis):
            raise ShapeError(
                f"concatenate: array {i} has shape {x.shape} but array 0 has {first.shape}; "
                f"all dimensions except axis {axis} must match")
    dt = result_type(*arrays)
    total = builtins.sum(x.shape[axis] for x in arrays)
    shape = first.shape[:axis] + (total,) + first.shape[axis + 1:]
    out = ndarray(rt, shape, dt)
    if _pieces_ok(rt, arrays, dt, out):
        _concat_pieces(out, arrays, axis)
        return out
    pos = 0
    for x in arrays:
        n = x.shape[axis]
        if n:
            sl = (slice(None),) * axis + (slice(pos, pos + n),)
            assign(basic_index(out, sl), x)
        pos += n
    return out


#: pieces copied by one launch of ``lk_concat`` (4 arguments each: within the 1 KB of kernel
#: arguments every OpenCL device takes)
PIECES = 8

_CONCAT_SRC = """
__kernel void lk_concat(const IDX row_len, __global T* out, const IDX out_o${params})
{
    const IDX r = (IDX)get_global_id(0);
    __global const T* src;
    IDX n, col;
    switch (get_global_id(1)) {${cases}
    }
    src += r * n;
    __global T* dst = out + out_o + r * row_len + col;
    IDX k = 0;
    if ((((size_t)src | (size_t)dst) % (W * sizeof(T))) == 0)  // NOTE: vloadN is a call
        for (; k + W <= n; k += W)
            *(__global ${ct}${w}*)(dst + k) = *(__global const ${ct}${w}*)(src + k);
    else
        for (; k + W <= n; k += W) vstore${w}(vload${w}(0, src + k), 0, dst + k);
    for (; k < n; ++k) dst[k] = src[k];
}
"""


def _pieces_ok(rt, arrays, dt, out):
    """Contiguous pieces of the result's dtype on a CPU device: copied a row of a piece per
    work-item in vectors, PIECES pieces a launch (a stack of an LSTM's 32 step gradients was
    32 launches of a strided copy, 22 us of device time each)."""
    return (rt.info.is_cpu and out.size and dt.itemsize in VECTOR_WIDTH
            and builtins.all(x.dtype == dt and x.is_contiguous for x in arrays))


def _concat_pieces(out, arrays, axis):
    rt = out.rt
    inner = 1
    for d in out.shape[axis + 1:]:
        inner *= d
    outer = out.size // (out.shape[axis] * inner)
    ct = CTYPES[out.dtype]
    w = VECTOR_WIDTH[out.dtype.itemsize]
    idx = index_ctype(out, *arrays)
    it = IDX_NP[idx]
    pieces, pos = [], 0
    for x in arrays:
        n = x.shape[axis] * inner
        if n:
            pieces.append((x, n, pos * inner))
        pos += x.shape[axis]
    for lo in range(0, len(pieces), PIECES):
        group = pieces[lo:lo + PIECES]
        k = len(group)

        def make(k=k):
            params = "".join(f", __global const T* s{j}, const IDX o{j}, const IDX n{j}, "
                             f"const IDX c{j}" for j in range(k))
            cases = "".join(f"\n    case {j}: src = s{j} + o{j}; n = n{j}; col = c{j}; break;"
                            for j in range(k - 1))
            cases += (f"\n    default: src = s{k - 1} + o{k - 1}; n = n{k - 1}; "
                      f"col = c{k - 1}; break;")
            src = header(rt, (ct,), {"T": ct, "IDX": idx, "W": w}, what="concatenate") + \
                Template(_CONCAT_SRC).substitute(params=params, cases=cases, w=w, ct=ct)
            return kernels(rt, src, {"lk_concat": [it, None, it] + [None, it, it, it] * k},
                           name="indexing:lk_concat").lk_concat
        kernel = rt.cached(("concat_pieces", ct, idx, k), make)
        args = []
        for x, n, col in group:
            args += [x.data, x.offset, n, col]
        with rt.lock:
            kernel(rt.queue, (outer, k), None, out.shape[axis] * inner, out.data, out.offset,
                   *args)


def stack(arrays, axis=0):
    arrays = list(arrays)
    if not arrays:
        raise ValueError("stack: need at least one array")
    shapes = {x.shape for x in arrays}
    if len(shapes) > 1:
        raise ShapeError(f"stack: all arrays must have the same shape, got {sorted(shapes)}")
    axis = normalize_axis(axis, arrays[0].ndim + 1, "stack")
    return concatenate([x.expand_dims(axis) for x in arrays], axis=axis)


def split(a, indices_or_sections, axis=0):
    axis = normalize_axis(axis, a.ndim, "split")
    n = a.shape[axis]
    bounds = split_bounds(n, indices_or_sections, axis)
    edges = [0] + bounds + [n]
    pre = (slice(None),) * axis
    return [a[pre + (slice(s, e),)] for s, e in zip(edges[:-1], edges[1:])]


# ---- basic indexing ---------------------------------------------------------------------------
def basic_index(a: ndarray, key: tuple):
    """The view that ints, slices, None and Ellipsis in ``key`` select (no copy)."""
    # NOTE: a Python or NumPy bool is a 0-d mask (NumPy): a new axis of length 1 (True) or 0
    nindexed = builtins.sum(1 for k in key if k is not None and k is not Ellipsis
                            and not isinstance(k, (bool, np.bool_)))
    if builtins.sum(1 for k in key if k is Ellipsis) > 1:
        raise IndexingError("an index can only have a single ellipsis ('...')")
    if nindexed > a.ndim:
        raise IndexingError(f"too many indices for array: array is {a.ndim}-dimensional, but "
                         f"{nindexed} were indexed")
    shape, st, off = [], [], a.offset
    dim = 0
    for k in key:
        if k is Ellipsis:
            for _ in range(a.ndim - nindexed):
                shape.append(a.shape[dim])
                st.append(a._st[dim])
                dim += 1
        elif k is None or isinstance(k, (bool, np.bool_)):
            shape.append(0 if k is False or k is np.False_ else 1)
            st.append(0)
        elif isinstance(k, slice):
            start, stop, step = k.indices(a.shape[dim])
            n = len(range(start, stop, step))
            shape.append(n)
            st.append(a._st[dim] * step)
            if n:
                off += start * a._st[dim]
            dim += 1
        else:
            try:
                i = operator.index(k)
            except TypeError:
                raise IndexingError(f"only integers, slices (`:`), ellipsis (`...`), None and "
                                    f"integer or boolean arrays are valid indices, got {k!r}"
                                    ) from None
            d = a.shape[dim]
            if not -d <= i < d:
                raise IndexingError(f"index {i} is out of bounds for axis {dim} with size {d}")
            off += (i % d) * a._st[dim]
            dim += 1
    for k in range(dim, a.ndim):
        shape.append(a.shape[k])
        st.append(a._st[k])
    return a._view(tuple(shape), tuple(st), off)
