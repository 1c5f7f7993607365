"""The NumPy-like namespace over labkit's OpenCL ndarray (re-exported by ``labkit.backend.opencl``).

One function body can serve both devices: ``xp = labkit.backend.get_array_module(a)`` gives
``numpy`` for NumPy arrays and this namespace for OpenCL arrays.
"""

from __future__ import annotations

import builtins
import math
import operator
import sys

import numpy as np

from ...errors import DeviceError, ShapeError
from . import ndarray as _nd
from .context import Runtime, runtime
from .elementwise import launch
from .ndarray import (
    CTYPES,
    broadcast_shapes,
    broadcast_strides,
    check_dtype,
    ndarray,
    normalize_axis,
    same_device,
)

# dtype aliases, so that `xp.float32` works on both namespaces
float32, float64 = np.float32, np.float64
int8, int16, int32, int64 = np.int8, np.int16, np.int32, np.int64
uint8, uint32, bool_ = np.uint8, np.uint32, np.bool_
newaxis = None
pi, e, inf, nan = math.pi, math.e, math.inf, math.nan
dtype = np.dtype


def _runtime(device) -> Runtime:
    """A Runtime from None (the default OpenCL device), 'cl', 'cl:N', a Device or a Runtime."""
    if isinstance(device, Runtime):
        return device
    from ..device import Device, default_device
    from ..device import device as _device

    if device is None:
        d = default_device()
        return runtime(d.index if d.kind == "cl" else 0)
    d = device if isinstance(device, Device) else _device(device)
    if d.kind != "cl":
        raise DeviceError(f"labkit.backend.opencl: {d} is not an OpenCL device; use 'cl' or "
                          "'cl:N' (NumPy serves the cpu device)")
    return runtime(d.index)


# ---- creation ---------------------------------------------------------------------------------
def empty(shape, dtype=np.float32, device=None) -> ndarray:
    rt = _runtime(device)
    shape = (int(shape),) if np.ndim(shape) == 0 else tuple(int(d) for d in shape)
    if builtins.any(d < 0 for d in shape):
        raise ShapeError(f"empty: negative dimensions are not allowed, got shape {shape}")
    return ndarray(rt, shape, check_dtype(dtype, rt, "empty"))


def full(shape, fill_value, dtype=None, device=None) -> ndarray:
    if dtype is None:
        dtype = np.result_type(fill_value)
    out = empty(shape, dtype, device)
    return launch("fill", "v0", out, [fill_value], (CTYPES[out.dtype],))


def zeros(shape, dtype=np.float32, device=None) -> ndarray:
    return full(shape, 0, dtype, device)


def ones(shape, dtype=np.float32, device=None) -> ndarray:
    return full(shape, 1, dtype, device)


def empty_like(a, dtype=None) -> ndarray:
    return empty(a.shape, a.dtype if dtype is None else dtype, a.rt)


def zeros_like(a, dtype=None) -> ndarray:
    return zeros(a.shape, a.dtype if dtype is None else dtype, a.rt)


def ones_like(a, dtype=None) -> ndarray:
    return ones(a.shape, a.dtype if dtype is None else dtype, a.rt)


def full_like(a, fill_value, dtype=None) -> ndarray:
    return full(a.shape, fill_value, a.dtype if dtype is None else dtype, a.rt)


def asarray(obj, dtype=None, device=None) -> ndarray:
    """An OpenCL array from a NumPy array, a list, a scalar or another OpenCL array."""
    import pyopencl as cl

    if isinstance(obj, ndarray):
        rt = obj.rt if device is None else _runtime(device)
        if rt is not obj.rt:
            obj = obj.get()
        else:
            return obj if dtype is None or np.dtype(dtype) == obj.dtype else obj.astype(dtype)
    rt = _runtime(device)
    host = np.asarray(obj, dtype=dtype)
    check_dtype(host.dtype, rt, "asarray")
    if not host.flags.c_contiguous:
        host = host.copy(order="C")  # NOTE: np.ascontiguousarray would make 0-d arrays 1-d
    out = ndarray(rt, host.shape, host.dtype)
    if host.size:
        cl.enqueue_copy(rt.queue, out.data, host, is_blocking=True)
    return out


array = asarray


def ascontiguousarray(a) -> ndarray:
    return a if a.is_contiguous else a.copy()


def arange(start, stop=None, step=1, dtype=None, device=None) -> ndarray:
    # NOTE: computed by NumPy and uploaded, so values match NumPy's bit for bit.
    return asarray(np.arange(start, stop, step, dtype=dtype), device=device)


def linspace(start, stop, num=50, dtype=np.float32, device=None) -> ndarray:
    return asarray(np.linspace(start, stop, num, dtype=dtype), device=device)


def eye(n, m=None, dtype=np.float32, device=None) -> ndarray:
    return asarray(np.eye(n, m, dtype=dtype), device=device)


