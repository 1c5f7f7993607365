"""Reductions over leading axes with the kept elements contiguous (a bias gradient: (N, C)
summed over N) on CPU devices, two vectors of columns per work-item and COLS_ROWS rows at a
time (``reduce._cols``): NumPy's results, each column folded in row order (bit for bit the
sequential sum chunk by chunk), special values kept, and other layouts on the other paths."""

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

R = red.COLS_ROWS


def _fp64():
    return runtime(0).info.fp64


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("op", ["sum", "max", "min", "mean", "prod"])
@pytest.mark.parametrize("shape,axis", [
    ((4 * R + 7, 512), 0),        # several chunks of rows and a ragged last one
    ((3, 2 * R + 1, 37), (0, 1)),  # collapsed leading axes; columns past the last vector pair
    ((2, 16), 0), ((R * R + 3, 40), 0),  # one chunk; a third pass over the chunks
])
def test_leading_axis_reductions_match_numpy(op, dtype, shape, axis, rng):
    if dtype == np.float64 and not _fp64():
        pytest.skip("this OpenCL device has no float64")
    x = rng.standard_normal(shape).astype(dtype)
    if op == "prod":
        x = (1 + x * dtype(1e-3)).astype(dtype)
    tol = 1e-4 if dtype == np.float32 else 1e-11
    want = getattr(np, op)(x.astype(np.float64), axis=axis)
    check(getattr(cp, op)(cp.asarray(x), axis=axis), want.astype(dtype), rtol=tol,
          atol=tol * 10)
    check(getattr(cp, op)(cp.asarray(x), axis=axis, keepdims=True),
          getattr(np, op)(x.astype(np.float64), axis=axis, keepdims=True).astype(dtype),
          rtol=tol, atol=tol * 10)


def test_each_column_is_folded_in_row_order_chunk_by_chunk(rng):
    """Bit for bit the float32 sum row after row within each COLS_ROWS rows, then chunk after
    chunk: deterministic, and on an offset view with a row stride longer than a row."""
    h = rng.standard_normal((3 * R + 11, 64)).astype(np.float32)
    d = cp.asarray(h)[:, 3:50]
    got = cp.sum(d, axis=0).get()
    parts = []
    for c in range(0, h.shape[0], R):
        acc = np.zeros(47, np.float32)
        for row in h[c:c + R, 3:50]:
            acc = acc + row
        parts.append(acc)
    want = np.zeros(47, np.float32)
    for p in parts:
        want = want + p
    if runtime(0).info.is_cpu:
        np.testing.assert_array_equal(got, want)
    assert all(np.array_equal(cp.sum(d, axis=0).get(), got) for _ in range(3))


def test_nan_and_inf_propagate_as_in_numpy(rng):
    x = rng.standard_normal((3 * R + 5, 70)).astype(np.float32)
    # in a vector lane, in a later chunk, in the columns past the last vector pair
    for r, c in ((0, 0), (R + 3, 17), (3 * R + 4, 69)):
        y = x.copy()
        y[r, c] = np.nan
        for op in ("sum", "max", "min"):
            got = getattr(cp, op)(cp.asarray(y), axis=0).get()
            assert np.isnan(got[c]) and not np.isnan(np.delete(got, c)).any(), (op, r, c)
    y = x.copy()
    y[R + 1, 5], y[2, 6], y[9, 6] = np.inf, np.inf, -np.inf
    d = cp.asarray(y)
    s, m = cp.sum(d, axis=0).get(), cp.max(d, axis=0).get()
    assert s[5] == np.inf and m[5] == np.inf and np.isnan(s[6])
    assert cp.min(d, axis=0).get()[6] == -np.inf


def test_only_contiguous_kept_float_columns_on_a_cpu_take_the_cols_path(rng, monkeypatch):
    calls = []
    real = red._cols
    monkeypatch.setattr(red, "_cols", lambda *a: calls.append(a[0]) or real(*a))
    x = rng.standard_normal((200, 48)).astype(np.float32)
    d = cp.asarray(x)
    check(cp.sum(d, axis=1), x.sum(axis=1), rtol=1e-4, atol=1e-4)  # rows: not columns
    check(cp.sum(d[:, ::2], axis=0), x[:, ::2].sum(axis=0), rtol=1e-4, atol=1e-4)  # strided
    check(cp.sum(cp.asarray(x.astype(np.int32)), axis=0), x.astype(np.int32).sum(axis=0))
    check(cp.argmax(d, axis=0), x.argmax(axis=0))  # argmax: generic
    check(cp.sum(d[:, :4], axis=0), x[:, :4].sum(axis=0), rtol=1e-4, atol=1e-4)  # < a vector
    assert calls == []
    cp.sum(d.T, axis=1)  # NOTE: the kept axis is contiguous there too (one chunk pass, then
    # the chunks' pass)
    assert calls == (["sum", "sum"] if runtime(0).info.is_cpu else [])


@pytest.mark.parametrize("shape", [(32, 10), (1024, 10), (64, 3), (300, 8), (5, 2, 7)])
@pytest.mark.parametrize("op", ["sum", "max", "prod"])
def test_few_columns_reduce_a_work_item_each_in_numpys_order(op, shape):
    """Fewer columns than a vector (a classifier's bias gradient, (32, 10) over axis 0) ran a
    work-group of 256 items per column (15-21 us for 320 values, a tree order): on a CPU
    device each column is one work-item's now, folded row by row as NumPy folds them."""
    if not runtime(0).info.is_cpu:
        pytest.skip("the work-item path for few columns is the CPU device's")
    h = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
    got = getattr(cp.asarray(h), op)(axis=0)
    want = getattr(h, op)(axis=0)
    assert got.get().tobytes() == want.tobytes()


@pytest.mark.parametrize("case", ["transposed whole", "strided rows", "short rows"])
def test_sums_numpy_adds_pairwise_keep_the_accuracy_of_a_tree(case):
    """Over the innermost axis NumPy adds pairwise: such sums are not folded one by one by
    the few-outputs path (8,192 values of a.T.sum() were 3,000 times further from the
    float64 sum than NumPy's)."""
    rng = np.random.default_rng(2)
    h = rng.standard_normal({"transposed whole": (128, 64), "strided rows": (4, 16384),
                             "short rows": (8, 200)}[case]).astype(np.float32) + 1.0
    a = cp.asarray(h)
    if case == "transposed whole":
        got, exact = cp.sum(a.T), h.astype(np.float64).sum()
    elif case == "strided rows":
        got, exact = a[:, ::2].sum(axis=1), h[:, ::2].astype(np.float64).sum(axis=1)
    else:
        got, exact = a.sum(axis=1), h.astype(np.float64).sum(axis=1)
    err = np.max(np.abs(got.get() - exact) / np.abs(exact))
    assert err < 2e-7, err
