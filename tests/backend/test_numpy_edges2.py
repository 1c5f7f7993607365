"""More of NumPy's behaviour at the edges, found by a differential fuzzer of the OpenCL arrays
against NumPy: advanced indexing with integers and index arrays apart in the key (their axes
first in the result), getitem and setitem alike; exact comparisons of integers of mixed signs
(int64 with uint64, Python ints beyond the dtype); the result dtypes of every elementwise op
for every dtype pair, float16 (which OpenCL arrays lack) refused by name."""

import warnings

import numpy as np
import pytest

import labkit as lk
from labkit.backend import opencl as cp

# ---- advanced indexing ----------------------------------------------------------------------
_rng = np.random.default_rng(7)
M34 = _rng.random((3, 4)) > 0.4
M2 = np.array([True, False])
M5 = np.array([True, False, True, True, False])
S = slice(None)
KEYS = [
    (S, [0, 1], S, 0),                      # an int apart from a list: their axes first
    (0, S, [1, 2]),
    ([0, 1], S, [1, 2]),                    # two lists apart
    ([1, 0], S, S, [[1], [2]]),             # ... broadcast together
    (S, [0, -1], None, [1, 2]),             # None between them
    (Ellipsis, [0, 1], 0), ([1], Ellipsis, [2]), (S, [0], Ellipsis, [0]),
    (M2, 0), (M2, S, 0), (0, M34), (S, M34, [0] * int(M34.sum())),  # bool masks with ints
    (M2, S, S, M5), (M2, [1, 2]),
    (0, S, True), (S, True, 0), (True, [0, 1]), (None, True, 1),  # bool scalars
    (1, [2, 0], slice(1, 3), np.int64(4)), (slice(None, None, -1), [[0], [2]], S, [1, 3]),
    (np.array(1), S, np.array([0, 2])), ([], S, 0),
    (S, [0, 1], 1, S), (S, [0, 1], 1, [1, 2]), ([0, 1], 2, S, [1, 2]),
]


def _device_key(key, on_device):
    return tuple(cp.asarray(np.asarray(k, None if np.size(k) else np.int64))
                 if on_device and isinstance(k, (list, np.ndarray)) and np.ndim(k) > 0 else k
                 for k in key)


@pytest.mark.parametrize("on_device", [False, True], ids=["host_index", "device_index"])
@pytest.mark.parametrize("key", KEYS, ids=str)
def test_advanced_indices_apart_come_first_as_in_numpy(key, on_device):
    h = np.arange(2 * 3 * 4 * 5, dtype=np.float32).reshape(2, 3, 4, 5)
    dkey = _device_key(key, on_device)
    want = h[key]
    got = cp.asarray(h)[dkey]
    assert got.shape == want.shape
    np.testing.assert_array_equal(got.get(), want)
    for value in (np.arange(want.size, dtype=np.float32).reshape(want.shape) + 1000, 7.0,
                  np.arange(want.shape[-1], dtype=np.float32) - 50 if want.ndim else 3.0):
        w = h.copy()
        w[key] = value
        d = cp.asarray(h)
        d[dkey] = cp.asarray(value) if isinstance(value, np.ndarray) else value
        np.testing.assert_array_equal(d.get(), w)


