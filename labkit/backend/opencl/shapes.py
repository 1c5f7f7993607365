"""Shapes and strides: axis normalisation, broadcasting, no-copy reshapes, the dimension
collapsing that every generated kernel relies on, and the NumPy shape functions.

Strides here are in elements. Nothing in this module touches a device.
"""

from __future__ import annotations

import numpy as np

from ...errors import ShapeError


def prod(shape) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def c_strides(shape) -> tuple:
    st, acc = [], 1
    for d in reversed(shape):
        st.append(acc)
        acc *= d
    return tuple(reversed(st))


def normalize_axis(axis, ndim: int, op: str) -> int:
    try:
        a = int(axis)
    except TypeError:
        raise TypeError(f"{op}: axis must be an integer, got {axis!r}") from None
    if (a not in (0, -1)) if ndim == 0 else not -ndim <= a < ndim:
        raise ShapeError(f"{op}: axis {axis} is out of bounds for an array of dimension {ndim}")
    return a % ndim if ndim else 0


def resolve_shape(shape, size: int, old) -> tuple:
    """``shape`` with its one ``-1`` filled in, checked to hold ``size`` elements."""
    shape = tuple(int(d) for d in shape)
    if shape.count(-1) > 1:
        raise ShapeError(f"reshape: can only infer one dimension (-1), got {shape}")
    if -1 in shape:
        known = prod(d for d in shape if d != -1)
        if known == 0 or size % known:
            raise ShapeError(f"reshape: cannot reshape an array of shape {old} (size {size}) "
                             f"into {shape}")
        shape = tuple(size // known if d == -1 else d for d in shape)
    if prod(shape) != size or any(d < 0 for d in shape):
        raise ShapeError(f"reshape: cannot reshape an array of shape {old} (size {size}) into "
                         f"shape {shape} (size {prod(shape)})")
    return shape


def nocopy_reshape_strides(old_shape, old_st, new_shape):
    """Strides that view ``old`` as ``new_shape`` without a copy, or None (NumPy's rule)."""
    if prod(old_shape) == 0:
        return c_strides(new_shape)
    old = [(d, s) for d, s in zip(old_shape, old_st) if d != 1]
    new_st = [0] * len(new_shape)
    oi, ni = 0, 0
    nnew = len(new_shape)
    # walk groups of old dims and new dims whose products agree
    while ni < nnew:
        if new_shape[ni] == 1:
            new_st[ni] = 0
            ni += 1
            continue
        if oi >= len(old):
            return None
        o0, n0 = oi, ni
        po, pn = old[oi][0], new_shape[ni]
        while po != pn:
            if po < pn:
                oi += 1
                if oi >= len(old):
                    return None
                po *= old[oi][0]
            else:
                ni += 1
                while ni < nnew and new_shape[ni] == 1:
                    ni += 1
                if ni >= nnew:
                    return None
                pn *= new_shape[ni]
        # the old dims o0..oi must be contiguous among themselves
        for k in range(o0, oi):
            if old[k][1] != old[k + 1][1] * old[k + 1][0]:
                return None
        st = old[oi][1]
        for k in range(ni, n0 - 1, -1):
            new_st[k] = st if new_shape[k] != 1 else 0
            st *= new_shape[k]
        oi += 1
        ni += 1
    return tuple(new_st)


def broadcast_shapes(*shapes, op: str = "broadcast") -> tuple:
    nd = max((len(s) for s in shapes), default=0)
    out = [1] * nd
    for s in shapes:
        for i, d in enumerate(s, nd - len(s)):
            o = out[i]
            if d != o:
                if o == 1:
                    out[i] = d
                elif d != 1:
                    raise ShapeError(
                        f"{op}: shapes {' and '.join(str(tuple(x)) for x in shapes)} do not "
                        f"broadcast (dimension {i - nd} is {o} in one and {d} in another); "
                        "reshape one of them, e.g. with expand_dims, so that each dimension "
                        "matches or is 1")
    return tuple(out)


def broadcast_strides(shape, st, to, op: str) -> tuple:
    if len(to) < len(shape):
        raise ShapeError(f"{op}: cannot broadcast an array of shape {shape} to {to}")
    pad = len(to) - len(shape)
    out = [0] * pad
    for d, s, t in zip(shape, st, to[pad:]):
        if d == t:
            out.append(s if d != 1 else 0)
        elif d == 1:
            out.append(0)
        else:
            raise ShapeError(f"{op}: cannot broadcast an array of shape {shape} to {to}")
    return tuple(out)


def collapse_dims(shape, strides_list):
    """The fewest dimensions that walk the same elements: size-1 dimensions dropped, then
    neighbours merged where *every* operand's strides (one tuple each in ``strides_list``)
    run contiguously across them. Returns ``(shape, [strides, ...])``, at least 1-D.

    Examples
    --------
    >>> collapse_dims((2, 1, 3, 4), [(12, 12, 4, 1), (0, 0, 0, 1)])
    ([6, 4], [[4, 1], [0, 1]])
    """
    dims = [i for i, d in enumerate(shape) if d != 1]
    cshape = [shape[i] for i in dims]
    cst = [[st[i] for i in dims] for st in strides_list]
    k = len(cshape) - 1
    while k > 0:
        if all(st[k - 1] == st[k] * cshape[k] for st in cst):
            cshape[k - 1] *= cshape[k]
            del cshape[k]
            for st in cst:
                st[k - 1] = st[k]
                del st[k]
        k -= 1
    if not cshape:
        return [1], [[0] for _ in cst]
    return cshape, cst


def split_bounds(n: int, indices_or_sections, axis: int, op: str = "split") -> list:
    """The split points of an axis of length ``n``: NumPy's ``split`` arguments checked."""
    if isinstance(indices_or_sections, (int, np.integer)) and not isinstance(
            indices_or_sections, (bool, np.bool_)):
        indices_or_sections = int(indices_or_sections)
        if indices_or_sections <= 0:
            raise ShapeError(f"{op}: the number of sections must be at least 1, got "
                             f"{indices_or_sections}")
        if n == 0:
            return [0] * (indices_or_sections - 1)  # NOTE: as many empty pieces
        if n % indices_or_sections:
            raise ShapeError(f"{op}: axis {axis} of size {n} does not divide into "
                             f"{indices_or_sections} equal sections")
        step = n // indices_or_sections
        return list(range(step, n, step))
    return list(indices_or_sections)


# ---- NumPy's shape functions (each is the method of the same name) ---------------------------
def reshape(a, shape):
    return a.reshape(shape)


def transpose(a, axes=None):
    return a.transpose(axes)


def swapaxes(a, x, y):
    return a.swapaxes(x, y)


def moveaxis(a, source, destination):
    src = normalize_axis(source, a.ndim, "moveaxis")
    dst = normalize_axis(destination, a.ndim, "moveaxis")
    order = [i for i in range(a.ndim) if i != src]
    order.insert(dst, src)
    return a.transpose(order)


def expand_dims(a, axis):
    return a.expand_dims(axis)


def squeeze(a, axis=None):
    return a.squeeze(axis)


def broadcast_to(a, shape):
    return a.broadcast_to(shape)


def broadcast_arrays(*arrays):
    shape = broadcast_shapes(*(a.shape for a in arrays), op="broadcast_arrays")
    return [a.broadcast_to(shape) for a in arrays]


def ravel(a):
    return a.ravel()


def ndim(a):
    return a.ndim


def shape(a):
    return a.shape


def size(a):
    return a.size
