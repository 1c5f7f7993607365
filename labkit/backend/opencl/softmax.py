"""Softmax and log-softmax over the last axis, and their gradients, one launch each.

A work-item takes a row. Log-softmax: ``(x - shift) - logsum``, the row's shift (its max,
0 where that is not finite: a row of +-inf or NaN keeps them) and log-sum as
``lse.logsumexp_parts`` computes them, the same operations in the same order as the
composed form (parts, two subtractions), so bitwise equal to it; not ``x - logsumexp``, which
rounds the log-sum into a large max (logits of 1e4 lost 3e-4 of the softmax). Softmax:
``exp(x - max) / sum``, one exp per element, more accurate than the composed ``exp`` of the
log-softmax; a row whose max is not finite takes the composed form's values (NaN or +-inf
kept alike). The
gradients take the softmax ``y`` and the upstream gradient ``g`` and write, per row,
``g - y * sum(g)`` (log-softmax) or ``y * (g - sum(g * y))`` (softmax); composed, each is five
launches and a broadcast.
"""

from __future__ import annotations

from .core import ascontiguousarray
from .elementwise import VECTOR_WIDTH, vector_defines
from .ndarray import CTYPES, IDX_NP, index_ctype, ndarray
from .program import header, kernels, source

#: the longest row these kernels take (a work-item loops over its row)
MAX_ROW = 65536

#: one row's softmax into ``dst``, scalar and (CPU devices) in vectors of W: lk_softmax_rows
#: and the cross-entropy's gradient (backend/opencl/xent.py) share them, so the same bits
ROW_SRC = """
inline void lk_softmax_row(__global const T* row, const IDX c, __global T* dst)
{
    T m = -INFINITY;
    for (IDX k = 0; k < c; ++k) m = LK_FMAX(m, row[k]);
    const T mm = isfinite(m) ? m : (T)0;
    T s = 0;
    // NOTE: one exp per element; exp(x - m) / s is also the more accurate form
    for (IDX k = 0; k < c; ++k) {
        const T e = exp(row[k] - mm);
        dst[k] = e;
        s += e;
    }
    if (isfinite(m)) for (IDX k = 0; k < c; ++k) dst[k] = dst[k] / s;
    else for (IDX k = 0; k < c; ++k) dst[k] = exp(row[k] - (log(s) + mm));
}

#ifdef W
// CPU devices: the row in vectors of W (PoCL inlines a vector exp; the scalar one is a call),
// its max as kernels_cl/rowlse.cl folds it
inline void lk_softmax_row_vec(__global const T* row, const IDX c, __global T* dst)
{
    const IDX cv = c - c % W;
    T lanes[W];
    const T m = lk_row_max(row, c);
    T s = 0;
    if (!isfinite(m)) {  // NOTE: the composed form's values (NaN or +-inf kept alike)
        for (IDX k = 0; k < c; ++k) s += exp(row[k]);
        for (IDX k = 0; k < c; ++k) dst[k] = exp(row[k] - log(s));
        return;
    }
    VT sv = (VT)(0);
    for (IDX k = 0; k < cv; k += W) {
        const VT e = exp(ROW_VLOAD(row + k) - (VT)(m));
        ROW_VSTORE(e, dst + k);
        sv += e;
    }
    ROW_VSTORE(sv, lanes);
    for (int j = 0; j < W; ++j) s += lanes[j];
    for (IDX k = cv; k < c; ++k) {
        const T e = exp(row[k] - m);
        dst[k] = e;
        s += e;
    }
    for (IDX k = 0; k < cv; k += W) ROW_VSTORE(ROW_VLOAD(dst + k) / (VT)(s), dst + k);
    for (IDX k = cv; k < c; ++k) dst[k] = dst[k] / s;
}
#endif
"""

