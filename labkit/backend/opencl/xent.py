"""Softmax cross-entropy of (N, C) logits against N labels in one launch.

One work-group walks the rows (a work-item per row at a time): the row's log-sum-exp as
``lse.logsumexp`` computes it (max first; a row of +-inf or NaN keeps it), minus the logit
of its label. A logit of -inf at another class (a mask) leaves the loss finite; a NaN or +inf
logit anywhere in the row, or a row all -inf, makes it NaN. A row whose label is ``ignore``
counts zero (its loss is ``0 * lse``: 0, or NaN for such a row, so a broken batch still
shows). The group then sums the rows' losses and counts in local memory, and writes their
mean, their sum, or each row's loss. The composed form (logsumexp, subtract, one-hot,
multiply, sum, then the valid count and its division) took about fifteen launches and 1 ms a
step at batch 1.
"""

from __future__ import annotations

import numpy as np

from .elementwise import VECTOR_WIDTH, vector_defines
from .ndarray import CTYPES, IDX_NP, index_ctype, ndarray
from .program import header, kernels, source
from .softmax import ROW_SRC
from .softmax import fits as softmax_fits

#: the most classes per row this kernel takes (a work-item loops over a row's classes)
MAX_CLASSES = 4096

_SRC = """
__kernel void lk_xent(const IDX n, const IDX c, __global const T* x, const IDX x_o,
                      __global const TI* t, const IDX t_o, const long ignore, const int mode,
                      __global T* out, const IDX out_o, __local T* s_sum, __local T* s_cnt)
{
    const int lid = get_local_id(0);
    const int ls = get_local_size(0);
    T acc = 0, cnt = 0;
    for (IDX r = lid; r < n; r += ls) {
        __global const T* row = x + x_o + r * c;
        const long label = (long)t[t_o + r];
        T mm;
        const T ls = lk_row_shifted_logsum(row, c, &mm);
        // NOTE: -log_softmax at the label, (shift - x) + log-sum (kernels_cl/rowlse.cl: the
        // log-sum's bits kept under a large max), plus ls - ls: NaN for a row whose log-sum is
        // not finite (a +inf logit, all -inf), as the CPU's x - max makes it; an ignored
        // row: 0 * ls, not skipped
        const int valid = label != ignore;
        const T nll = valid ? ((mm - row[label]) + ls) + (ls - ls) : ls * (T)0;
        cnt += (T)valid;
        if (mode == 2) out[out_o + r] = nll;
        acc += nll;
    }
    s_sum[lid] = acc;
    s_cnt[lid] = cnt;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int h = ls / 2; h > 0; h /= 2) {
        if (lid < h) {
            s_sum[lid] += s_sum[lid + h];
            s_cnt[lid] += s_cnt[lid + h];
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    if (lid == 0 && mode != 2)
        out[out_o] = mode == 0 ? s_sum[0] / (s_cnt[0] > 1 ? s_cnt[0] : (T)1) : s_sum[0];
}
"""

_MODES = {"mean": 0, "sum": 1, "none": 2}

#: the labels that are not ``ignore`` (all, without ``check``), at least 1, counted by a
#: work-group in local memory (every work-item calls it)
_COUNT_SRC = """
inline long lk_count_valid(const IDX n, __global const TI* t, const IDX t_o, const long ignore,
                           const int check, __local long* s_cnt)
{
    const int lid = get_local_id(0);
    const int ls = get_local_size(0);
    long cnt = 0;
    for (IDX r = lid; r < n; r += ls) cnt += !check || (long)t[t_o + r] != ignore;
    s_cnt[lid] = cnt;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int h = ls / 2; h > 0; h /= 2) {
        if (lid < h) s_cnt[lid] += s_cnt[lid + h];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    return s_cnt[0] > 1 ? s_cnt[0] : 1;
}
"""

