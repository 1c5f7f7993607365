"""Max and average pooling whose windows tile the input (the usual 2x2 stride 2), one launch
each way.

Three kernels, one work-item per row of windows, for (N, C, H, W) inputs read through their
strides (a convolution's output is laid out (C, N, H, W) in memory) with windows of KH x KW
(build macros) that tile H and W exactly:

- ``pool_max``: each window's maximum, folded as the NumPy path folds it (a NaN wins; of two
  equal values, -0 and 0, the later one);
- ``pool_scatter``: the gradient. Each window's winners (its elements equal to its maximum)
  share its upstream gradient: ``gy * (1 / winners)`` times 1 at a winner and 0 elsewhere, so
  a window without a winner (its maximum NaN) and an infinite ``gy`` give NaN as the NumPy path
  (``labkit.functions.pooling.TileScatter``) does;
- ``pool_gather``: its adjoint (the gradient's own gradient): each window's sum of its winners'
  values, times the share.

and for average pooling ``pool_avg`` (each window's sum, in the NumPy path's order, times
1 / (KH*KW) as ``F.mean`` does) and ``pool_spread`` (its gradient: each window's share in each
of its places; the two are each other's adjoint).

The general path (window copies, a strided reduction, a full-size mask and its scatter) took
13.5 ms forward and 6.8 ms backward of a 111 ms CNN step on PoCL.
"""

from __future__ import annotations

import numpy as np

from .core import astype, copy, memory_order, new_in_order
from .ndarray import CTYPES, IDX_NP, index_ctype, ndarray
from .program import header, kernels, source

