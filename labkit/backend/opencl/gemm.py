"""matmul: 2-D and batched, operands read through their strides (a transposed view is not
copied by the caller). Kernels in kernels_cl/gemm.cl.

Large float products run the register-blocked ``gemm_rb`` over the full blocks and ``gemm_gen``
over the edge strips. The blocking (rows x vectors x width) is tuned once per device, dtype and
size class (``size_class``), kept in memory and in ``<cache dir>/gemm-tuning.json``;
``LABKIT_GEMM_CONFIG=RM,VN,VW`` forces one. Like a BLAS, the fast path packs B into aligned
rows when its layout does not allow vector loads (B transposed, or rows not a multiple of the
vector width apart), and for large products (its panels are then read sequentially: at n=2048
on PoCL this took GEMM from ~107 to ~153 GFLOP/s).
"""

from __future__ import annotations

import json
import time
import warnings

import numpy as np

from ..._fs import atomic_write
from ...config import SETTINGS, kernel_cache_dir
from ...config import get as setting
from ...errors import KernelBuildError, ShapeError
from .core import asarray, assign, result_type
from .gemm_paths import (
    _DOT_MAX_OUT,
    _DOT_MIN_K,
    _DOT_SMALL_K,
    _DOT_SMALL_WORK,
    _EPI_ARGS,
    _GEMV_MIN_K,
    _SGD_ARGS,
    _batch_strides,
    _dot_program,
    _epi_args,
    _epi_defs,
    _epilogue_after,
    _finish,
    _gemm_dot,
    _gemv,
    _gemv_ok,
    _matrices,
    _outer,
    _pack_panels,
    _sgd,
)
from .ndarray import CTYPES, fresh, ndarray, same_device
from .program import header, kernels, source
from .shapes import broadcast_shapes, broadcast_strides
from .transpose import _TRANSPOSE_MIN
from .transpose import transpose_rows as _transpose_rows

CANDIDATES = {
    "float": [(8, 2, 16), (4, 2, 16), (8, 1, 16), (4, 4, 8), (8, 2, 8), (4, 1, 16), (6, 2, 16)],
    "double": [(8, 2, 8), (4, 2, 8), (4, 4, 4), (8, 1, 8)],
}
DEFAULT = {"float": (8, 2, 16), "double": (4, 2, 8)}
#: the sizes (n x n x n) each product's blocking is tuned on: the nearest in log scale
TUNING_SIZES = (512, 1024, 2048)
_MIN_COLS = 16  # a product with fewer columns (and more rows) runs as its transpose
#: below this many multiply-adds the plain kernel (``gemm_gen``, one output per work-item) is
#: as fast as the blocked one. Measured on PoCL over small products (M 1-64, N 10-512, K
#: 10-512, three layouts): the plain kernel costs about 15 us plus a multiply-add per
#: 0.4-0.7 ns, the blocked one 25-50 us at these sizes; so from 64 * 32 * 32 on (it was
#: 64 * 64 * 64) the blocked kernel runs them: (32, 10) @ (10, 512), a classifier's input
#: gradient, 67 -> 25 us; (32, 512) @ (512, 10) with W row-major 110 -> 51 us
_FAST_MIN_WORK = 64 * 32 * 32
_PACK_MIN_ROWS = 128  # from this many rows of A on, packing B pays for its copy,
_PACK_MIN_LD = 1024  # when B's rows are a page (4 KiB of floats) or more apart: each k of an
# unpacked panel then touches a new page (TLB misses), which packing removes


_GEN_ARGS = ([np.int32] * 5 + [None] + [np.int64] * 4 + [None] + [np.int64] * 4 + [None]
             + [np.int64] * 4)
_RB_ARGS = ([np.int32] * 2 + [None] + [np.int64] * 4 + [None] + [np.int64] * 4 + [None]
            + [np.int64] * 4)


