"""The matrix product's helper kernels (labkit/backend/opencl/gemm.py runs the blocked
kernels and chooses among these): products of few outputs over a long K as dot products
(``gemm_dot``, summed with the epilogue by ``gemm_dot_finish``), a row vector times a matrix
(``gemv_rows``), an outer product (K = 1: ``gemm_outer``, with the SGD update), and B
packed in panels for the blocked kernel (its tiled transpose is transpose.py's). The epilogue
(bias, relu, the SGD update) is kernels_cl/epilogue.cl's.
"""

from __future__ import annotations

import numpy as np

from ...errors import ShapeError
from .core import add, assign, maximum, where_positive
from .elementwise import VECTOR_WIDTH
from .ndarray import CTYPES, ndarray
from .program import header, kernels, source
from .shapes import broadcast_strides

_EPI_ARGS = [None, np.int64, np.int64, np.int64]  # bias, its offset, row and column strides


#: few outputs, a long K (or a small product, ``_DOT_SMALL_WORK``), both operands contiguous
#: along K (A row-major, B column-major: a weight gradient such as gy (32, 50176) @ col.T
#: (50176, 9), a classifier's h @ W.T): each output is a dot product
#: of two contiguous rows, taken in vector registers over slices of K, the slices then summed.
#: The blocked kernels give such a product a few work-items with 50,000-long loops, or gather
#: B across work-items (3 GFLOP/s on PoCL). CPU devices only.
_DOT_MAX_OUT = 4096  # beyond, rows re-read per output cost more than blocking saves
_DOT_MIN_K = 1024
#: and a small product (between these many multiply-adds) with K from _DOT_SMALL_K on: a
#: classifier's h @ W.T, (32, 512) @ (512, 10), took 107 us in the plain kernel, 59 blocked,
#: 36 here; below the range the plain kernel is as fast, above it the blocked one is faster
_DOT_SMALL_K = 128
_DOT_SMALL_WORK = (32 * 32 * 32, 64 * 64 * 64)
_GEMV_MIN_K = 64  # a row vector's product from this inner size on (below, generic is as fast)
_DOT_SRC = """
__kernel void gemm_dot(const int M, const int N, const int K, const int kc,
                       __global const T* a, const long a_o, const long sam,
                       __global const T* b, const long b_o, const long sbn,
                       __global T* part)
{
    // a block of MB rows x NB columns of outputs per work-item, over one slice of K: each
    // vector of a row of A is used NB times and each of B MB times from registers. Rows past
    // M (columns past N) read the last one and are not written.
    const int n0 = get_global_id(0) * NB, m0 = get_global_id(1) * MB, s = get_global_id(2);
    if (n0 >= N || m0 >= M) return;
    const int k0 = s * kc;
    const int k1 = min(K, k0 + kc);
    __global const T* pa[MB];
    __global const T* pb[NB];
    for (int i = 0; i < MB; ++i) pa[i] = a + a_o + (long)min(m0 + i, M - 1) * sam;
    for (int j = 0; j < NB; ++j) pb[j] = b + b_o + (long)min(n0 + j, N - 1) * sbn;
    VT acc[MB][NB];
    for (int i = 0; i < MB; ++i)
        for (int j = 0; j < NB; ++j) acc[i][j] = (VT)(0);
    int k = k0;
    // NOTE: vector pointers where every row starts on a vector's alignment (VLOAD is a call
    // in PoCL's build: an MLP's 784-wide product at batch 1 took 1.5-2x as long through it)
    size_t starts = (size_t)k0 * sizeof(T);
    for (int i = 0; i < MB; ++i) starts |= (size_t)pa[i];
    for (int j = 0; j < NB; ++j) starts |= (size_t)pb[j];
    if (starts % sizeof(VT) == 0) {
        for (; k + W <= k1; k += W) {
            VT av[MB], bv[NB];
            for (int i = 0; i < MB; ++i) av[i] = *(__global const VT*)(pa[i] + k);
            for (int j = 0; j < NB; ++j) bv[j] = *(__global const VT*)(pb[j] + k);
            for (int i = 0; i < MB; ++i)
                for (int j = 0; j < NB; ++j) acc[i][j] += av[i] * bv[j];
        }
    }
    for (; k + W <= k1; k += W) {
        VT av[MB], bv[NB];
        for (int i = 0; i < MB; ++i) av[i] = VLOAD(0, pa[i] + k);
        for (int j = 0; j < NB; ++j) bv[j] = VLOAD(0, pb[j] + k);
        for (int i = 0; i < MB; ++i)
            for (int j = 0; j < NB; ++j) acc[i][j] += av[i] * bv[j];
    }
    for (int i = 0; i < MB; ++i) {
        if (m0 + i >= M) break;
        for (int j = 0; j < NB; ++j) {
            if (n0 + j >= N) break;
            T lanes[W];
            VSTORE(acc[i][j], 0, lanes);
            T r = 0;
            for (int l = 0; l < W; ++l) r += lanes[l];
            for (int q = k; q < k1; ++q) r += pa[i][q] * pb[j][q];
            part[((long)s * M + m0 + i) * N + n0 + j] = r;
        }
    }
}
"""


