"""The GEMM kernels' epilogue (labkit/backend/opencl/gemm.linear): ``relu(a @ b + bias)`` in
one launch, against the same ops run one by one (bit for bit: each is its own rounding, in
the same order) and against float64 NumPy, on every path a product can take (blocked with
edge strips, the swapped product of a transposed operand, the generic kernel, the dot and
GEMV paths, a long inner dimension split into slices, an empty inner dimension)."""

import numpy as np
import pytest

from labkit.backend import opencl as cp
from labkit.backend.opencl.gemm import linear
from labkit.errors import ShapeError

SHAPES = [  # M, K, N: the path each takes on a CPU device
    (100, 300, 70),   # blocked, with a right and a bottom edge strip
    (32, 784, 512),   # blocked; with b transposed, the swapped product C.T = b.T @ a.T
    (7, 13, 5),       # generic kernel only
    (3, 2048, 4),     # few outputs, long K: the dot-product path (its second kernel's)
    (5, 1030, 7),     # the same with odd blocks of 2 x 2 and a tail of K past the vectors
    (1, 784, 512),    # a row vector: GEMV or dot path (epilogue after)
    (40, 5000, 70),   # long K: 3 slices of 1666 as a batch, a slice of 2 more, then summed
    (96, 12544, 40),  # a convolution's weight gradient: 8 slices, none left over
    (4, 0, 3),        # nothing to sum: the bias alone
    (0, 5, 3),        # empty
]


def _composed(a, b, bias, axis, relu):
    c = cp.matmul(a, b)
    if bias is not None:
        c = cp.add(c, bias if axis == 1 else bias.reshape(-1, 1))
    return cp.maximum(c, 0) if relu else c


def _operands(rng, M, K, N, transposed):
    a = rng.standard_normal((M, K)).astype(np.float32)
    b = rng.standard_normal((K, N)).astype(np.float32)
    if a.size > 3:
        a.flat[:3] = [np.nan, np.inf, -0.0]
    db = cp.asarray(np.ascontiguousarray(b.T)).T if transposed else cp.asarray(b)
    return a, b, cp.asarray(a), db


@pytest.mark.parametrize("M,K,N", SHAPES)
@pytest.mark.parametrize("transposed", [False, True], ids=["b", "b.T"])
@pytest.mark.parametrize("axis", [0, 1])
@pytest.mark.parametrize("relu", [False, True])
def test_epilogue_equals_the_separate_ops_bit_for_bit(M, K, N, transposed, axis, relu, rng):
    a, b, da, db = _operands(rng, M, K, N, transposed)
    bias = rng.standard_normal(N if axis == 1 else M).astype(np.float32)
    dbias = cp.asarray(bias)
    got = linear(da, db, dbias, axis=axis, relu=relu).get()
    want = _composed(da, db, dbias, axis, relu).get()
    assert got.shape == (M, N)
    assert np.array_equal(got.view(np.uint32), want.view(np.uint32))
    with np.errstate(all="ignore"):
        ref = a.astype(np.float64) @ b + (bias if axis == 1 else bias[:, None])
        if relu:
            ref = np.where(np.isnan(ref), ref, np.maximum(ref, 0))
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4 * np.sqrt(max(K, 1)))


@pytest.mark.parametrize("M,K,N", SHAPES[:3])
def test_relu_without_bias_and_a_strided_bias(M, K, N, rng):
    a, b, da, db = _operands(rng, M, K, N, False)
    np.testing.assert_array_equal(linear(da, db, relu=True).get(),
                                  _composed(da, db, None, 1, True).get())
    wide = cp.asarray(rng.standard_normal(2 * N + 1).astype(np.float32))
    every_other = wide[1::2]
    assert every_other.shape == (N,) and not every_other.is_contiguous
    np.testing.assert_array_equal(linear(da, db, every_other).get(),
                                  _composed(da, db, every_other, 1, False).get())


def test_relu_of_the_epilogue_is_maximum_with_zero_for_every_special_value():
    v = np.array([np.nan, -np.nan, np.inf, -np.inf, -0.0, 0.0, -1e-38, 1e-38, 3.0, -3.0],
                 np.float32)
    a = cp.asarray(v.reshape(-1, 1))
    b = cp.asarray(np.ones((1, 1), np.float32))
    got = linear(a, b, relu=True).get().ravel()
    want = np.maximum(v, np.float32(0))
    assert np.array_equal(np.isnan(got), np.isnan(want))
    assert np.array_equal(got[~np.isnan(got)].view(np.uint32),
                          want[~np.isnan(want)].view(np.uint32))


def test_float64(rng):
    from labkit.backend.opencl import runtime

    if not runtime(0).info.fp64:
        pytest.skip("this OpenCL device has no float64")
    a, b = rng.standard_normal((70, 90)), rng.standard_normal((90, 66))
    bias = rng.standard_normal(66)
    got = linear(cp.asarray(a), cp.asarray(b), cp.asarray(bias), relu=True).get()
    np.testing.assert_allclose(got, np.maximum(a @ b + bias, 0), rtol=1e-12, atol=1e-12)


def test_bad_operands_are_named():
    a = cp.asarray(np.ones((4, 3), np.float32))
    b = cp.asarray(np.ones((3, 5), np.float32))
    with pytest.raises(ShapeError, match=r"bias must have shape \(5,\) along axis 1"):
        linear(a, b, cp.asarray(np.ones(4, np.float32)))
    with pytest.raises(ShapeError, match=r"bias must have shape \(4,\) along axis 0"):
        linear(a, b, cp.asarray(np.ones(5, np.float32)), axis=0)
    with pytest.raises(ShapeError, match="a.shape=\\(4, 3\\), b.shape=\\(4, 3\\)"):
        linear(a, a)
    with pytest.raises(ValueError, match="axis must be 0 .* or 1"):
        linear(a, b, cp.asarray(np.ones(5, np.float32)), axis=2)
    with pytest.raises(TypeError, match="one float dtype"):
        linear(a, cp.asarray(np.ones((3, 5), np.int32)))