_SRC = """
// NOTE: a work-item per row of windows (n, c, oh): the index divisions (by runtime sizes) once
// per row, then a loop over the row's windows; ``total`` counts rows. WINDOW opens the loop
// (g: the window's flat index, p: its first element), END_WINDOW closes it.
#define WINDOW(a, a_o, sn, sc, sh, sw) \\
    const IDX r = get_global_id(0); \\
    if (r >= total) return; \\
    const IDX oh = r % OH, t2 = r / OH; \\
    const IDX c = t2 % C, n = t2 / C; \\
    __global const T* prow = a + a_o + n * sn + c * sc + oh * KH * sh; \\
    for (IDX ow = 0; ow < OW; ++ow) { \\
        const IDX g = r * OW + ow; \\
        __global const T* p = prow + ow * KW * sw;
#define END_WINDOW }

__kernel void pool_max(const IDX total, const IDX C, const IDX OH, const IDX OW,
                       __global const T* x, const IDX x_o, const IDX sn, const IDX sc,
                       const IDX sh, const IDX sw, __global T* y)
{
    WINDOW(x, x_o, sn, sc, sh, sw)
    // NOTE: the NumPy path's order, np.maximum's rule (the second of two equals: -0 and 0):
    // down each column of the window, then across the columns
    T m = 0;
    for (int j = 0; j < KW; ++j) {
        T r = p[j * sw];
        for (int i = 1; i < KH; ++i) r = LK_FMAX(r, p[i * sh + j * sw]);
        m = j == 0 ? r : LK_FMAX(m, r);
    }
    y[g] = m;
    END_WINDOW
}

// the mean of each window: its sum in the NumPy path's order (rows, then columns within each)
// times scale = (T)(1 / (KH * KW)), as F.mean multiplies its sum
__kernel void pool_avg(const IDX total, const IDX C, const IDX OH, const IDX OW,
                       __global const T* x, const IDX x_o, const IDX sn, const IDX sc,
                       const IDX sh, const IDX sw, const T scale, __global T* y)
{
    WINDOW(x, x_o, sn, sc, sh, sw)
    T s = p[0];
    for (int i = 0; i < KH; ++i)
        for (int j = (i == 0); j < KW; ++j) s += p[i * sh + j * sw];
    y[g] = s * scale;
    END_WINDOW
}

// the mean's gradient: each window's gy times scale, in every one of its places (gy read
// through its strides, gx (N, C, OH*KH, OW*KW) contiguous)
__kernel void pool_spread(const IDX total, const IDX C, const IDX OH, const IDX OW,
                          __global const T* gy, const IDX gy_o, const IDX sn, const IDX sc,
                          const IDX sh, const IDX sw, const T scale, __global T* gx)
{
    const IDX r = get_global_id(0);
    if (r >= total) return;
    const IDX oh = r % OH, t2 = r / OH;
    const IDX c = t2 % C, n = t2 / C;
    const IDX W = OW * KW;
    for (IDX ow = 0; ow < OW; ++ow) {
        const T v = gy[gy_o + n * sn + c * sc + oh * sh + ow * sw] * scale;
        __global T* q = gx + ((n * C + c) * OH * KH + oh * KH) * W + ow * KW;
        for (int i = 0; i < KH; ++i)
            for (int j = 0; j < KW; ++j) q[i * W + j] = v;
    }
}

// a winner of a window whose max is m: equal to it, or a NaN (which made m NaN; F.max's rule)
#define WIN(a, m) ((a) == (m) || (a) != (a))
// the winners of window g and their share 1 / count
#define WINNERS \\
    const T m = y[g]; \\
    int count = 0; \\
    for (int i = 0; i < KH; ++i) \\
        for (int j = 0; j < KW; ++j) count += WIN(p[i * sh + j * sw], m); \\
    const T share = (T)1 / (T)count;

// g_*: the strides of the full-size gradient (gx written, gg read), in its own layout
__kernel void pool_scatter(const IDX total, const IDX C, const IDX OH, const IDX OW,
                           __global const T* x, const IDX x_o, const IDX sn, const IDX sc,
                           const IDX sh, const IDX sw, __global const T* y,
                           __global const T* gy, __global T* gx, const IDX gn, const IDX gc,
                           const IDX gh, const IDX gw)
{
    WINDOW(x, x_o, sn, sc, sh, sw)
    WINNERS
    const T v = gy[g] * share;
    __global T* q = gx + n * gn + c * gc + oh * KH * gh + ow * KW * gw;
    for (int i = 0; i < KH; ++i)
        for (int j = 0; j < KW; ++j) q[i * gh + j * gw] = v * (T)WIN(p[i * sh + j * sw], m);
    END_WINDOW
}

#if defined(T8) && KH == 2 && KW == 2
// CPU devices, 2x2 windows along contiguous rows: four windows at a time from two vectors of
// eight (their even and odd lanes are the windows' two columns), in the scalar kernels' order
// and with their rules; the row's last OW % 4 windows one at a time, as those kernels do
#define VFMAX(a, b) select((b), (a), ((a) > (b)) | ((a) != (a)))
#define ONES(e) select((T4)(0), (T4)(1), e)
#define VWIN(a, m) (((a) == (m)) | ((a) != (a)))
#define INTERLEAVE(a, b) (T8)((a).s0, (b).s0, (a).s1, (b).s1, (a).s2, (b).s2, (a).s3, (b).s3)
#define ROW(sh) \
    const IDX r = get_global_id(0); \
    if (r >= total) return; \
    const IDX oh = r % OH, t2 = r / OH; \
    const IDX c = t2 % C, n = t2 / C; \
    __global const T* prow = x + x_o + n * sn + c * sc + oh * 2 * sh; \
    IDX ow = 0;

__kernel void pool_max_v(const IDX total, const IDX C, const IDX OH, const IDX OW,
                         __global const T* x, const IDX x_o, const IDX sn, const IDX sc,
                         const IDX sh, const IDX sw, __global T* y)
{
    ROW(sh)
    for (; ow + 4 <= OW; ow += 4) {
        const T8 a = vload8(0, prow + 2 * ow), b = vload8(0, prow + sh + 2 * ow);
        vstore4(VFMAX(VFMAX(a.even, b.even), VFMAX(a.odd, b.odd)), 0, y + r * OW + ow);
    }
    for (; ow < OW; ++ow) {
        __global const T* p = prow + 2 * ow;
        y[r * OW + ow] = LK_FMAX(LK_FMAX(p[0], p[sh]), LK_FMAX(p[1], p[sh + 1]));
    }
}

__kernel void pool_scatter_v(const IDX total, const IDX C, const IDX OH, const IDX OW,
                             __global const T* x, const IDX x_o, const IDX sn, const IDX sc,
                             const IDX sh, const IDX sw, __global const T* y,
                             __global const T* gy, __global T* gx, const IDX gn,
                             const IDX gc, const IDX gh, const IDX gw)
{
    ROW(sh)
    __global T* qrow = gx + n * gn + c * gc + oh * 2 * gh;
    for (; ow + 4 <= OW; ow += 4) {
        const IDX g = r * OW + ow;
        const T8 a = vload8(0, prow + 2 * ow), b = vload8(0, prow + sh + 2 * ow);
        const T4 m = vload4(0, y + g);
        const T4 e00 = ONES(VWIN(a.even, m)), e01 = ONES(VWIN(a.odd, m));
        const T4 e10 = ONES(VWIN(b.even, m)), e11 = ONES(VWIN(b.odd, m));
        const T4 v = vload4(0, gy + g) * ((T4)(1) / (e00 + e01 + e10 + e11));
        vstore8(INTERLEAVE(v * e00, v * e01), 0, qrow + 2 * ow);
        vstore8(INTERLEAVE(v * e10, v * e11), 0, qrow + gh + 2 * ow);
    }
    for (; ow < OW; ++ow) {
        const IDX g = r * OW + ow;
        __global const T* p = prow + 2 * ow;
        const T m = y[g];
        const int count = WIN(p[0], m) + WIN(p[1], m) + WIN(p[sh], m) + WIN(p[sh + 1], m);
        const T v = gy[g] * ((T)1 / (T)count);
        __global T* q = qrow + 2 * ow;
        q[0] = v * (T)WIN(p[0], m);
        q[1] = v * (T)WIN(p[1], m);
        q[gh] = v * (T)WIN(p[sh], m);
        q[gh + 1] = v * (T)WIN(p[sh + 1], m);
    }
}
#endif

__kernel void pool_gather(const IDX total, const IDX C, const IDX OH, const IDX OW,
                          __global const T* x, const IDX x_o, const IDX sn, const IDX sc,
                          const IDX sh, const IDX sw, __global const T* y,
                          __global const T* gg, __global T* out, const IDX gn, const IDX gc,
                          const IDX gh, const IDX gw)
{
    WINDOW(x, x_o, sn, sc, sh, sw)
    WINNERS
    __global const T* q = gg + n * gn + c * gc + oh * KH * gh + ow * KW * gw;
    T s = 0;
    for (int i = 0; i < KH; ++i)
        for (int j = 0; j < KW; ++j) s += q[i * gh + j * gw] * (T)WIN(p[i * sh + j * sw], m);
    out[g] = s * share;
    END_WINDOW
}
"""


