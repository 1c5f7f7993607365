"""An LSTM's time steps in one launch on a CPU device, and their gradients in another
(lk.compile, compile/lstm_cells.py).

lstm_gemm.py makes each time step one launch (``h @ U + x_t`` and the cell). On PoCL's CPU
device a compiled LSTM step of 32 time steps still spent about 30 us of host and runtime
work per launch around 60 us of arithmetic, each way. The batch's rows do not depend on each
other: here a work-item takes ``RM`` rows through every time step, computing all the units of
its rows at each (so it reads only the ``h`` it wrote itself, and needs no barrier), with
``gemm_rb``'s inner loop and lstm_gemm's cell. On the 2-core machine 32 steps of (32, 128)
@ (128, 512) and the cell took 1.37-1.45 ms as one launch against 2.0-2.9 ms as 32
(/tmp/me/loopk2.py, interleaved). Each work-item reads all of ``U`` at every step, so the loop
is taken while ``U`` fits a core's cache (``MAX_U_BYTES``); a GPU keeps a launch per step (a
few work-items per launch would leave it idle). The gradient's steps (lstm_gemm's
``LSTM_GRAD`` launch each: the cell's gradient, then the gates' gradient times ``U`` and the
loss's gradient of ``h`` added) go the same way, the last time step first: 31 steps at
batch 32, H 128 took 2.1-2.5 ms as 31 launches, 1.1-1.2 as one (/tmp/me/gradab.py, on a quiet
machine); the compiled LSTM step went from 9.9 to 7.0-7.4 ms with both.

Bit for bit the launches of lstm_gemm.forward and grad_product: each sum runs over K in
order with the same expression as ``gemm_rb`` (in the same contraction state), the cell and
its gradient are lstm_gemm's (tested). :func:`plan` and :func:`plan_grad` say where that
holds (each step's own launch would be the blocked kernel of the same blocking).
"""

from __future__ import annotations

import numpy as np

from .gemm_paths import _EPI_ARGS
from .lstm import CELL, cell_defines
from .lstm import rows as cell_rows
from .lstm_gemm import _CELL_STEP
from .lstm_gemm import plan as step_plan
from .lstm_gemm import plan_grad as step_plan_grad
from .ndarray import CTYPES, fresh, ndarray
from .program import header, kernels, source
from .shapes import broadcast_strides

#: the largest ``U`` (bytes) whose steps run as one launch: every work-item reads all of it at
#: every time step, so it should stay in a core's L2 cache
MAX_U_BYTES = 1 << 20

# NOTE: the sums are gemm_rb's (kernels_cl/gemm.cl): `acc += av * bv` in the file's default
# contraction state, over k in order, so that each element rounds as the step's own launch.
# PRODUCT: acc[RM][VN] = RM rows of A (from a_, rows sam_ apart, sak_ along k) times the VN
# vectors of B's rows (from b_, rows ldb apart), over k_ terms
_PRODUCT = r"""
#define PRODUCT(acc, a_, sam_, sak_, b_, k_) {                                      \
    __global const T* a = (a_);                                                      \
    __global const VT* b = (b_);                                                     \
    _Pragma("unroll") for (int r = 0; r < RM; ++r)                                   \
        _Pragma("unroll") for (int v = 0; v < VN; ++v) acc[r][v] = (VT)(0);          \
    for (int k = 0; k < (k_); ++k) {                                                 \
        VT bv[VN];                                                                   \
        _Pragma("unroll") for (int v = 0; v < VN; ++v) bv[v] = b[v];                 \
        b += ldb;                                                                    \
        _Pragma("unroll") for (int r = 0; r < RM; ++r) {                             \
            const T av = a[r * (sam_)];                                              \
            _Pragma("unroll") for (int v = 0; v < VN; ++v) acc[r][v] += av * bv[v];  \
        }                                                                            \
        a += (sak_);                                                                 \
    }                                                                                \
}
"""
_SRC = r"""
__kernel void lk_lstm_loop(const int steps, const int K, const long MB,
                           __global const T* xw, const long xw_o, const long xw_sb,
                           const long xw_st,
                           __global const VT* B, const long b_o, const long ldb,
                           __global const T* h0, const long h0_o, const long h0_sm,
                           const long h0_sk,
                           __global const T* c0, const long c0_o, const long c0_ld,
                           __global T* X, __global T* Cs, __global T* Hs)
{
    const long ib = get_global_id(0);  // RM rows of the batch, through every step
    const long lh = K, scm = 4 * K, e_si = xw_sb;
    __global const T* bias = xw;
    __global T* C = X;
    for (int t = 0; t < steps; ++t) {
        const long bias_o = xw_o + t * xw_st, c_o = t * MB * 4 * K;
        __global const T* lcp = t ? Cs : c0;
        const long lcp_o = t ? (t - 1) * MB * K : c0_o, lcp_ld = t ? K : c0_ld;
        __global T* lc = Cs + t * MB * K;
        __global T* lhout = Hs + t * MB * K;
        const long sam = t ? K : h0_sm, sak = t ? 1 : h0_sk;
        __global const T* a0 = (t ? Hs + (t - 1) * MB * K : h0 + h0_o) + ib * RM * sam;
        for (int jv = 0; jv < K / VW; ++jv) {  // NOTE: the gates of VW units
            VT acc[RM][VN];
            PRODUCT(acc, a0, sam, sak, B + b_o + (long)jv * VN, K)
            for (int r = 0; r < RM; ++r) LSTM_CELL(acc[r], ib * RM + r, (long)jv * VW);
        }
    }
}
"""

