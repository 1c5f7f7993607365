"""Products with K = 1 (a weight gradient at batch 1: the outer product of two vectors) on
``gemm_outer`` (labkit/backend/opencl/gemm._outer): bit for bit ``0 + a * b`` as NumPy rounds
it (signs of zero and NaNs included), in whole vectors, the columns past them and element by
element through any strides, batched, in float32 and float64, with the SGD epilogue as the
optimizer's own update; a bias or relu epilogue is left to the blocked and plain kernels."""

import numpy as np
import pytest

from labkit.backend import opencl as cp
from labkit.backend.opencl import gemm
from labkit.backend.opencl.gemm import matmul_sgd

SPECIAL = [0.0, -0.0, np.inf, -np.inf, np.nan, 1e-30, -3.5]


def _vectors(M, N, dt, seed=0):
    rng = np.random.default_rng(seed + M + N)
    a = rng.standard_normal(M).astype(dt)
    b = rng.standard_normal(N).astype(dt)
    a[:len(SPECIAL)] = np.array(SPECIAL[:M], dt)  # NOTE: -0, inf and nan in both
    b[-min(N, len(SPECIAL)):] = np.array(SPECIAL[:min(N, len(SPECIAL))], dt)
    return a, b


def _reference(a, b):
    # NOTE: the kernels sum K products from 0: 0 + (-0) is +0
    with np.errstate(invalid="ignore", over="ignore"):
        return np.multiply.outer(a, b) + a.dtype.type(0)


def _same_bits(got, want):
    """Equal bit for bit: the sign of a zero counts (assert_array_equal's does not), and a
    NaN is a NaN where the other has one."""
    nan = np.isnan(want)
    np.testing.assert_array_equal(np.isnan(got), nan)
    ui = {4: np.uint32, 8: np.uint64}[got.dtype.itemsize]
    np.testing.assert_array_equal(got[~nan].view(ui), want[~nan].view(ui))


def _launches(monkeypatch):
    seen = []
    real = gemm._outer

    def spy(*args):
        done = real(*args)
        seen.append(done)
        return done
    monkeypatch.setattr(gemm, "_outer", spy)
    return seen


@pytest.mark.parametrize("dt", [np.float32, np.float64])
@pytest.mark.parametrize("M,N", [(512, 784), (10, 512), (33, 50), (7, 3), (1, 16)])
def test_outer_products_are_bit_for_bit_numpys_rounding(monkeypatch, M, N, dt):
    a, b = _vectors(M, N, dt)
    seen = _launches(monkeypatch)
    got = cp.matmul(cp.asarray(a.reshape(M, 1)), cp.asarray(b.reshape(1, N))).get()
    assert seen == [True]
    _same_bits(got, _reference(a, b))


def test_a_gradient_at_batch_1_is_an_outer_product(monkeypatch):
    """gz.T @ x with gz (1, M) and x (1, N), as a linear layer's weight gradient."""
    gz, x = _vectors(64, 96, np.float32, seed=1)
    seen = _launches(monkeypatch)
    got = cp.matmul(cp.asarray(gz.reshape(1, 64)).T, cp.asarray(x.reshape(1, 96))).get()
    assert seen == [True]
    _same_bits(got, _reference(gz, x))


def test_batched_outer_products(monkeypatch):
    rng = np.random.default_rng(3)
    a = rng.standard_normal((3, 40, 1)).astype(np.float32)
    b = rng.standard_normal((3, 1, 37)).astype(np.float32)
    seen = _launches(monkeypatch)
    got = cp.matmul(cp.asarray(a), cp.asarray(b)).get()
    assert seen == [True]
    _same_bits(got, a * b + np.float32(0))


