"""The elementwise core of labkit's OpenCL namespace: array creation, NumPy's elementwise
operations with broadcasting and dtype promotion, ``where``, ``copy``, ``astype`` and
assignment. The reductions, GEMM and indexing modules build on this one (and import it at the
top); ``api.py`` re-exports the public names.
"""

from __future__ import annotations

import builtins
from functools import partial

import numpy as np

from ... import config
from ...errors import DeviceMismatchError, DTypeError, ShapeError
from .context import Runtime, cl_index, runtime
from .elementwise import launch, maker, plan_of, run
from .ndarray import CTYPES, check_dtype, check_writeable, ndarray, same_device
from .promotion import (
    BOOL_INT8,
    NO_BOOL_NEGATIVE,
    NO_BOOL_SIGN,
    NO_BOOL_SUBTRACT,
    _cast_scalar,
    bool_rule,
    exact_compare,
    finite_for_int,
    float_of,
    needs_exact,
)
from .shapes import broadcast_shapes, broadcast_strides
from .transpose import copy_transposed


def resolve(device) -> Runtime:
    """The Runtime ``device`` names: None (the default device, ``LABKIT_DEVICE``, when it is
    an OpenCL one, else cl:0), ``"cl"``, ``"cl:N"``, a Device (by its name) or a Runtime."""
    if isinstance(device, Runtime):
        return device
    if device is None:
        spec = config.get("LABKIT_DEVICE")
        return runtime(0 if spec == "cpu" else cl_index(spec))
    return runtime(cl_index(str(device)))


# ---- creation ---------------------------------------------------------------------------------
def empty(shape, dtype=np.float32, device=None) -> ndarray:
    rt = resolve(device)
    shape = (int(shape),) if np.ndim(shape) == 0 else tuple(int(d) for d in shape)
    if builtins.any(d < 0 for d in shape):
        raise ShapeError(f"empty: negative dimensions are not allowed, got shape {shape}")
    return ndarray(rt, shape, check_dtype(dtype, rt, "empty"))


def full(shape, fill_value, dtype=None, device=None) -> ndarray:
    if dtype is None:
        dtype = np.asarray(fill_value).dtype  # NOTE: NumPy's full: 7 is int64, True bool
    out = empty(shape, dtype, device)
    # NOTE: cast to the dtype first, as NumPy's full does (2.7 -> 2 in int32, 2 -> True)
    return launch("fill", "v0", out, [_cast_scalar(fill_value, out.dtype)], (CTYPES[out.dtype],))


def zeros(shape, dtype=np.float32, device=None) -> ndarray:
    return full(shape, 0, np.float64 if dtype is None else dtype, device)  # NOTE: NumPy's None


def ones(shape, dtype=np.float32, device=None) -> ndarray:
    return full(shape, 1, np.float64 if dtype is None else dtype, device)


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
    if isinstance(obj, ndarray):
        rt = obj.rt if device is None else resolve(device)
        if rt is not obj.rt:
            obj = obj.get()
        else:
            return obj if dtype is None or np.dtype(dtype) == obj.dtype else astype(obj, dtype)
    rt = resolve(device)
    host = np.asarray(obj, dtype=dtype)
    check_dtype(host.dtype, rt, "asarray")
    out = ndarray(rt, host.shape, host.dtype)
    if host.size:
        # NOTE: a private copy, uploaded without waiting for the queue: a blocking copy
        # would wait for every kernel queued before it (a sync per batch uploaded), and the
        # caller may change its array as soon as this returns. np.array(order="C") keeps
        # 0-d arrays 0-d, which np.ascontiguousarray would not
        rt.upload(out.data, np.array(host, order="C", copy=True))
    return out


array = asarray


def ascontiguousarray(a) -> ndarray:
    return a if a.is_contiguous else copy(a)


def arange(start, stop=None, step=1, dtype=None, device=None) -> ndarray:
    # NOTE: computed by NumPy and uploaded, so values match NumPy's bit for bit.
    return asarray(np.arange(start, stop, step, dtype=dtype), device=device)


def class_indices(n: int, device) -> ndarray:
    """``arange(n)`` (int64) on ``device``, made once per device and size and shared: for
    one-hot comparisons in every step (uploading it each time cost a copy per call). Read
    only: never write into it."""
    rt = resolve(device)
    return rt.cached(("class_indices", int(n)), lambda: arange(int(n), dtype=np.int64,
                                                               device=rt))


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