def fits(x, k) -> bool:
    """Whether these kernels take ``x``: a floating (N, C, H, W) device array whose sides the
    ``k`` = (kh, kw) windows tile."""
    return (isinstance(x, ndarray) and x.ndim == 4 and x.dtype.kind == "f"
            and x.shape[2] % k[0] == 0 and x.shape[3] % k[1] == 0 and x.size > 0)


def _kernel(rt, dt, k, idx, name):
    ct = CTYPES[dt]

    def make():
        defs = {"T": ct, "IDX": idx, "KH": k[0], "KW": k[1]}
        if rt.info.is_cpu:
            defs.update(T4=f"{ct}4", T8=f"{ct}8")
        src = header(rt, (ct,), defs, what="max_pool2d") + source("common") + _SRC
        i = IDX_NP[idx]
        x_args = [i, i, i, i, None, i, i, i, i, i]
        t = dt.type
        sig = {"pool_max": x_args + [None], "pool_scatter": x_args + [None] * 3 + [i] * 4,
               "pool_gather": x_args + [None] * 3 + [i] * 4, "pool_avg": x_args + [t, None],
               "pool_spread": x_args + [t, None]}
        if rt.info.is_cpu and k == (2, 2):
            sig.update(pool_max_v=sig["pool_max"], pool_scatter_v=sig["pool_scatter"])
        return kernels(rt, src, sig, name=f"pool ({ct}, {k})")

    return getattr(rt.cached(("pool", ct, k, idx), make), name)


#: the kernels with a vector form for 2x2 windows on CPU devices (``name + "_v"``)
_VECTOR = ("pool_max", "pool_scatter")


