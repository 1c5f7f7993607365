"""A product whose A is a transposed matrix (its columns contiguous: a weight gradient
``dz.T @ x``) runs on a row-major copy of A made by tiles (gemm.py), and the tiled transpose
moves whole aligned float tiles as vectors (transpose.py): the same bits as the product read
through A's strides, and as NumPy's transpose."""

import numpy as np
import pytest

from labkit.backend import opencl as cp
from labkit.backend.opencl import gemm
from labkit.backend.opencl.transpose import copy_transposed


@pytest.mark.parametrize("shape", [(1024, 512), (32, 784), (37, 530), (24, 64), (17, 80),
                                   (300, 129)])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32])
def test_a_tiled_transpose_is_numpys(shape, dtype):
    if dtype == np.float64 and not cp.asarray(np.zeros(1)).rt.info.fp64:
        pytest.skip("the device has no float64")
    h = (np.random.default_rng(0).standard_normal(shape) * 100).astype(dtype)
    a = cp.asarray(h)
    for view, want in ((a.T, h.T), (a[1:, 3:].T, h[1:, 3:].T)):  # aligned, then not
        got = copy_transposed(view)
        assert got is not None and got.get().tobytes() == np.ascontiguousarray(want).tobytes()


@pytest.mark.parametrize("mkn", [(512, 32, 784), (512, 992, 128), (37, 64, 200), (512, 1024, 64),
                                 (300, 17, 130)])
def test_a_transposed_a_gives_the_bits_it_gave_read_through_its_strides(mkn, monkeypatch):
    M, K, N = mkn
    rng = np.random.default_rng(1)
    dz = cp.asarray(rng.standard_normal((K, M)).astype(np.float32))
    b = cp.asarray(rng.standard_normal((K, N)).astype(np.float32))
    calls, real = [], gemm._transpose_rows
    monkeypatch.setattr(gemm, "_transpose_rows", lambda *a: calls.append(a[2:4]) or real(*a))
    made = cp.matmul(dz.T, b).get()
    vn, vw = gemm.config(dz.rt, "float", (M, N, K))[1:]
    # NOTE: A is made row-major where it has three panels of columns or more
    assert ((1, M) in calls) == (N >= 3 * vn * vw), (calls, vn, vw)
    if N >= 600:
        assert (1, M) in calls  # the MLP's weight gradient takes the path on any blocking
    monkeypatch.setattr(gemm, "A_TRANSPOSE_MIN", 1 << 62)  # read through its strides
    strided = cp.matmul(dz.T, b).get()
    assert made.tobytes() == strided.tobytes()
    np.testing.assert_allclose(made, dz.get().T @ b.get(), rtol=2e-4, atol=2e-4)


def test_a_batch_of_transposes_of_one_matrix():
    """64 transposes of one broadcast matrix in one launch (a convolution's batched product:
    B's batch stride 0): each is NumPy's (a second private tile per work-item crashed PoCL's
    worker thread here)."""
    from labkit.backend.opencl.transpose import transpose_rows

    h = np.random.default_rng(3).standard_normal((64, 512)).astype(np.float32)
    b = cp.asarray(h).T  # (512, 64), columns contiguous
    out = transpose_rows(b.rt, b.dtype, 64, 512, 64, (b, b.offset, 1, b._st[1], 0))[0]
    got = out.get().reshape(64, 512, 64)
    assert all(got[z].tobytes() == np.ascontiguousarray(h.T).tobytes() for z in range(64))