def _prepare_out(op, out, shape, dt, rt):
    if out is None:
        return ndarray(rt, shape, check_dtype(dt, rt, op))
    if not isinstance(out, ndarray):
        raise TypeError(f"{op}: out must be an OpenCL ndarray, got {type(out).__name__}")
    check_writeable(out, op)
    if out.shape != shape:
        raise ShapeError(f"{op}: out has shape {out.shape} but the result has shape {shape}")
    if out.rt is not rt:
        raise DeviceMismatchError(f"{op}: out is on cl:{out.rt.info.index}, the inputs on "
                                  f"cl:{rt.info.index}")
    if not np.can_cast(dt, out.dtype, "same_kind"):
        # NOTE: NumPy's rule for out= (and x += ...): int32 += 2.5 is refused, not truncated
        raise DTypeError(f"{op}: cannot cast the {dt} result to out's {out.dtype} with "
                         "casting='same_kind'; cast explicitly (astype) or give out of the "
                         "result's dtype")
    return out


#: the elementwise calls seen, by signature (``_signature``): what ``_elementwise`` decided
#: for them (result shape, dtype, layout, kernel plan), bound into a function of the operands
#: that makes the result and launches (``elementwise.maker``), so that a repeated call is a
#: lookup and that function. Emptied when it reaches ``_DECIDED_MAX`` entries (shapes that change
#: at every step, such as sequence lengths, would otherwise grow it without end).
_DECIDED: dict = {}
_DECIDED_MAX = 8192
_PY_SCALARS = {float: "f", int: "i", bool: "b"}
#: NumPy 1 promotes an array with a scalar by the scalar's value (float32 + 1e300 is float64):
#: there a call with a scalar is decided afresh each time
_SCALARS_BY_TYPE = np.lib.NumpyVersion(np.__version__) >= "2.0.0"


def _signature(op, exprs, kind, vec, xs):
    """The key of a call whose decisions depend only on it, or None: operands are device
    arrays with float dtypes on one device, and Python or NumPy scalars (a Python int's
    value matters to an integer array's promotion, so those take the full path)."""
    sig = [op, exprs["f"], exprs.get("i"), kind, vec]
    rt = None
    for x in xs:
        t = type(x)
        if t is ndarray:
            if x.dtype.kind != "f" or (rt is not None and x.rt is not rt):
                return None
            rt = x.rt
            sig.append((x.dtype, x.shape, x._st, x._nbuf > 2147483647))  # index type
        elif t in _PY_SCALARS and _SCALARS_BY_TYPE:
            sig.append(_PY_SCALARS[t])
        elif isinstance(x, np.generic) and _SCALARS_BY_TYPE:
            sig.append(x.dtype)
        else:
            return None
    if rt is None:
        return None
    sig.append(rt)
    return tuple(sig)


def _elementwise(op, exprs, xs, kind="same", out=None, vec=None):
    """``exprs``: {"f": float expression, "i": integer/bool expression} over v0, v1, ...

    ``kind``: "same" (result in the promoted dtype), "float" (ints promoted to float),
    "bool" (comparisons, compute in the promoted dtype), "bitwise" (integers only).
    """
    if out is None:
        # NOTE: a call seen before skips the promotion, broadcasting, layout and plan lookups
        # (half of an op's host time on a small array): its result is made and launched
        key = _signature(op, exprs, kind, vec, xs)
        if key is not None:
            new = _DECIDED.get(key)
            if new is not None:
                return new(xs)
    else:
        key = None
    xs = [_operand(x) for x in xs]
    rt = same_device(op, xs)
    cdt = result_type(*xs)
    if cdt == np.bool_ and "bool" in exprs:
        cdt = bool_rule(op, exprs["bool"])  # NOTE: NumPy's square(bool) is int8, bool - bool
    if kind == "float":
        cdt = float_of(op, xs, cdt)
    elif kind == "divide" and cdt.kind != "f":
        cdt = np.dtype(np.float64)  # NumPy: true division of integers or bools is float64
    elif kind == "bitwise" and cdt.kind not in "iub":
        raise DTypeError(f"{op}: needs integer or bool arrays, got {cdt}")
    shape = broadcast_shapes(*(x.shape for x in xs if isinstance(x, ndarray)), op=op)
    if "cmp" in exprs and needs_exact(xs, cdt):
        # NOTE: int64 with uint64 promotes to float64, which rounds from 2**53: compared
        # exactly, as NumPy 2 does
        expr, cts = exact_compare(exprs["cmp"], xs)
        if cts is None:  # a Python int beyond every 64-bit value: the same answer everywhere
            if out is None:
                return full(shape, expr, np.bool_, rt)
            out = _prepare_out(op, out, shape, np.dtype(np.bool_), rt)
            assign(out, expr)
            return out
        cdt, vec = np.dtype(np.bool_), None
    else:
        if cdt.kind in "iu":
            cdt = _int_scalars(op, xs, cdt, kind)
        check_dtype(cdt, rt, op)
        expr = exprs["f"] if _is_float(cdt) else exprs.get("i", exprs["f"])
        if expr is None:
            raise DTypeError(f"{op}: not defined for {cdt} arrays; use a float dtype")
        cts = (CTYPES[cdt],) * len(xs)
        vec = vec if _is_float(cdt) else None
    odt = np.dtype(np.bool_) if kind == "bool" else cdt
    if out is None:
        return _launch_new(op, expr, xs, shape, check_dtype(odt, rt, op), rt, cts, vec, key)
    out = _prepare_out(op, out, shape, odt, rt)
    # NOTE: an operand that shares memory with ``out`` other than element for element (x +=
    # x[::-1], add(x, x.T, out=x)) would read values this launch already wrote: copied first
    xs = [copy(x) if isinstance(x, ndarray) and _overlaps(out, x) and not _same_view(out, x)
          else x for x in xs]
    return launch(op, expr, out, xs, cts, vec)