def asnumpy(a):
    return a.get() if isinstance(a, ndarray) else np.asarray(a)


# ---- elementwise ops --------------------------------------------------------------------------
def _is_float(dt) -> bool:
    return dt.kind == "f"


def _operand(x):
    """Arrays stay; NumPy 0-d arrays and scalars become scalars (weakly typed if Python's)."""
    if isinstance(x, ndarray):
        return x
    if isinstance(x, np.ndarray):
        if x.ndim == 0:
            return x[()]
        return x  # same_device() reports it
    if isinstance(x, (bool, int, float, np.generic)):
        return x
    if isinstance(x, (list, tuple)):
        raise TypeError("a list or tuple cannot be an operand of an OpenCL array op; convert "
                        "it with labkit.backend.opencl.asarray(...)")
    raise TypeError(f"unsupported operand of type {type(x).__name__}")


def _result_type(xs):
    return np.result_type(*(x.dtype if isinstance(x, ndarray) else x for x in xs))


def _float_of(dt):
    # NumPy turns integers into float64 for transcendental ops (bools and small ints into
    # float16, which OpenCL lacks; labkit uses float32 there).
    if dt.kind == "f":
        return dt
    return np.dtype(np.float64) if dt.itemsize >= 4 and dt.kind != "b" else np.dtype(np.float32)


def _prepare_out(op, out, shape, dt, rt):
    if out is None:
        return ndarray(rt, shape, check_dtype(dt, rt, op))
    if not isinstance(out, ndarray):
        raise TypeError(f"{op}: out must be an OpenCL ndarray, got {type(out).__name__}")
    if out.shape != shape:
        raise ShapeError(f"{op}: out has shape {out.shape} but the result has shape {shape}")
    if out.rt is not rt:
        raise _nd.DeviceMismatchError(f"{op}: out is on cl:{out.rt.info.index}, the inputs on "
                                      f"cl:{rt.info.index}")
    return out


def _elementwise(op, exprs, xs, kind="same", out=None):
    """``exprs``: {"f": float expression, "i": integer/bool expression} over v0, v1, ...

    ``kind``: "same" (result in the promoted dtype), "float" (ints promoted to float),
    "bool" (comparisons, compute in the promoted dtype), "bitwise" (integers only).
    """
    xs = [_operand(x) for x in xs]
    rt = same_device(op, xs)
    cdt = _result_type(xs)
    if kind == "float":
        cdt = _float_of(cdt)
    elif kind == "divide" and cdt.kind != "f":
        cdt = np.dtype(np.float64)  # NumPy: true division of integers or bools is float64
    elif kind == "bitwise" and cdt.kind not in "iub":
        raise _nd.DTypeError(f"{op}: needs integer or bool arrays, got {cdt}")
    check_dtype(cdt, rt, op)
    odt = np.dtype(np.bool_) if kind == "bool" else cdt
    expr = exprs["f"] if _is_float(cdt) else exprs.get("i", exprs["f"])
    if expr is None:
        raise _nd.DTypeError(f"{op}: not defined for {cdt} arrays; use a float dtype")
    shape = broadcast_shapes(*(x.shape for x in xs if isinstance(x, ndarray)), op=op)
    o = _prepare_out(op, out, shape, odt, rt)
    ct = CTYPES[cdt]
    return launch(op, expr, o, xs, (ct,) * len(xs))


def _binary(name, f_expr, i_expr=None, kind="same"):
    exprs = {"f": f_expr, "i": i_expr if i_expr is not None else f_expr}

    def op(a, b, out=None):
        return _elementwise(name, exprs, (a, b), kind, out)

    op.__name__ = name
    op.__doc__ = f"Elementwise ``{name}`` with NumPy broadcasting and dtype promotion."
    return op


def _unary(name, f_expr, i_expr=None, kind="same"):
    exprs = {"f": f_expr, "i": i_expr if i_expr is not None else f_expr}

    def op(a, out=None):
        return _elementwise(name, exprs, (a,), kind, out)

    op.__name__ = name
    op.__doc__ = f"Elementwise ``{name}``."
    return op