_AUX_SRC = """
__kernel void lk_xent_weights(const IDX n, __global const TI* t, const IDX t_o,
                              const long ignore, const int check, const int mean,
                              __global T* w, __local long* s_cnt)
{
    const int lid = get_local_id(0);
    const int ls = get_local_size(0);
    const T count = (T)lk_count_valid(n, t, t_o, ignore, check, s_cnt);
    for (IDX r = lid; r < n; r += ls) {
        const T v = (T)(!check || (long)t[t_o + r] != ignore);
        w[r] = mean ? v / count : v;
    }
}

__kernel void lk_labels_bad(const IDX n, __global const TI* t, const IDX t_o, const long c,
                            const long ignore, const int check, __global uchar* flag,
                            __local int* s_bad)
{
    const int lid = get_local_id(0);
    const int ls = get_local_size(0);
    int bad = 0;
    for (IDX r = lid; r < n; r += ls) {
        const long v = (long)t[t_o + r];  // NOTE: an unsigned label past 2**63 reads negative
        bad |= (v < 0 || v >= c) && !(check && v == ignore);
    }
    s_bad[lid] = bad;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int h = ls / 2; h > 0; h /= 2) {
        if (lid < h) s_bad[lid] |= s_bad[lid + h];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    if (lid == 0) flag[0] = (uchar)s_bad[0];
}

__kernel void lk_onehot(const IDX n, const IDX c, __global const TI* t, const IDX t_o,
                        __global T* out)
{
    const IDX i = get_global_id(0);
    if (i >= n * c) return;
    out[i] = (T)((long)t[t_o + i / c] == (long)(i % c));
}
"""


def _group(rt, n) -> int:
    """The work-group size of the kernels that walk ``n`` rows in one group and reduce in
    local memory: the largest power of two up to 256, the device's limit and ``n``."""
    ls = 1
    while ls * 2 <= min(256, rt.info.max_work_group_size, max(n, 1)):
        ls *= 2
    return ls


def fits(x, t) -> bool:
    """Whether this kernel takes logits ``x`` and labels ``t``: (N, C) contiguous float with
    C <= MAX_CLASSES, and N contiguous integer labels on the same device."""
    return (isinstance(x, ndarray) and isinstance(t, ndarray) and x.ndim == 2
            and x.dtype.kind == "f" and x.is_contiguous and 0 < x.shape[1] <= MAX_CLASSES
            and t.shape == x.shape[:1] and t.dtype.kind in "iu" and t.is_contiguous
            and t.rt is x.rt and x.shape[0] > 0)


def softmax_cross_entropy(x, t, ignore: int, reduce: str) -> ndarray:
    """The loss of each row (``reduce="none"``), or their mean over the rows whose label is
    not ``ignore`` (``"mean"``), or their sum; ``x`` and ``t`` must pass :func:`fits`.
    Labels must be classes in [0, C) or ``ignore`` (the caller checks them)."""
    rt = x.rt
    ct, ti = CTYPES[x.dtype], CTYPES[t.dtype]
    idx = index_ctype(x, t)
    key = ("xent", ct, ti, idx)

    def make():
        defs = {"T": ct, "TI": ti, "IDX": idx, **vector_defines(rt, ct, x.dtype.itemsize)}
        src = header(rt, (ct,), defs, what="softmax_cross_entropy") + source("common") + \
            source("rowlse") + _SRC
        it = IDX_NP[idx]
        return kernels(rt, src, {"lk_xent": [it, it, None, it, None, it, np.int64, np.int32,
                                             None, it, None, None]},
                       name="xent:lk_xent").lk_xent

    kernel = rt.cached(key, make)
    n, c = x.shape
    out = ndarray(rt, (n,) if reduce == "none" else (), x.dtype)
    ls = _group(rt, n)
    import pyopencl as cl

    size = x.dtype.itemsize * ls
    with rt.lock:
        kernel(rt.queue, (ls,), (ls,), n, c, x.data, x.offset, t.data, t.offset, int(ignore),
               _MODES[reduce], out.data, out.offset, cl.LocalMemory(size), cl.LocalMemory(size))
    return out


