"""Reductions over any set of axes with keepdims: sum, prod, mean, max, min, argmax, argmin,
var, std, any, all (logsumexp: lse.py). Kernels in kernels_cl/reduce.cl."""

from __future__ import annotations

import builtins
from string import Template

import numpy as np

from ...errors import ShapeError
from .core import (
    add,
    full,
    sqrt,
    square,
    subtract,
    true_divide,
)
from .elementwise import VECTOR_WIDTH
from .ndarray import CTYPES, IDX_NP, check_dtype, fresh, index_ctype, ndarray
from .program import header, kernels, source
from .shapes import c_strides, collapse_dims, normalize_axis
from .shapes import prod as _size

_INT_LIMITS = {"char": ("CHAR_MIN", "CHAR_MAX"), "uchar": ("0", "UCHAR_MAX"),
               "short": ("SHRT_MIN", "SHRT_MAX"), "ushort": ("0", "USHRT_MAX"),
               "int": ("INT_MIN", "INT_MAX"), "uint": ("0", "UINT_MAX"),
               "long": ("LONG_MIN", "LONG_MAX"), "ulong": ("0", "ULONG_MAX")}


def _axes(a: ndarray, axis, op: str) -> tuple:
    if axis is None:
        return tuple(range(a.ndim))
    axes = axis if isinstance(axis, (tuple, list)) else (axis,)
    norm = tuple(sorted({normalize_axis(x, a.ndim, op) for x in axes}))
    if len(norm) != len(axes):
        raise ShapeError(f"{op}: duplicate value in axis {axis}")
    return norm


def _collapse(dims, st):
    shape, (strides,) = collapse_dims(dims, [st])
    return shape, strides


def _offset_code(var, idx_var, tag, dims, st, params, args, idx):
    """Code that unravels `idx_var` over `dims` into `var` = sum(i_j * stride_j)."""
    lines = []
    terms = []
    for j in range(len(dims) - 1, -1, -1):
        iv = f"{tag}{j}"
        if j:
            params.append(f", const IDX {tag}d{j}")
            args.append((IDX_NP[idx], dims[j]))
            lines.append(f"    const IDX {iv} = {idx_var} % {tag}d{j}; {idx_var} /= {tag}d{j};")
        else:
            lines.append(f"    const IDX {iv} = {idx_var};")
        if st[j] == 1:
            terms.append(iv)
        elif st[j] != 0:
            params.append(f", const IDX {tag}s{j}")
            args.append((IDX_NP[idx], st[j]))
            terms.append(f"{iv}*{tag}s{j}")
    lines.append(f"    const IDX {var} = {' + '.join(terms) or '0'};")
    return "\n".join("    " + ln for ln in lines)


#: one-launch reductions seen before, by call signature: a function of the input that
#: allocates the result and launches (what ``_reduce`` decided the first time). A bias
#: gradient's sum, (32, 512) over axis 0, took 35 us of host time per call, 7 of them the
#: launch. Emptied when full (shapes that change every call)
_RECIPES: dict = {}


def _recipe_key(op, a, axis, keepdims, rest):
    try:
        key = (op, a.dtype, a.shape, a._st, a._nbuf > 2147483647, a.rt,
               tuple(axis) if isinstance(axis, list) else axis, keepdims, rest)
        hash(key)
    except TypeError:  # NOTE: an axis NumPy would refuse: the full path says why
        return None
    return key


def _learn(key, kernel, grid, local, pre, post, extra, a, shape, dt):
    """Keep ``key``'s recipe: ``kernel(queue, grid, local, *pre, result, *post, a, a.offset,
    *extra)``, its result a new C-contiguous array of ``shape`` and ``dt``."""
    if key is None:
        return
    if len(_RECIPES) >= 8192:
        _RECIPES.clear()
    rt, st, n = a.rt, c_strides(shape), _size(shape)

    def recipe(x):
        out = fresh(rt, shape, dt, st, n)
        with rt.lock:
            kernel(rt.queue, grid, local, *pre, out.data, *post, x.data, x.offset, *extra)
        return out
    _RECIPES[key] = recipe