# NOTE: the gradient's steps in the order given (the last time step first), each lstm_gemm's
# LSTM_GRAD launch: the cell's gradient of the work-item's rows (CELL_GRAD reads cp, x, gc,
# gh and writes gcp, gx: here the step's), then the product of its gates' gradient with U and
# the epilogue's addition, summed and added as gemm_rb does
_GRAD_SRC = r"""
__kernel void lk_lstm_loop_grad(const int steps, const int K, const long MB, const long h,
                                __global const T* cp_b, const long cp_bo, const long cp_bld,
                                const long cp_st,
                                __global const T* x_b, const long x_bo, const long x_bld,
                                const long x_st,
                                __global const T* gc_b, const long gc_bo, const long gc_bld,
                                __global const T* gh_b, const long gh_bo, const long gh_bld,
                                __global const VT* B, const long b_o, const long ldb,
                                __global T* GCP, __global T* GX, __global T* OUT,
                                const long add_st EPI_ARGS)
{
    const long ib = get_global_id(0);  // RM rows of the batch, through every step
    const long N = VN * VW;
#if BIAS
    const long add_o = bias_o;
#endif
    for (int s = 0; s < steps; ++s) {
        __global const T* cp = cp_b;
        __global const T* x = x_b;
        const long cp_o = cp_bo + s * cp_st, cp_ld = cp_bld, x_o = x_bo + s * x_st;
        const long x_ld = x_bld;
        __global const T* gc = s ? GCP : gc_b;
        __global const T* gh = s ? OUT : gh_b;
        const long gc_o = s ? (s - 1) * MB * h : gc_bo, gc_ld = s ? h : gc_bld;
        const long gh_o = s ? (s - 1) * MB * N : gh_bo, gh_ld = s ? N : gh_bld;
        __global T* gcp = GCP + s * MB * h;
        __global T* gx = GX + s * MB * K;
        for (int r_ = 0; r_ < RM; ++r_)
            for (long j_ = 0; j_ < h; j_ += W) CELL_GRAD(ib * RM + r_, j_)
        VT acc[RM][VN];
        PRODUCT(acc, gx + ib * RM * K, K, 1, B + b_o, K)
#if BIAS
        {
            const long bias_o = add_o + s * add_st;  // NOTE: this step's array to add
            for (int r = 0; r < RM; ++r)
                for (int v = 0; v < VN; ++v) {
                    T* p = (T*)&acc[r][v];
                    for (int i = 0; i < VW; ++i) EPI(p[i], ib * RM + r, v * VW + i);
                }
        }
#endif
        __global T* c = OUT + s * MB * N + ib * RM * N;
#pragma unroll
        for (int r = 0; r < RM; ++r)
#pragma unroll
            for (int v = 0; v < VN; ++v) *(__global VT*)(c + r * N + v * VW) = acc[r][v];
    }
}
"""

_ARGS = ([np.int32, np.int32, np.int64, None] + [np.int64] * 3 + [None, np.int64, np.int64]
         + [None] + [np.int64] * 3 + [None] + [np.int64] * 2 + [None] * 3)