_DOT_FINISH_SRC = """
__kernel void gemm_dot_finish(const int S, const int M, const int N,
                              __global const T* part, __global T* c, const long c_o,
                              const long scm, const long scn EPI_ARGS)
{
    const int n = get_global_id(0), m = get_global_id(1);
    if (n >= N || m >= M) return;
    T acc = 0;
    for (int s = 0; s < S; ++s) acc += part[((long)s * M + m) * N + n];
    EPI(acc, m, n);
    c[c_o + m * scm + n * scn] = acc;
}
"""


def _epi_defs(epi):
    """The build macros and the kernel arguments of an epilogue (``_gemm``'s ``epi``)."""
    if epi is None:
        return {"BIAS": 0, "ACT": 0}, ()
    bias, off, si, sj, act = epi
    return ({"BIAS": int(bias is not None), "ACT": int(act)},
            () if bias is None else (bias.data, off, si, sj))


def _dot_program(rt, dt, edefs, mb=1, nb=1):
    """``gemm_dot`` (blocks of ``mb`` x ``nb`` outputs) and ``gemm_dot_finish`` (the sum of
    slices with the epilogue)."""
    ct = CTYPES[dt]
    w = VECTOR_WIDTH[dt.itemsize]
    i4, i8 = np.int32, np.int64

    def make():
        defs = {"T": ct, "VT": f"{ct}{w}", "W": w, "VLOAD": f"vload{w}", "VSTORE": f"vstore{w}",
                "MB": mb, "NB": nb, **edefs}
        src = header(rt, (ct,), defs, what="matmul") + source("epilogue") + _DOT_SRC + \
            _DOT_FINISH_SRC
        finish = [i4, i4, i4, None, None, i8, i8, i8] + (_EPI_ARGS if edefs["BIAS"] else [])
        return kernels(rt, src, {"gemm_dot": [i4, i4, i4, i4, None, i8, i8, None, i8, i8,
                                              None], "gemm_dot_finish": finish},
                       name=f"gemm_dot ({ct}, {mb}x{nb}, {edefs})")
    return rt.cached(("gemm_dot", ct, edefs["BIAS"], edefs["ACT"], mb, nb), make)