def _int_scalars(op, xs, cdt, kind):
    """NumPy 2's rule for a Python int with an integer array (NEP 50): it takes the array's
    dtype, and one that does not fit is an OverflowError; a comparison is exact (computed in
    a dtype that holds both). Returns the compute dtype."""
    info = np.iinfo(cdt)
    for x in xs:
        if type(x) is int and not info.min <= x <= info.max:
            if kind != "bool":
                raise OverflowError(f"{op}: Python integer {x} out of bounds for {cdt}")
            cdt = np.result_type(cdt, np.min_scalar_type(x))
            if cdt.kind == "f" or cdt.kind not in "iu":
                return cdt
            info = np.iinfo(cdt)
    return cdt


def _launch_new(op, expr, xs, shape, dt, rt, in_ctypes, vec=None, key=None) -> ndarray:
    """``launch`` into a new result of ``shape``, laid out as its operands are in memory.

    NumPy's order="K": a result laid out as its operand is in memory (a convolution's output
    is (C, N, H, W) there), computed over that memory in order, where a C-order result made
    every element an index division and a scattered read (relu of a (64, 32, 28, 28) conv
    output: 3 ms, contiguous: 0.6 ms)."""
    perm = memory_order(xs, shape)
    o = ndarray(rt, shape, dt) if perm is None else new_in_order(rt, shape, dt, perm)
    target = o if perm is None else o.transpose(perm)
    ins = xs if perm is None else [_permuted(x, shape, perm) for x in xs]
    if o.size == 0:
        return o
    plan = plan_of(op, expr, target, ins, in_ctypes, vec)
    if key is not None:
        if len(_DECIDED) >= _DECIDED_MAX:  # shapes that change every call: start again
            _DECIDED.clear()
        _DECIDED[key] = (maker(plan, rt, o.shape, o.dtype, o._st, o.size) if perm is None
                         else partial(_new_permuted, rt, shape, dt, perm, plan))
    run(plan, target, ins)
    return o


def _new_permuted(rt, shape, dt, perm, plan, xs) -> ndarray:
    """``_launch_new``'s result for a repeated call whose operands lie in the memory order
    ``perm`` (other than C's), from its decisions (``_DECIDED``)."""
    o = new_in_order(rt, shape, dt, perm)
    run(plan, o.transpose(perm), [_permuted(x, shape, perm) for x in xs])
    return o


def new_in_order(rt, shape, dt, perm) -> ndarray:
    """A new array of ``shape`` whose axes lie in memory in the order ``perm`` (outermost
    first; None: C order)."""
    if perm is None:
        return ndarray(rt, shape, dt)
    base = ndarray(rt, tuple(shape[p] for p in perm), dt)
    return base.transpose(tuple(int(a) for a in np.argsort(perm)))