_SRC = """
__kernel void lk_softmax_rows(const IDX n, const IDX c, __global T* out, const IDX out_o,
                              __global const T* x, const IDX x_o, const int log_out)
{
    const IDX r = (IDX)get_global_id(0);
    if (r >= n) return;
    __global const T* row = x + x_o + r * c;
    __global T* dst = out + out_o + r * c;
    if (log_out) {  // NOTE: (x - shift) - log-sum: kernels_cl/rowlse.cl
        T mm;
        const T ls = lk_row_shifted_logsum(row, c, &mm);
        for (IDX k = 0; k < c; ++k) dst[k] = (row[k] - mm) - ls;
        return;
    }
    lk_softmax_row(row, c, dst);
}

#ifdef W
__kernel void lk_softmax_rows_vec(const IDX n, const IDX c, __global T* out, const IDX out_o,
                                  __global const T* x, const IDX x_o)
{
    const IDX r = (IDX)get_global_id(0);
    if (r >= n) return;
    __global const T* row = x + x_o + r * c;
    __global T* dst = out + out_o + r * c;
    lk_softmax_row_vec(row, c, dst);
}
#endif

__kernel void lk_softmax_grad_rows(const IDX n, const IDX c, __global T* out, const IDX out_o,
                                   __global const T* y, const IDX y_o,
                                   __global const T* g, const IDX g_o, const int log_in)
{
    const IDX r = (IDX)get_global_id(0);
    if (r >= n) return;
    __global const T* yr = y + y_o + r * c;
    __global const T* gr = g + g_o + r * c;
    __global T* dst = out + out_o + r * c;
    T s = 0;
    if (log_in) {
        for (IDX k = 0; k < c; ++k) s += gr[k];
        for (IDX k = 0; k < c; ++k) dst[k] = gr[k] - yr[k] * s;
    } else {
        for (IDX k = 0; k < c; ++k) s += gr[k] * yr[k];
        for (IDX k = 0; k < c; ++k) dst[k] = yr[k] * (gr[k] - s);
    }
}
"""


def _rows(a, axis):
    """``(rows, row length)`` when the kernels take ``a`` over ``axis``, else None: a float
    array whose ``axis`` is its last, with many rows or short ones (a few long rows would be a
    few work-items looping: the composed form is parallel there)."""
    if not isinstance(a, ndarray) or a.dtype.kind != "f" or a.ndim == 0 or a.size == 0:
        return None
    if axis % a.ndim != a.ndim - 1:
        return None
    c = a.shape[-1]
    n = a.size // c
    if c > MAX_ROW or not (n >= 16 or c <= 1024):
        return None
    return n, c


def fits(a, axis) -> bool:
    return _rows(a, axis) is not None


def _kernel(rt, dt, idx, name):
    ct = CTYPES[dt]

    def make():
        defs = {"T": ct, "IDX": idx, **vector_defines(rt, ct, dt.itemsize)}
        src = header(rt, (ct,), defs, what="softmax") + source("common") + \
            source("rowlse") + ROW_SRC + _SRC
        it = IDX_NP[idx]
        args = {"lk_softmax_rows": [it, it, None, it, None, it, IDX_NP["int"]],
                "lk_softmax_grad_rows": [it, it, None, it, None, it, None, it, IDX_NP["int"]]}
        if rt.info.is_cpu:
            args["lk_softmax_rows_vec"] = [it, it, None, it, None, it]
        return kernels(rt, src, args, name="softmax")
    return getattr(rt.cached(("softmax", ct, idx), make), name)


def _launch(kernel, rt, n, *args):
    ls = 64
    with rt.lock:
        kernel(rt.queue, (-(-n // ls) * ls,), (ls,), *args)


def softmax(x, axis, log: bool) -> ndarray:
    """softmax (or log-softmax, ``log=True``) of ``x`` over ``axis``; ``fits(x, axis)``."""
    n, c = _rows(x, axis)
    x = ascontiguousarray(x)
    out = ndarray(x.rt, x.shape, x.dtype)
    idx = index_ctype(x, out)
    if not log and x.rt.info.is_cpu and c >= 2 * VECTOR_WIDTH[x.dtype.itemsize]:
        k = _kernel(x.rt, x.dtype, idx, "lk_softmax_rows_vec")
        _launch(k, x.rt, n, n, c, out.data, out.offset, x.data, x.offset)
        return out
    k = _kernel(x.rt, x.dtype, idx, "lk_softmax_rows")
    _launch(k, x.rt, n, n, c, out.data, out.offset, x.data, x.offset, int(log))
    return out


def grad_fits(y, g, axis) -> bool:
    return (fits(y, axis) and isinstance(g, ndarray) and g.shape == y.shape
            and g.dtype == y.dtype and g.rt is y.rt)


def grad(y, g, axis, log: bool) -> ndarray:
    """The gradient through softmax (``y * (g - sum(g * y))``) or, ``log=True``, through
    log-softmax (``g - y * sum(g)``), from the softmax ``y``; ``grad_fits(y, g, axis)``."""
    n, c = _rows(y, axis)
    y, g = ascontiguousarray(y), ascontiguousarray(g)
    out = ndarray(y.rt, y.shape, y.dtype)
    k = _kernel(y.rt, y.dtype, index_ctype(y, g, out), "lk_softmax_grad_rows")
    _launch(k, y.rt, n, n, c, out.data, out.offset, y.data, y.offset, g.data, g.offset,
            int(log))
    return out