#: a product whose rows are not a multiple of the blocking's takes the rows left in a partial
#: last block of its launch where they waste at most 1/TAIL_IN_BLOCK of the rows (the block's
#: rows past the end compute and write nothing useful) and the whole blocks' work-groups are
#: one block each (on a CPU device work-groups of 2-8 blocks would gain a group of mostly
#: idle items: (129, 512) @ (512, 512) in 8-row blocks 0.37 -> 0.45 ms), else in a second
#: launch: the (512, 784) @ (784, 32)-like products of an MLP step at batch 32 in 6-row blocks
#: were two launches each (a launch costs about 7 us of host time, and a program is built for
#: the tail's rows), 9 of the step's 34 launches; (512, 512) @ (512, 32) 0.168 -> 0.142 ms
TAIL_IN_BLOCK = 16
#: and a product of at most this many multiply-adds always (its waste is a few us, a launch
#: about 13 us of a PoCL device's time: an MLP's (10, 32) @ (32, 512) weight gradient)
TAIL_ANYWAY = 1 << 18

#: elements of a transposed A (its columns contiguous) from which it is made row-major first
A_TRANSPOSE_MIN = _TRANSPOSE_MIN

#: row blocks per work-group of ``gemm_rb`` on a CPU device (the largest that divides them)
WG_ROWS = (8, 4, 2, 1)


def _local(rt, row_blocks):
    """``gemm_rb``'s work-group shape: on a CPU device a column of up to 8 row blocks that
    share one panel of B. A CPU runtime runs a work-group's items one after another on one
    core, so the panel is read from memory once and then from cache for the next row blocks;
    left to the runtime (PoCL picks groups along the panels), 1024^3 ran at 141-143 GFLOP/s
    here and at 184-216 with (1, 8, 1), 2048^3 at 153-158 and 227. A GPU's runtime picks."""
    if not rt.info.is_cpu:
        return None
    return (1, next(d for d in WG_ROWS if row_blocks % d == 0), 1)


def _program(rt, ct, cfg=None, bias=False, act=0, sgd=False):
    """``gemm_gen`` (and with a blocking ``cfg``, ``gemm_rb``) for element type ``ct``; with
    ``bias``, ``act`` (1: relu) and ``sgd`` their epilogue (kernels_cl/epilogue.cl)."""
    defs = {"T": ct, "BIAS": int(bias), "ACT": int(act), "SGD": int(sgd)}
    extra = (_EPI_ARGS if bias else []) + (_SGD_ARGS[ct] if sgd else [])
    signatures = {"gemm_gen": _GEN_ARGS + extra}
    if cfg is not None:
        rm, vn, vw = cfg
        defs.update(VT=f"{ct}{vw}", VW=vw, RM=rm, VN=vn)
        signatures["gemm_rb"] = _RB_ARGS + extra
    src = header(rt, (ct,), defs, what="matmul") + source("epilogue") + source("gemm")
    return kernels(rt, src, signatures, name=f"gemm.cl ({ct}, {cfg}, bias {int(bias)}, "
                                             f"act {act}, sgd {int(sgd)})")


def _tuning_file():
    return kernel_cache_dir() / "gemm-tuning.json"


def _device_key(rt):
    return rt.info.hardware  # NOTE: a derived device runs on the same hardware


def size_class(M, N, K) -> int:
    """The tuning size for an M x N x K product: the one of ``TUNING_SIZES`` nearest to its
    geometric mean side in log scale. The best blocking depends on the size (on PoCL (6,2,16)
    and (8,2,16) tie at 768 and differ 1.6x at 1024; on an H200 the best at 2048 is 2.5x the
    best at 768), so each class is tuned on its own size."""
    side = (float(M) * N * K) ** (1 / 3)
    for lo, hi in zip(TUNING_SIZES, TUNING_SIZES[1:]):
        if side < (lo * hi) ** 0.5:
            return lo
    return TUNING_SIZES[-1]


#: bumped when the kernel or its launch changes what the timings mean (a stored choice of an
#: older launch is tuned again)
TUNING_VERSION = 3


def tuning_key(rt, ct, n) -> str:
    return f"{_device_key(rt)}|{ct}|n{n}|v{TUNING_VERSION}"


