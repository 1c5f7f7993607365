import numpy as np
import pytest

import labkit as lk
from labkit.backend import opencl as cp

from .helpers import check


@pytest.mark.parametrize("axis", [0, 1, 2, -1, None])
def test_take(axis, rng):
    h = rng.standard_normal((4, 5, 6)).astype(np.float32)
    size = h.size if axis is None else h.shape[axis]
    idx = rng.integers(-size, size, (3, 2))
    check(cp.take(cp.asarray(h), idx, axis=axis), np.take(h, idx, axis=axis))
    check(cp.take(cp.asarray(h), cp.asarray(idx), axis=axis), np.take(h, idx, axis=axis))
    size_t = h.size if axis is None else h.T.shape[axis]
    idx_t = rng.integers(-size_t, size_t, (5,))
    check(cp.take(cp.asarray(h).T, idx_t, axis=axis), np.take(h.T, idx_t, axis=axis))


def test_take_out_of_bounds_is_an_index_error():
    d = cp.ones((3, 4))
    with pytest.raises(IndexError, match="index 3 is out of bounds for axis 0 with size 3"):
        cp.take(d, [0, 3], axis=0)
    with pytest.raises(IndexError, match="index -5 is out of bounds for axis 1 with size 4"):
        cp.take(d, cp.asarray(np.array([-5])), axis=1)


@pytest.mark.parametrize("axis", [0, 1, 2])
def test_scatter_add_matches_numpy_add_at(axis, rng):
    out = rng.standard_normal((5, 6, 4)).astype(np.float32)
    n = out.shape[axis]
    idx = rng.integers(-n, n, 17)  # many repeats
    vshape = list(out.shape)
    vshape[axis] = idx.size
    vals = rng.standard_normal(vshape).astype(np.float32)
    want = out.copy()
    np.add.at(want, (slice(None),) * axis + (idx,), vals)
    d = cp.asarray(out)
    cp.scatter_add(d, idx, cp.asarray(vals), axis=axis)
    check(d, want, rtol=1e-5, atol=1e-5)
    d2 = cp.asarray(out)
    cp.add.at(d2, (slice(None),) * axis + (cp.asarray(idx),), cp.asarray(vals))
    assert d2.get().tobytes() == d.get().tobytes()  # the same bits: no atomics


def test_scatter_add_is_the_gradient_of_take(rng):
    # <take(x, i), g> == <x, scatter_add(0, i, g)> for all x: the adjoint identity
    x = rng.standard_normal((50, 8))
    g = rng.standard_normal((30, 8))
    i = rng.integers(0, 50, 30)
    gx = cp.zeros((50, 8), dtype=np.float64)
    cp.scatter_add(gx, i, cp.asarray(g))
    lhs = (cp.take(cp.asarray(x), i, axis=0).get() * g).sum()
    assert np.isclose(lhs, (x * gx.get()).sum(), rtol=1e-12)