def memory_order(xs, shape):
    """The axes of ``shape`` in the memory order of the first operand that has the whole
    shape, when that operand is contiguous in an order other than C's; else None."""
    for x in xs:
        if isinstance(x, ndarray) and x.shape == shape:
            if x.ndim < 2 or x.is_contiguous:
                return None
            if any(s < 0 for s in x._st):
                return None
            # NOTE: no abs() here: this module's abs is the device op
            perm = tuple(sorted(range(x.ndim), key=lambda a: (-x._st[a], a)))
            return perm if x.transpose(perm).is_contiguous else None
    return None


def _permuted(x, shape, perm):
    """Operand ``x`` (broadcast to ``shape``: leading axes of size 1 added as views) with its
    axes in the order ``perm``."""
    if not isinstance(x, ndarray):
        return x
    pad = len(shape) - x.ndim
    if pad:
        x = x._view((1,) * pad + x.shape, (0,) * pad + tuple(x._st), x.offset)
    return x.transpose(perm)


def _exprs(f_expr, i_expr, bools, cmp):
    """``bools``: what bool operands become where NumPy does not keep bool (``promotion``);
    ``cmp``: the comparison's C operator, for exact integer comparisons of mixed signs."""
    exprs = {"f": f_expr, "i": i_expr if i_expr is not None else f_expr}
    if bools is not None:
        exprs["bool"] = bools
    if cmp is not None:
        exprs["cmp"] = cmp
    return exprs


def _binary(name, f_expr, i_expr=None, kind="same", bools=None, cmp=None):
    exprs = _exprs(f_expr, i_expr, bools, cmp)

    def op(a, b, out=None):
        return _elementwise(name, exprs, (a, b), kind, out)

    op.__name__ = name
    op.__doc__ = f"Elementwise ``{name}`` with NumPy broadcasting and dtype promotion."
    return op


def _unary(name, f_expr, i_expr=None, kind="same", vec=None, bools=None):
    """``vec``: the float expression written for vectors (OpenCL vector semantics: a
    comparison is 0 or -1 per lane, ``?:`` is ``select``), for the vector kernels on CPU
    devices; None where the scalar kernel is as fast (memory-bound ops)."""
    exprs = _exprs(f_expr, i_expr, bools, None)

    def op(a, out=None):
        return _elementwise(name, exprs, (a,), kind, out, vec)

    op.__name__ = name
    op.__doc__ = f"Elementwise ``{name}``."
    return op


add = _binary("add", "(v0 + v1)")
subtract = _binary("subtract", "(v0 - v1)", bools=NO_BOOL_SUBTRACT)
multiply = _binary("multiply", "(v0 * v1)")
true_divide = _binary("true_divide", "(v0 / v1)", kind="divide")
divide = true_divide
maximum = _binary("maximum", "LK_FMAX(v0, v1)", "LK_IMAX(v0, v1)")
minimum = _binary("minimum", "LK_FMIN(v0, v1)", "LK_IMIN(v0, v1)")
arctan2 = _binary("arctan2", "atan2(v0, v1)", kind="float")
equal = _binary("equal", "(v0 == v1)", kind="bool", cmp="==")
not_equal = _binary("not_equal", "(v0 != v1)", kind="bool", cmp="!=")
less = _binary("less", "(v0 < v1)", kind="bool", cmp="<")
less_equal = _binary("less_equal", "(v0 <= v1)", kind="bool", cmp="<=")
greater = _binary("greater", "(v0 > v1)", kind="bool", cmp=">")
greater_equal = _binary("greater_equal", "(v0 >= v1)", kind="bool",
                               cmp=">=")
logical_and = _binary("logical_and", "((v0 != 0) && (v1 != 0))", kind="bool")
logical_or = _binary("logical_or", "((v0 != 0) || (v1 != 0))", kind="bool")
logical_xor = _binary("logical_xor", "((v0 != 0) != (v1 != 0))", kind="bool")
bitwise_and = _binary("bitwise_and", None, "(v0 & v1)", kind="bitwise")
bitwise_or = _binary("bitwise_or", None, "(v0 | v1)", kind="bitwise")
bitwise_xor = _binary("bitwise_xor", None, "(v0 ^ v1)", kind="bitwise")

