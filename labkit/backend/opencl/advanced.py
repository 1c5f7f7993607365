"""``a[key]`` and ``a[key] = value``: basic indexing is a view (``indexing.basic_index``);
advanced indexing follows NumPy's rules. Integer arrays, boolean masks (a mask of k
dimensions is its k arrays of nonzero positions) and, once one of those is in the key, integers
and bool scalars are all advanced indices: they broadcast together, and the broadcast axes take
the place of the indexed axes where the advanced indices are adjacent in the key, else they
come first in the result (``a[:, [0, 1], :, 0]`` of a 4-d array is ``(2, a.shape[0],
a.shape[2])``). A bool scalar alone is advanced too (``a[0, :, True]`` is ``(1, ...)``).

The indexed axes are merged into one and gathered by one ``take`` with a flat index; an
assignment gathers its values onto that merged axis the same way and keeps them where an index
points (the last value wins where indices repeat, as in NumPy).
"""

from __future__ import annotations

import builtins

import numpy as np

from ...errors import IndexingError, ShapeError
from .core import add as _add
from .core import (
    asarray,
    assign,
    astype,
    drop_leading_ones,
    less,
    multiply,
    where,
)
from .indexing import _check_host, _take, basic_index, index_array
from .ndarray import check_writeable, ndarray
from .promotion import check_int_range
from .shapes import broadcast_shapes, nocopy_reshape_strides


def _is_array(k) -> bool:
    return isinstance(k, (ndarray, np.ndarray, list))


def _is_bool(k) -> bool:
    return isinstance(k, (bool, np.bool_))


def _scalars(key: tuple) -> tuple:
    """0-d NumPy arrays as the scalars they hold (NumPy: an integer or a bool index), and a
    0-d device bool array as its bool (read back: ``a[True]`` adds an axis, ``a[False]`` one
    of size 0)."""
    return tuple(k[()] if isinstance(k, np.ndarray) and k.ndim == 0 else
                 bool(k.get()[()]) if isinstance(k, ndarray) and k.ndim == 0
                 and k.dtype == np.bool_ else k for k in key)


def _host_value(value, dtype):
    """A host value in ``dtype``, as NumPy's setitem casts it: an array cast unsafely (floats
    truncated), Python values converted by NumPy into the dtype, so that an integer out of its
    range is NumPy 2's OverflowError (``a[[0]] = [300]`` in int8 was 44)."""
    check_int_range(value, dtype, "setitem")
    with np.errstate(all="ignore"):
        if isinstance(value, (np.ndarray, np.generic)):
            return np.asarray(value).astype(dtype)
        try:
            return np.asarray(value, dtype=dtype)
        except OverflowError as e:
            raise OverflowError(f"setitem: {e}") from None


def _advanced(key: tuple) -> bool:
    return builtins.any(_is_array(k) or _is_bool(k) for k in key)


def getitem(a: ndarray, key):
    key = _scalars(key if isinstance(key, tuple) else (key,))
    if not _advanced(key):
        return basic_index(a, key)
    v, axes, flat, shp, front = _parse(a, key, "getitem")
    w, pos = _leading(v, axes, front)
    out = _take(_merged(w, pos, len(axes))[0], flat, pos)
    if front and pos:
        nb = len(shp)
        out = out.transpose(tuple(range(pos, pos + nb)) + tuple(range(pos))
                            + tuple(range(pos + nb, out.ndim)))
    return out