def test_concatenate_stack_split(rng):
    a = rng.standard_normal((2, 3)).astype(np.float32)
    b = rng.standard_normal((4, 3)).astype(np.float32)
    c = rng.integers(0, 3, (1, 3)).astype(np.int32)
    check(cp.concatenate([cp.asarray(a), cp.asarray(b), cp.asarray(c)]), np.concatenate([a, b, c]))
    check(cp.concatenate([cp.asarray(a).T, cp.asarray(b).T], axis=1),
          np.concatenate([a.T, b.T], axis=1))
    check(cp.stack([cp.asarray(a), cp.asarray(a) * 2], axis=-1), np.stack([a, a * 2], axis=-1))
    parts = cp.split(cp.asarray(b), [1, 3])
    for got, want in zip(parts, np.split(b, [1, 3])):
        check(got, want)
    with pytest.raises(lk.ShapeError, match=r"concatenate: array 1 has shape \(4, 2\)"):
        cp.concatenate([cp.ones((2, 3)), cp.ones((4, 2))])


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.int64, np.bool_])
@pytest.mark.parametrize("shapes,axis,kind", [
    ([(32, 40)] * 19, 1, "stack"),          # more pieces than one launch copies, ragged rows
    ([(5, 3), (0, 3), (9, 3)] * 4, 0, "concat"),  # uneven pieces, an empty one
    ([(2, 3, 17), (2, 1, 17), (2, 6, 17)], 1, "concat"),
    ([(7,)] * 3, 1, "stack"), ([(4, 33)], 0, "concat"),
    # rows longer than a work-item's chunk (indexing.CHUNK): split, at and off the boundary
    ([(5, 999)] * 9 + [(1, 999)], 0, "concat"), ([(2, 2048)] * 2, 0, "concat"),
    ([(3, 7, 301)] * 3, 1, "concat"),
])
def test_concatenate_and_stack_of_many_pieces_match_numpy(dtype, shapes, axis, kind, rng):
    if dtype == np.float64 and not cp.runtime(0).info.fp64:
        pytest.skip("this OpenCL device has no float64")
    hs = [(rng.standard_normal(s) * 50).astype(dtype) for s in shapes]
    f, g = (cp.stack, np.stack) if kind == "stack" else (cp.concatenate, np.concatenate)
    got = f([cp.asarray(h) for h in hs], axis=axis)
    want = g(hs, axis=axis)
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got.get(), want)


def test_concatenate_of_views_and_mixed_pieces(rng, monkeypatch):
    from labkit.backend.opencl import indexing

    calls = []
    real = indexing._concat_pieces
    monkeypatch.setattr(indexing, "_concat_pieces", lambda *a: calls.append(1) or real(*a))
    h = rng.standard_normal((10, 64)).astype(np.float32)
    d = cp.asarray(h)
    # contiguous views at offsets into one buffer: the pieces' path
    check(cp.concatenate([d[2:4], d[5:9], d[0:1]]), np.concatenate([h[2:4], h[5:9], h[0:1]]))
    assert calls == ([1] if cp.runtime(0).info.is_cpu else [])
    calls.clear()
    # strided pieces and mixed dtypes: one copy each, as before
    check(cp.concatenate([d[:, ::2], d[:, 1::2]], axis=1),
          np.concatenate([h[:, ::2], h[:, 1::2]], axis=1))
    i = rng.integers(0, 9, (10, 3)).astype(np.int32)
    check(cp.concatenate([d, cp.asarray(i)], axis=1), np.concatenate([h, i], axis=1))
    assert calls == []


@pytest.mark.parametrize("key", [
    ([2, 0, 2],), (slice(None), [1, -1]), (np.array([[0, 1], [2, 3]]),),
    ([0, 2], [1, 3]), (1, [0, 3]), (slice(1, 3), [0, 0], slice(None)),
    (np.arange(3), np.array([1, 0, 2]), 0),
], ids=str)
def test_advanced_indexing_matches_numpy(key, rng):
    h = rng.standard_normal((4, 5, 3)).astype(np.float32)
    check(cp.asarray(h)[key], h[key])


def test_boolean_masks(rng):
    h = rng.standard_normal((4, 5)).astype(np.float32)
    m = h > 0
    check(cp.asarray(h)[m], h[m])
    check(cp.asarray(h)[cp.asarray(m)], h[m])
    check(cp.asarray(h)[m[:, 0]], h[m[:, 0]])
    check(cp.asarray(h)[:, m[0]], h[:, m[0]])
    idx = cp.nonzero(cp.asarray(m))
    for got, want in zip(idx, np.nonzero(m)):
        check(got, want)


# ---- every index array is bounds-checked on its own axis -----------------------------------------
SHAPE = (3, 4, 5)


def _put(kind, idx):
    return cp.asarray(np.asarray(idx)) if kind == "dev" else np.asarray(idx)