add = _binary("add", "(v0 + v1)")
subtract = _binary("subtract", "(v0 - v1)")
multiply = _binary("multiply", "(v0 * v1)")
true_divide = _binary("true_divide", "(v0 / v1)", kind="divide")
divide = true_divide
floor_divide = _binary("floor_divide", "floor(v0 / v1)", "lk_floordiv(v0, v1)")
mod = _binary("mod", "(v0 - floor(v0 / v1) * v1)", "lk_mod(v0, v1)")
remainder = mod
power = _binary("power", "pow(v0, v1)", "lk_powi(v0, v1)")
maximum = _binary("maximum", "LK_FMAX(v0, v1)", "LK_IMAX(v0, v1)")
minimum = _binary("minimum", "LK_FMIN(v0, v1)", "LK_IMIN(v0, v1)")
arctan2 = _binary("arctan2", "atan2(v0, v1)", kind="float")
equal = _binary("equal", "(v0 == v1)", kind="bool")
not_equal = _binary("not_equal", "(v0 != v1)", kind="bool")
less = _binary("less", "(v0 < v1)", kind="bool")
less_equal = _binary("less_equal", "(v0 <= v1)", kind="bool")
greater = _binary("greater", "(v0 > v1)", kind="bool")
greater_equal = _binary("greater_equal", "(v0 >= v1)", kind="bool")
logical_and = _binary("logical_and", "((v0 != 0) && (v1 != 0))", kind="bool")
logical_or = _binary("logical_or", "((v0 != 0) || (v1 != 0))", kind="bool")
logical_xor = _binary("logical_xor", "((v0 != 0) != (v1 != 0))", kind="bool")
bitwise_and = _binary("bitwise_and", None, "(v0 & v1)", kind="bitwise")
bitwise_or = _binary("bitwise_or", None, "(v0 | v1)", kind="bitwise")
bitwise_xor = _binary("bitwise_xor", None, "(v0 ^ v1)", kind="bitwise")

negative = _unary("negative", "(-v0)")
absolute = _unary("absolute", "fabs(v0)", "((v0) < 0 ? -(v0) : (v0))")
abs = absolute  # noqa: A001 - NumPy's name
sign = _unary("sign", "(isnan(v0) ? v0 : (((v0) > 0) - ((v0) < 0)))", "(((v0) > 0) - ((v0) < 0))")
square = _unary("square", "(v0 * v0)")
reciprocal = _unary("reciprocal", "(1 / v0)")
exp = _unary("exp", "exp(v0)", kind="float")
expm1 = _unary("expm1", "expm1(v0)", kind="float")
log = _unary("log", "log(v0)", kind="float")
log1p = _unary("log1p", "log1p(v0)", kind="float")
log2 = _unary("log2", "log2(v0)", kind="float")
sqrt = _unary("sqrt", "sqrt(v0)", kind="float")
tanh = _unary("tanh", "tanh(v0)", kind="float")
sin = _unary("sin", "sin(v0)", kind="float")
cos = _unary("cos", "cos(v0)", kind="float")
tan = _unary("tan", "tan(v0)", kind="float")
arctan = _unary("arctan", "atan(v0)", kind="float")
erf = _unary("erf", "erf(v0)", kind="float")
floor = _unary("floor", "floor(v0)", "v0")
ceil = _unary("ceil", "ceil(v0)", "v0")
trunc = _unary("trunc", "trunc(v0)", "v0")
rint = _unary("rint", "rint(v0)", "v0")
isnan = _unary("isnan", "isnan(v0)", "0", kind="bool")
isinf = _unary("isinf", "isinf(v0)", "0", kind="bool")
isfinite = _unary("isfinite", "isfinite(v0)", "1", kind="bool")
logical_not = _unary("logical_not", "(v0 == 0)", kind="bool")


def invert(a, out=None):
    if isinstance(a, ndarray) and a.dtype == np.bool_:
        return logical_not(a, out=out)
    return _elementwise("invert", {"f": None, "i": "(~v0)"}, (a,), "bitwise", out)


def sigmoid(a, out=None):
    """Numerically stable logistic function (not in NumPy; provided for both namespaces)."""
    expr = "(v0 >= 0 ? 1 / (1 + exp(-v0)) : exp(v0) / (1 + exp(v0)))"
    return _elementwise("sigmoid", {"f": expr}, (a,), "float", out)


def where(cond, a=None, b=None):
    """``where(cond, a, b)`` elementwise; ``where(cond)`` is ``nonzero(cond)``."""
    if a is None and b is None:
        return nonzero(cond)
    xs = [_operand(x) for x in (cond, a, b)]
    rt = same_device("where", xs)
    if not isinstance(xs[0], ndarray):
        xs[0] = asarray(bool(xs[0]), device=rt)
    dt = _result_type(xs[1:])
    check_dtype(dt, rt, "where")
    shape = broadcast_shapes(*(x.shape for x in xs if isinstance(x, ndarray)), op="where")
    out = ndarray(rt, shape, dt)
    ct = CTYPES[dt]
    cct = CTYPES[xs[0].dtype]
    return launch("where", "((v0 != 0) ? v1 : v2)", out, xs, (cct, ct, ct))


def clip(a, a_min=None, a_max=None, out=None):
    if a_min is None and a_max is None:
        raise ValueError("clip: give a_min, a_max or both")
    r = a
    if a_min is not None:
        r = maximum(r, a_min, out=out if a_max is None else None)
    if a_max is not None:
        r = minimum(r, a_max, out=out)
    return r


