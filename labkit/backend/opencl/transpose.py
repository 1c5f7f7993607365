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
    T tile[TILE][TILE];
    __global const T* src = b + b_o + z * sbb + k0 + (long)n0 * sbn;
    for (int j = 0; j < nn; ++j)
        for (int i = 0; i < kk; ++i) tile[j][i] = src[(long)j * sbn + i];
    __global T* dst = out + (z * K + k0) * (long)N + n0;
    for (int i = 0; i < kk; ++i)
        for (int j = 0; j < nn; ++j) dst[(long)i * N + j] = tile[j][i];
}
"""


def transpose_rows(rt, dt, nb, K, N, B):
    """B (batch of K x N with contiguous columns) copied to contiguous rows: the new B tuple."""
    ct = CTYPES[dt]
    b, b_o, _, sbn, sbb = B

    def make():
        src = header(rt, (ct,), {"T": ct}, what="matmul") + _TRANSPOSE_SRC
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