def setitem(a: ndarray, key, value) -> None:
    check_writeable(a, "setitem")
    key = _scalars(key if isinstance(key, tuple) else (key,))
    if not _advanced(key):
        assign(basic_index(a, key), value)
        return
    # NOTE: np.asarray(value, dtype): a Python int out of the dtype's range is NumPy 2's
    # OverflowError (astype wrapped 300 to 44 in int8)
    value = astype(value, a.dtype) if isinstance(value, ndarray) else \
        asarray(_host_value(value, a.dtype), device=a.rt)
    if len(key) == 1 and _full_mask(a, key[0]) and value.size == 1:
        # NOTE: one mask of the array's shape and one value: where() on the device, without
        # reading the mask back
        m = key[0] if isinstance(key[0], ndarray) else asarray(key[0], device=a.rt)
        assign(a, where(m, value.reshape(()), a))
        return
    v, axes, flat, shp, front = _parse(a, key, "setitem")
    w, pos = _leading(v, axes, front)
    n = len(axes)
    rest = w.shape[pos + n:]
    # the values in the layout of the result a getitem would give, then in w's
    want = (shp + w.shape[:pos] + rest) if front else (w.shape[:pos] + shp + rest)
    value = drop_leading_ones(value, len(want))
    try:
        value = value.broadcast_to(want) if value.shape != want else value
    except ShapeError:
        raise ShapeError(f"setitem: shape mismatch: value array of shape {value.shape} could "
                         f"not be broadcast to indexing result of shape {want}") from None
    nb = len(shp)
    if front and pos:
        value = value.transpose(tuple(range(nb, nb + pos)) + tuple(range(nb))
                                + tuple(range(nb + pos, value.ndim)))
    count = int(np.prod(shp, dtype=np.int64))
    value = value.reshape(w.shape[:pos] + (count,) + rest)
    merged, view = _merged(w, pos, n)
    size = merged.shape[pos]
    if merged.size == 0 or count == 0:
        return
    # NOTE: for each position of the merged axis, the last value that an index sends there
    h = flat.get() if isinstance(flat, ndarray) else flat
    h = np.where(h < 0, h + size, h).reshape(-1)
    if count <= FEW and size > 4 * count:
        # NOTE: a few indices into a long axis: each position written through a view (the
        # whole-axis merge below took 2.8 s and 1.7 GB for one element of a 2**26 array)
        where_, last = np.unique(h[::-1], return_index=True)
        pre = (slice(None),) * pos
        if value.data is merged.data:
            value = value.copy()  # NOTE: a view of the array written: read before writing
        for p, j in zip(where_.tolist(), (count - 1 - last).tolist()):
            assign(merged[pre + (p,)], value[pre + (j,)])
    else:
        _merge(merged, value, h, size, count, pos, rest, a.rt)
    if not view:
        assign(w, merged.reshape(w.shape))


#: at most this many indices are written one view at a time (each a launch)
FEW = 16


def _merge(merged, value, h, size, count, pos, rest, rt) -> None:
    """``merged`` with the values the flat indices ``h`` send to its axis ``pos`` (the last
    one where several go to one place), in one pass over the whole axis."""
    src = np.zeros(size, np.int64)
    hit = np.zeros(size, np.bool_)
    src[h] = np.arange(count, dtype=np.int64)
    hit[h] = True
    picked = _take(value if value.is_contiguous else value.copy(),
                   asarray(src, device=rt), pos)
    hit = asarray(hit.reshape((size,) + (1,) * len(rest)), device=rt)
    assign(merged, where(hit, picked, merged))


def _full_mask(a, k) -> bool:
    if isinstance(k, list):
        k = np.asarray(k)
    return isinstance(k, (ndarray, np.ndarray)) and k.dtype == np.bool_ and k.shape == a.shape


# ---- the key --------------------------------------------------------------------------------
def _as_index(k):
    if isinstance(k, ndarray):
        return k
    h = np.asarray(k)
    if h.dtype == object:
        raise IndexingError(f"invalid index {k!r}")
    return h


def _width(k) -> int:
    """How many of the array's axes ``k`` indexes."""
    if k is None or k is Ellipsis or _is_bool(k):
        return 0
    if isinstance(k, (ndarray, np.ndarray)) and k.dtype == np.bool_:
        return k.ndim
    return 1