def _finish(rt, prg, S, M, N, parts, c, eargs):
    """``c`` = the sum of the S (M, N) slices of ``parts``, in order, with the epilogue."""
    with rt.lock:
        prg.gemm_dot_finish(rt.queue, (-(-N // 8) * 8, M), None, S, M, N, parts.data, c.data,
                            c.offset, c._st[-2], c._st[-1], *eargs)


def _gemm_dot(rt, dt, M, N, K, a, b, c, epi=None):
    """``c`` (M, N) = a @ b in slices of K, the slices' sums then added up (in a fixed order)
    by a second kernel that applies the epilogue and writes ``c``."""
    edefs, eargs = _epi_defs(epi)
    mb, nb = min(DOT_BLOCK[0], M), min(DOT_BLOCK[1], N)
    prg = _dot_program(rt, dt, edefs, mb, nb)
    gx, gy = -(-N // nb), -(-M // mb)
    # slices: enough work-items for every core, each slice at least 256 long
    S = max(1, min(-(-_DOT_ITEMS // (gx * gy)), K // 256))
    kc = -(-K // S)
    S = -(-K // kc)
    parts = ndarray(rt, (S, M, N), dt)
    with rt.lock:
        prg.gemm_dot(rt.queue, (gx, gy, S), None, M, N, K, kc, a.data, a.offset,
                     a._st[-2], b.data, b.offset, b._st[-1], parts.data)
    _finish(rt, prg, S, M, N, parts, c, eargs)


#: ``gemm_dot``'s outputs per work-item (rows, columns): each vector loaded is used twice.
#: Measured on PoCL (1x1 to 8x8, 64 to 1024 work-items): 2x2 was within noise of the best on
#: every shape tried and keeps 4 vector accumulators (larger blocks spill on 16-register
#: CPUs); a conv's weight gradient (32, 50176) @ (50176, 9): 2.4 -> 0.77 ms
DOT_BLOCK = (2, 2)
_DOT_ITEMS = 256  # work-items to aim for (slices of K are added until there are about this)


#: a row vector times a matrix with contiguous rows (the input gradient of a linear layer at
#: batch 1: (1, 512) @ (512, 784)): a work-item per W consecutive columns, reading B's rows as
#: vectors. The generic kernel read a column of B per output (1.4 GFLOP/s on PoCL).
_GEMV_SRC = """
__kernel void gemv_rows(const int N, const int K, __global const T* a, const long a_o,
                        const long sak, __global const VT* b, const long bv_o, const long ldv,
                        __global T* c, const long c_o EPI_ARGS)
{
    const int jv = get_global_id(0);
    if (jv * W >= N) return;
    __global const T* pa = a + a_o;
    __global const VT* pb = b + bv_o + jv;
    VT acc = (VT)(0);
    for (int k = 0; k < K; ++k) acc += pa[k * sak] * pb[k * ldv];
#if BIAS || ACT
    T* p = (T*)&acc;
    for (int i = 0; i < W; ++i) EPI(p[i], 0, jv * W + i);
#endif
    VSTORE(acc, 0, c + c_o + jv * W);
}
"""


def _gemv_ok(rt, dt, M, N, K, b) -> bool:
    if dt.kind != "f":  # NOTE: bool and small integers have no vector width here
        return False
    w = VECTOR_WIDTH[dt.itemsize]
    return (M == 1 and K >= _GEMV_MIN_K and rt.info.is_cpu
            and N % w == 0 and N >= w and b._st[-1] == 1 and b.offset % w == 0
            and b._st[-2] % w == 0)


def _gemv(rt, dt, N, K, a, b, c, epi=None):
    """``c`` (1, N), contiguous, = ``a`` (1, K) @ ``b`` (K, N) whose rows are contiguous and
    vector-aligned (``_gemv_ok``), with the epilogue ``epi``."""
    ct = CTYPES[dt]
    w = VECTOR_WIDTH[dt.itemsize]
    edefs, eargs = _epi_defs(epi)

    def make():
        defs = {"T": ct, "VT": f"{ct}{w}", "W": w, "VSTORE": f"vstore{w}", **edefs}
        src = header(rt, (ct,), defs, what="matmul") + source("epilogue") + _GEMV_SRC
        i4, i8 = np.int32, np.int64
        sig = [i4, i4, None, i8, i8, None, i8, i8, None, i8] + (_EPI_ARGS if eargs else [])
        return kernels(rt, src, {"gemv_rows": sig},
                       name=f"gemv_rows ({ct}, {edefs})").gemv_rows
    kernel = rt.cached(("gemv_rows", ct, edefs["BIAS"], edefs["ACT"]), make)
    with rt.lock:
        kernel(rt.queue, (N // w,), None, N, K, a.data, a.offset, a._st[-1], b.data,
               b.offset // w, b._st[-2] // w, c.data, c.offset, *eargs)


def _pack_panels(rt, dt, nb, K, ncols, B, panel):
    """Copy B's first ``ncols`` columns panel after panel: (nb, ncols/panel, K, panel), as a
    BLAS packs its panels, so that each work-item reads its panel sequentially."""
    b, b_o, sbk, sbn, sbb = B
    npan = ncols // panel
    packed = ndarray(rt, (nb, npan, K, panel), dt)
    src = b._view((nb, npan, K, panel), (sbb, panel * sbn, sbk, sbn), b_o)
    assign(packed, src)
    return packed


#: the SGD epilogue's arguments: the parameter, its offset and strides, the learning rate
_SGD_ARGS = {"float": [None, np.int64, np.int64, np.int64, np.float32],
             "double": [None, np.int64, np.int64, np.int64, np.float64]}


def _sgd(epi) -> int:
    """The SGD epilogue's mode (kernels_cl/epilogue.cl): 0 none, 1 the update and the product
    written, 2 the update alone (the weight's tuple ends with ``store=False``)."""
    if epi is None or len(epi) < 6 or epi[5] is None:
        return 0
    return 1 if len(epi[5]) < 6 or epi[5][5] else 2


def _epi_args(epi, i0=0, j0=0):
    """The epilogue's kernel arguments for the block whose first element is (i0, j0)."""
    if epi is None:
        return ()
    bias, off, si, sj = epi[:4]
    out = () if bias is None else (bias.data, off + i0 * si + j0 * sj, si, sj)
    if _sgd(epi):  # NOTE: a rate of the weight's type passed as it is (compile/sgd.py finds it)
        w, w_o, w_si, w_sj, lr = epi[5][:5]
        lr = lr if type(lr) is w.dtype.type else w.dtype.type(lr)
        out += (w.data, w_o + i0 * w_si + j0 * w_sj, w_si, w_sj, lr)
    return out


_OUTER_ARGS = ([np.int32] + [None] + [np.int64] * 3 + [None] + [np.int64] * 3 + [None]
               + [np.int64] * 4)


def _outer(rt, ct, nb, M, N, A, B, C, epi) -> bool:
    """C = A @ B for K = 1 (a weight gradient at batch 1) as ``gemm_outer``, with no epilogue
    or the SGD update (False, for the other kernels, with a bias or relu): a vector of a row of
    C per work-item where the rows allow whole vectors, else an element. The blocked kernel ran
    these at a fifth of memory speed: an MLP step's (512, 1) @ (1, 784) with its SGD update
    took 390-930 us on PoCL, 160 us now (66 us without the update, 145 element by element)."""
    if ct not in ("float", "double"):
        return False
    sgd = _sgd(epi)
    if epi is not None and (epi[0] is not None or epi[4] or not sgd):
        return False
    a, a_o, sam, _, sab = A
    b, b_o, _, sbn, sbb = B
    c, c_o, scm, scn, scb = C
    ow = (16 if ct == "float" else 8) if rt.info.is_cpu else (4 if ct == "float" else 2)
    whole = [b_o, sbb, c_o, scm, scb] + ([epi[5][1], epi[5][2]] if sgd else [])
    if sbn != 1 or scn != 1 or (sgd and epi[5][3] != 1) or any(x % ow for x in whole):
        ow = 1  # NOTE: PoCL makes vectors of neighbouring work-items where it can

    def make():
        defs = {"T": ct, "BIAS": 0, "ACT": 0, "SGD": int(sgd),
                "OT": f"{ct}{ow}" if ow > 1 else ct, "OW": ow}
        src = header(rt, (ct,), defs, what="matmul") + source("epilogue") + source("gemm")
        return kernels(rt, src, {"gemm_outer": _OUTER_ARGS + (_SGD_ARGS[ct] if sgd else [])},
                       name=f"gemm.cl outer ({ct}, width {ow}, sgd {int(sgd)})").gemm_outer
    kernel = rt.cached(("gemm_outer", ct, ow, sgd), make)  # NOTE: a weight gradient per step
    with rt.lock:
        kernel(rt.queue, (-(-N // ow), M, nb), None, N, a.data, a_o, sam, sab,
               b.data, b_o, sbn, sbb, c.data, c_o, scm, scn, scb, *_epi_args(epi))
    return True


def _batch_strides(x, batch_shape, op):
    """One stride for the (broadcast) batch dims of x, or None if they do not collapse."""
    st = broadcast_strides(x.shape[:-2], x._st[:-2], batch_shape, op)
    dims = [(d, s) for d, s in zip(batch_shape, st) if d != 1]
    if not dims:
        return 0
    for (_, s0), (d1, s1) in zip(dims, dims[1:]):
        if s0 != s1 * d1:
            return None
    return dims[-1][1]


def _epilogue_after(c, epi):
    """The epilogue as separate ops on a finished ``c`` (..., M, N): the same roundings."""
    bias, off, sbi, sbj, act = epi
    if act == 2:  # NOTE: the array is relu's gradient mask (kernels_cl/epilogue.cl)
        where_positive(c, bias._view(c.shape[-2:], (sbi, sbj), off), out=c)
        return
    if bias is not None:
        add(c, bias._view(c.shape[-2:], (sbi, sbj), off), out=c)
    if act:
        maximum(c, 0, out=c)


def _matrices(op, a, b):
    """``(M, K, N)`` of a 2-D ``a`` (M, K) and ``b`` (K, N), or a ShapeError naming ``op``."""
    if a.ndim != 2 or b.ndim != 2 or a.shape[1] != b.shape[0]:
        raise ShapeError(f"{op}: needs a (M, K) and b (K, N), got a.shape={a.shape}, "
                         f"b.shape={b.shape}")
    return a.shape[0], a.shape[1], b.shape[1]