def _aux(rt, ct, ti, idx):
    """The label-side kernels of the loss's gradient (compiled once per type triple)."""
    def make():
        src = header(rt, (ct,), {"T": ct, "TI": ti, "IDX": idx},
                     what="softmax_cross_entropy gradient") + source("common") + _COUNT_SRC \
            + _AUX_SRC
        it = IDX_NP[idx]
        return kernels(rt, src, {"lk_xent_weights": [it, None, it, np.int64, np.int32,
                                                     np.int32, None, None],
                                 "lk_onehot": [it, it, None, it, None],
                                 "lk_labels_bad": [it, None, it, np.int64, np.int64, np.int32,
                                                   None, None]},
                       name="xent:aux")
    return rt.cached(("xent_aux", ct, ti, idx), make)


def labels_fit(t) -> bool:
    """Whether :func:`row_weights` and :func:`onehot` take labels ``t``: N > 0 contiguous
    integer labels on a device."""
    return (isinstance(t, ndarray) and t.ndim == 1 and t.size > 0 and t.dtype.kind in "iu"
            and t.is_contiguous)


def row_weights(t, ignore: int, mean: bool, dtype) -> ndarray:
    """Each row's weight in the reduced loss, in one launch: 1 where its label is not
    ``ignore`` (an unsigned label is never a negative ``ignore``), 0 where it is, divided by
    the number of such rows (at least 1) when ``mean``. The same numbers as composing
    not_equal, astype, sum, maximum, astype and divide (six launches), counted exactly."""
    rt = t.rt
    ct = CTYPES[np.dtype(dtype)]
    k = _aux(rt, ct, CTYPES[t.dtype], index_ctype(t)).lk_xent_weights
    n = t.shape[0]
    out = ndarray(rt, (n,), dtype)
    check = not (t.dtype.kind == "u" and ignore < 0)
    ls = _group(rt, n)
    import pyopencl as cl

    with rt.lock:
        k(rt.queue, (ls,), (ls,), n, t.data, t.offset, int(ignore), int(check), int(mean),
          out.data, cl.LocalMemory(8 * ls))
    return out