def config(rt, ct, shape=None):
    """The blocking ``(RM, VN, VW)`` for ``gemm_rb`` on this device and type, for a product of
    ``shape`` (M, N, K; a 1024-cube when None): forced by ``LABKIT_GEMM_CONFIG``, else tuned
    on first use of its size class and kept in memory and on disk."""
    forced = setting("LABKIT_GEMM_CONFIG")
    if forced:
        return forced
    n = size_class(*shape) if shape is not None else 1024
    got = rt.tuned.get(("gemm", ct, n))
    if got:
        return got
    with rt.build_lock:  # NOTE: two threads that miss together tune once
        got = rt.tuned.get(("gemm", ct, n))
        if got:
            return got
        key = tuning_key(rt, ct, n)
        cfg = _stored_blocking(_read_tuning().get(key))
        if cfg is None:
            cfg, timings = tune(rt, ct, n)
            # NOTE: a default chosen because every candidate failed, or a choice the timings
            # could not separate from noise, stays in memory only: the next process tunes again
            if timings and timings.pop("noisy", None) is None:
                stored = _read_tuning()  # re-read: another process may have added its device
                stored[key] = {"config": list(cfg), "ms": timings}
                try:
                    atomic_write(_tuning_file(), json.dumps(stored, indent=1))
                except OSError:
                    pass  # a read-only cache dir only costs tuning time in the next process
        rt.tuned[("gemm", ct, n)] = cfg
    return cfg


def _read_tuning() -> dict:
    try:
        stored = json.loads(_tuning_file().read_text())
    except (OSError, ValueError):
        return {}
    return stored if isinstance(stored, dict) else {}


def _stored_blocking(entry):
    """The blocking of a tuning-file entry, or None when there is none or it is not valid
    (an entry edited by hand, or from another version: tuned again)."""
    try:
        return SETTINGS["LABKIT_GEMM_CONFIG"].parse(",".join(map(str, entry["config"])))
    except (KeyError, TypeError, ValueError):
        return None


