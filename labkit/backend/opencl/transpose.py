"""A matrix with contiguous columns (a transposed one: ``U.T``) copied to contiguous rows by
tiles: the product's B made contiguous (labkit/backend/opencl/gemm.py) and ``copy`` of a
transposed matrix (core.copy)."""

from __future__ import annotations

import numpy as np

from .ndarray import CTYPES, ndarray
from .program import header, kernels

#: elements of B from which transposing it beats packing it by gathers: a tiled transpose took
#: 2.9 us of device time for a (128, 32) B, the gathering pack 10.5 us (an LSTM step's h.T,
#: 32 times a step); (784, 32): 12.7 against 47 us
_TRANSPOSE_MIN = 1 << 10
_TRANSPOSE_SRC = """
#define TILE 16
__kernel void lk_transpose_rows(const int K, const int N, __global const T* b, const long b_o,
                                const long sbn, const long sbb, __global T* out)
{
    // out[z, k, n] = b[z][k, n], where b's columns are contiguous (b[k, n] at k + n * sbn):
    // a work-item per 16 x 16 tile, read along columns and written along rows
    const int k0 = get_global_id(0) * TILE, n0 = get_global_id(1) * TILE;
    const long z = get_global_id(2);
    if (k0 >= K || n0 >= N) return;
    const int kk = min(TILE, K - k0), nn = min(TILE, N - n0);
    __global const T* src = b + b_o + z * sbb + k0 + (long)n0 * sbn;
    __global T* dst = out + (z * K + k0) * (long)N + n0;
#if VEC
    // a whole float tile whose columns and rows are 64-byte aligned: 16 vector loads, the
    // transpose in registers, 16 vector stores (a (1024, 512) matrix 173 -> 119 us on PoCL)
    if (kk == TILE && nn == TILE && ((size_t)src | (size_t)dst) % 64 == 0
            && (sbn | N) % 16 == 0) {
        float16 r[16];
#pragma unroll
        for (int j = 0; j < 16; ++j) r[j] = *(__global const float16*)(src + (long)j * sbn);
        ROWS
        return;
    }
#endif
    // NOTE: element by element within the tile, no private copy of it: PoCL may keep one per
    // work-item of a group, and a second 1 KB array overran a worker thread's stack (a batch
    // of 64 transposes)
    for (int i = 0; i < kk; ++i)
        for (int j = 0; j < nn; ++j) dst[(long)i * N + j] = src[(long)j * sbn + i];
}
"""
#: ``ROWS`` of the float kernel's vector path: row i of the tile from lane i of each column
_ROWS = " ".join(
    f"*(__global float16*)(dst + {i} * (long)N) = (float16)("
    + ", ".join(f"r[{j}].s{i:x}" for j in range(16)) + ");" for i in range(16)) + "\n"


def transpose_rows(rt, dt, nb, K, N, B):
    """B (batch of K x N with contiguous columns) copied to contiguous rows: the new B tuple."""
    ct = CTYPES[dt]
    b, b_o, _, sbn, sbb = B

    def make():
        vec = int(ct == "float" and rt.info.is_cpu)
        src = (header(rt, (ct,), {"T": ct, "VEC": vec}, what="matmul") + "#define ROWS "
               + _ROWS + _TRANSPOSE_SRC)
        i4, i8 = np.int32, np.int64
        return kernels(rt, src, {"lk_transpose_rows": [i4, i4, None, i8, i8, i8, None]},
                       name=f"transpose_rows ({ct})").lk_transpose_rows
    kernel = rt.cached(("transpose_rows", ct), make)
    out = ndarray(rt, (nb, K, N), dt)
    with rt.lock:
        kernel(rt.queue, (-(-K // 16), -(-N // 16), nb), None, K, N, b.data, b_o, sbn, sbb,
               out.data)
    return (out, 0, N, 1, K * N)


#: elements from which ``copy`` of a transposed matrix goes by tiles
TRANSPOSED_MIN = 1024


def copy_transposed(a):
    """A contiguous copy of ``a`` where it is a transposed matrix of TRANSPOSED_MIN elements
    or more (its columns contiguous), else None. The elementwise copy gathers every element
    across a row: 95 against 32 us for a (128, 512) U.T on PoCL, 327 against 150 us for
    (512, 784)."""
    if not (a.ndim == 2 and a._st[0] == 1 and a._st[1] > 0 and min(a.shape) > 1
            and a.size >= TRANSPOSED_MIN and a.dtype.kind in "fiu"):
        return None
    (K, N), sbn = a.shape, a._st[1]
    return transpose_rows(a.rt, a.dtype, 1, K, N, (a, a.offset, 1, sbn, 0))[0].reshape(K, N)