def _parse(a, key, op):
    """``(v, axes, flat, shape, front)``: ``v`` is ``a`` under the key's integers, slices,
    None and bool scalars (a new axis of size 1 or 0), the axes the index arrays index kept
    whole; ``axes`` those axes of ``v`` (ascending); ``flat`` one int64 index over them merged
    (negatives wrapped), of the broadcast ``shape`` of the index arrays; ``front``: the
    advanced indices are not adjacent in the key, so the broadcast axes lead the result."""
    if builtins.sum(1 for k in key if k is Ellipsis) > 1:
        raise IndexingError("an index can only have a single ellipsis ('...')")
    ks = [_as_index(k) if _is_array(k) else k for k in key]
    indexed = builtins.sum(_width(k) for k in ks)
    if indexed > a.ndim:
        raise IndexingError(f"too many indices for array: array is {a.ndim}-dimensional, but "
                            f"{indexed} were indexed")
    adv = [i for i, k in enumerate(ks) if not (k is None or k is Ellipsis
                                               or isinstance(k, slice))]
    front = adv != list(range(adv[0], adv[-1] + 1))
    basic, found = [], []  # found: (axis of v, index, axis of a or None)
    vax = aax = 0
    for k in ks:
        if k is Ellipsis:
            basic += [slice(None)] * (a.ndim - indexed)
            vax += a.ndim - indexed
            aax += a.ndim - indexed
        elif k is None:
            basic.append(None)
            vax += 1
        elif _is_bool(k):
            basic.append(k)
            found.append((vax, np.zeros(1 if k else 0, np.int64), None))
            vax += 1
        elif isinstance(k, (ndarray, np.ndarray)) and k.dtype == np.bool_:
            dims = a.shape[aax:aax + k.ndim]
            if k.shape != dims:
                raise IndexingError(f"{op}: boolean index of shape {k.shape} does not match "
                                    f"the indexed dimensions {dims} of an array of shape "
                                    f"{a.shape}")
            for j, nz in enumerate(np.nonzero(k.get() if isinstance(k, ndarray) else k)):
                found.append((vax + j, nz.astype(np.int64), None))
            basic += [slice(None)] * k.ndim
            vax += k.ndim
            aax += k.ndim
        elif isinstance(k, (ndarray, np.ndarray)):
            found.append((vax, k, aax))
            basic.append(slice(None))
            vax += 1
            aax += 1
        else:  # a slice, or an integer (basic_index checks it)
            basic.append(k)
            vax += isinstance(k, slice)
            aax += 1
    v = basic_index(a, tuple(basic))
    axes = [ax for ax, _, _ in found]
    try:
        shp = broadcast_shapes(*(k.shape for _, k, _ in found), op=op)
    except ShapeError:
        raise IndexingError(
            f"{op}: shape mismatch: indexing arrays could not be broadcast together with "
            f"shapes {' '.join(str(k.shape) for _, k, _ in found)}") from None
    # NOTE: NumPy checks no index when they select nothing (a[[5], False] is empty)
    idx = [_checked(k, a.rt, v.shape[ax], aax if 0 not in shp else None, op)
           for ax, k, aax in found]
    return v, axes, _flat(idx, [v.shape[ax] for ax in axes], shp, a.rt), shp, front


def _checked(k, rt, size, axis, op):
    """Index ``k`` checked against its axis: an int64 host array if it was one (or came from a
    mask), else a device array (``index_array``). ``axis`` None: not checked."""
    if isinstance(k, np.ndarray):
        if k.size and k.dtype.kind not in "iu":
            raise IndexingError(f"{op}: indices must be integers, got {k.dtype}")
        k = k.astype(np.int64)
        if axis is not None:
            _check_host(k, size, axis, op)
        return k
    if axis is None:
        if k.dtype.kind not in "iu":
            raise IndexingError(f"{op}: indices must be integers, got {k.dtype}")
        return k
    return index_array(k, rt, size, axis, op)


def _flat(idx, dims, shp, rt):
    """One index over the axes ``dims`` merged, of shape ``shp``: computed on the host when
    every index is there (one upload), else on the device."""
    if len(idx) == 1:
        k = idx[0]
        return asarray(k, device=rt) if isinstance(k, np.ndarray) else k
    if builtins.all(isinstance(k, np.ndarray) for k in idx):
        flat = np.zeros((), np.int64)
        for k, d in zip(idx, dims):
            flat = flat * d + np.where(k < 0, k + d, k)
        return asarray(np.broadcast_to(flat, shp), device=rt)
    flat = None
    for k, d in zip(idx, dims):
        k = asarray(k, device=rt) if isinstance(k, np.ndarray) else k
        k = _add(k, multiply(less(k, 0), d))
        flat = k if flat is None else _add(multiply(flat, d), k)
    return flat.broadcast_to(shp).copy() if flat.shape != shp else flat


# ---- layout -----------------------------------------------------------------------------------
def _leading(v, axes, front):
    """``v`` with the indexed ``axes`` next to each other (a view), and where they start:
    moved to the front where they are apart in ``v``."""
    if axes == list(range(axes[0], axes[0] + len(axes))):
        return v, axes[0]
    return v.transpose(tuple(axes) + tuple(i for i in range(v.ndim) if i not in axes)), 0


def _merged(w, pos, n):
    """``(m, view)``: ``w`` with its axes ``pos .. pos + n`` merged into one; ``view``: ``m``
    shares ``w``'s memory (else it is a copy)."""
    shape = w.shape[:pos] + (int(np.prod(w.shape[pos:pos + n], dtype=np.int64)),) + \
        w.shape[pos + n:]
    if shape == w.shape:
        return w, True
    st = nocopy_reshape_strides(w.shape, w._st, shape)
    if st is None:
        return w.copy().reshape(shape), False
    return w._view(shape, st, w.offset), True