def _kernel(rt, ct, cfg, w):
    rm, vn, vw = cfg

    def make():
        defs = {"T": ct, "VT": f"{ct}{vw}", "VW": vw, "RM": rm, "VN": vn,
                **cell_defines(ct, w)}
        src = (header(rt, (ct,), defs, what="lstm") + source("common") + CELL + _CELL_STEP
               + _PRODUCT + _SRC)
        return kernels(rt, src, {"lk_lstm_loop": _ARGS},
                       name=f"lstm loop ({ct}, {cfg}, {w})").lk_lstm_loop
    return rt.cached(("lstm_loop", ct, cfg, w), make)


def plan(h0, ug, xws, c0, u):
    """The blocking for :func:`forward` (``ug``: ``U`` interleaved, ``u``: ``U`` as the
    step's own launch reads it), or None where one launch would not be bit for bit
    lstm_gemm.forward at every step: not a CPU device, ``U`` larger than ``MAX_U_BYTES``,
    inputs ``xws`` that are not one array's time steps (the same layout, evenly apart in one
    buffer), or a step whose own launch would not be the blocked kernel of one blocking (for
    the first step's ``h0``, and for the contiguous ``h`` of the others)."""
    if len(xws) < 2 or type(ug) is not ndarray or not ug.rt.info.is_cpu:
        return None
    first = xws[0]
    if (type(first) is not ndarray or ug.size * ug.dtype.itemsize > MAX_U_BYTES
            or type(h0) is not ndarray or h0.ndim != 2 or h0.shape[1] * 4 != ug.shape[1]):
        return None
    st = _apart(xws)
    if st is None:
        return None
    once = step_plan(h0, ug, first, c0, u)
    if once is None:
        return None
    made = fresh(h0.rt, h0.shape, h0.dtype, (h0.shape[1], 1), h0.size)  # NOTE: as the step
    if step_plan(made, ug, first, made, u) != once:  # before makes h and c (only the layout)
        return None
    return once, st


def _apart(arrays):
    """How far apart in their one buffer ``arrays`` are (elements), when they are views of
    one layout evenly apart; else None."""
    first = arrays[0]
    if type(first) is not ndarray or type(arrays[1]) is not ndarray:
        return None
    st = arrays[1].offset - first.offset
    for t, a in enumerate(arrays):
        if (type(a) is not ndarray or a.data is not first.data or a._st != first._st
                or a.shape != first.shape or a.offset != first.offset + t * st):
            return None
    return st


def _views(stack, t, shape, st, size):
    v = object.__new__(ndarray)
    v.rt, v.shape, v.dtype, v.size, v._st = stack.rt, shape, stack.dtype, size, st
    v.offset, v.base, v._nbuf, v._ro, v.data = t * size, stack, stack.size, False, stack.data
    return v