negative = _unary("negative", "(-v0)", bools=NO_BOOL_NEGATIVE)
absolute = _unary("absolute", "fabs(v0)", "((v0) < 0 ? -(v0) : (v0))")
abs = absolute  # noqa: A001 - NumPy's name
sign = _unary("sign", "((v0) != (v0) ? v0 : (((v0) > 0) - ((v0) < 0)))",
              "(((v0) > 0) - ((v0) < 0))", bools=NO_BOOL_SIGN)
square = _unary("square", "(v0 * v0)", bools=BOOL_INT8)
reciprocal = _unary("reciprocal", "(1 / v0)", bools=BOOL_INT8)
exp = _unary("exp", "exp(v0)", kind="float", vec="exp(v0)")
expm1 = _unary("expm1", "expm1(v0)", kind="float", vec="expm1(v0)")
log = _unary("log", "log(v0)", kind="float", vec="log(v0)")
log1p = _unary("log1p", "log1p(v0)", kind="float", vec="log1p(v0)")
log2 = _unary("log2", "log2(v0)", kind="float", vec="log2(v0)")
sqrt = _unary("sqrt", "sqrt(v0)", kind="float")
# NOTE: float32 tanh is common.cl's LK_TANH_S/L (a polynomial, then exp: faster than PoCL's
# library call, 1.5 ulp); double is the library's, whose +-0.99999... past 19.1, where NumPy's
# is +-1 (and 1 - y*y, tanh's gradient, must then be 0), is the sign itself
#: tanh of one operand {0}, as the scalar kernels and lk.compile's fused kernels compute it
TANH_FORM = ("(sizeof({0}) == 4 ? (fabs({0}) >= 0.55f ? "
             "LK_TANH_L({0}, exp(-2.0f * fabs({0}))) : LK_TANH_S({0}, {0} * {0})) : "
             "((fabs({0}) >= 19.1f) ? ((({0}) > 0) - (({0}) < 0)) : tanh({0})))")
tanh = _unary("tanh", TANH_FORM.format("v0"), kind="float",
              vec="(sizeof(TS) == 4 ? select(LK_TANH_S(v0, v0 * v0), "
                  "LK_TANH_L(v0, exp(-2.0f * fabs(v0))), fabs(v0) >= (VT)(0.55f)) : "
                  "select(tanh(v0), copysign((VT)(1), v0), fabs(v0) >= (VT)(19.1f)))")
sin = _unary("sin", "sin(v0)", kind="float", vec="sin(v0)")
cos = _unary("cos", "cos(v0)", kind="float", vec="cos(v0)")
tan = _unary("tan", "tan(v0)", kind="float")
arctan = _unary("arctan", "atan(v0)", kind="float")
erf = _unary("erf", "erf(v0)", kind="float", vec="erf(v0)")
erfc = _unary("erfc", "erfc(v0)", kind="float", vec="erfc(v0)")
floor = _unary("floor", "floor(v0)", "v0")
ceil = _unary("ceil", "ceil(v0)", "v0")
trunc = _unary("trunc", "trunc(v0)", "v0")
# NOTE: NumPy's rint of integers is a float (int16: float32, int32 and int64: float64), where
# floor, ceil and trunc keep them
rint = _unary("rint", "rint(v0)", kind="float")
# NOTE: x != x, not isnan(x), here and in LK_FMAX: PoCL calls isnan() out of line (maximum
# of 1.6M floats: 4.5 ms with it, 0.37 ms without)
isnan = _unary("isnan", "((v0) != (v0))", "0", kind="bool")
isinf = _unary("isinf", "isinf(v0)", "0", kind="bool")
isfinite = _unary("isfinite", "isfinite(v0)", "1", kind="bool")
logical_not = _unary("logical_not", "(v0 == 0)", kind="bool")


def where_positive(a, mask, out=None):
    """``a`` where ``mask > 0``, else 0, as ``where(mask > 0, a, 0)`` gives it but in one
    kernel (relu's gradient; NaN in ``a`` passes where the mask is positive). ``a`` and
    ``mask`` share a float dtype."""
    if not (isinstance(a, ndarray) and isinstance(mask, ndarray) and a.dtype == mask.dtype
            and a.dtype.kind == "f"):
        raise DTypeError(f"where_positive: needs two arrays of one float dtype, got "
                         f"{getattr(a, 'dtype', type(a).__name__)} and "
                         f"{getattr(mask, 'dtype', type(mask).__name__)}")
    return _elementwise("where_positive", {"f": "((v1) > 0 ? (v0) : 0)"}, (a, mask), "same",
                        out)


