"""backend/blas.py: NumPy's own BLAS called directly (an in-place axpy, an outer product),
against NumPy; what it must refuse (it is handed raw pointers)."""

import numpy as np
import pytest

import labkit as lk
from labkit.backend import blas

pytestmark = pytest.mark.skipif(not blas.available(), reason="NumPy is not built on its "
                                "bundled OpenBLAS here: the callers keep their NumPy code")


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("m,n", [(1, 1), (7, 3), (512, 784), (3, 1000)])
def test_outer_is_numpys_product_bit_for_bit(dtype, m, n, rng):
    a = rng.standard_normal((m, 1)).astype(dtype)
    b = rng.standard_normal((1, n)).astype(dtype)
    a[0, 0] = -0.0 if m > 1 else a[0, 0]
    got = blas.outer(a, b)
    want = a * b
    assert got.dtype == want.dtype and got.shape == (m, n) and got.flags.c_contiguous
    assert np.array_equal(got, want)  # NOTE: -0.0 == +0.0: the one difference allowed


def test_a_weight_gradient_at_batch_1_goes_through_it(rng, monkeypatch):
    calls = []
    outer = blas.outer
    monkeypatch.setattr(blas, "outer", lambda a, b: calls.append(1) or outer(a, b))
    x = lk.tensor(rng.standard_normal((1, 300)).astype(np.float32))
    W = lk.tensor(rng.standard_normal((200, 300)).astype(np.float32), requires_grad=True)
    lk.functions.linear(x, W).sum().backward()
    assert calls and np.array_equal(W.grad.data, np.ones((200, 1), np.float32) * x.data)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_axpy_adds_in_place(dtype, rng):
    x = rng.standard_normal(10_001).astype(dtype)
    y = rng.standard_normal(10_001).astype(dtype)
    want = y.astype(np.float64) - 0.25 * x.astype(np.float64)
    before = y.ctypes.data
    assert blas.axpy(-0.25, x, y)
    assert y.ctypes.data == before
    np.testing.assert_allclose(y, want, rtol=0, atol=4 * np.finfo(dtype).eps)


def test_refused_operands_are_left_alone(rng):
    y = rng.standard_normal((4, 6)).astype(np.float32)
    keep = y.copy()
    x = rng.standard_normal((4, 6)).astype(np.float32)
    bad = [(x.astype(np.float64), y), (x.T.copy().T[:, ::-1], y), (x[:, :3], y[:, :3]),
           (x.reshape(6, 4), y), (x.astype(np.int32), y.astype(np.int32)),
           (y[:, 1:], y[:, :-1]), (x.astype(">f4"), y.astype(">f4"))]
    for a, b in bad:
        b_before = b.copy()
        assert not blas.axpy(1.0, a, b)
        assert np.array_equal(b, b_before)
    ro = y.copy()
    ro.flags.writeable = False
    assert not blas.axpy(1.0, x, ro)
    assert np.array_equal(y, keep)
    col = rng.standard_normal((5, 1)).astype(np.float32)
    row = rng.standard_normal((1, 3)).astype(np.float32)
    for a, b in [(col, row.astype(np.float64)), (col.astype(np.int64), row.astype(np.int64)),
                 (col, row[:, ::-1][:, ::-1].repeat(2, 0)), (col.reshape(1, 5), row),
                 (np.ones((5, 2), np.float32)[:, :1], row)]:
        assert blas.outer(a, b) is None


@pytest.mark.parametrize("how", ["flag", "setting"])
def test_turned_off_it_does_nothing(how, monkeypatch):
    if how == "flag":
        monkeypatch.setattr(blas, "ENABLED", False)
    else:
        monkeypatch.setenv("LABKIT_NUMPY_BLAS", "off")
    x = np.ones(8, np.float32)
    y = np.zeros(8, np.float32)
    assert not blas.available()
    assert not blas.axpy(1.0, x, y) and not y.any()
    assert blas.outer(np.ones((2, 1), np.float32), np.ones((1, 2), np.float32)) is None