KINDS = [("dev", "dev"), ("dev", "host"), ("host", "dev"), ("host", "host")]


@pytest.mark.parametrize("kinds", KINDS, ids="-".join)
@pytest.mark.parametrize("axes", [(0, 1), (1, 2)], ids=str)
@pytest.mark.parametrize("bad", [0, 1])
@pytest.mark.parametrize("sign", [1, -1], ids=["past_end", "before_start"])
def test_two_index_arrays_check_every_axis(kinds, axes, bad, sign, rng):
    h = rng.standard_normal(SHAPE).astype(np.float32)
    size = SHAPE[axes[bad]]
    wrong = size if sign > 0 else -size - 1
    idx = [[0, -1], [1, 0]]
    idx[bad] = [0, wrong]
    key = (slice(None),) * axes[0] + tuple(_put(k, i) for k, i in zip(kinds, idx))
    with pytest.raises(IndexError):
        h[key]  # NumPy refuses it too
    with pytest.raises(IndexError, match=f"index {wrong} is out of bounds for axis "
                                         f"{axes[bad]} with size {size}"):
        cp.asarray(h)[key]


def test_the_reported_case_and_three_arrays(rng):
    d = cp.ones((3, 4))
    with pytest.raises(IndexError, match="index 5 is out of bounds for axis 1 with size 4"):
        d[cp.asarray([0]), cp.asarray([5])]
    h = rng.standard_normal(SHAPE).astype(np.float32)
    i, j, k = np.array([2, -3]), np.array([-1, 3]), np.array([4, -5])
    for kinds in [("dev",) * 3, ("host", "dev", "host"), ("dev", "host", "dev")]:
        key = tuple(_put(kd, x) for kd, x in zip(kinds, (i, j, k)))
        check(cp.asarray(h)[key], h[i, j, k])  # negatives wrap per axis
        bad = key[:2] + (_put(kinds[2], [0, 5]),)
        with pytest.raises(IndexError, match="index 5 is out of bounds for axis 2 with size 5"):
            cp.asarray(h)[bad]
    # an integer before the arrays shifts the axes they index
    with pytest.raises(IndexError, match="index 5 is out of bounds for axis 2 with size 5"):
        cp.asarray(h)[1, cp.asarray([0]), cp.asarray([5])]
    check(cp.asarray(h)[1, cp.asarray([0, -1]), cp.asarray([4, -5])], h[1, [0, -1], [4, -5]])


def test_index_checks_in_take_scatter_add_and_setitem():
    d = cp.zeros((3, 4))
    for idx in ([0, 4], cp.asarray([0, 4]), [-5], cp.asarray([-5])):
        with pytest.raises(IndexError, match="out of bounds for axis 1 with size 4"):
            cp.take(d, idx, axis=1)
        with pytest.raises(IndexError, match="scatter_add: index .* out of bounds for axis 1 "
                                             "with size 4"):
            cp.scatter_add(d, idx, 1.0, axis=1)
        with pytest.raises(IndexError, match="out of bounds for axis 1 with size 4"):
            cp.add.at(d, (slice(None), idx), 1.0)
    assert not d.get().any()  # nothing was written by the refused calls
    cp.add.at(d, (slice(None), cp.asarray([-1, 3, 0])), 1.0)
    np.testing.assert_array_equal(d.get(), np.tile([1, 0, 0, 2], (3, 1)))
    with pytest.raises(IndexError, match=r"boolean index of shape \(2,\) does not match"):
        d[np.array([True, False])] = 1.0
    with pytest.raises(IndexError, match=r"boolean index of shape \(2, 4\) does not match"):
        d[cp.asarray(np.ones((2, 4), bool))]
    m = np.zeros((3, 4), bool)
    m[1, 2] = True
    d[cp.asarray(m)] = 7.0
    assert d.get()[1, 2] == 7.0 and d.get().sum() == 7.0 + 9
