"""Whole-array reductions of large contiguous float arrays on CPU devices, folded in vector
registers chunk by chunk (``reduce._chunked``): NumPy's results, special values kept, the
same value on every call, and every other layout on the generic kernels."""

import numpy as np
import pytest

from labkit.backend import opencl as cp
from labkit.backend.opencl import reduce as red
from labkit.backend.opencl import runtime

from .helpers import check


@pytest.fixture(autouse=True)
def _decided_afresh(monkeypatch):
    """Which path a reduction takes is decided on its signature's first call (later calls
    replay the decision: ``reduce._RECIPES``): these tests watch the decision."""
    monkeypatch.setattr(red, "_RECIPES", {})

N = red.CHUNKED_MIN + 4096 * 3 + 37  # several chunks and a ragged last one


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("op", ["sum", "max", "min", "mean", "prod"])
def test_large_contiguous_reductions_match_numpy(op, dtype, rng):
    if dtype == np.float64 and not runtime(0).info.fp64:
        pytest.skip("this OpenCL device has no float64")
    x = rng.standard_normal(N).astype(dtype)
    if op == "prod":
        x = (1 + x * dtype(1e-4)).astype(dtype)
    got = getattr(cp, op)(cp.asarray(x))
    want = getattr(np, op)(x.astype(np.float64))
    tol = 1e-5 if dtype == np.float32 else 1e-12
    if op == "prod" and dtype == np.float32:
        # 80,000 float32 products drift by ~1e-4 whoever multiplies (NumPy's own: 5e-5, the
        # generic kernel's 5e-4, the chunked one's 3e-4 here)
        tol = 1e-3
    check(got, np.asarray(want, dtype), rtol=tol, atol=tol * np.abs(x).sum() / N)
    # keepdims, a 2-D shape and an offset view take the same path
    x2 = x[: (N // 64) * 64].reshape(-1, 64)
    d2 = cp.asarray(np.concatenate([np.zeros(5, dtype), x2.ravel()]))[5:].reshape(x2.shape)
    check(getattr(cp, op)(d2, keepdims=True),
          np.asarray(getattr(np, op)(x2.astype(np.float64), keepdims=True), dtype),
          rtol=tol, atol=tol * np.abs(x).sum() / N)


def test_nan_and_inf_propagate_as_in_numpy(rng):
    x = rng.standard_normal(N).astype(np.float32)
    for pos in (0, 4099, N - 1):  # in a vector lane, in a later chunk, in the ragged tail
        y = x.copy()
        y[pos] = np.nan
        d = cp.asarray(y)
        for op in ("sum", "max", "min"):
            assert np.isnan(getattr(cp, op)(d).get()), (op, pos)
    y = x.copy()
    y[12345] = np.inf
    d = cp.asarray(y)
    assert cp.sum(d).get() == np.inf and cp.max(d).get() == np.inf
    y[777] = -np.inf
    assert np.isnan(cp.sum(cp.asarray(y)).get())  # inf - inf
    assert cp.min(cp.asarray(y)).get() == -np.inf


def test_the_result_is_the_same_on_every_call(rng):
    d = cp.asarray(rng.standard_normal(N).astype(np.float32))
    first = cp.sum(d).get()
    assert all(cp.sum(d).get() == first for _ in range(5))


def test_only_whole_contiguous_float_reductions_on_a_cpu_take_the_chunked_path(rng,
                                                                              monkeypatch):
    calls = []
    real = red._chunked
    monkeypatch.setattr(red, "_chunked", lambda *a: calls.append(a[0]) or real(*a))
    x = rng.standard_normal((N // 64, 64)).astype(np.float32)
    d = cp.asarray(x)
    check(cp.sum(d, axis=0), x.sum(axis=0), rtol=1e-4, atol=1e-3)  # one axis: generic
    check(cp.sum(d.T), np.float32(x.sum()), rtol=1e-4, atol=1e-2)  # a strided walk: generic
    check(cp.sum(cp.asarray(x.astype(np.int32))), x.astype(np.int32).sum())  # ints: generic
    check(cp.argmax(d), np.int64(x.argmax()))  # argmax: generic
    assert calls == []
    cp.sum(d)
    is_cpu = runtime(0).info.is_cpu
    assert calls == (["sum"] if is_cpu else [])


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("op", ["sum", "max", "min", "mean", "prod"])
@pytest.mark.parametrize("n_red", [red.ROWS_MIN, 1000, red.CHUNK * 3 + 37])
def test_contiguous_rows_are_folded_in_vectors(op, dtype, n_red, rng, monkeypatch):
    """Reductions of contiguous rows (``reduce._rows``): a convolution's bias gradient, rows
    of a (C, N, H, W)-laid-out array over N, H and W, or the last axis; one CHUNK or several
    (a second pass) per row; NaN and infinities kept; NumPy's results."""
    if dtype == np.float64 and not runtime(0).info.fp64:
        pytest.skip("this OpenCL device has no float64")
    used = []
    real = red._rows
    monkeypatch.setattr(red, "_rows", lambda *a, **k: used.append(a[3]) or real(*a, **k))
    x = rng.standard_normal((5, n_red)).astype(dtype)
    if op == "prod":
        x = (1 + x * dtype(1e-4)).astype(dtype)
    x[1, 3] = np.nan
    x[2, -1] = np.inf
    x[3, n_red // 2] = -np.inf
    tol = 1e-5 if dtype == np.float32 else 1e-12
    with np.errstate(invalid="ignore"):
        want = getattr(np, op)(x.astype(np.float64), axis=1).astype(dtype)
        check(getattr(cp, op)(cp.asarray(x), axis=1), want, rtol=tol, atol=tol * n_red ** 0.5)
        # the same rows laid out as a convolution's output, (C, N, H, W) in memory
        cnhw = (5, 2, n_red // 2, 1) if n_red % 2 == 0 else (5, 1, 1, n_red)
        nchw = cp.asarray(x.reshape(cnhw)).transpose(1, 0, 2, 3)
        check(getattr(cp, op)(nchw, axis=(0, 2, 3)), want, rtol=tol, atol=tol * n_red ** 0.5)
    assert used == [n_red, n_red]