def _time(run, reps, budget):
    """The best of at least ``reps`` timed calls, more while under ``budget`` seconds (a fast
    device gets more repeats, so that its minimum is not one lucky or unlucky call); and the
    median, to tell noise."""
    times = []
    while len(times) < reps or (sum(times) < budget and len(times) < 50):
        t = time.perf_counter()
        run()
        times.append(time.perf_counter() - t)
    times.sort()
    return times[0], times[len(times) // 2]


def tune(rt, ct, n=1024):
    """Time every candidate blocking on an n x n x n product; return the best and the times
    (best milliseconds by ``"RM,VN,VW"``). Each candidate is built and run once untimed, then
    timed repeatedly (the minimum counts); the two best are timed again, alternately, when
    they are within 5% of each other. When the winner's median is far from its minimum (a
    busy machine), the timings carry ``"noisy": True`` and the choice is not stored. A
    candidate that the device cannot build or run (an OpenCL error) is skipped; any other
    error propagates. With no candidate left, the default blocking and empty timings come
    back, with a warning."""
    import pyopencl as cl  # NOTE: see context.py

    dt = np.float32 if ct == "float" else np.float64
    rng = np.random.default_rng(0)
    a = asarray(rng.standard_normal((n, n)).astype(dt), device=rt)
    b = asarray(rng.standard_normal((n, n)).astype(dt), device=rt)
    best, median, failed = {}, {}, {}

    def runner(cfg):
        def run():
            _matmul2(a, b, cfg=cfg)
            rt.finish()
        return run

    for cfg in CANDIDATES[ct]:
        if (cfg[1] * cfg[2]) > n:
            continue
        name = ",".join(map(str, cfg))
        try:
            runner(cfg)()  # builds the kernel: never timed
            best[name], median[name] = _time(runner(cfg), 3, 0.05)
        except (cl.Error, KernelBuildError) as e:
            failed[name] = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
    if not best:
        warnings.warn(f"matmul: no GEMM blocking could run on cl:{rt.info.index} "
                      f"({rt.info.name}): {failed}; using {DEFAULT[ct]} in this process "
                      "without caching it", RuntimeWarning, stacklevel=3)
        return DEFAULT[ct], {}
    top = sorted(best, key=best.get)[:2]
    if len(top) == 2 and best[top[1]] <= 1.05 * best[top[0]]:
        for _ in range(3):  # a near tie: alternate, so that drift hits both alike
            for name in top:
                t, m = _time(runner(_parse(name)), 2, 0.0)
                best[name] = min(best[name], t)
                median[name] = min(median[name], m)
    win = min(best, key=best.get)
    timings = {k: round(v * 1e3, 3) for k, v in best.items()}
    if median[win] > 1.25 * max(best[win], 1e-9):
        timings["noisy"] = True
    return _parse(win), timings


def _parse(name):
    return tuple(int(x) for x in name.split(","))


def _matmul2(a, b, cfg=None):
    out = ndarray(a.rt, (a.shape[0], b.shape[1]), a.dtype)
    _gemm(a.rt, a.dtype, 1, a.shape[0], b.shape[1], a.shape[1],
          (a, a.offset, a._st[0], a._st[1], 0), (b, b.offset, b._st[0], b._st[1], 0),
          (out, 0, out._st[0], out._st[1], 0), cfg=cfg)
    return out


def _gemm(rt, dt, nb, M, N, K, A, B, C, cfg=None, epi=None, swapped=False):
    """C = A @ B; ``epi``: None, or ``(bias, offset, sbi, sbj, act)``, the epilogue each element
    (i, j) of C gets (``bias`` an ndarray or None; ``act`` 0, or 1 for relu)."""
    ct = CTYPES[dt]
    q = rt.queue
    if M == 0 or N == 0:
        return
    if K == 0:
        assign(C[0], 0)
        if epi is not None:
            _epilogue_after(C[0], epi)
        return
    if K == 1 and _outer(rt, ct, nb, M, N, A, B, C, epi):
        return
    fast = ct in ("float", "double") and M * N * K >= _FAST_MIN_WORK
    # NOTE: fewer columns than a vector (a classifier's 10) left every element to gemm_gen
    # (4 GFLOP/s): C.T = B.T @ A.T has them as rows
    if fast and not swapped and ((B[3] != 1 and _MIN_COLS <= M < N) or N < _MIN_COLS <= M):
        # NOTE: B's rows are not contiguous (a linear layer's x @ W.T), so the blocked kernel
        # would pack all of B (N x K) at every call. C.T = B.T @ A.T packs A.T instead (M x
        # K): for (32, 784) @ (784, 512) that is 25k elements copied instead of 401k
        a, a_o, sam, sak, sab = A
        b, b_o, sbk, sbn, sbb = B
        c, c_o, scm, scn, scb = C
        if epi is not None:
            bias, e_o, sbi, sbj, act = epi[:5]
            w = epi[5] if _sgd(epi) else None  # NOTE: the weight's strides swap too
            epi = (bias, e_o, sbj, sbi, act, w and (w[0], w[1], w[3], w[2], *w[4:]))
        return _gemm(rt, dt, nb, N, M, K, (b, b_o, sbn, sbk, sbb), (a, a_o, sak, sam, sab),
                     (c, c_o, scn, scm, scb), cfg=cfg, epi=epi, swapped=True)
    bias, act = (None, 0) if epi is None else (epi[0], epi[4])
    done_n = 0  # NOTE: the blocks take every row of the columns before done_n
    if fast:
        if cfg is None:
            cfg = config(rt, ct, (M, N, K))
        rm, vn, vw = cfg
        mb, nbk = (M // rm) * rm, (N // (vn * vw)) * (vn * vw)
        w2 = ((N - nbk) // vw) * vw  # NOTE: columns right of the panels, whole vectors
        if (N >= 3 * vn * vw and A[2] == 1 and A[3] != 1 and (nb == 1 or A[4])
                and M * K >= A_TRANSPOSE_MIN):
            # NOTE: A is a transposed matrix (its columns contiguous: a weight gradient
            # dz.T @ x): each k read a piece of a new line of every row block's A, once for
            # each panel of columns; made row-major by tiles, each work-item streams its rows
            # instead. On PoCL, the transpose included: an MLP's (512, 32) @ (32, 784) 197 ->
            # 151 us, an LSTM's (512, 992) @ (992, 128) 860 -> 661; with two panels, (512,
            # 1024) @ (1024, 64), the transpose costs what it saves (not done). The same sums
            # in the same order
            A = _transpose_rows(rt, dt, nb, M, K, A)
        if (nbk or w2) and B[3] != 1 and B[2] == 1 and K * N >= _TRANSPOSE_MIN:
            # NOTE: B is a transposed matrix (its columns contiguous, both operands read along
            # K: a weight gradient gy @ col.T): a tiled transpose makes its rows contiguous,
            # where packing its panels gathered every element from another row (a (12544, 64)
            # B: 4.4 ms to pack, 1.0 ms to transpose)
            B = _transpose_rows(rt, dt, nb, K, N, B)
        # NOTE: blocks of rm rows, the last of them partial where that wastes little (see
        # TAIL_IN_BLOCK), else a second launch for the M - mb rows left under them; panels of
        # vn vectors, then blocks of one vector for the columns left of a panel's width: a
        # work-item per element there ran at 5-15 GFLOP/s (an MLP step's 784- and 10-wide
        # products: 1.8 of 6.6 ms)
        if (mb and ((rm - M + mb) * TAIL_IN_BLOCK <= M or M * N * K <= TAIL_ANYWAY)
                and _local(rt, mb // rm) in (None, (1, 1, 1))):
            mb = M
        for j0, width, v in ((0, nbk, vn), (nbk, w2, 1)):
            if not width:
                continue
            Bj = (B[0], B[1] + j0 * B[3], B[2], B[3], B[4])
            panels = _panels(rt, dt, nb, M, K, width, Bj, v * vw, vw)
            if mb:
                _blocked(rt, ct, nb, K, (rm, v, vw), A, panels, C, epi, 0, j0, mb, width)
            if M > mb:
                _blocked(rt, ct, nb, K, (M - mb, v, vw), A, panels, C, epi, mb, j0, M - mb,
                         width)
            done_n = j0 + width
    n = N - done_n  # NOTE: the columns past the last whole vector (or all of them)
    if n == 0:
        return
    prg = _program(rt, ct, None, bias is not None, act, _sgd(epi))
    a, a_o, sam, sak, sab = A
    b, b_o, sbk, sbn, sbb = B
    c, c_o, scm, scn, scb = C
    with rt.lock:
        prg.gemm_gen(q, (-(-n // 8) * 8, -(-M // 4) * 4, nb), None, M, n, K, 0, done_n,
                     a.data, a_o, sam, sak, sab, b.data, b_o, sbk, sbn, sbb,
                     c.data, c_o, scm, scn, scb, *_epi_args(epi))


def _panels(rt, dt, nb, M, K, ncols, B, panel, vw):
    """B's first ``ncols`` columns as ``gemm_rb`` reads them: ``(buffer, offset, ldb, sbj,
    sbb)`` in vectors, B in place when its rows are contiguous and aligned, else packed panel
    after panel (also for large products whose rows of B are a page or more apart)."""
    bufb, b_o, sbk, sbn, sbb = B
    if (M >= _PACK_MIN_ROWS and sbk >= _PACK_MIN_LD) or not (
            sbn == 1 and b_o % vw == 0 and sbk % vw == 0 and sbb % vw == 0):
        packed = _pack_panels(rt, dt, nb, K, ncols, B, panel)
        return packed, 0, panel // vw, K * (panel // vw), (ncols // panel) * K * (panel // vw)
    return bufb, b_o // vw, sbk // vw, panel // vw, sbb // vw


def _blocked(rt, ct, nb, K, cfg, A, panels, C, epi, i0, j0, m, n):
    """``gemm_rb`` with blocking ``cfg`` on rows [i0, i0 + m) and columns [j0, j0 + n) of C
    (n a multiple of its panel; the last block of rows partial where m is not a multiple of
    them), B's columns from ``panels`` (``_panels``, starting at column j0)."""
    rm, vn, vw = cfg
    bias, act = (None, 0) if epi is None else (epi[0], epi[4])
    eargs = _epi_args(epi, i0, j0)
    bufb, b_o, ldb, sbj, sbb = panels
    a, a_o, sam, sak, sab = A
    c, c_o, scm, scn, scb = C
    prg = _program(rt, ct, cfg, bias is not None, act, _sgd(epi))
    blocks = -(-m // rm)
    # NOTE: the whole blocks' work-group (with one block more: 1025 rows in 8s, 13 ms for 8)
    local = _local(rt, m // rm)
    with rt.lock:
        prg.gemm_rb(rt.queue, (n // (vn * vw), blocks, nb), local, K, m,
                    a.data, a_o + i0 * sam, sam, sak, sab,
                    bufb.data, b_o, ldb, sbj, sbb,
                    c.data, c_o + i0 * scm + j0 * scn, scm, scn, scb, *eargs)


#: a product whose inner dimension is long against its outer ones (a convolution's weight
#: gradient: (64, 12544) @ (12544, 288)) is split along K into slices of about SPLIT_K, run
#: as one batched product and summed: each work-item's panel of B then stays in cache, where
#: a 12,544-long panel did not (57 -> 253 GFLOP/s for (288, 12544) @ (12544, 64) on PoCL)
SPLIT_K = 1536
SPLIT_MIN_K = 4096


def _split_k(rt, dt, M, N, K) -> int:
    """How many slices of K the product runs as (0: not split)."""
    if K < SPLIT_MIN_K or K < 8 * max(M, N) or dt.kind != "f" or not rt.info.is_cpu:
        return 0
    return max(2, round(K / SPLIT_K))


def _gemm_split(rt, dt, S, M, N, K, a, b, c, epi=None):
    """``c`` = a @ b as S slices of K (a batched product; the remainder of K that S does not
    divide as one more slice), summed in order with the epilogue by ``gemm_dot_finish``."""
    kc = K // S
    rem = K - S * kc
    parts = ndarray(rt, (S + (1 if rem else 0), M, N), dt)
    sak, sbk = a._st[-1], b._st[-2]
    _gemm(rt, dt, S, M, N, kc, (a, a.offset, a._st[-2], sak, kc * sak),
          (b, b.offset, sbk, b._st[-1], kc * sbk), (parts, 0, N, 1, M * N))
    if rem:
        _gemm(rt, dt, 1, M, N, rem, (a, a.offset + S * kc * sak, a._st[-2], sak, 0),
              (b, b.offset + S * kc * sbk, sbk, b._st[-1], 0), (parts, S * M * N, N, 1, 0))
    edefs, eargs = _epi_defs(epi)
    _finish(rt, _dot_program(rt, dt, edefs), parts.shape[0], M, N, parts, c, eargs)


def path(rt, dt, nb, M, N, K, a, b) -> str:
    """Which kernels ``a @ b`` runs: ``"dot"`` (dot products over slices of K), ``"gemv"``,
    ``"split"`` (slices of K as a batch) or ``"gemm"``. Each element of ``"gemm"`` is summed
    over K in order, whatever the operands' layouts; the others sum in another order (so
    lk.compile changes an operand's layout only where both layouts take ``"gemm"``)."""
    work = M * N * K
    if (nb == 1 and a._st[-1] == 1 and b._st[-2] == 1 and M * N <= _DOT_MAX_OUT
            and (K >= _DOT_MIN_K or (M == 1 and K >= _GEMV_MIN_K)
                 or (K >= _DOT_SMALL_K and _DOT_SMALL_WORK[0] <= work < _DOT_SMALL_WORK[1]))
            and dt.kind == "f" and rt.info.is_cpu):
        return "dot"  # NOTE: also x @ W.T at batch 1, and a classifier's h @ W.T
    if nb == 1 and _gemv_ok(rt, dt, M, N, K, b):
        return "gemv"
    if nb == 1 and _split_k(rt, dt, M, N, K):
        return "split"
    return "gemm"


def _product(rt, dt, nb, M, N, K, a, b, sa, sb, c, epi=None):
    """``c`` = a @ b by the path that suits the shapes (``path``), with the epilogue ``epi``
    (``_gemm``) fused where the path has one, else applied after it."""
    way = path(rt, dt, nb, M, N, K, a, b)
    if way == "dot":
        _gemm_dot(rt, dt, M, N, K, a, b, c, epi)
    elif way == "gemv":
        _gemv(rt, dt, N, K, a, b, c, epi)
    elif way == "split":
        _gemm_split(rt, dt, _split_k(rt, dt, M, N, K), M, N, K, a, b, c, epi)
    else:
        _gemm(rt, dt, nb, M, N, K, (a, a.offset, a._st[-2], a._st[-1], sa),
              (b, b.offset, b._st[-2], b._st[-1], sb), (c, 0, N, 1, M * N), epi=epi)


def linear(a, b, bias=None, axis=1, relu=False) -> ndarray:
    """``a @ b`` for 2-D ``a`` (M, K) and ``b`` (K, N) of one float dtype, then ``+ bias`` and
    relu in the product kernel's epilogue (kernels_cl/epilogue.cl; the dot-product path's
    second kernel). ``bias`` is 1-D: one value per column of the result (``axis=1``,
    a linear layer's (N,)) or per row (``axis=0``, a convolution's (M,) channels). The result
    is bit for bit ``maximum(a @ b + bias, 0)`` computed as separate ops."""
    rt = same_device("linear", (a, b) if bias is None else (a, b, bias))
    if axis not in (0, 1):
        raise ValueError(f"linear: axis must be 0 (a bias per row) or 1 (per column), got "
                         f"{axis!r}")
    M, K, N = _matrices("linear", a, b)
    dt = a.dtype
    if b.dtype != dt or dt.kind != "f" or (bias is not None and bias.dtype != dt):
        raise TypeError(f"linear: a, b and bias must share one float dtype, got {a.dtype}, "
                        f"{b.dtype}" + ("" if bias is None else f" and {bias.dtype}"))
    epi = None
    if bias is not None or relu:
        if bias is not None:
            want = N if axis == 1 else M
            if bias.shape != (want,):
                raise ShapeError(f"linear: bias must have shape ({want},) along axis {axis} of "
                                 f"the ({M}, {N}) result, got {bias.shape}")
            st = bias._st[0]
            epi = (bias, bias.offset, 0 if axis == 1 else st, st if axis == 1 else 0, int(relu))
        else:
            epi = (None, 0, 0, 0, 1)
    c = ndarray(rt, (M, N), dt)
    _product(rt, dt, 1, M, N, K, a, b, 0, 0, c, epi)
    return c


def matmul_add(a, b, c, mask=False) -> ndarray:
    """``a @ b + c`` for 2-D ``a`` (M, K) and ``b`` (K, N) and ``c`` broadcastable to (M, N),
    of one float dtype: ``c`` read in the product kernel's epilogue (an LSTM step's
    ``x_t + h @ U.T``). Bit for bit the product and the addition computed as separate ops.
    With ``mask``, ``c`` is relu's gradient mask: ``where_positive(a @ b, c)`` instead."""
    rt = same_device("matmul_add", (a, b, c))
    M, K, N = _matrices("matmul_add", a, b)
    dt = a.dtype
    if b.dtype != dt or c.dtype != dt or dt.kind != "f":
        raise TypeError(f"matmul_add: a, b and c must share one float dtype, got {a.dtype}, "
                        f"{b.dtype} and {c.dtype}")
    sti, stj = broadcast_strides(c.shape, c._st, (M, N), "matmul_add")
    out = ndarray(rt, (M, N), dt)
    _product(rt, dt, 1, M, N, K, a, b, 0, 0, out, (c, c.offset, sti, stj, 2 if mask else 0))
    return out


def matmul(a, b, out=None):
    """NumPy's matmul: 1-D operands are promoted and the added axis removed; batch dims
    broadcast."""
    if (out is None and type(a) is ndarray and type(b) is ndarray and a.rt is b.rt
            and len(a.shape) == 2 == len(b.shape) and a.shape[1] == b.shape[0]
            and a.dtype == b.dtype and a.dtype.kind == "f"):
        # NOTE: two matrices of one float dtype (a layer's products): none of the promotion,
        # broadcasting and reshaping below applies (about 8 us of host time a product)
        (M, K), N = a.shape, b.shape[1]
        c = fresh(a.rt, (M, N), a.dtype, (N, 1), M * N)
        _product(a.rt, a.dtype, 1, M, N, K, a, b, 0, 0, c)
        return c
    rt = same_device("matmul", (a, b))
    if not isinstance(a, ndarray) or not isinstance(b, ndarray):
        raise TypeError("matmul: both operands must be arrays (scalars: use multiply)")
    if a.ndim == 0 or b.ndim == 0:
        raise ShapeError(f"matmul: operands must have at least one dimension, got shapes "
                         f"{a.shape} and {b.shape}; use multiply for scalars")
    dt = result_type(a, b)
    if a.dtype != dt:
        a = a.astype(dt)
    if b.dtype != dt:
        b = b.astype(dt)
    va = a.ndim == 1
    vb = b.ndim == 1
    if va:
        a = a.reshape(1, -1)
    if vb:
        b = b.reshape(-1, 1)
    M, K = a.shape[-2:]
    K2, N = b.shape[-2:]
    if K != K2:
        raise ShapeError(
            f"matmul: a has {K} columns but b has {K2} rows (a.shape={a.shape}, "
            f"b.shape={b.shape}); the last axis of a must match the second-to-last of b")
    batch = broadcast_shapes(a.shape[:-2], b.shape[:-2], op="matmul (batch dimensions)")
    nb = int(np.prod(batch)) if batch else 1
    sa = _batch_strides(a, batch, "matmul")
    if sa is None:
        a = a.broadcast_to(batch + (M, K)).copy()
        sa = K * M
    sb = _batch_strides(b, batch, "matmul")
    if sb is None:
        b = b.broadcast_to(batch + (K, N)).copy()
        sb = K * N
    c = ndarray(rt, batch + (M, N), dt)
    _product(rt, dt, nb, M, N, K, a, b, sa, sb, c)
    shape = batch + ((M,) if not va else ()) + ((N,) if not vb else ())
    res = c.reshape(shape)
    if out is not None:
        assign(out, res)
        return out
    return res


def dot(a, b):
    if a.ndim <= 2 and b.ndim <= 2:
        return matmul(a, b)
    raise NotImplementedError("dot: only 1-D and 2-D operands; use matmul for batches")


def matmul_sgd(a, b, w, lr, store=True):
    """``a @ b`` for 2-D float ``a`` (M, K) and ``b`` (K, N), and in the same kernel ``w -= lr *
    (a @ b)`` on the contiguous (M, N) parameter ``w`` (``lr`` a Python number or a NumPy
    scalar of its type): a weight's gradient and its plain SGD update (lk.compile), bit for
    bit the product and then the optimizer's kernel. None, with nothing computed, where that
    is not sure: another path than the blocked kernels (``path``: other sums, no such
    epilogue), or a ``w`` of another kind, or sharing memory with ``a`` or ``b``. With
    ``store=False`` the product is not written: the array returned is left as allocated (a
    weight's gradient nothing reads in the step: at batch 1 the (512, 784) update 160 -> 90
    us of device time on PoCL)."""
    if not (type(a) is ndarray and type(b) is ndarray and type(w) is ndarray
            and a.rt is b.rt is w.rt and a.ndim == 2 == b.ndim and a.shape[1] == b.shape[0]
            and a.dtype == b.dtype == w.dtype and a.dtype.kind == "f"
            and w.shape == (a.shape[0], b.shape[1]) and w.is_contiguous and not w._ro
            and w.data not in (a.data, b.data) and type(lr) in (int, float, w.dtype.type)):
        return None
    (M, K), N, rt, dt = a.shape, b.shape[1], a.rt, a.dtype
    if M * N * K == 0 or path(rt, dt, 1, M, N, K, a, b) != "gemm":
        return None
    c = fresh(rt, (M, N), dt, (N, 1), M * N)
    _gemm(rt, dt, 1, M, N, K, (a, a.offset, *a._st, 0), (b, b.offset, *b._st, 0),
          (c, 0, N, 1, 0), epi=(None, 0, 0, 0, 0, (w, w.offset, *w._st, lr, store)))
    return c
