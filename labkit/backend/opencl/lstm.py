"""One LSTM step, forward and gradient, each one launch (F.lstm's cl path).

A work-item per (row, unit), or per W units as vectors (see _SRC): it reads the units' four
gate pre-activations (a, i, f, o: the four blocks of a row of x, Chainer's layout) and the
previous cell, and writes the new cell and output, or, for the gradient, the previous cell's
gradient and the four gates'. The composed form was about ten launches forward and twenty
backward per step. tanh and sigmoid are the elementwise kernels' expressions, and
floating-point contraction is off, so each operation rounds as the composed kernels do (the
order of operations is labkit.functions.recurrent's). Rows may be strided (a time step of an
(N, T, 4H) projection); columns must be contiguous.
"""

from __future__ import annotations

from .elementwise import VECTOR_WIDTH
from .ndarray import CTYPES, IDX_NP, index_ctype, ndarray
from .program import header, kernels, source

# NOTE: on a CPU device, when H is a multiple of the vector width, a work-item takes W
# consecutive units as vectors (CVT a vector type, LD/ST vector loads and stores): PoCL's vector
# exp runs on whole SIMD registers where the scalar one is a library call per element (a
# step at batch 32, H 128: 133 -> 21 us), and float32 tanh is common.cl's, with no library
# call. The forms are the elementwise kernels' (labkit/backend/opencl/core.py: tanh,
# sigmoid). With W = 1, CVT is the element type TS and the forms are the scalar ones.
#: the cell's loads, stores, tanh and sigmoid over W units (CVT: TS or a vector of W of them),
#: shared with the GEMM whose epilogue is the cell (lstm_gemm.py)
CELL = """#if W == 1
#define LD(p) (*(p))
#define ST(v, p) (*(p) = (v))
#define TANH(v) (sizeof(v) == 4 ? (fabs(v) >= 0.55f ? LK_TANH_L(v, exp(-2.0f * fabs(v))) \\
                 : LK_TANH_S(v, (v) * (v))) : ((fabs(v) >= 19.1f) ? \\
                 (CVT)(((v) > 0) - ((v) < 0)) : tanh(v)))
#define SIG(v) ((v) >= 0 ? 1 / (1 + exp(-(v))) : exp(v) / (1 + exp(v)))
#else
#define LD(p) VLOAD(0, p)
#define ST(v, p) VSTORE(v, 0, p)
#define TANH(v) (sizeof(TS) == 4 ? select(LK_TANH_S(v, (v) * (v)), \\
                       LK_TANH_L(v, exp(-2.0f * fabs(v))), fabs(v) >= (CVT)(0.55f)) : \\
                       select(tanh(v), copysign((CVT)(1), v), fabs(v) >= (CVT)(19.1f)))
#define SIG(v) select(exp(-fabs(v)) / (1 + exp(-fabs(v))), 1 / (1 + exp(-fabs(v))), \\
                      (v) >= (CVT)(0))
#endif
// the gate activations a, i, f, o of the units j .. of row r (of x: x, x_o, x_ld; h units)
#define GATES(r, j) \\
    __global const TS* xr = x + x_o + (r) * x_ld; \\
    const CVT xa = LD(xr + (j)), xi = LD(xr + h + (j)); \\
    const CVT xf = LD(xr + 2 * h + (j)), xo = LD(xr + 3 * h + (j)); \\
    const CVT a = TANH(xa), i = SIG(xi), f = SIG(xf), o = SIG(xo);
// the gradient of those units' c_prev (into gcp) and gates (into gx) from those of their
// c (gc) and h (gh), all read through their row offsets and strides (contraction off: also
// inside a kernel that has it on, lstm_gemm.py's)
#define CELL_GRAD(r, j) { \\
    _Pragma("OPENCL FP_CONTRACT OFF") \\
    GATES(r, j) \\
    const CVT cpv = LD(cp + cp_o + (r) * cp_ld + (j)); \\
    const CVT c = a * i + f * cpv; \\
    const CVT tc = TANH(c); \\
    const CVT ghv = LD(gh + gh_o + (r) * gh_ld + (j)); \\
    const CVT g = LD(gc + gc_o + (r) * gc_ld + (j)) + ghv * o * (1 - tc * tc); \\
    const CVT gi0 = g * i; \\
    const CVT gfp = g * f; \\
    ST(gfp, gcp + (r) * h + (j)); \\
    __global TS* gr = gx + (r) * 4 * h; \\
    ST(gi0 * (1 - a * a), gr + (j)); \\
    ST(gi0 * a * (1 - i), gr + h + (j)); \\
    ST(gfp * cpv * (1 - f), gr + 2 * h + (j)); \\
    ST(ghv * tc * o * (1 - o), gr + 3 * h + (j)); \\
}
"""