def invert(a, out=None):
    if isinstance(a, ndarray) and a.dtype == np.bool_:
        return logical_not(a, out=out)
    return _elementwise("invert", {"f": None, "i": "(~v0)"}, (a,), "bitwise", out)


def sigmoid(a, out=None):
    """Numerically stable logistic function (not in NumPy; provided for both namespaces)."""
    expr = "(v0 >= 0 ? 1 / (1 + exp(-v0)) : exp(v0) / (1 + exp(v0)))"
    vec = ("select(exp(-fabs(v0)) / (1 + exp(-fabs(v0))), 1 / (1 + exp(-fabs(v0))), "
           "v0 >= (VT)(0))")
    return _elementwise("sigmoid", {"f": expr}, (a,), "float", out, vec)


def where(cond, a=None, b=None):
    """``where(cond, a, b)`` elementwise; ``where(cond)`` is ``nonzero(cond)``."""
    if a is None and b is None:
        return nonzero(cond)
    xs = [_operand(x) for x in (cond, a, b)]
    rt = same_device("where", xs)
    if not isinstance(xs[0], ndarray):
        xs[0] = asarray(bool(xs[0]), device=rt)
    dt = result_type(*xs[1:])
    check_dtype(dt, rt, "where")
    shape = broadcast_shapes(*(x.shape for x in xs if isinstance(x, ndarray)), op="where")
    ct = CTYPES[dt]
    cct = CTYPES[xs[0].dtype]
    return _launch_new("where", "((v0 != 0) ? v1 : v2)", xs, shape, dt, rt, (cct, ct, ct))


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
    if (t := copy_transposed(a)) is not None:  # NOTE: a transposed matrix, by tiles
        return t
    out = ndarray(a.rt, a.shape, a.dtype)
    ct = CTYPES[a.dtype]
    return launch("copy", "v0", out, [a], (ct,))


def astype(a, dt) -> ndarray:
    dt = check_dtype(dt, a.rt, "astype")
    out = ndarray(a.rt, a.shape, dt)
    if dt == np.bool_ and a.dtype != np.bool_:
        return launch("astype_bool", "(v0 != 0)", out, [a], (CTYPES[a.dtype],))
    return launch("astype", "v0", out, [a], (CTYPES[dt],))


def drop_leading_ones(value: ndarray, ndim: int) -> ndarray:
    """``value`` without leading axes of size 1 beyond ``ndim`` (NumPy's setitem drops them:
    ``d[0] = ones((1, 4))``)."""
    while value.ndim > ndim and value.shape[0] == 1:
        value = value.reshape(value.shape[1:])
    return value


def assign(view: ndarray, value) -> None:
    """``view[...] = value`` (broadcast; a value that overlaps ``view`` is copied first)."""
    check_writeable(view, "setitem")
    value = _operand(value)
    same_device("setitem", (view, value))
    ct = CTYPES[view.dtype]
    if isinstance(value, ndarray):
        value = drop_leading_ones(value, view.ndim)
        broadcast_strides(value.shape, value._st, view.shape, "setitem")
        if _overlaps(view, value):
            value = copy(value)
        if view.dtype == np.bool_:
            ct = CTYPES[value.dtype]  # NOTE: 0.5 is true: compared with 0 before the store
    else:
        finite_for_int(value, view.dtype)  # NOTE: stored, NaN was INT_MIN
        value = _cast_scalar(value, view.dtype)
    launch("assign", "v0", view, [value], (ct,))


def _same_view(a: ndarray, b: ndarray) -> bool:
    """``b`` reads exactly the elements ``a`` writes, at the same positions."""
    return (a.data is b.data and a.offset == b.offset and a.shape == b.shape
            and tuple(a._st) == tuple(b._st))


def _overlaps(a: ndarray, b: ndarray) -> bool:
    return a.data is b.data or (a.base is not None and a.base is b.base)


def nonzero(a):
    """Indices of the non-zero elements (reads the array back to the host)."""
    return tuple(asarray(i, device=a.rt) for i in np.nonzero(a.get()))


def result_type(*xs):
    return np.result_type(*(x.dtype if isinstance(x, ndarray) else x for x in xs))


def to(a: ndarray, device):
    """``a`` on ``device``: a NumPy array for ``"cpu"``, else an OpenCL array (``a`` itself
    when it is there already)."""
    if str(device).strip().lower() == "cpu":
        return a.get()
    return asarray(a, device=device)
