"""Gather (take, advanced indexing), deterministic scatter-add (``add.at``), concatenate, stack,
split. Kernels in kernels_cl/indexing.cl."""

from __future__ import annotations

import os

import numpy as np

from ...errors import ShapeError
from .ndarray import CTYPES, broadcast_shapes, ndarray, normalize_axis, same_device
from .program import build, source


def _program(rt, dt, it):
    return rt.cached(("indexing", dt, it), lambda: _make_program(rt, dt, it))


def _make_program(rt, dt, it):
    ct, ci = CTYPES[np.dtype(dt)], CTYPES[np.dtype(it)]
    head = ("#define LK_FP64\n" if ct == "double" else "") + f"#define T {ct}\n#define I {ci}\n"
    from .gemm import _Kernels

    prg = _Kernels(build(rt, head + source("common") + source("indexing"), "",
                         name=f"indexing.cl ({ct}, {ci})"), ["take", "scatter_add"])
    prg.take.set_scalar_arg_dtypes([np.int64] * 4 + [None, None, np.int64, None, np.int64])
    prg.scatter_add.set_scalar_arg_dtypes(
        [np.int64] * 4 + [None, np.int64, None, np.int64, None, None])
    return prg


def _check_indices_enabled() -> bool:
    return os.environ.get("LABKIT_CHECK_INDICES", "1") not in ("0", "false", "no")


def _index_array(idx, rt, size, axis, op):
    """Indices as a contiguous int64 device array, bounds-checked against ``size``."""
    from .api import any as _any
    from .api import asarray, greater_equal, less, logical_or

    if isinstance(idx, ndarray):
        if idx.dtype.kind not in "iu":
            raise IndexError(f"{op}: indices must be integers, got {idx.dtype}")
        if idx.rt is not rt:
            from ...errors import DeviceMismatchError

            raise DeviceMismatchError(
                f"{op}: the indices are on cl:{idx.rt.info.index} but the array on "
                f"cl:{rt.info.index}; move them with .to('cl:{rt.info.index}')")
        dev = idx if idx.dtype == np.int64 and idx.is_contiguous else idx.astype(np.int64)
        if _check_indices_enabled() and dev.size:
            bad = _any(logical_or(less(dev, -size), greater_equal(dev, size))).item()
            if bad:
                h = dev.get()
                first = h[(h < -size) | (h >= size)].flat[0]
                raise IndexError(f"{op}: index {first} is out of bounds for axis {axis} with "
                                 f"size {size}")
        return dev
    h = np.asarray(idx)
    if h.dtype.kind == "b":
        raise IndexError(f"{op}: boolean indices are handled by getitem, not take")
    if h.size and h.dtype.kind not in "iu":
        raise IndexError(f"{op}: indices must be integers, got {h.dtype}")
    h = h.astype(np.int64)
    if h.size and (h.min() < -size or h.max() >= size):
        first = h[(h < -size) | (h >= size)].flat[0]
        raise IndexError(f"{op}: index {first} is out of bounds for axis {axis} with size {size}")
    return asarray(h, device=rt)


def take(a, indices, axis=None):
    """NumPy's take: ``a.shape[:axis] + indices.shape + a.shape[axis+1:]``."""
    if axis is None:
        a, axis = a.reshape(-1), 0
    axis = normalize_axis(axis, a.ndim, "take")
    rt = a.rt
    A = a.shape[axis]
    idx = _index_array(indices, rt, A, axis, "take")
    inner = int(np.prod(a.shape[axis + 1:], dtype=np.int64))
    out_shape = a.shape[:axis] + idx.shape + a.shape[axis + 1:]
    out = ndarray(rt, out_shape, a.dtype)
    n = out.size
    if n == 0:
        return out
    if A == 0:
        raise IndexError(f"take: cannot take from an empty axis {axis} (shape {a.shape})")
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
    rt = out.rt
    same_device("scatter_add", (out, values))
    A = out.shape[axis]
    h = indices.get() if isinstance(indices, ndarray) else np.asarray(indices)
    h = h.astype(np.int64).reshape(-1)
    if h.size and (h.min() < -A or h.max() >= A):
        first = h[(h < -A) | (h >= A)][0]
        raise IndexError(f"scatter_add: index {first} is out of bounds for axis {axis} with "
                         f"size {A}")
    h = np.where(h < 0, h + A, h)
    J = h.size
    want = out.shape[:axis] + (J,) + out.shape[axis + 1:]
    if not isinstance(values, ndarray):
        from .api import full

        values = full(want, values, out.dtype, rt)
    values = values.reshape(out.shape[:axis] + tuple(np.shape(h)) + out.shape[axis + 1:]) \
        if values.shape != want and values.size == int(np.prod(want)) else values
    if values.shape != want:
        values = values.broadcast_to(want)
    if values.dtype != out.dtype:
        values = values.astype(out.dtype)
    if not values.is_contiguous:
        values = values.copy()
    if out.size == 0 or J == 0:
        return out
    from .api import asarray

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
        from .api import _assign

        _assign(out, target)
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


