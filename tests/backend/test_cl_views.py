"""Views share the buffer where NumPy makes none; copies are made only where NumPy makes them."""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import labkit as lk
from labkit.backend import opencl as cp

from .helpers import check


def shares(a, b):
    return a.data is b.data


def test_views_share_the_buffer(rng):
    h = rng.standard_normal((4, 6, 5)).astype(np.float32)
    d = cp.asarray(h)
    cases = {
        "reshape": (d.reshape(24, 5), h.reshape(24, 5)),
        "reshape-1": (d.reshape(-1), h.reshape(-1)),
        "transpose": (d.transpose(2, 0, 1), h.transpose(2, 0, 1)),
        "T": (d.T, h.T),
        "slice": (d[1:3, ::2, ::-1], h[1:3, ::2, ::-1]),
        "int": (d[2], h[2]),
        "ellipsis": (d[..., 3], h[..., 3]),
        "newaxis": (d[:, None, 1], h[:, None, 1]),
        "expand_dims": (cp.expand_dims(d, (0, 2)), np.expand_dims(h, (0, 2))),
        "squeeze": (d[:1].squeeze(0), h[:1].squeeze(0)),
        "broadcast_to": (cp.broadcast_to(d[:, :1], (4, 6, 5)),
                         np.broadcast_to(h[:, :1], (4, 6, 5))),
        "swapaxes": (d.swapaxes(0, 2), h.swapaxes(0, 2)),
        "moveaxis": (cp.moveaxis(d, 0, -1), np.moveaxis(h, 0, -1)),
        "reshape-of-slice": (d[1:3].reshape(2, 30), h[1:3].reshape(2, 30)),
    }
    for name, (got, want) in cases.items():
        assert shares(got, d), f"{name} copied"
        check(got, want)
        # strides agree with NumPy's wherever they matter (dimensions longer than 1)
        big = [i for i, n in enumerate(want.shape) if n > 1]
        assert [got.strides[i] for i in big] == [want.strides[i] for i in big], name


def test_reshape_copies_only_when_numpy_must(rng):
    h = rng.standard_normal((4, 6)).astype(np.float32)
    d = cp.asarray(h)
    t = d.T.reshape(-1)  # a transposed array cannot be flattened without a copy
    assert not shares(t, d)
    check(t, h.T.reshape(-1))
    check(d.T.reshape(3, 8), h.T.reshape(3, 8))
    # splitting one axis of a transposed array stays a view, as in NumPy
    s = d.T.reshape(2, 3, 4)
    assert shares(s, d)
    check(s, h.T.reshape(2, 3, 4))
    with pytest.raises(lk.ShapeError, match=r"cannot reshape an array of shape \(4, 6\)"):
        d.reshape(5, -1)


def test_ascontiguousarray_and_flags(rng):
    d = cp.asarray(rng.standard_normal((3, 4)).astype(np.float32))
    assert d.flags["C_CONTIGUOUS"] and not d.T.flags["C_CONTIGUOUS"]
    c = cp.ascontiguousarray(d.T)
    assert c.is_contiguous and not shares(c, d)
    assert cp.ascontiguousarray(d) is d


def test_setitem_basic(rng):
    h = rng.standard_normal((5, 6)).astype(np.float32)
    d = cp.asarray(h)
    d[1] = 3.0
    h[1] = 3.0
    d[:, ::2] = cp.asarray(np.arange(3, dtype=np.float32))
    h[:, ::2] = np.arange(3)
    d[2:4, 1:3] = cp.asarray(h[:2, :2] * 0 + 7)
    h[2:4, 1:3] = 7
    check(d, h)
    # overlapping source and destination behave as in NumPy
    d[1:] = d[:-1]
    h[1:] = h[:-1]
    check(d, h)
    d[d > 0] = 0
    h[h > 0] = 0
    check(d, h)
    d.fill(2)
    check(d, np.full_like(h, 2))


def test_indexing_errors():
    d = cp.zeros((3, 4))
    with pytest.raises(IndexError, match="index 3 is out of bounds for axis 0 with size 3"):
        d[3]
    with pytest.raises(IndexError, match="too many indices"):
        d[0, 0, 0]
    with pytest.raises(lk.ShapeError, match="squeeze: axis 1 has size 4"):
        d.squeeze(1)
    with pytest.raises(lk.ShapeError, match="cannot broadcast"):
        d.broadcast_to((3, 5))


def test_scalars_and_transfer():
    d = cp.asarray(np.array([[2.5]], np.float32))
    assert d.item() == 2.5 and float(d) == 2.5
    assert d.tolist() == [[2.5]]
    assert np.asarray(d).dtype == np.float32
    assert d.to("cpu").shape == (1, 1) and d.to("cl:0") is d
    assert "cl_array" in repr(d) and "cl:0" in repr(d)
    with pytest.raises(TypeError):
        np.exp(d)  # NumPy ufuncs do not silently copy device arrays to the host


@st.composite
def array_and_index(draw):
    shape = draw(hnp.array_shapes(min_dims=1, max_dims=4, min_side=0, max_side=6))
    index = draw(hnp.basic_indices(shape, allow_newaxis=True, allow_ellipsis=True))
    return shape, index


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(array_and_index())
def test_property_basic_indexing_matches_numpy(case):
    shape, index = case
    h = np.arange(int(np.prod(shape)), dtype=np.int32).reshape(shape)
    d = cp.asarray(h)
    got = d[index]
    want = h[index]
    if np.ndim(want) == 0:
        assert got.item() == want
    else:
        check(got, want)
        # a view: values written through it are seen by the base
        if got.size:
            got[...] = -1
            h2 = h.copy()
            h2[index] = -1
            check(d, h2)


@settings(max_examples=50, deadline=None)
@given(hnp.array_shapes(min_dims=1, max_dims=4, max_side=5), st.data())
def test_property_transpose_then_reshape(shape, data):
    h = np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape)
    perm = data.draw(st.permutations(range(len(shape))))
    t = h.transpose(perm)
    new = data.draw(st.sampled_from([(-1,), (t.size, 1) if t.size else (0,), t.shape[::-1]]))
    check(cp.asarray(h).transpose(perm).reshape(new), t.reshape(new))
