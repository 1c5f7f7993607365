"""logsumexp, and its parts (the shift and the log-sum) that log-softmax is made of: a row of a
last axis per work-item (kernels_cl/rowlse.cl, the kernel log-softmax and the cross-entropy
also use), other axes composed of the reductions."""

from __future__ import annotations

import numpy as np

from .core import add, ascontiguousarray, exp, isfinite, log, subtract, where
from .elementwise import vector_defines
from .ndarray import CTYPES, IDX_NP, index_ctype, ndarray
from .program import header, kernels, source
from .reduce import _axes, max, sum

_LSE_ROWS = """
__kernel void lk_lse_rows(const IDX n_out, const IDX n_red, __global T* out, const IDX out_o,
                          __global const T* a, const IDX a_o, __global T* shift,
                          const IDX shift_o, const int parts)
{
    const IDX r = (IDX)get_global_id(0);
    if (r >= n_out) return;
    T mm;
    const T ls = lk_row_shifted_logsum(a + a_o + r * n_red, n_red, &mm);
    if (parts) {
        out[out_o + r] = ls;
        shift[shift_o + r] = mm;
    } else {
        out[out_o + r] = ls + mm;  // NOTE: lk_row_lse
    }
}
"""


def _lse_rows(a, n_out, n_red, parts=False):
    """logsumexp of each row of a contiguous (n_out, n_red) float array: one work-item per
    row, one launch (the composed form takes eight). With ``parts``, (shift, log-sum) instead
    (see :func:`logsumexp_parts`)."""
    rt = a.rt
    ct = CTYPES[a.dtype]
    idx = index_ctype(a)

    def make():
        defs = {"T": ct, "IDX": idx, **vector_defines(rt, ct, a.dtype.itemsize)}
        src = header(rt, (ct,), defs, what="logsumexp") + source("common") + \
            source("rowlse") + _LSE_ROWS
        it = IDX_NP[idx]
        return kernels(rt, src, {"lk_lse_rows": [it, it, None, it, None, it, None, it,
                                                 np.int32]},
                       name="reduce:lk_lse_rows").lk_lse_rows
    kernel = rt.cached(("lse_rows", ct, idx), make)
    out = ndarray(rt, (n_out,), a.dtype)
    shift = ndarray(rt, (n_out,), a.dtype) if parts else out
    ls = 64
    with rt.lock:
        kernel(rt.queue, (-(-n_out // ls) * ls,), (ls,), n_out, n_red, out.data, out.offset,
               a.data, a.offset, shift.data, shift.offset, int(parts))
    return (shift, out) if parts else out


def logsumexp_parts(a, axis):
    """``(shift, logsum)`` over ``axis`` (kept, of size 1): the max (0 where it is not
    finite) and ``log(sum(exp(a - shift)))``, whose sum is ``logsumexp``. Log-softmax is
    ``(a - shift) - logsum``: the log-sum's bits are kept where ``a - logsumexp`` loses them
    to a large max. A last axis of a float array in one launch (the rows' kernel, so the
    log-softmax kernel's values bit for bit), other axes composed."""
    axes = _axes(a, axis, "logsumexp")
    if (axes == (a.ndim - 1,) and a.dtype.kind == "f" and 0 < a.shape[-1] <= 65536):
        n_red = a.shape[-1]
        keep = a.shape[:-1] + (1,)
        shift, logsum = _lse_rows(ascontiguousarray(a), a.size // n_red, n_red, parts=True)
        return shift.reshape(keep), logsum.reshape(keep)
    return _composed_parts(a, axis)


def _composed_parts(a, axis):
    """``logsumexp_parts`` of the reductions (kept axes): the max, 0 where not finite, and
    the log of the sum of ``exp(a - max)``."""
    m = max(a, axis=axis, keepdims=True)
    m = where(isfinite(m), m, 0)
    return m, log(sum(exp(subtract(a, m)), axis=axis, keepdims=True))


def logsumexp(a, axis=None, keepdims=False):
    """log(sum(exp(a))) computed stably (max subtracted first). Over the trailing axes of a
    float array with many rows (a softmax's classes), one kernel per call (after a copy when
    the array is not contiguous)."""
    axes = _axes(a, axis, "logsumexp")
    kept_shape = tuple(d for i, d in enumerate(a.shape) if i not in axes)
    n_red = 1
    for i in axes:
        n_red *= a.shape[i]
    n_out = a.size // n_red if n_red else 0
    if (a.dtype.kind == "f" and axes == tuple(range(a.ndim - len(axes), a.ndim))
            and n_red and (16 <= n_out or n_red <= 1024) and n_red <= 65536):
        # NOTE: a few long rows would be a few work-items looping: composed (parallel) there.
        # Another layout is copied first, as log_softmax's kernel does, so that the two agree
        # bit for bit whatever the layout
        r = _lse_rows(ascontiguousarray(a), n_out, n_red)
        full_shape = tuple(1 if i in axes else d for i, d in enumerate(a.shape))
        return r.reshape(full_shape if keepdims else kept_shape)
    m, logsum = _composed_parts(a, axis)
    r = add(logsum, m)
    return r if keepdims else r.reshape(tuple(d for i, d in enumerate(r.shape)
                                              if i not in _axes(a, axis, "logsumexp")))