def _reduce(op: str, a: ndarray, axis, keepdims: bool, *, acc_dt, out_dt, map_="(x)",
            combine=None, neutral=None, better=None, empty_ok=True):
    key = _recipe_key(op, a, axis, keepdims, (acc_dt, out_dt, map_, combine, neutral, better,
                                              empty_ok))
    recipe = _RECIPES.get(key) if key is not None else None
    if recipe is not None:
        return recipe(a)
    axes = _axes(a, axis, op)
    if a.ndim == 0:  # NOTE: NumPy reduces a 0-d array over axis 0 (or -1) to itself
        return _reduce(op, a.reshape(1), 0, False, acc_dt=acc_dt, out_dt=out_dt, map_=map_,
                       combine=combine, neutral=neutral, better=better,
                       empty_ok=empty_ok).reshape(())
    kept = [i for i in range(a.ndim) if i not in axes]
    out_shape = tuple(a.shape[i] for i in kept)
    full_shape = tuple(1 if i in axes else a.shape[i] for i in range(a.ndim))
    n_red = 1
    for i in axes:
        n_red *= a.shape[i]
    rt = a.rt
    acc_dt, out_dt = check_dtype(acc_dt, rt, op), check_dtype(out_dt, rt, op)
    out = ndarray(rt, out_shape, out_dt)
    if n_red == 0 and not empty_ok:
        raise ValueError(f"{op}: zero-size reduction (shape {a.shape}, axis {axis}) has no "
                         "identity; pass a non-empty array or use an initial value")
    if out.size == 0:
        return out.reshape(full_shape) if keepdims else out
    if n_red == 0:
        out = full(out_shape, neutral_value(neutral), out_dt, rt)
        return out.reshape(full_shape) if keepdims else out
    if (n_red == 1 and op in ("sum", "prod", "max", "min") and map_ == "(x)"
            and a.dtype == acc_dt == out_dt and a.dtype.kind == "f"):
        # NOTE: over axes of length 1 (a bias gradient at batch 1) each result is its one
        # element combined with the neutral value, as NumPy's: -0.0 + 0 is +0.0 for a sum,
        # the element itself for the others. One elementwise launch, not the generic kernel
        x = add(a, a.dtype.type(0)) if op == "sum" else a.copy()
        return x.reshape(full_shape if keepdims else out_shape)
    if _chunked_ok(a, len(axes), n_red, acc_dt, map_, better):
        part = _chunked(op, a, n_red, acc_dt, combine, neutral)
        return _reduce(op, part, None, keepdims=False, acc_dt=acc_dt, out_dt=out_dt,
                       combine=combine, neutral=neutral).reshape(
            full_shape if keepdims else out_shape)
    outer = _collapse([a.shape[i] for i in kept], [a._st[i] for i in kept])
    inner = _collapse([a.shape[i] for i in axes], [a._st[i] for i in axes])
    n_out = out.size
    final = full_shape if keepdims else out_shape
    if _rows_ok(a, outer, inner, n_red, acc_dt, out_dt, map_, better):
        part = _rows(op, a, n_out, n_red, outer[1][0], acc_dt, combine, neutral, key, final)
        if part.ndim == 2:  # NOTE: a second pass over each row's chunks
            part = _reduce(op, part, 1, False, acc_dt=acc_dt, out_dt=out_dt, combine=combine,
                           neutral=neutral)
        return part.reshape(full_shape if keepdims else out_shape)
    if _cols_ok(a, outer, inner, n_out, n_red, acc_dt, out_dt, map_, better):
        part = _cols(op, a, n_out, n_red, inner[1][0], acc_dt, combine, neutral, key, final)
        if part.shape[0] > 1:  # NOTE: a second pass over each column's chunks of rows
            part = _reduce(op, part, 0, False, acc_dt=acc_dt, out_dt=out_dt, combine=combine,
                           neutral=neutral)
        return part.reshape(full_shape if keepdims else out_shape)
    ls = 1
    while ls * 2 <= builtins.min(256, rt.info.max_work_group_size):
        ls *= 2
    # NOTE: a work-item per output when there are enough of them; on a CPU device from 64 on
    # (PoCL runs a work-group's items one after another, so a group of 256 per output only
    # pays when outputs are few: a bias gradient, (32, 512) summed over axis 0, took 0.95 ms
    # in groups and takes 0.03 ms in work-items), or when each sums up to WI_MAX_RED values
    # over axes outside the kept ones in memory, which NumPy folds one by one too (a
    # classifier's bias gradient, (32, 10) over axis 0: 15-21 us in groups, 1.0 in
    # work-items, in NumPy's order; (262144, 2): 186 us in groups, 307 in work-items). Where
    # NumPy adds pairwise (over the innermost axis: a.T.sum()), the tree of a group keeps the
    # error near NumPy's (one by one, 8,192 values were 3,000 times further off)
    outer_red = (bool(outer[1]) and abs(outer[1][-1]) == 1
                 and builtins.all(abs(v) != 1 for v in inner[1]))
    use_wi = (n_red <= (WI_MAX_RED if rt.info.is_cpu and outer_red else 16)
              or n_out >= (64 if rt.info.is_cpu else 16384))
    n_seg = 1
    if not use_wi and better is None:
        target = builtins.max(64, 16 * rt.info.compute_units)
        n_seg = builtins.max(1, builtins.min(-(-target // n_out), n_red // (ls * 32)))
    if n_seg == 1:
        _run(op, a, out, n_out, n_red, 1, outer, inner, acc_dt, map_, combine, neutral,
             better, use_wi, ls, key=key, final=final)
    else:
        part = ndarray(rt, (n_out * n_seg,), acc_dt)
        _run(op, a, part, n_out, n_red, n_seg, outer, inner, acc_dt, map_, combine, neutral,
             better, False, ls)
        _run(op + "_pass2", part, out, n_out, n_seg, 1, [n_out], [n_seg], acc_dt, "(x)",
             combine, neutral, None, n_seg <= 16, ls, inner_override=([n_seg], [1]),
             outer_override=([n_out], [n_seg]))
    return out.reshape(full_shape) if keepdims else out


#: a whole contiguous array of at least this many elements is reduced on a CPU device by
#: ``_chunked``: one row for ``_rows``, whose work-items fold CHUNK consecutive elements each in
#: vector registers
CHUNKED_MIN = 1 << 16
CHUNK = 4096


def _chunked_ok(a, n_axes, n_red, acc_dt, map_, better):
    """A sum, product, max or min of a whole contiguous float array on a CPU device, large
    enough to pay for a second pass: PoCL's compiler does not vectorise the generic kernels'
    strided loops (a sum ran at a third of NumPy's speed)."""
    return (n_axes == a.ndim and n_red >= CHUNKED_MIN and a.is_contiguous
            and better is None and map_ == "(x)" and a.dtype == acc_dt
            and a.dtype.kind == "f" and a.rt.info.is_cpu)


def _chunked(op, a, n, acc_dt, combine, neutral):
    """The partial results of ``n`` elements, one per CHUNK of them (the first pass): the
    whole array as one row of ``_rows``."""
    return _rows(op, a, 1, n, 0, acc_dt, combine, neutral).reshape(-1)


#: rows at least this long (contiguous, over any row stride) are reduced on a CPU device by
#: ``_rows``: a work-item per CHUNK of a row, in vector registers
ROWS_MIN = 256

_ROWS_SRC = """
__kernel void lk_rows_${name}(const IDX n_red, const IDX n_chunks, const IDX row_st,
                              __global ACC* part, __global const ACC* a, const IDX a_o)
{
    const IDX c = (IDX)get_global_id(0), r = (IDX)get_global_id(1);
    if (c >= n_chunks) return;
    __global const ACC* row = a + a_o + r * row_st;
    const IDX start = c * CHUNK;
    const IDX stop = min(start + (IDX)CHUNK, n_red);
    VT acc = (VT)(NEUTRAL);
    IDX k = start;
    for (; k + W <= stop; k += W) {
        const VT x = vload${w}(0, row + k);
        acc = COMBINE(acc, x);
    }
    ACC lanes[W];
    vstore${w}(acc, 0, lanes);
    ACC res = lanes[0];
    for (int l = 1; l < W; ++l) res = COMBINE(res, lanes[l]);  // a fixed order: deterministic
    for (; k < stop; ++k) res = COMBINE(res, row[k]);
    part[r * n_chunks + c] = res;
}
"""


def _rows_ok(a, outer, inner, n_red, acc_dt, out_dt, map_, better):
    """A sum, product, max or min of contiguous rows (one stride between them) of a float
    array on a CPU device: the generic kernels' loops are not vectorised by PoCL and a
    work-item folding a 12,544-long row one add at a time waits on each add (a convolution's
    bias gradient: 0.49 ms for 64 rows, about a quarter of that in vectors)."""
    return (_vector_ok(a, acc_dt, out_dt, map_, better) and n_red >= ROWS_MIN
            and len(outer[0]) == 1 and len(inner[0]) == 1 and inner[1][0] == 1)


def _vector_ok(a, acc_dt, out_dt, map_, better) -> bool:
    """A sum, product, max or min (no map, no arg-reduction) of a float array, in its own
    dtype, on a CPU device: what ``_rows`` and ``_cols`` fold in vectors."""
    return (a.rt.info.is_cpu and better is None and map_ == "(x)"
            and a.dtype == acc_dt == out_dt and a.dtype.kind == "f")


def _vector_kernel(family, src, op, a, acc_dt, combine, neutral, defs):
    """The kernel ``lk_{family}_{op}`` of ``src`` (a template over ``name`` and the vector
    width ``w``) for ``a``'s index type, built once per device: ``(kernel, w)``. Its
    arguments: three indices, the output, the input and its offset."""
    rt = a.rt
    ct = CTYPES[acc_dt]
    w = VECTOR_WIDTH[acc_dt.itemsize]
    idx = index_ctype(a)

    def make():
        d = {"ACC": ct, "IDX": idx, "VT": f"{ct}{w}", "W": w, **defs, "NEUTRAL": neutral,
             "COMBINE(a,b)": combine}
        text = header(rt, (ct,), d, what=op) + source("common") + \
            Template(src).substitute(name=op, w=w)
        kname = f"lk_{family}_{op}"
        it = IDX_NP[idx]
        return getattr(kernels(rt, text, {kname: [it, it, it, None, None, it]},
                               name=f"reduce:{kname}"), kname)
    return rt.cached((f"reduce_{family}", op, ct, idx), make), w


def _rows(op, a, n_out, n_red, row_st, acc_dt, combine, neutral, key=None, final=None):
    """Each row's result (n_out,) when a row is one CHUNK or less, else (n_out, chunks) of
    partial results, one per CHUNK of each row."""
    rt = a.rt
    kernel, _ = _vector_kernel("rows", _ROWS_SRC, op, a, acc_dt, combine, neutral,
                               {"CHUNK": CHUNK})
    chunks = -(-n_red // CHUNK)
    part = ndarray(rt, (n_out, chunks) if chunks > 1 else (n_out,), acc_dt)
    with rt.lock:
        kernel(rt.queue, (chunks, n_out), None, n_red, chunks, row_st, part.data, a.data,
               a.offset)
    if chunks == 1:
        _learn(key, kernel, (chunks, n_out), None, (n_red, chunks, row_st), (), (), a, final,
               acc_dt)
    return part


#: a reduction over leading axes whose kept elements are contiguous (a bias gradient: (N, C)
#: summed over N) runs on a CPU device as ``_cols``: a work-item per COLS_ROWS rows of two
#: vectors of columns. Each column is still folded row by row in order (then chunk by chunk).
COLS_ROWS = 64
#: on a CPU device, a reduction of at most this many values per output runs a work-item per
#: output (``_reduce``)
WI_MAX_RED = 8192

_COLS_SRC = """
__kernel void lk_cols_${name}(const IDX n_red, const IDX n_out, const IDX row_st,
                              __global ACC* part, __global const ACC* a, const IDX a_o)
{
    const IDX c0 = (IDX)get_global_id(0) * (2 * W), ch = (IDX)get_global_id(1);
    if (c0 >= n_out) return;
    const IDX r0 = ch * COLS_ROWS, r1 = min(r0 + (IDX)COLS_ROWS, n_red);
    __global const ACC* src = a + a_o + c0;
    __global ACC* dst = part + ch * n_out + c0;
    if (c0 + 2 * W <= n_out) {
        VT acc0 = (VT)(NEUTRAL), acc1 = (VT)(NEUTRAL);
        for (IDX r = r0; r < r1; ++r) {
            __global const ACC* row = src + r * row_st;
            acc0 = COMBINE(acc0, vload${w}(0, row));
            acc1 = COMBINE(acc1, vload${w}(1, row));
        }
        vstore${w}(acc0, 0, dst);
        vstore${w}(acc1, 1, dst);
        return;
    }
    for (IDX c = 0; c < 2 * W && c0 + c < n_out; ++c) {  // the last columns, one at a time
        ACC acc = NEUTRAL;
        for (IDX r = r0; r < r1; ++r) acc = COMBINE(acc, src[r * row_st + c]);
        dst[c] = acc;
    }
}
"""


def _cols_ok(a, outer, inner, n_out, n_red, acc_dt, out_dt, map_, better):
    """A sum, product, max or min over leading axes of a float array on a CPU device, the
    kept elements contiguous and at least a vector of them: a work-item per output walked
    its column with a row stride between adds (a bias gradient, (256, 512) over axis 0, took
    75 us; (1024, 512) 551 us)."""
    return (_vector_ok(a, acc_dt, out_dt, map_, better) and n_red >= 2
            and n_out >= VECTOR_WIDTH[a.dtype.itemsize]
            and len(outer[0]) == 1 and outer[1][0] == 1 and len(inner[0]) == 1)


def _cols(op, a, n_out, n_red, row_st, acc_dt, combine, neutral, key=None, final=None):
    """(chunks, n_out): each column's result over each COLS_ROWS rows."""
    rt = a.rt
    kernel, w = _vector_kernel("cols", _COLS_SRC, op, a, acc_dt, combine, neutral,
                               {"COLS_ROWS": COLS_ROWS})
    chunks = -(-n_red // COLS_ROWS)
    part = ndarray(rt, (chunks, n_out), acc_dt)
    with rt.lock:
        kernel(rt.queue, (-(-n_out // (2 * w)), chunks), None, n_red, n_out, row_st,
               part.data, a.data, a.offset)
    if chunks == 1:
        _learn(key, kernel, (-(-n_out // (2 * w)), 1), None, (n_red, n_out, row_st), (), (), a,
               final, acc_dt)
    return part


def neutral_value(neutral):
    return {"0": 0, "1": 1}.get(neutral, 0)


def _run(op, a, out, n_out, n_red, n_seg, outer, inner, acc_dt, map_, combine, neutral,
         better, use_wi, ls, inner_override=None, outer_override=None, key=None, final=None):
    rt = a.rt
    od, os_ = outer_override if outer_override else outer
    idd, ist = inner_override if inner_override else inner
    idx = index_ctype(a, out)
    # NOTE: not ``key`` (the recipe's, learnt below): the recipe was kept under this one and
    # never found again
    kkey = ("reduce", op, a.dtype, out.dtype, acc_dt, tuple(od), tuple(os_), tuple(idd),
            tuple(ist), use_wi, idx, n_seg > 1, ls)
    plan = rt.kernels.get(kkey)
    if plan is None:
        plan = rt.cached(kkey, lambda: _plan(rt, op, a, out, od, os_, idd, ist, idx, acc_dt,
                                            map_, combine, neutral, better, use_wi, ls))
    kernel, extra = plan
    with rt.lock:
        _launch(rt, kernel, extra, use_wi, n_out, n_red, n_seg, out, a, ls)
    if final is not None:  # NOTE: one segment into a new array (``out``) of final's size
        grid = (-(-n_out // ls) * ls,) if use_wi else (n_out * ls,)
        _learn(key, kernel, grid, (ls,), (n_out, n_red) if use_wi else (n_out, n_red, 1),
               (0,), extra, a, final, out.dtype)


def _plan(rt, op, a, out, od, os_, idd, ist, idx, acc_dt, map_, combine, neutral, better,
          use_wi, ls):
    """Generate, build and type the kernel for one reduction signature."""
    params, args = [], []
    outer_code = _offset_code("base0", "r", "o", od, os_, params, args, idx)
    outer_code += "\n        const IDX base = a_o + base0;"
    inner_code = _offset_code("off", "q", "q", idd, ist, params, args, idx)
    name = f"lk_{op}"
    ct_acc = CTYPES[acc_dt]
    defs = {"IN": CTYPES[a.dtype], "ACC": ct_acc, "OUT": CTYPES[out.dtype], "IDX": idx,
            "NEUTRAL": neutral, "LK_WG": str(ls), "MAP(x)": map_}
    if better is not None:
        defs["ARG"] = "1"
        defs["BETTER(x,b)"] = better
    else:
        defs["COMBINE(a,b)"] = combine
    src = header(rt, (defs["IN"], ct_acc, defs["OUT"]), defs, what=op) + source("common") + \
        Template(source("reduce")).substitute(name=name, params="".join(params),
                                              outer=outer_code, inner=inner_code)
    kname = f"{name}_wi" if use_wi else f"{name}_wg"
    it = IDX_NP[idx]
    arg_types = [it, it] + ([] if use_wi else [it]) + [None, it, None, it] + [t for t, _ in args]
    kernel = getattr(kernels(rt, src, {kname: arg_types}, name=f"reduce.cl:{name}"), kname)
    return kernel, tuple(v for _, v in args)


def _launch(rt, kernel, extra, use_wi, n_out, n_red, n_seg, out, a, ls):
    if use_wi:
        gs = -(-n_out // ls) * ls
        kernel(rt.queue, (gs,), (ls,), n_out, n_red, out.data, out.offset, a.data, a.offset,
               *extra)
    else:
        kernel(rt.queue, (n_out * n_seg * ls,), (ls,), n_out, n_red, n_seg, out.data,
               out.offset, a.data, a.offset, *extra)


def _float_neutrals(ct, kind):
    if kind == "max":
        return "(-INFINITY)" if ct in ("float", "double") else _INT_LIMITS[ct][0]
    return "INFINITY" if ct in ("float", "double") else _INT_LIMITS[ct][1]


def _sum_dtype(dt, dtype):
    if dtype is not None:
        return np.dtype(dtype)
    if dt.kind == "b" or (dt.kind == "i" and dt.itemsize < 8):
        return np.dtype(np.int64)
    if dt.kind == "u" and dt.itemsize < 8:
        return np.dtype(np.uint64)
    return dt


def sum(a, axis=None, dtype=None, keepdims=False):  # noqa: A001 - NumPy's name
    dt = _sum_dtype(a.dtype, dtype)
    return _reduce("sum", a, axis, keepdims, acc_dt=dt, out_dt=dt, combine="((a) + (b))",
                   neutral="0")


def prod(a, axis=None, dtype=None, keepdims=False):
    dt = _sum_dtype(a.dtype, dtype)
    return _reduce("prod", a, axis, keepdims, acc_dt=dt, out_dt=dt, combine="((a) * (b))",
                   neutral="1")


def _mean_dtype(a, dtype):
    if dtype is not None:
        return np.dtype(dtype)
    return a.dtype if a.dtype.kind == "f" else np.dtype(np.float64)


def mean(a, axis=None, dtype=None, keepdims=False):
    dt = _mean_dtype(a, dtype)
    axes = _axes(a, axis, "mean")
    n = 1
    for i in axes:
        n *= a.shape[i]
    s = _reduce("sum", a, axis, keepdims, acc_dt=dt, out_dt=dt, combine="((a) + (b))",
                neutral="0")
    if dt.kind in "iub":  # NOTE: NumPy's mean(dtype=int32) is in int32: the quotient truncated
        return true_divide(s, n if n else np.nan).astype(dt)
    return true_divide(s, dt.type(n) if n else dt.type(np.nan))


def var(a, axis=None, ddof=0, keepdims=False, dtype=None):
    m = mean(a, axis=axis, dtype=dtype, keepdims=True)
    d = square(subtract(a.astype(m.dtype, copy=False), m))
    axes = _axes(a, axis, "var")
    n = 1
    for i in axes:
        n *= a.shape[i]
    s = sum(d, axis=axis, keepdims=keepdims)
    if m.dtype.kind in "iub":  # NOTE: var(dtype=int64) is in int64, as NumPy's
        return true_divide(s, builtins.max(n - ddof, 0)).astype(m.dtype)
    return true_divide(s, m.dtype.type(builtins.max(n - ddof, 0)))


def std(a, axis=None, ddof=0, keepdims=False, dtype=None):
    v = var(a, axis=axis, ddof=ddof, keepdims=keepdims, dtype=dtype)
    return sqrt(v).astype(v.dtype) if v.dtype.kind in "iub" else sqrt(v)


def _maxmin(op, kind, a, axis, keepdims):
    ct = CTYPES[a.dtype]
    fl = a.dtype.kind == "f"
    comb = ("LK_FMAX" if fl else "LK_IMAX") if kind == "max" else ("LK_FMIN" if fl else "LK_IMIN")
    return _reduce(op, a, axis, keepdims, acc_dt=a.dtype, out_dt=a.dtype,
                   combine=f"{comb}((a), (b))", neutral=_float_neutrals(ct, kind),
                   empty_ok=False)


def max(a, axis=None, keepdims=False):  # noqa: A001
    return _maxmin("max", "max", a, axis, keepdims)


def min(a, axis=None, keepdims=False):  # noqa: A001
    return _maxmin("min", "min", a, axis, keepdims)


amax, amin = max, min


def _arg(op, kind, a, axis, keepdims):
    if isinstance(axis, (tuple, list)):
        raise TypeError(f"{op}: axis must be one integer or None (as NumPy's), got {axis!r}")
    if axis is None:
        flat = _arg(op, kind, a.reshape(-1), 0, False)
        return flat.reshape((1,) * a.ndim) if keepdims else flat
    fl = a.dtype.kind == "f"
    cmp = ">" if kind == "max" else "<"
    better = f"((x) {cmp} (b) || ((x) != (x) && (b) == (b)))" if fl else f"((x) {cmp} (b))"
    ct = CTYPES[a.dtype]
    return _reduce(op, a, axis, keepdims, acc_dt=a.dtype, out_dt=np.int64,
                   neutral=_float_neutrals(ct, kind), better=better, empty_ok=False)


def argmax(a, axis=None, keepdims=False):
    return _arg("argmax", "max", a, axis, keepdims)


def argmin(a, axis=None, keepdims=False):
    return _arg("argmin", "min", a, axis, keepdims)


def any(a, axis=None, keepdims=False):  # noqa: A001
    return _reduce("any", a, axis, keepdims, acc_dt=np.bool_, out_dt=np.bool_,
                   map_="((x) != 0)", combine="((a) || (b))", neutral="0")


def all(a, axis=None, keepdims=False):  # noqa: A001
    return _reduce("all", a, axis, keepdims, acc_dt=np.bool_, out_dt=np.bool_,
                   map_="((x) != 0)", combine="((a) && (b))", neutral="1")