def _launch(name, a, k, windows, out, between=(), strides=None):
    """Run kernel ``name`` with a work-item per window of ``windows`` = (N, C, OH, OW): ``a``
    read through its strides, then ``between`` (arrays, contiguous from the start of their
    buffers, or typed scalars), ``out``, and the strides of ``strides`` (the full-size gradient
    the kernel writes or reads in its own layout)."""
    rt = a.rt
    arrays = [b for b in between if isinstance(b, ndarray)]
    idx = index_ctype(a, out, *arrays, *(() if strides is None else (strides,)))
    if (name in _VECTOR and k == (2, 2) and rt.info.is_cpu and windows[3] >= 4
            and a._st[3] == 1 and (strides is None or strides._st[3] == 1)):
        name += "_v"  # NOTE: four windows at a time along contiguous rows
    kernel = _kernel(rt, a.dtype, k, idx, name)
    it = IDX_NP[idx]
    n, c, oh, ow = windows
    total = n * c * oh  # NOTE: rows of windows (a work-item each)
    tail = () if strides is None else tuple(it(s) for s in strides._st)
    with rt.lock:
        kernel(rt.queue, (-(-total // 64) * 64,), None, it(total), it(c), it(oh), it(ow),
               a.data, it(a.offset), *(it(s) for s in a._st),
               *(b.data if isinstance(b, ndarray) else b for b in between), out.data, *tail)
    return out


def _like(x) -> ndarray:
    """A new array of ``x``'s shape laid out as ``x`` is in memory (C order when ``x`` is not
    a permutation of a contiguous array), so the gradient of a (C, N, H, W) convolution
    output keeps that layout for the elementwise ops and the GEMMs after it."""
    return new_in_order(x.rt, x.shape, x.dtype, memory_order([x], x.shape))


def _scale(a, k):
    """1 / (kh * kw) in ``a``'s type, as ``F.mean`` multiplies its sum."""
    return a.dtype.type(1.0 / (k[0] * k[1]))


def avg_pool(x: ndarray, k) -> ndarray:
    """The mean of each ``k`` window of ``x`` (which must pass :func:`fits`): (N, C, OH, OW),
    contiguous."""
    y = _pooled(x, k)
    return _launch("pool_avg", x, k, y.shape, y, (_scale(x, k),))


def avg_spread(gy: ndarray, k) -> ndarray:
    """The gradient of :func:`avg_pool` for its input: each window's ``gy`` times 1 / (kh*kw)
    in each of its places; (N, C, OH*kh, OW*kw), contiguous."""
    n, c, oh, ow = gy.shape
    gx = ndarray(gy.rt, (n, c, oh * k[0], ow * k[1]), gy.dtype)
    return _launch("pool_spread", gy, k, gy.shape, gx, (_scale(gy, k),))


def _flat(a) -> ndarray:
    """``a``, or a copy of it, contiguous from the start of its buffer (the kernels index the
    small arrays without offsets)."""
    return a if a.is_contiguous and a.offset == 0 else copy(a)


def _pooled(x, k) -> ndarray:
    n, c, h, w = x.shape
    return ndarray(x.rt, (n, c, h // k[0], w // k[1]), x.dtype)


def max_pool(x: ndarray, k) -> ndarray:
    """The maximum of each ``k`` window of ``x`` (which must pass :func:`fits`): (N, C, OH, OW),
    contiguous."""
    y = _pooled(x, k)
    return _launch("pool_max", x, k, y.shape, y)


def _common(x, y, g):
    """``x``, ``y`` and ``g`` in one floating type (NumPy's promotion: a float64 gradient of a
    float32 input gives a float64 gradient, as on the cpu), since a kernel has one type."""
    dt = np.result_type(x.dtype, g.dtype)
    if dt.kind != "f":
        dt = x.dtype
    return tuple(a if a.dtype == dt else astype(a, dt) for a in (x, y, g))


def max_pool_scatter(x: ndarray, y: ndarray, gy: ndarray, k) -> ndarray:
    """The gradient for ``x`` of ``y = max_pool(x, k)`` given ``gy`` (contiguous copies are made
    of ``y`` and ``gy`` where needed), laid out as ``x``: each window's winners share its
    ``gy``."""
    x, y, gy = _common(x, y, gy)
    gx = _like(x)
    return _launch("pool_scatter", x, k, y.shape, gx, (_flat(y), _flat(gy)), strides=gx)


def max_pool_gather(x: ndarray, y: ndarray, g: ndarray, k) -> ndarray:
    """The adjoint of :func:`max_pool_scatter`: each window's sum of ``g`` (any layout) at its
    winners, times their share."""
    x, y, g = _common(x, y, g)
    g = g if g.offset == 0 else copy(g)
    out = _pooled(x, k)
    return _launch("pool_gather", x, k, out.shape, out, (_flat(y), g), strides=g)

