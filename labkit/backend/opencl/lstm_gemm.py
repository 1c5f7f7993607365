"""An LSTM step's product and its cell in one launch, ``x = h @ U + x_t`` and then
``c, h = lstm(c_prev, x)``; and its gradient and the product of its gates' gradient with U in
one launch, ``gc_prev, gx = lstm_grad(...)`` and then ``gx @ U`` (lk.compile,
compile/lstm_cells.py).

In a compiled LSTM step on a CPU device every time step was two launches each way, with
PoCL's work per command (a gap of about 18 us) between them. Forward, the product's
work-items finish the cell: ``U``'s columns are regrouped (``interleave``) so that a
work-item's four vectors of sums are the gates a, i, f, o of its ``W`` units
(kernels_cl/gemm.cl, ``LSTM 1``); it writes the gate pre-activations where the product does
(the cell's gradient reads them) and the new cell and output where ``lk_lstm`` does. 32 steps
of (32, 128) @ (128, 512) and the cell took 2.24-2.96 ms as two launches each, 1.80-1.86 as
one, on the 2-core machine's PoCL. Backward, a work-item first computes the cell's gradient
of its rows (``lk_lstm_grad``'s statements, lstm.CELL_GRAD), then their product with ``U`` over
all the columns (``LSTM_GRAD 1``): 2.30-2.73 ms for 32 steps as two launches, 2.16-2.21 as
one.

Bit for bit the two launches: any blocking of ``gemm_rb`` sums each element over K in order,
an addition is the epilogue's, and the cell and its gradient are ``lk_lstm``'s statements
(contraction off) over vectors of its width (tested). :func:`plan` and :func:`plan_grad`
say where that holds.
"""

from __future__ import annotations

import numpy as np

from ...errors import ShapeError
from .gemm import _FAST_MIN_WORK, _MIN_COLS, _PACK_MIN_LD, _PACK_MIN_ROWS, _RB_ARGS, _local
from .gemm import config as gemm_config
from .gemm import path as gemm_path
from .gemm_paths import _EPI_ARGS
from .lstm import CELL, cell_defines, vector_width
from .lstm import fits as cell_fits
from .lstm import rows as cell_rows
from .ndarray import CTYPES, fresh, ndarray
from .program import header, kernels, source
from .shapes import broadcast_strides

_CELL_STEP = r"""
// the cell of the W units from `u` of row `row`, whose gate sums (h @ U) are the vectors
// g[0 .. 4): x = g + x_t written to C in U's order, then lk_lstm's statements
#define LSTM_CELL(g, row, u) {                                                     \
    _Pragma("OPENCL FP_CONTRACT OFF")                                              \
    __global const TS* xr_ = bias + bias_o + (row) * e_si + (u);                   \
    const CVT xa = (g)[0] + LD(xr_), xi = (g)[1] + LD(xr_ + lh);                   \
    const CVT xf = (g)[2] + LD(xr_ + 2 * lh), xo = (g)[3] + LD(xr_ + 3 * lh);      \
    __global TS* x_ = C + c_o + (row) * scm + (u);                                 \
    ST(xa, x_); ST(xi, x_ + lh); ST(xf, x_ + 2 * lh); ST(xo, x_ + 3 * lh);         \
    const CVT a_ = TANH(xa), i_ = SIG(xi), f_ = SIG(xf), o_ = SIG(xo);             \
    const CVT cn_ = a_ * i_ + f_ * LD(lcp + lcp_o + (row) * lcp_ld + (u));         \
    ST(cn_, lc + (row) * lh + (u));                                                \
    ST(o_ * TANH(cn_), lhout + (row) * lh + (u));                                  \
}
"""

_LSTM_ARGS = [np.int64, None, np.int64, np.int64, None, None]
_GRAD_ARGS = [np.int64] + [None, np.int64, np.int64] * 4 + [None, None]


def _kernel(rt, ct, cfg, w, flags, args):
    """``gemm_rb`` of blocking ``cfg`` with the cell (``W`` = ``w`` units) and the build
    macros ``flags`` (``LSTM`` or ``LSTM_GRAD``, ``BIAS``), taking ``args`` after its own."""
    rm, vn, vw = cfg

    def make():
        defs = {"T": ct, "BIAS": 0, "ACT": 0, "SGD": 0, "VT": f"{ct}{vw}", "VW": vw, "RM": rm,
                "VN": vn, **cell_defines(ct, w), **flags}
        src = (header(rt, (ct,), defs, what="lstm") + source("common") + CELL + _CELL_STEP
               + source("epilogue") + source("gemm"))
        return kernels(rt, src, {"gemm_rb": _RB_ARGS + args},
                       name=f"gemm.cl lstm ({ct}, {cfg}, {w}, {flags})").gemm_rb
    return rt.cached(("gemm_lstm", ct, cfg, w, tuple(sorted(flags.items()))), make)


