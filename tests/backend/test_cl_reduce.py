import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from labkit.backend import opencl as cp

from .helpers import check, views

AXES = [None, 0, -1, (0, 2), (1,), (0, 1, 2)]
FLOAT_OPS = ["sum", "mean", "max", "min", "prod", "var", "std"]


@pytest.mark.parametrize("op", FLOAT_OPS)
@pytest.mark.parametrize("axis", AXES, ids=str)
@pytest.mark.parametrize("keepdims", [False, True])
def test_reductions(op, axis, keepdims, rng):
    lo, hi = (0.5, 1.5) if op == "prod" else (-2, 2)
    for _layout, h, d in views(rng, (3, 17, 5), low=lo, high=hi):
        check(getattr(d, op)(axis=axis, keepdims=keepdims),
              getattr(h, op)(axis=axis, keepdims=keepdims), rtol=2e-5, atol=1e-5)


@pytest.mark.parametrize("op", ["argmax", "argmin"])
@pytest.mark.parametrize("axis", [None, 0, 1, -1])
def test_arg_reductions_pick_the_first_extreme(op, axis, rng):
    h = rng.integers(0, 4, (6, 50, 7)).astype(np.float32)  # many ties
    for d, hh in ((cp.asarray(h), h), (cp.asarray(h).transpose(2, 0, 1), h.transpose(2, 0, 1))):
        check(getattr(d, op)(axis=axis), getattr(hh, op)(axis=axis))
    n = np.array([1.0, np.nan, 3.0, np.nan], np.float32)
    check(getattr(cp.asarray(n), op)(), getattr(n, op)())


def test_big_reductions_use_many_work_groups(rng):
    h = rng.standard_normal(1009 * 2973).astype(np.float32)  # 3M, odd
    d = cp.asarray(h)
    check(d.sum(), h.astype(np.float64).sum().astype(np.float32), rtol=1e-4, atol=1e-2)
    check(d.max(), h.max())
    check(d.argmax(), h.argmax())
    check(d.mean(), h.astype(np.float64).mean().astype(np.float32), rtol=1e-4, atol=1e-5)
    m = h.reshape(1009, -1)
    check(cp.asarray(m).sum(axis=0), m.sum(axis=0), rtol=1e-4, atol=1e-3)
    check(cp.asarray(m).sum(axis=1), m.sum(axis=1), rtol=1e-4, atol=1e-3)


def test_integer_and_bool_reductions_follow_numpy_dtypes(rng):
    h = rng.integers(-5, 5, (4, 9)).astype(np.int32)
    d = cp.asarray(h)
    check(d.sum(axis=1), h.sum(axis=1))  # int64, as NumPy
    check(d.max(axis=0), h.max(axis=0))
    check(d.mean(), h.mean())  # float64
    b = h > 0
    check(cp.asarray(b).sum(), b.sum())
    check(cp.asarray(b).any(axis=0), b.any(axis=0))
    check(cp.asarray(b).all(axis=1), b.all(axis=1))
    f = np.array([0.0, 0.5, 0.0], np.float32)
    check(cp.asarray(f).any(), f.any())  # 0.5 is true, not truncated to 0


def test_empty_reductions():
    e = np.zeros((0, 3), np.float32)
    check(cp.asarray(e).sum(axis=0), e.sum(axis=0))
    check(cp.asarray(e).sum(axis=1), e.sum(axis=1))
    check(cp.asarray(e).prod(axis=0), e.prod(axis=0))
    with pytest.raises(ValueError, match="zero-size"):
        cp.asarray(e).max(axis=0)


def test_logsumexp_is_stable(rng):
    h = np.array([[1000.0, 1000.0, -1000.0], [-1000.0, -1001.0, -1002.0]], np.float32)
    want = np.log(np.exp(h.astype(np.float64) - h.max(1, keepdims=True)).sum(1)) + h.max(1)
    check(cp.logsumexp(cp.asarray(h), axis=1), want.astype(np.float32), rtol=1e-6)


def test_reductions_are_deterministic(rng):
    d = cp.asarray(rng.standard_normal(2_000_003).astype(np.float32))
    assert d.sum().get().tobytes() == d.sum().get().tobytes()


@settings(max_examples=40, deadline=None)
@given(hnp.array_shapes(min_dims=1, max_dims=4, min_side=1, max_side=7), st.data())
def test_property_sum_and_max_over_any_axes(shape, data):
    axes = data.draw(st.lists(st.integers(0, len(shape) - 1), unique=True, max_size=len(shape)))
    axis = tuple(axes) if axes else None
    keep = data.draw(st.booleans())
    h = np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape) % 7 - 3
    d = cp.asarray(h)
    check(d.sum(axis=axis, keepdims=keep), h.sum(axis=axis, keepdims=keep))
    check(d.max(axis=axis, keepdims=keep), h.max(axis=axis, keepdims=keep))
    check(d.T.min(axis=axis, keepdims=keep), h.T.min(axis=axis, keepdims=keep))