def onehot(t, c: int, dtype) -> ndarray:
    """(N, C) of ``dtype``: 1 at each row's label, 0 elsewhere (a label outside [0, C), such
    as an ignored one, gives a row of zeros); one launch where comparing against the class
    indices and casting took two."""
    rt = t.rt
    n = t.shape[0]
    out = ndarray(rt, (n, int(c)), dtype)
    if out.size == 0:
        return out
    k = _aux(rt, CTYPES[np.dtype(dtype)], CTYPES[t.dtype], index_ctype(t, out)).lk_onehot
    ls = min(256, rt.info.max_work_group_size)
    with rt.lock:
        k(rt.queue, (-(-out.size // ls) * ls,), (ls,), n, int(c), t.data, t.offset, out.data)
    return out


def any_outside(t, c: int, ignore) -> ndarray:
    """A 0-d bool: whether a label of the contiguous integer array ``t`` is outside [0, c)
    and not ``ignore`` (None: none is ignored; a negative one never matches an unsigned
    label), in one launch, where comparing, combining and reducing took six."""
    rt = t.rt
    flag = ndarray(rt, (), np.dtype(np.bool_))
    k = _aux(rt, "float", CTYPES[t.dtype], index_ctype(t)).lk_labels_bad
    check = ignore is not None and not (t.dtype.kind == "u" and ignore < 0)
    ls = _group(rt, t.size)
    import pyopencl as cl

    with rt.lock:
        k(rt.queue, (ls,), (ls,), t.size, t.data, t.offset, int(c),
          int(ignore) if check else 0, int(check), flag.data, cl.LocalMemory(4 * ls))
    return flag


_GRAD_SRC = """
__kernel void lk_xent_grad(const IDX n, const IDX c, __global const T* x, const IDX x_o,
                           __global const TI* t, const IDX t_o, const long ignore,
                           const int check, const int mean, __global const T* w,
                           const int have_w, __global const T* gy, const IDX gy_o,
                           const IDX gy_step, const int vec, __global T* out,
                           __local long* s_cnt)
{
    // NOTE: every work-group counts the labels itself (as lk_xent_weights does)
    const T count = mean && !have_w ? (T)lk_count_valid(n, t, t_o, ignore, check, s_cnt) : 1;
    const IDX r = (IDX)get_global_id(0);
    if (r >= n) return;
    const long label = (long)t[t_o + r];
    T wr;
    if (have_w) {
        wr = w[r];
    } else {
        const T v = (T)(!check || label != ignore);
        wr = mean ? v / count : v;
    }
    const T g = gy[gy_o + r * gy_step] * wr;
    __global const T* row = x + x_o + r * c;
    __global T* dst = out + r * c;
#ifdef W
    if (vec) lk_softmax_row_vec(row, c, dst);
    else
#endif
    lk_softmax_row(row, c, dst);
    for (IDX k = 0; k < c; ++k) dst[k] = (dst[k] - (T)(label == (long)k)) * g;
}
"""

#: the most rows whose labels every work-group of ``lk_xent_grad`` counts itself (for a mean);
#: past it the rows' weights are one launch before (``row_weights``)
GRAD_COUNT_MAX = 2048


def grad_fits(x, t, gy, reduce: str) -> bool:
    """Whether :func:`grad` takes logits ``x``, labels ``t`` and the loss's gradient ``gy``:
    what :func:`fits` takes, ``gy`` an array of ``x``'s dtype on its device, 0-d for a "mean"
    or "sum", N contiguous values for "none"; and rows that softmax.py's row kernels take
    (elsewhere the composed softmax rounds otherwise: a few rows of over 1,024 classes)."""
    return (fits(x, t) and softmax_fits(x, 1) and isinstance(gy, ndarray) and gy.rt is x.rt
            and gy.dtype == x.dtype
            and (gy.shape == (x.shape[0],) and gy.is_contiguous if reduce == "none"
                 else gy.shape == ()))


def grad(x, t, gy, ignore: int, reduce: str) -> ndarray:
    """The gradient of the loss through the logits in one launch: each row's ``(softmax(x) -
    onehot(t)) * (gy * w)``, ``w`` its weight in the reduction (:func:`row_weights`); the
    softmax as ``softmax.softmax`` computes it, the rest the same operations as the composed
    gradient's (weights, scale, softmax, one-hot, subtract and multiply: five launches).
    Needs :func:`grad_fits`; labels as :func:`softmax_cross_entropy` takes them."""
    rt = x.rt
    ct, ti = CTYPES[x.dtype], CTYPES[t.dtype]
    n, c = x.shape
    out = ndarray(rt, (n, c), x.dtype)
    idx = index_ctype(x, t, out)

    def make():
        defs = {"T": ct, "TI": ti, "IDX": idx, **vector_defines(rt, ct, x.dtype.itemsize)}
        src = header(rt, (ct,), defs, what="softmax_cross_entropy gradient") + \
            source("common") + source("rowlse") + ROW_SRC + _COUNT_SRC + _GRAD_SRC
        it = IDX_NP[idx]
        i32 = np.int32
        return kernels(rt, src, {"lk_xent_grad": [it, it, None, it, None, it, np.int64, i32,
                                                  i32, None, i32, None, it, it, i32, None,
                                                  None]},
                       name="xent:lk_xent_grad").lk_xent_grad

    kernel = rt.cached(("xent_grad", ct, ti, idx), make)
    mean = reduce == "mean"
    check = not (t.dtype.kind == "u" and ignore < 0)
    w = row_weights(t, ignore, True, x.dtype) if mean and n > GRAD_COUNT_MAX else None
    vec = rt.info.is_cpu and c >= 2 * VECTOR_WIDTH[x.dtype.itemsize]
    ls = _group(rt, min(n, 64)) if w is not None or not mean else _group(rt, n)
    import pyopencl as cl

    with rt.lock:
        kernel(rt.queue, (-(-n // ls) * ls,), (ls,), n, c, x.data, x.offset, t.data, t.offset,
               int(ignore), int(check), int(mean), (w if w is not None else out).data,
               int(w is not None), gy.data, gy.offset, int(reduce == "none"), int(vec),
               out.data, cl.LocalMemory(8 * ls))
    return out