def test_setitem_through_index_arrays_edge_cases():
    h = np.arange(60, dtype=np.int64).reshape(3, 4, 5) + 2 ** 60  # NOTE: exact int64
    vals = np.arange(30, dtype=np.int64).reshape(3, 2, 5) - 2 ** 61
    w, d = h.copy(), cp.asarray(h)
    w[[0, 0, 2], [1, 1, 3]] = vals[:, 0]           # repeated indices: the last value wins
    d[[0, 0, 2], [1, 1, 3]] = cp.asarray(vals[:, 0])
    np.testing.assert_array_equal(d.get(), w)
    w, d = h.copy(), cp.asarray(h)
    wt, dt = w.transpose(2, 0, 1), d.transpose(2, 0, 1)  # a strided target
    wt[[0, 3], :, 1] = 5
    dt[[0, 3], :, 1] = 5
    np.testing.assert_array_equal(d.get(), w)
    w, d = h.copy(), cp.asarray(h)
    w[M34] = -1                                     # a mask over the leading axes
    d[cp.asarray(M34)] = -1
    np.testing.assert_array_equal(d.get(), w)
    w, d = h.copy(), cp.asarray(h)
    w[M34] = np.arange(int(M34.sum()) * 5).reshape(-1, 5)  # a mask with an array of values
    d[M34] = cp.asarray(np.arange(int(M34.sum()) * 5).reshape(-1, 5))
    np.testing.assert_array_equal(d.get(), w)
    b = np.zeros((2, 3), bool)
    db = cp.asarray(b)
    b[[1], 0, None] = 2.5
    db[[1], 0, None] = 2.5
    np.testing.assert_array_equal(db.get(), b)
    with pytest.raises(ValueError, match="could not be broadcast to indexing result"):
        cp.asarray(h)[[0, 1], S, 0] = cp.zeros(3, np.int64)
    with pytest.raises(IndexError, match="shape mismatch: indexing arrays could not be "
                                         "broadcast together"):
        cp.asarray(h)[[0, 1], False]
    with pytest.raises(IndexError, match="index 4 is out of bounds for axis 2 with size 4"):
        cp.asarray(h).reshape(3, 1, 4, 5)[[0], S, [4]]
    for key in (([5], False), (Ellipsis, [[-7], [1]], S, False)):  # NOTE: selects nothing,
        assert cp.asarray(h)[key].shape == h[key].shape          # so NumPy checks nothing


# ---- exact comparisons of integers ------------------------------------------------------------
CMP = ["equal", "not_equal", "less", "less_equal", "greater", "greater_equal"]
INTS = {np.int64: [-2 ** 63, -2 ** 53 - 1, -1, 0, 2 ** 53, 2 ** 53 + 1, 2 ** 63 - 1],
        np.uint64: [0, 1, 2 ** 53, 2 ** 53 + 1, 2 ** 63 - 1, 2 ** 63, 2 ** 64 - 1],
        np.int8: [-128, -1, 0, 127], np.uint32: [0, 2 ** 32 - 1], np.bool_: [False, True]}