@pytest.mark.parametrize("M,K,N", [(64, 12544, 288), (288, 5000, 64), (20, 300, 90)])
@pytest.mark.parametrize("batch", [1, 3])
def test_a_transposed_b_and_a_long_k_against_numpy(M, K, N, batch, rng):
    """B with contiguous columns (a weight gradient's col.T) is transposed by tiles before the
    blocked kernel; a long K is split into slices summed in order: both against float64."""
    a = rng.standard_normal((batch, M, K)).astype(np.float32)
    bt = rng.standard_normal((batch, N, K)).astype(np.float32)
    da = cp.asarray(a if batch > 1 else a[0])
    db = cp.asarray(bt if batch > 1 else bt[0])
    db = db.transpose(0, 2, 1) if batch > 1 else db.T
    got = cp.matmul(da, db).get()
    want = a.astype(np.float64) @ bt.transpose(0, 2, 1)
    np.testing.assert_allclose(got, want if batch > 1 else want[0], rtol=1e-4,
                               atol=1e-4 * np.sqrt(K))


@pytest.mark.parametrize("M,K,N", SHAPES, ids=str)
@pytest.mark.parametrize("transposed", [False, True])
@pytest.mark.parametrize("cshape", ["full", "row", "column", "strided"])
def test_matmul_add_is_the_product_plus_c_bit_for_bit(M, K, N, transposed, cshape, rng):
    """``matmul_add(a, b, c)``: ``c`` (the whole result's shape, a row or a column broadcast,
    or a strided slice of a larger array, as an LSTM step's ``x_t``) read in the epilogue."""
    from labkit.backend.opencl.gemm import matmul_add

    a = rng.standard_normal((M, K)).astype(np.float32)
    b = rng.standard_normal((K, N)).astype(np.float32)
    da = cp.asarray(a)
    db = cp.asarray(np.ascontiguousarray(b.T)).T if transposed else cp.asarray(b)
    if cshape == "strided":
        big = rng.standard_normal((M, 3, N)).astype(np.float32)
        dc, c = cp.asarray(big)[:, 1], big[:, 1]
    else:
        c = rng.standard_normal({"full": (M, N), "row": (N,), "column": (M, 1)}[cshape])
        c = c.astype(np.float32)
        dc = cp.asarray(c)
    got = matmul_add(da, db, dc).get()
    np.testing.assert_array_equal(got, cp.add(dc, cp.matmul(da, db)).get())
    np.testing.assert_allclose(got, a.astype(np.float64) @ b + c, rtol=1e-4,
                               atol=1e-4 * np.sqrt(max(K, 1)))


def test_matmul_add_refuses_what_it_cannot_add():
    from labkit.backend.opencl.gemm import matmul_add

    a, b = cp.ones((3, 4)), cp.ones((4, 5))
    with pytest.raises(ShapeError, match="matmul_add"):
        matmul_add(a, b, cp.ones((3, 4)))
    with pytest.raises(ShapeError, match=r"matmul_add: needs a \(M, K\) and b \(K, N\)"):
        matmul_add(a, cp.ones((5, 4)), cp.ones((3, 4)))
    with pytest.raises(TypeError, match="one float dtype"):
        matmul_add(a, b, cp.ones((3, 5), dtype=np.int32))


@pytest.mark.parametrize("M,K,N", SHAPES + [(32, 10, 512), (1, 512, 512), (1, 10, 512),
                                            (32, 512, 512), (10, 32, 512)], ids=str)
@pytest.mark.parametrize("transposed", [False, True])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_matmul_add_with_a_mask_is_relus_gradient_of_the_product_bit_for_bit(
        M, K, N, transposed, dtype, rng):
    """``matmul_add(a, b, m, mask=True)`` (lk.compile: a product and relu's gradient, on
    every path a product takes): the product where ``m > 0``, else 0, as ``where_positive``
    gives it after the product (NaN and inf of the product kept where the mask is positive;
    a NaN, 0 or -0 in the mask gives 0)."""
    from labkit.backend.opencl.core import where_positive
    from labkit.backend.opencl.gemm import matmul_add

    a = rng.standard_normal((M, K)).astype(dtype)
    b = rng.standard_normal((K, N)).astype(dtype)
    if a.size > 3:
        a.flat[:3] = [np.nan, np.inf, -0.0]
    m = rng.standard_normal((M, N)).astype(dtype)
    if m.size > 4:
        m.flat[:4] = [np.nan, 0.0, -0.0, np.inf]
    da, dm = cp.asarray(a), cp.asarray(m)
    db = cp.asarray(np.ascontiguousarray(b.T)).T if transposed else cp.asarray(b)
    got = matmul_add(da, db, dm, mask=True).get()
    np.testing.assert_array_equal(got, where_positive(cp.matmul(da, db), dm).get())
    with np.errstate(invalid="ignore"):
        want = np.where(m > 0, a.astype(np.float64) @ b, 0)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * np.sqrt(max(K, 1)))
    if M > 1 and N > 1:  # NOTE: a strided mask (a slice of a larger array)
        big = np.repeat(m, 2, axis=1)
        got = matmul_add(da, db, cp.asarray(big)[:, ::2], mask=True).get()
        np.testing.assert_array_equal(got, where_positive(cp.matmul(da, db), dm).get())
