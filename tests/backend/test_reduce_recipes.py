"""A reduction seen before replays its first call's decision (``reduce._RECIPES``): one new
array and one launch, without the path's decisions. The same results as the first call and
as NumPy, for any offset of a view with the same layout, on every single-launch path."""

import numpy as np
import pytest

from labkit.backend import opencl as cp
from labkit.backend.opencl import reduce as red

from .helpers import check


@pytest.fixture(autouse=True)
def recipes(monkeypatch):
    table = {}
    monkeypatch.setattr(red, "_RECIPES", table)
    return table


@pytest.mark.parametrize("op", ["sum", "max", "min", "mean", "prod", "argmax", "any"])
@pytest.mark.parametrize("shape,axis,keepdims", [
    ((6, 512), 0, False),       # a bias gradient: _cols, one chunk of rows
    ((6, 300), 1, True),        # rows of one chunk: _rows
    ((6, 40), 1, False),        # short rows: the generic kernel, a work-item per output
    ((1, 512), 0, False),       # a batch of one: a sum over an axis of length 1
    ((3, 4, 5), (0, 2), True),  # collapsed strided axes
    ((7,), None, False),        # everything, a few elements
])
def test_a_replayed_reduction_matches_numpy_at_any_offset(op, shape, axis, keepdims, rng,
                                                          recipes):
    if op == "argmax" and isinstance(axis, tuple):
        axis = 2  # NOTE: one axis at most, as in NumPy
    n = int(np.prod(shape))
    flat = rng.standard_normal(3 * n + 5).astype(np.float32)
    if op == "any":
        flat = (flat > 1.5)
    if op == "prod":
        flat = 1 + flat * np.float32(1e-2)
    big = cp.asarray(flat)
    results = []
    for start in (0, 5, n + 3, 2 * n + 5):  # NOTE: one layout, four offsets
        x = big[start:start + n].reshape(shape)
        want = getattr(np, op)(flat[start:start + n].reshape(shape), axis=axis,
                               **({} if op == "argmax" else {"keepdims": keepdims}))
        got = (getattr(cp, op)(x, axis=axis) if op == "argmax"
               else getattr(cp, op)(x, axis=axis, keepdims=keepdims))
        assert got.shape == np.shape(want) and got.dtype == np.asarray(want).dtype
        check(got, want, rtol=1e-5, atol=1e-5)
        results.append(got.get())
    first = getattr(cp, op)(big[:n].reshape(shape), axis=axis) if op == "argmax" else \
        getattr(cp, op)(big[:n].reshape(shape), axis=axis, keepdims=keepdims)
    np.testing.assert_array_equal(first.get(), results[0])  # bit for bit its first call


def test_a_replay_is_one_new_array_and_one_launch(rng, recipes, monkeypatch):
    x = cp.asarray(rng.standard_normal((32, 512)).astype(np.float32))
    want = x.get().sum(axis=0)
    first = x.sum(axis=0)
    assert len(recipes) == 1
    calls = []
    for name in ("_axes", "_collapse", "_cols_ok", "_rows_ok", "_vector_kernel", "_run"):
        real = getattr(red, name)
        monkeypatch.setattr(red, name, lambda *a, _r=real, _n=name, **k: calls.append(_n)
                            or _r(*a, **k))
    again = x.sum(axis=0)
    assert calls == [] and again.data is not first.data
    check(again, want, rtol=1e-5, atol=1e-4)
    np.testing.assert_array_equal(again.get(), first.get())
    # another layout (a transposed view) is decided afresh, and kept too
    y = cp.asarray(rng.standard_normal((512, 32)).astype(np.float32)).T
    check(y.sum(axis=0), y.get().sum(axis=0), rtol=1e-5, atol=1e-4)
    assert calls and len(recipes) == 2


def test_a_bad_axis_is_still_refused_after_a_good_call(rng):
    x = cp.asarray(rng.standard_normal((3, 4)).astype(np.float32))
    x.sum(axis=1)
    with pytest.raises(Exception, match="axis"):
        x.sum(axis=2)
    with pytest.raises(Exception, match="duplicate"):
        x.sum(axis=[1, 1])


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("op", ["sum", "prod", "max", "min", "mean"])
def test_a_reduction_over_axes_of_length_one_is_numpys_bit_for_bit(op, dtype):
    """A bias gradient at batch 1 sums over an axis of length 1: one elementwise launch,
    and NumPy's bits (a sum of -0.0 is +0.0, its maximum -0.0; NaN and infinities kept)."""
    from labkit.backend.opencl import runtime

    if dtype == np.float64 and not runtime(0).info.fp64:
        pytest.skip("this OpenCL device has no float64")
    x = np.array([[[-0.0, 1.5, np.nan, -np.inf, np.inf, -2.25]]], dtype)  # (1, 1, 6)
    for axis in (0, 1, (0, 1), (1, 0)):
        for keepdims in (False, True):
            got = getattr(cp, op)(cp.asarray(x), axis=axis, keepdims=keepdims).get()
            want = getattr(np, op)(x, axis=axis, keepdims=keepdims)
            assert got.shape == want.shape and got.dtype == want.dtype
            assert got.tobytes() == want.tobytes(), (axis, keepdims, got, want)


@pytest.mark.parametrize("shape,axis", [((6, 40), 1), ((3, 4, 5), (0, 2)), ((8, 16, 32), 1)])
def test_the_generic_kernels_reduction_is_replayed_too(rng, recipes, monkeypatch, shape, axis):
    """Its recipe was kept under the kernel cache's key, never the one looked up: every call
    of a generic reduction took the whole path again (45 us instead of 5 for a sum over axes
    (0, 2) of a small array)."""
    x = cp.asarray(rng.standard_normal(shape).astype(np.float32))
    first = x.sum(axis=axis)
    assert len(recipes) == 1
    runs = []
    real = red._run
    monkeypatch.setattr(red, "_run", lambda *a, **k: runs.append(1) or real(*a, **k))
    again = x.sum(axis=axis)
    assert runs == [] and again.data is not first.data
    np.testing.assert_array_equal(again.get(), first.get())
    check(again, x.get().sum(axis=axis), rtol=1e-5, atol=1e-5)