@pytest.mark.parametrize("d1", list(INTS), ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("d2", list(INTS), ids=lambda d: np.dtype(d).name)
def test_integer_comparisons_are_exact(d1, d2):
    v1, v2 = np.array(INTS[d1], d1), np.array(INTS[d2], d2)
    a, b = np.repeat(v1, len(v2)), np.tile(v2, len(v1))
    for name in CMP:
        f, g = getattr(cp, name), getattr(np, name)
        np.testing.assert_array_equal(f(cp.asarray(a), cp.asarray(b)).get(), g(a, b), name)
        for s in (v2[0], v2[-1]):  # NumPy scalars are typed
            np.testing.assert_array_equal(f(cp.asarray(a), s).get(), g(a, s), name)
            np.testing.assert_array_equal(f(s, cp.asarray(a)).get(), g(s, a), name)


@pytest.mark.parametrize("dtype", [np.int8, np.int64, np.uint64, np.uint8])
def test_comparisons_with_python_ints_beyond_the_dtype(dtype):
    h = np.array([np.iinfo(dtype).min, 0, 1, np.iinfo(dtype).max], dtype)
    for s in (2 ** 53 + 1, 2 ** 63 - 1, 2 ** 63, 2 ** 64 - 1, 2 ** 64, 2 ** 70, -1, -2 ** 63,
              -2 ** 63 - 1, -2 ** 70):
        for name in CMP:
            f, g = getattr(cp, name), getattr(np, name)
            np.testing.assert_array_equal(f(cp.asarray(h), s).get(), g(h, s), f"{name} {s}")
            np.testing.assert_array_equal(f(s, cp.asarray(h)).get(), g(s, h), f"{name} {s}")
    out = cp.zeros(4, np.int32)  # out= of another dtype, and the constant answer into it
    cp.less(cp.asarray(h), 2 ** 70, out=out)
    assert out.get().tolist() == [1, 1, 1, 1]
    cp.equal(cp.asarray(h), cp.asarray(np.array([-1, 0, 1, -1], np.int64)), out=out)
    assert out.get().tolist() == np.equal(h, np.array([-1, 0, 1, -1])).astype(int).tolist()
    with pytest.raises(OverflowError):  # NumPy's too: bools take a Python int as int64
        _ = cp.asarray(np.array([True])) < 2 ** 63


def test_numpy_bool_scalars_are_operands():
    h = np.array([1.5, 0.0], np.float32)
    for _ in range(2):  # the second call takes the decided path
        np.testing.assert_array_equal((cp.asarray(h) + np.True_).get(), h + np.True_)
    assert (cp.asarray(np.array([1, 2], np.int32)) == np.True_).get().tolist() == [True, False]


# ---- result dtypes ------------------------------------------------------------------------------
DTYPES = [np.bool_, np.int8, np.uint8, np.int16, np.uint16, np.int32, np.uint32, np.int64,
          np.uint64, np.float32, np.float64]
UNARY = ["negative", "absolute", "sign", "square", "reciprocal", "exp", "expm1", "log", "log1p",
         "log2", "sqrt", "tanh", "sin", "cos", "tan", "arctan", "floor", "ceil", "trunc", "rint",
         "isnan", "isinf", "isfinite", "logical_not", "invert"]
BINARY = ["add", "subtract", "multiply", "true_divide", "floor_divide", "mod", "power", "maximum",
          "minimum", "arctan2", "equal", "less", "logical_and", "logical_xor", "bitwise_and",
          "bitwise_or"]


def _outcome(f, *args):
    """The result dtype, or 'TypeError' / 'float16' (what labkit refuses by name)."""
    try:
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore")
            r = f(*args)
    except lk.DTypeError as e:
        return "float16" if "float16" in str(e) else "TypeError"
    except TypeError:
        return "TypeError"
    return np.dtype(r.dtype).name


def _same(name, np_args, cl_args):
    want = _outcome(getattr(np, name), *np_args)
    assert _outcome(getattr(cp, name), *cl_args) == want, (name, np_args)


#: pairs also run on elements (the others are decided on empty arrays: the same decision,
#: without building a kernel for each of 121 pairs per op, which took CI minutes)
LAUNCHED = {(np.bool_, np.bool_), (np.int8, np.uint8), (np.int64, np.uint64),
            (np.float32, np.int32), (np.uint16, np.float64)}


def _arr(values, dt, launched):
    return np.array(values if launched else [], dt)


@pytest.mark.parametrize("name", UNARY)
def test_unary_result_dtypes_are_numpys(name):
    for dt in DTYPES:
        for launched in (False, True) if dt in (np.bool_, np.int16, np.float32) else (False,):
            h = _arr([1, 0, 1], dt, launched)
            _same(name, (h,), (cp.asarray(h),))


@pytest.mark.parametrize("name", BINARY)
def test_binary_result_dtypes_are_numpys(name):
    for d1 in DTYPES:
        for d2 in DTYPES:
            for launched in (False, True) if (d1, d2) in LAUNCHED else (False,):
                x, y = _arr([1, 2, 1], d1, launched), _arr([1, 1, 1], d2, launched)
                _same(name, (x, y), (cp.asarray(x), cp.asarray(y)))
        for s in (True, 2, 2.5):
            x = _arr([1, 2, 1], d1, d1 in (np.int8, np.float32))
            _same(name, (x, s), (cp.asarray(x), s))
            _same(name, (s, x), (s, cp.asarray(x)))


def test_the_reported_dtypes():
    b = cp.asarray(np.array([True, False]))
    assert cp.square(b).dtype == np.int8 and cp.floor_divide(b, b).dtype == np.int8
    assert cp.square(b).get().tolist() == [1, 0]
    for dt, want in ((np.int16, np.float32), (np.int32, np.float64), (np.uint64, np.float64)):
        r = cp.rint(cp.asarray(np.array([3, -2 if dt != np.uint64 else 2], dt)))
        assert r.dtype == want and r.get().tolist() == [3.0, -2.0 if dt != np.uint64 else 2.0]
    r = cp.arctan2(cp.asarray(np.array([1], np.uint16)), cp.asarray(np.array([1], np.int8)))
    assert r.dtype == np.float32
    with pytest.raises(lk.DTypeError, match=r"sqrt: NumPy computes uint8 in float16.*astype"):
        cp.sqrt(cp.asarray(np.array([4], np.uint8)))
    with pytest.raises(TypeError, match="boolean subtract"):
        b - b


def test_rint_of_int32_without_fp64_is_refused_as_other_float64_results(dev_no_fp64):
    x = cp.asarray(np.array([1, 2], np.int32), device=dev_no_fp64)
    with pytest.raises(lk.DTypeError, match="has no float64 support"):
        cp.rint(x)
    assert cp.rint(x.astype(np.int16)).dtype == np.float32