def concatenate(arrays, axis=0):
    from .api import _assign, result_type

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
    total = sum(x.shape[axis] for x in arrays)
    shape = first.shape[:axis] + (total,) + first.shape[axis + 1:]
    out = ndarray(rt, shape, dt)
    pos = 0
    for x in arrays:
        n = x.shape[axis]
        if n:
            sl = (slice(None),) * axis + (slice(pos, pos + n),)
            _assign(out[sl], x)
        pos += n
    return out


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
    from .. import split_bounds

    axis = normalize_axis(axis, a.ndim, "split")
    n = a.shape[axis]
    bounds = split_bounds(n, indices_or_sections, axis)
    edges = [0] + bounds + [n]
    pre = (slice(None),) * axis
    return [a[pre + (slice(s, e),)] for s, e in zip(edges[:-1], edges[1:])]


# ---- advanced indexing ------------------------------------------------------------------------
def _as_index(k, rt):
    if isinstance(k, ndarray):
        return k
    h = np.asarray(k)
    if h.dtype == object:
        raise IndexError(f"invalid index {k!r}")
    return h


def advanced_getitem(a, key, adv):
    """One boolean mask, or integer arrays on adjacent axes (NumPy's result layout)."""
    from .api import _basic_index

    rt = a.rt
    ks = [_as_index(key[i], rt) for i in adv]
    if len(adv) == 1 and ks[0].dtype == np.bool_:
        return _mask_getitem(a, key, adv[0], ks[0])
    if any(k.dtype == np.bool_ for k in ks):
        raise NotImplementedError("indexing with a boolean mask together with other arrays; "
                                  "index with the mask alone, or use nonzero(mask)")
    if adv != list(range(adv[0], adv[0] + len(adv))):
        raise NotImplementedError("integer-array indices on non-adjacent axes; index one axis "
                                  "at a time, or use take")
    if any(k is Ellipsis for k in key):
        raise NotImplementedError("integer-array indexing together with '...'; spell out the "
                                  "slices")
    # basic indexing first, keeping the advanced axes whole
    basic = tuple(slice(None) if i in adv else k for i, k in enumerate(key))
    pre = [k for k in key[:adv[0]]]
    # axis position of the first advanced index in the basic-indexed view
    pos = sum(1 if (k is None or isinstance(k, slice)) else 0 for k in pre)
    v = _basic_index(a, basic)
    if v.ndim < pos + len(adv):
        raise IndexError(f"too many indices for array of shape {a.shape}")
    if len(ks) == 1:
        return take(v, ks[0], axis=pos)
    dims = v.shape[pos:pos + len(adv)]
    # combine the index arrays into one flat index over the merged axes
    shp = broadcast_shapes(*(k.shape for k in ks), op="indexing")
    from .api import add, asarray, multiply

    flat = None
    for k, d in zip(ks, dims):
        if isinstance(k, ndarray):
            k = k.astype(np.int64)
            kk = add(k, multiply(k < 0, d))  # wrap negatives per axis
        else:
            h = np.asarray(k, dtype=np.int64)
            if h.size and (h.min() < -d or h.max() >= d):
                first = h[(h < -d) | (h >= d)].flat[0]
                raise IndexError(f"index {first} is out of bounds for size {d}")
            kk = asarray(np.where(h < 0, h + d, h), device=rt)
        flat = kk if flat is None else add(multiply(flat, d), kk)
    flat = flat.broadcast_to(shp).copy() if flat.shape != shp else flat
    merged_shape = v.shape[:pos] + (int(np.prod(dims)),) + v.shape[pos + len(adv):]
    vv = v.reshape(merged_shape)
    return take(vv, flat, axis=pos)


def _mask_getitem(a, key, i, mask):
    from .api import _basic_index

    if isinstance(mask, ndarray):
        mask = mask.get()
    def whole(k):
        return k is Ellipsis or (isinstance(k, slice) and k == slice(None))

    if i != 0 or not all(whole(k) for k in key[1:]):
        v = _basic_index(a, tuple(slice(None) if j == i else k for j, k in enumerate(key)))
        pos = sum(1 for k in key[:i] if k is None or isinstance(k, slice))
    else:
        v, pos = a, 0
    md = mask.ndim
    if v.shape[pos:pos + md] != mask.shape:
        raise IndexError(f"boolean index of shape {mask.shape} does not match the indexed "
                         f"dimensions {v.shape[pos:pos + md]} of an array of shape {a.shape}")
    merged = v.reshape(v.shape[:pos] + (-1,) + v.shape[pos + md:])
    return take(merged, np.flatnonzero(mask), axis=pos)


def advanced_setitem(a, key, adv, value):
    from .api import _assign, where

    if len(adv) == 1 and len(key) == 1:
        k = _as_index(key[0], a.rt)
        if k.dtype == np.bool_ and k.shape == a.shape:
            m = k if isinstance(k, ndarray) else np.asarray(k)
            from .api import asarray

            md = m if isinstance(m, ndarray) else asarray(m, device=a.rt)
            if isinstance(value, ndarray) and value.shape not in ((), (1,)):
                raise NotImplementedError(
                    "a[mask] = array: only a scalar (or a full-shape array through "
                    "where(mask, values, a)) can be assigned through a mask")
            _assign(a, where(md, value, a))
            return
    raise NotImplementedError(
        "assignment through integer arrays is not supported on OpenCL arrays; use "
        "scatter_add / add.at for accumulation, or where(mask, values, a)")