def copy(a) -> ndarray:
    out = ndarray(a.rt, a.shape, a.dtype)
    ct = CTYPES[a.dtype]
    return launch("copy", "v0", out, [a], (ct,))


def astype(a, dt) -> ndarray:
    dt = check_dtype(dt, a.rt, "astype")
    out = ndarray(a.rt, a.shape, dt)
    if dt == np.bool_ and a.dtype != np.bool_:
        return launch("astype_bool", "(v0 != 0)", out, [a], (CTYPES[a.dtype],))
    return launch("astype", "v0", out, [a], (CTYPES[dt],))


def _assign(view: ndarray, value) -> None:
    value = _operand(value)
    same_device("setitem", (view, value))
    if isinstance(value, ndarray):
        broadcast_strides(value.shape, value._st, view.shape, "setitem")
        if _overlaps(view, value):
            value = value.copy()
    launch("assign", "v0", view, [value], (CTYPES[view.dtype],))


def _overlaps(a: ndarray, b: ndarray) -> bool:
    return a.data is b.data or (a.base is not None and a.base is b.base)


def result_type(*xs):
    return np.result_type(*(x.dtype if isinstance(x, ndarray) else x for x in xs))


# ---- shape functions ----------------------------------------------------------------------------
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


# ---- indexing ---------------------------------------------------------------------------------
def _is_advanced(k) -> bool:
    return isinstance(k, (ndarray, np.ndarray, list)) and not (
        isinstance(k, np.ndarray) and k.ndim == 0)


def _basic_index(a: ndarray, key: tuple):
    """Apply ints, slices, None and Ellipsis; return (view, positions of kept dims)."""
    nindexed = builtins.sum(1 for k in key if k is not None and k is not Ellipsis)
    if builtins.sum(1 for k in key if k is Ellipsis) > 1:
        raise IndexError("an index can only have a single ellipsis ('...')")
    if nindexed > a.ndim:
        raise IndexError(f"too many indices for array: array is {a.ndim}-dimensional, but "
                         f"{nindexed} were indexed")
    shape, st, off = [], [], a.offset
    dim = 0
    for k in key:
        if k is Ellipsis:
            for _ in range(a.ndim - nindexed):
                shape.append(a.shape[dim])
                st.append(a._st[dim])
                dim += 1
        elif k is None:
            shape.append(1)
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
                raise IndexError(f"only integers, slices (`:`), ellipsis (`...`), None and integer "
                                 f"or boolean arrays are valid indices, got {k!r}") from None
            d = a.shape[dim]
            if not -d <= i < d:
                raise IndexError(f"index {i} is out of bounds for axis {dim} with size {d}")
            off += (i % d) * a._st[dim]
            dim += 1
    for k in range(dim, a.ndim):
        shape.append(a.shape[k])
        st.append(a._st[k])
    return a._view(tuple(shape), tuple(st), off)


def getitem(a: ndarray, key):
    if not isinstance(key, tuple):
        key = (key,)
    adv = [i for i, k in enumerate(key) if _is_advanced(k)]
    if not adv:
        return _basic_index(a, key)
    from . import indexing

    return indexing.advanced_getitem(a, key, adv)


def setitem(a: ndarray, key, value) -> None:
    if not isinstance(key, tuple):
        key = (key,)
    adv = [i for i, k in enumerate(key) if _is_advanced(k)]
    if not adv:
        _assign(_basic_index(a, key), value)
        return
    from . import indexing

    indexing.advanced_setitem(a, key, adv, value)


def nonzero(a):
    """Indices of the non-zero elements (reads the array back to the host)."""
    return tuple(asarray(i, device=a.rt) for i in np.nonzero(a.get()))


# ---- families in their own modules ------------------------------------------------------------
# NOTE: plain assignments, not `from x import y`: a linter's unused-import fix cannot drop them.
from . import gemm as _gemm  # noqa: E402
from . import indexing as _indexing  # noqa: E402
from . import reduce as _reduce  # noqa: E402

matmul, dot = _gemm.matmul, _gemm.dot
take, scatter_add, concatenate, stack, split = (
    _indexing.take, _indexing.scatter_add, _indexing.concatenate, _indexing.stack, _indexing.split)
sum, prod, mean, var, std = _reduce.sum, _reduce.prod, _reduce.mean, _reduce.var, _reduce.std
max, min, amax, amin = _reduce.max, _reduce.min, _reduce.amax, _reduce.amin
argmax, argmin, any, all = _reduce.argmax, _reduce.argmin, _reduce.any, _reduce.all
logsumexp = _reduce.logsumexp
# `xp.add.at(out, idx, values)` is a deterministic scatter-add, as in NumPy
add = _indexing.with_at(add)

_nd._api = sys.modules[__name__]
__all__ = [n for n in dir() if not n.startswith("_")]