_SRC = """#pragma OPENCL FP_CONTRACT OFF
// this work-item's row r and first unit j
#define UNITS \\
    const IDX gid = (IDX)get_global_id(0); \\
    const IDX hv = h / W; \\
    if (gid >= n * hv) return; \\
    const IDX r = gid / hv, j = (gid % hv) * W;

__kernel void lk_lstm(const IDX n, const IDX h,
                      __global const TS* cp, const IDX cp_o, const IDX cp_ld,
                      __global const TS* x, const IDX x_o, const IDX x_ld,
                      __global TS* c, __global TS* hout)
{
    UNITS
    GATES(r, j)
    const CVT cn = a * i + f * LD(cp + cp_o + r * cp_ld + j);
    ST(cn, c + r * h + j);
    ST(o * TANH(cn), hout + r * h + j);
}

__kernel void lk_lstm_grad(const IDX n, const IDX h,
                           __global const TS* cp, const IDX cp_o, const IDX cp_ld,
                           __global const TS* x, const IDX x_o, const IDX x_ld,
                           __global const TS* gc, const IDX gc_o, const IDX gc_ld,
                           __global const TS* gh, const IDX gh_o, const IDX gh_ld,
                           __global TS* gcp, __global TS* gx)
{
    UNITS
    CELL_GRAD(r, j)
}
"""


def cell_defines(ct, w, **more) -> dict:
    """The defines ``CELL`` needs for ``w`` units of type ``ct`` a work-item."""
    return {"TS": ct, "CVT": f"{ct}{w}" if w > 1 else ct, "W": w, "VLOAD": f"vload{w}",
            "VSTORE": f"vstore{w}", **more}


def vector_width(rt, dt, h):
    """The units per work-item: the vector width, or 1 (the scalar kernels)."""
    w = VECTOR_WIDTH[dt.itemsize]
    return w if rt.info.is_cpu and h % w == 0 else 1


def rows(a, cols):
    """(offset, row stride) of a 2-D array with contiguous columns, else None."""
    if not isinstance(a, ndarray) or a.ndim != 2 or a.shape[1] != cols:
        return None
    if a.shape[1] > 1 and a._st[1] != 1:
        return None
    return a.offset, a._st[0] if a.shape[0] > 1 else cols


def fits(c_prev, x, *more) -> bool:
    """Whether the kernels take these arrays: OpenCL, one float dtype and device, rows of
    contiguous columns, x (N, 4H) and the others (N, H)."""
    if not isinstance(x, ndarray) or x.dtype.kind != "f" or x.ndim != 2:
        return False
    n, h4 = x.shape
    h = h4 // 4
    if rows(x, h4) is None:
        return False
    for a in (c_prev,) + more:
        if (rows(a, h) is None or a.shape[0] != n or a.dtype != x.dtype or a.rt is not x.rt):
            return False
    return True


def _kernel(rt, ct, idx, name, w):
    def make():
        src = header(rt, (ct,), cell_defines(ct, w, IDX=idx), what="lstm") + source(
            "common") + CELL + _SRC
        it = IDX_NP[idx]
        n_in = 2 if name == "lk_lstm" else 4
        types = [it, it] + [None, it, it] * n_in + [None, None]
        return getattr(kernels(rt, src, {name: types}, name=f"lstm:{name}:{w}"), name)
    return rt.cached((name, ct, idx, w), make)


def _launch(rt, kernel, n, h, args, w):
    total = n * (h // w)
    ls = min(256, rt.info.max_work_group_size)
    with rt.lock:
        kernel(rt.queue, (-(-total // ls) * ls,), (ls,), n, h, *args)


def forward(c_prev, x):
    """(c, h) of one step; the arrays must pass :func:`fits`."""
    rt = x.rt
    n, h4 = x.shape
    h = h4 // 4
    c = ndarray(rt, (n, h), x.dtype)
    out = ndarray(rt, (n, h), x.dtype)
    idx = index_ctype(c_prev, x, c)
    w = vector_width(rt, x.dtype, h)
    k = _kernel(rt, CTYPES[x.dtype], idx, "lk_lstm", w)
    args = []
    for a, cols in ((c_prev, h), (x, h4)):
        o, ld = rows(a, cols)
        args += [a.data, o, ld]
    _launch(rt, k, n, h, args + [c.data, out.data], w)
    return c, out


def grad(c_prev, x, gc, gh):
    """(gradient of c_prev, gradient of x) of one step from those of (c, h)."""
    rt = x.rt
    n, h4 = x.shape
    h = h4 // 4
    gcp = ndarray(rt, (n, h), x.dtype)
    gx = ndarray(rt, (n, h4), x.dtype)
    idx = index_ctype(c_prev, x, gc, gh, gx)
    w = vector_width(rt, x.dtype, h)
    k = _kernel(rt, CTYPES[x.dtype], idx, "lk_lstm_grad", w)
    args = []
    for a, cols in ((c_prev, h), (x, h4), (gc, h), (gh, h)):
        o, ld = rows(a, cols)
        args += [a.data, o, ld]
    _launch(rt, k, n, h, args + [gcp.data, gx.data], w)
    return gcp, gx