@pytest.mark.parametrize("layout", ["offset", "strided"])
def test_layouts_without_whole_vectors_go_element_by_element(monkeypatch, layout):
    a, b = _vectors(40, 64, np.float32)
    seen = _launches(monkeypatch)
    A = cp.asarray(a.reshape(40, 1))
    if layout == "offset":
        B = cp.asarray(np.concatenate([[7.0], b]).astype(np.float32).reshape(1, 65))[:, 1:]
    else:
        B = cp.asarray(np.repeat(b, 3).reshape(1, 192))[:, ::3]
    got = cp.matmul(A, B).get()
    assert seen and all(seen)
    _same_bits(got, _reference(a, b))


def test_a_bias_or_relu_is_left_to_the_other_kernels(monkeypatch):
    from labkit.backend.opencl.gemm import linear

    a, b = _vectors(40, 64, np.float32)
    a, b = np.nan_to_num(a), np.nan_to_num(b, posinf=2.0, neginf=-2.0)
    bias = np.linspace(-1, 1, 64).astype(np.float32)
    seen = _launches(monkeypatch)
    got = linear(cp.asarray(a.reshape(40, 1)), cp.asarray(b.reshape(1, 64)), cp.asarray(bias),
                 relu=True).get()
    assert seen == [False]
    np.testing.assert_array_equal(got, np.maximum(_reference(a, b) + bias, 0))


@pytest.mark.parametrize("dt", [np.float32, np.float64])
@pytest.mark.parametrize("M,N", [(512, 784), (10, 50)])  # NOTE: rows 50 apart: element-wise
def test_the_sgd_epilogue_updates_as_the_optimizer_does(monkeypatch, M, N, dt):
    gz, x = _vectors(M, N, dt, seed=2)
    gz, x = np.nan_to_num(gz), np.nan_to_num(x, posinf=2.0, neginf=-2.0)
    rng = np.random.default_rng(4)
    w0 = rng.standard_normal((M, N)).astype(dt)
    w = cp.asarray(w0)
    lr = dt(0.0123)
    seen = _launches(monkeypatch)
    g = matmul_sgd(cp.asarray(gz.reshape(1, M)).T, cp.asarray(x.reshape(1, N)), w, lr)
    assert seen == [True]
    want = _reference(gz, x)
    _same_bits(g.get(), want)
    _same_bits(w.get(), w0 - want * lr)  # NOTE: two roundings, as SGD's update


class _AsGPU:
    """This device's runtime, described as a GPU: gemm_outer then takes a GPU's vector widths
    (4 floats, 2 doubles), which CI has no GPU to run."""

    def __init__(self, rt):
        import dataclasses

        self._rt, self.info = rt, dataclasses.replace(rt.info, type="GPU")

    def __getattr__(self, name):
        return getattr(self._rt, name)


@pytest.mark.parametrize("dt", [np.float32, np.float64])
@pytest.mark.parametrize("M,N,b_offset", [(7, 13, 0), (9, 32, 0), (9, 30, 2), (6, 31, 1)])
def test_a_gpus_vector_widths_give_the_same_bits(M, N, b_offset, dt):
    a, b = _vectors(M, N + b_offset, dt, seed=7)
    a, b = np.nan_to_num(a), np.nan_to_num(b, posinf=2.0, neginf=-2.0)
    A = cp.asarray(a.reshape(M, 1))
    B = cp.asarray(b)[b_offset:].reshape(1, N)
    C = cp.asarray(np.zeros((M, N), dt))
    w0 = np.random.default_rng(8).standard_normal((M, N)).astype(dt)
    W = cp.asarray(w0)
    lr = dt(0.37)
    rt = _AsGPU(A.rt)
    assert not rt.info.is_cpu
    assert gemm._outer(rt, gemm.CTYPES[np.dtype(dt)], 1, M, N, (A, A.offset, 1, 1, 0),
                       (B, B.offset, N, 1, 0), (C, 0, N, 1, M * N),
                       (None, 0, 0, 0, 0, (W, 0, N, 1, lr)))
    want = _reference(a, b[b_offset:])
    _same_bits(C.get(), want)
    _same_bits(W.get(), w0 - want * lr)
