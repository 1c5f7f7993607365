"""NumPy's behaviour at the edges, found by a differential fuzzer of the OpenCL arrays against
NumPy: bools stored as 0/1, Python integers out of an integer dtype's range (NEP 50), in-place
operations whose operand overlaps the output, masked assignment into int64, float and integer
floor division and modulo with every special value, a 0-d reduction over axis 0, argmax's
keepdims, empty splits and masks, bool scalars as indices, small-integer matmul."""

import numpy as np
import pytest

from labkit.backend import opencl as cp


def test_bools_hold_only_0_and_1():
    a, b = np.array([True, True, False]), np.array([True, False, False])
    s = cp.asarray(a) + cp.asarray(b)
    assert s.dtype == np.bool_ and s.get().view(np.uint8).tolist() == [1, 1, 0]
    assert int(cp.sum(s).get()) == int(np.sum(a + b)) == 2
    assert cp.full(3, 2, dtype=bool).get().view(np.uint8).tolist() == [1, 1, 1]
    z = cp.zeros(3, dtype=bool)
    z[...] = cp.asarray(np.array([0.5, 0.0, -0.3], np.float32))
    assert z.get().tolist() == [True, False, True]
    z[...] = 0.5
    assert z.get().view(np.uint8).tolist() == [1, 1, 1]
    assert cp.full(2, 2.7, dtype=np.int32).get().tolist() == [2, 2]


def test_python_integers_out_of_an_integer_dtype():
    u8 = cp.asarray(np.array([200], np.uint8))
    with pytest.raises(OverflowError, match="300 out of bounds for uint8"):
        u8 + 300
    with pytest.raises(OverflowError, match="out of bounds for int64"):
        cp.asarray(np.array([1], np.int64)) + 2 ** 63
    assert (u8 > -1).get().tolist() == [True]
    assert (cp.asarray(np.array([-24], np.int8)) == 1000).get().tolist() == [False]
    assert (cp.asarray(np.array([5], np.uint32)) < -1).get().tolist() == [False]


def test_in_place_operands_that_overlap_the_output():
    x = np.arange(8, dtype=np.float32)
    d = cp.asarray(x)
    d += d[::-1]
    np.testing.assert_array_equal(d.get(), x + x[::-1])
    m = np.arange(16, dtype=np.float32).reshape(4, 4)
    dm = cp.asarray(m)
    cp.add(dm, dm.T, out=dm)
    np.testing.assert_array_equal(dm.get(), m + m.T)


def test_masked_assignment_keeps_int64_elements():
    a = np.array([2 ** 62 + 1, 2 ** 63 - 1, 5], np.int64)
    d = cp.asarray(a)
    mask = np.array([False, False, True])
    d[mask] = 0.0
    a[mask] = 0.0
    np.testing.assert_array_equal(d.get(), a)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_float_floor_divide_and_mod_are_numpys(dtype):
    if dtype == np.float64 and not cp.runtime(0).info.fp64:
        pytest.skip("this OpenCL device has no float64")
    sp = np.array([0.0, -0.0, 1.0, -1.0, 0.1, -0.1, 7.0, -7.0, 1e17, -1e17, np.inf, -np.inf,
                   np.nan, 2.5, -2.5, 3.0], dtype)
    a, b = np.repeat(sp, len(sp)), np.tile(sp, len(sp))
    with np.errstate(all="ignore"):
        for f, g in ((cp.floor_divide, np.floor_divide), (cp.mod, np.mod)):
            got, want = f(cp.asarray(a), cp.asarray(b)).get(), g(a, b)
            same = (got == want) & (np.signbit(got) == np.signbit(want))
            assert (same | (np.isnan(got) & np.isnan(want))).all(), g.__name__


@pytest.mark.parametrize("dtype", [np.int8, np.int32, np.int64, np.uint8, np.uint64])
def test_integer_floor_divide_and_mod_are_numpys(dtype):
    info = np.iinfo(dtype)
    v = np.array([0, 1, 2, 7, info.max, info.max - 1, info.min, info.min + 1]
                 + ([-1, -2, -7] if info.min < 0 else []), dtype)
    a, b = np.repeat(v, len(v)), np.tile(v, len(v))
    with np.errstate(all="ignore"):
        for f, g in ((cp.floor_divide, np.floor_divide), (cp.mod, np.mod)):
            np.testing.assert_array_equal(f(cp.asarray(a), cp.asarray(b)).get(), g(a, b))


def test_zero_d_reductions_keepdims_and_empty_edges():
    assert float(cp.sum(cp.asarray(np.float32(3)), axis=0).get()) == 3.0
    assert cp.max(cp.asarray(np.float32(3)), axis=-1).shape == ()
    assert cp.argmax(cp.ones((2, 3)), axis=None, keepdims=True).shape == (1, 1)
    assert cp.argmin(cp.asarray(np.float32(1)), keepdims=True).shape == ()
    assert [p.shape for p in cp.split(cp.zeros(0), 4)] == [(0,)] * 4
    x = cp.zeros((4, 5, 0, 3))
    assert x[cp.asarray(np.ones((4, 5), bool))].shape == (20, 0, 3)


def test_bool_scalars_index_as_numpy_does():
    x = np.arange(10.0).reshape(2, 5)
    d = cp.asarray(x)
    for k in [(True,), (False,), (0, True), (Ellipsis, False), (np.True_,), (None, True, 1)]:
        assert d[k].shape == x[k].shape
        np.testing.assert_array_equal(d[k].get(), x[k])


@pytest.mark.parametrize("dtype", [bool, np.int8, np.int16])
def test_matmul_of_small_integer_types(dtype):
    a = np.ones((1, 300), dtype)
    b = np.ones((300, 2), dtype)
    np.testing.assert_array_equal((cp.asarray(a) @ cp.asarray(b)).get(), a @ b)


def test_out_and_in_place_follow_same_kind_casting():
    a = cp.asarray(np.array([1, 2], np.int32))
    with pytest.raises(TypeError, match="casting='same_kind'"):
        a += 2.5
    assert a.get().tolist() == [1, 2]  # NOTE: unchanged
    f = cp.asarray(np.array([1.0, 2.0], np.float32))
    f += cp.asarray(np.array([1.0, 2.0]))  # float64 into float32: same kind
    assert f.get().tolist() == [2.0, 4.0]