def forward(h0, ug, xws, c0, planned):
    """``[(x, c, h), ...]``, lstm_gemm.forward's results for each time step in turn (from
    ``h0``, ``c0``; ``xws`` the steps' inputs), computed by one launch; ``planned`` is
    :func:`plan`'s. The results are views of three arrays, one per kind, steps first."""
    ((rm, vn, vw), w), st = planned
    rt, dt, ct = h0.rt, h0.dtype, CTYPES[h0.dtype]
    steps, first = len(xws), xws[0]
    (M, K), N = h0.shape, ug.shape[1]
    H = N // 4
    kernel = _kernel(rt, ct, (rm, vn, vw), w)
    xs = fresh(rt, (steps, M, N), dt, (M * N, N, 1), steps * M * N)
    cs = fresh(rt, (steps, M, H), dt, (M * H, H, 1), steps * M * H)
    hs = fresh(rt, (steps, M, H), dt, (M * H, H, 1), steps * M * H)
    c0_o, c0_ld = cell_rows(c0, H)
    with rt.lock:
        kernel(rt.queue, (M // rm,), (1,), steps, K, M,
               first.data, first.offset, first._st[0], st,
               ug.data, ug.offset // vw, N // vw,
               h0.data, h0.offset, h0._st[0], h0._st[1],
               c0.data, c0_o, c0_ld, xs.data, cs.data, hs.data)
    return [(_views(xs, t, (M, N), (N, 1), M * N), _views(cs, t, (M, H), (H, 1), M * H),
             _views(hs, t, (M, H), (H, 1), M * H)) for t in range(steps)]


def _grad_kernel(rt, ct, cfg, w, bias):
    rm, vn, vw = cfg

    def make():
        defs = {"T": ct, "VT": f"{ct}{vw}", "VW": vw, "RM": rm, "VN": vn, "BIAS": int(bias),
                "ACT": 0, "SGD": 0, **cell_defines(ct, w)}
        src = (header(rt, (ct,), defs, what="lstm") + source("common") + CELL
               + source("epilogue") + _PRODUCT + _GRAD_SRC)
        types = ([np.int32, np.int32, np.int64, np.int64] + ([None] + [np.int64] * 3) * 2
                 + ([None] + [np.int64] * 2) * 3 + [None] * 3 + [np.int64]
                 + (_EPI_ARGS if bias else []))
        return kernels(rt, src, {"lk_lstm_loop_grad": types},
                       name=f"lstm loop grad ({ct}, {cfg}, {w}, {bias})").lk_lstm_loop_grad
    return rt.cached(("lstm_loop_grad", ct, cfg, w, bias), make)


def plan_grad(cps, xs, gc, gh, u, adds=None, stacked=False):
    """The blocking for :func:`grad` (each step's ``cp`` and ``x`` in the order the gradient
    runs, the last time step first; the first step's ``gc`` and ``gh``; ``adds`` each step's
    array its product adds, or None), or None where one launch would not be bit for bit
    lstm_gemm.grad_product at every step (as :func:`plan` for the forward). ``stacked``:
    ``cps`` and ``xs`` are taken to be one array's steps each (lk.compile plans with the
    traced arrays, which :func:`forward` will make so)."""
    if (len(xs) < 2 or type(u) is not ndarray or not u.rt.info.is_cpu
            or u.size * u.dtype.itemsize > MAX_U_BYTES):
        return None
    apart = [0, 0] if stacked else [_apart(cps), _apart(xs)]
    apart += [_apart(adds)] if adds is not None else []
    if None in apart:
        return None
    more = (adds[0],) if adds is not None else ()
    once = step_plan_grad(cps[0], xs[0], gc, gh, u, *more)
    if once is None:
        return None
    M, H = xs[0].shape[0], xs[0].shape[1] // 4
    made = fresh(u.rt, (M, H), u.dtype, (H, 1), M * H)  # NOTE: as the step before makes them
    if step_plan_grad(cps[1], xs[1], made, made, u, *more) != once:
        return None
    return once, apart


def grad(cps, xs, gc, gh, u, planned, adds=None):
    """``[(gcp, gx, gx @ u [+ add]), ...]``, lstm_gemm.grad_product's results for each step
    in turn (see :func:`plan_grad`), computed by one launch: views of three arrays."""
    ((rm, vn, vw), w), apart = planned
    rt, dt, ct = u.rt, u.dtype, CTYPES[u.dtype]
    steps = len(xs)
    (M, K), N = xs[0].shape, xs[0].shape[1] // 4
    bias = adds is not None
    kernel = _grad_kernel(rt, ct, (rm, vn, vw), w, bias)
    gcps = fresh(rt, (steps, M, N), dt, (M * N, N, 1), steps * M * N)
    gxs = fresh(rt, (steps, M, K), dt, (M * K, K, 1), steps * M * K)
    outs = fresh(rt, (steps, M, N), dt, (M * N, N, 1), steps * M * N)
    epi = ()
    if bias:
        sti, stj = broadcast_strides(adds[0].shape, adds[0]._st, (M, N), "matmul_add")
        epi = (adds[0].data, adds[0].offset, sti, stj)
    rows = []
    for a, cols, st in ((cps[0], N, apart[0]), (xs[0], K, apart[1])):
        rows += [a.data, *cell_rows(a, cols), st]
    for a in (gc, gh):
        rows += [a.data, *cell_rows(a, N)]
    with rt.lock:
        kernel(rt.queue, (M // rm,), (1,), steps, K, M, N, *rows,
               u.data, u.offset // vw, N // vw, gcps.data, gxs.data, outs.data,
               apart[2] if bias else 0, *epi)
    return [(_views(gcps, t, (M, N), (N, 1), M * N), _views(gxs, t, (M, K), (K, 1), M * K),
             _views(outs, t, (M, N), (N, 1), M * N)) for t in range(steps)]