_INTERLEAVE_SRC = """
__kernel void lk_interleave(const long h, __global const T* u, const long u_o,
                            __global T* out)
{
    // vector v of row k of the result is vector j of gate g in u's row: v = 4 j + g
    const long v = get_global_id(0), k = get_global_id(1), n = 4 * h;
    *(__global VT*)(out + k * n + v * W) =
        *(__global const VT*)(u + u_o + k * n + (v % 4) * h + (v / 4) * W);
}
"""


def interleave(u, w):
    """``U`` (K, 4H) with its columns regrouped ``w`` units at a time: the gates a, i, f, o of
    units ``j .. j + w - 1`` in turn (a new contiguous array). A contiguous ``U`` whose rows
    are vectors of ``w`` moves a vector per work-item: the elementwise copy of the 4-D view
    took 300 us of an LSTM step's 8 ms (a (128, 512) U on PoCL), this about 20."""
    k, n = u.shape
    h = n // 4
    ct = CTYPES.get(u.dtype)
    if not (type(u) is ndarray and u.is_contiguous and w in (2, 4, 8, 16) and h % w == 0
            and u.offset % w == 0 and ct in ("float", "double")):
        return u.reshape(k, 4, h // w, w).transpose(0, 2, 1, 3).copy().reshape(k, n)
    rt = u.rt

    def make():
        src = header(rt, (ct,), {"T": ct, "VT": f"{ct}{w}", "W": w}, what="lstm") \
            + _INTERLEAVE_SRC
        return kernels(rt, src, {"lk_interleave": [np.int64, None, np.int64, None]},
                       name=f"interleave ({ct}, {w})").lk_interleave
    kernel = rt.cached(("lstm_interleave", ct, w), make)
    out = ndarray(rt, (k, n), u.dtype)
    if out.size:
        with rt.lock:
            kernel(rt.queue, (n // w, k), None, h, u.data, u.offset, out.data)
    return out


def plan(h, b, xw, cp, u=None):
    """The blocking for ``forward(h, b, xw, cp)`` (``b``: ``U`` interleaved, ``u``: ``U`` as
    the product of the separate launches reads it, a transposed view say), or None where
    one launch would not be bit for bit the product, the addition and the cell as separate
    launches: another path than the blocked kernel for ``b`` or for ``u`` (a small product
    of a view runs as dot products over slices of K), a packed B, arrays it does not take.
    The cell's vectors are ``lk_lstm``'s (``W`` units a work-item), which must be the tuned
    blocking's vectors: a work-item's four vectors of sums are then the gates of its units
    (``interleave(U, W)``), for 4 rows (16 vectors); any blocking of ``gemm_rb`` sums each
    element over K in order, so the product is the tuned blocking's."""
    if not (type(h) is ndarray and type(b) is ndarray and type(xw) is ndarray
            and type(cp) is ndarray and h.rt is b.rt is xw.rt is cp.rt
            and h.ndim == 2 == b.ndim == xw.ndim and h.dtype == b.dtype == xw.dtype
            and h.dtype.kind == "f" and h.shape[1] == b.shape[0]):
        return None
    rt, dt = h.rt, h.dtype
    (M, K), N = h.shape, b.shape[1]
    H = N // 4
    if (N % 4 or not H or xw.shape != (M, N) or not b.is_contiguous or b._ro
            or M * N * K < _FAST_MIN_WORK or N < _MIN_COLS or not cell_fits(cp, xw)
            or gemm_path(rt, dt, 1, M, N, K, h, b) != "gemm"
            or (u is not None and (type(u) is not ndarray or u.shape != b.shape
                                   or gemm_path(rt, dt, 1, M, N, K, h, u) != "gemm"))):
        return None
    vw = gemm_config(rt, CTYPES[dt], (M, N, K))[2]
    w = vector_width(rt, dt, H)
    rm = next((r for r in (4, 2, 1) if M % r == 0), 0)
    if (w != vw or xw._st[1] != 1 or b.offset % vw
            or (M >= _PACK_MIN_ROWS and N >= _PACK_MIN_LD)):
        return None
    return (rm, 4, vw), w


def forward(h, b, xw, cp, planned):
    """``(x, c, h)``: ``x = h @ U + xw`` in U's column order and one LSTM step from ``cp``
    (the previous cell), ``b`` being ``interleave(U)`` and ``planned`` :func:`plan`'s."""
    (rm, vn, vw), w = planned
    rt, dt, ct = h.rt, h.dtype, CTYPES[h.dtype]
    (M, K), N = h.shape, b.shape[1]
    H = N // 4
    kernel = _kernel(rt, ct, (rm, vn, vw), w, {"LSTM": 1, "BIAS": 1}, _EPI_ARGS + _LSTM_ARGS)
    x = fresh(rt, (M, N), dt, (N, 1), M * N)
    c = fresh(rt, (M, H), dt, (H, 1), M * H)
    out = fresh(rt, (M, H), dt, (H, 1), M * H)
    cp_o, cp_ld = cell_rows(cp, H)
    with rt.lock:
        kernel(rt.queue, (N // (vn * vw), M // rm, 1), _local(rt, M // rm), K, M,
               h.data, h.offset, h._st[0], h._st[1], 0,
               b.data, b.offset // vw, N // vw, vn, 0,
               x.data, 0, N, 1, 0,
               xw.data, xw.offset, xw._st[0], xw._st[1],
               H, cp.data, cp_o, cp_ld, c.data, out.data)
    return x, c, out


def plan_grad(cp, x, gc, gh, u, add=None):
    """The blocking for ``grad_product(cp, x, gc, gh, u, add)``, or None where one launch
    would not be bit for bit the cell's gradient (``lk_lstm_grad``) and then ``gx @ u`` (the
    gates' gradient times ``U``, (4H, H)), plus ``add`` where given (the epilogue's addition,
    as ``matmul_add``): a work-item's rows of the product take all H columns (it computes those
    rows' gradient first), in vectors of the cell's width, so H is a few vectors (at most 16
    with its rows' sums)."""
    if not (type(u) is ndarray and type(x) is ndarray and u.rt is x.rt and u.dtype == x.dtype
            and x.dtype.kind == "f" and x.ndim == 2 == u.ndim and cell_fits(cp, x, gc, gh)):
        return None
    if add is not None and not (type(add) is ndarray and add.rt is x.rt
                                and add.dtype == x.dtype and add.ndim <= 2):
        return None
    rt, dt = x.rt, x.dtype
    (M, K), N = x.shape, x.shape[1] // 4
    if (u.shape != (K, N) or not u.is_contiguous or N < _MIN_COLS or M * N * K < _FAST_MIN_WORK
            or gemm_path(rt, dt, 1, M, N, K, x, u) != "gemm"):
        return None
    if add is not None:
        try:
            broadcast_strides(add.shape, add._st, (M, N), "matmul_add")
        except ShapeError:
            return None
    vw = gemm_config(rt, CTYPES[dt], (M, N, K))[2]
    if vector_width(rt, dt, N) != vw or N % vw or u.offset % vw:
        return None
    vn = N // vw
    rm = next((r for r in (8, 4, 2, 1) if r * vn <= 16 and M % r == 0), 0)
    return ((rm, vn, vw), vw) if rm else None


def grad_product(cp, x, gc, gh, u, planned, add=None):
    """``(gcp, gx, gx @ u [+ add])``: one LSTM step's gradient from those of its ``c`` and
    ``h``, and the gates' gradient times ``u``, ``planned`` being :func:`plan_grad`'s."""
    (rm, vn, vw), w = planned
    rt, dt, ct = x.rt, x.dtype, CTYPES[x.dtype]
    (M, K), N = x.shape, x.shape[1] // 4
    bias = add is not None
    epi = ()
    if bias:
        sti, stj = broadcast_strides(add.shape, add._st, (M, N), "matmul_add")
        epi = (add.data, add.offset, sti, stj)
    kernel = _kernel(rt, ct, (rm, vn, vw), w, {"LSTM_GRAD": 1, "BIAS": int(bias)},
                     (_EPI_ARGS if bias else []) + _GRAD_ARGS)
    gcp = fresh(rt, (M, N), dt, (N, 1), M * N)
    gx = fresh(rt, (M, K), dt, (K, 1), M * K)
    out = fresh(rt, (M, N), dt, (N, 1), M * N)
    rows = []
    for a, cols in ((cp, N), (x, K), (gc, N), (gh, N)):
        rows += [a.data, *cell_rows(a, cols)]
    with rt.lock:
        kernel(rt.queue, (1, M // rm, 1), _local(rt, M // rm), K, M,
               gx.data, 0, K, 1, 0,
               u.data, u.offset // vw, N // vw, vn, 0,
               out.data, 0, N, 1, 0, *epi,
               N, *rows, gcp.data, gx.data)
    return gcp, gx, out
