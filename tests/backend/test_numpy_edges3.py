"""A third probe of the OpenCL arrays against NumPy (the reference): in-place operators on
views, writes into broadcast views (read-only, as NumPy's: a write raced on the elements that
share memory), NumPy's positional order for methods, setitem values with extra leading axes,
Python integers out of a dtype's range, reductions with an integer dtype, and the shapes,
indices and exponents NumPy refuses or accepts."""

import numpy as np
import pytest

import labkit as lk
from labkit.backend import opencl as cp
from labkit.errors import ShapeError


def both(h):
    return np.array(h), cp.asarray(np.array(h))


# ---- in-place operators on a view write into its base --------------------------------------
@pytest.mark.parametrize("op", ["+=", "-=", "*=", "//=", "%=", "**=", "&=", "|=", "^="])
def test_every_in_place_operator_writes_into_a_views_base(op):
    h, d = both(np.arange(1, 7, dtype=np.int32).reshape(2, 3))
    hv, dv = h[0], d[0]
    rhs = 2
    exec(f"hv {op} rhs", {}, {"hv": hv, "rhs": rhs})
    exec(f"dv {op} rhs", {}, {"dv": dv, "rhs": rhs})
    np.testing.assert_array_equal(d.get(), h)


def test_float_in_place_matmul_and_true_division_on_a_view():
    h, d = both(np.arange(12, dtype=np.float32).reshape(3, 4) + 1)
    hv, dv = h[:, :2], d[:, :2]
    hv /= 4
    dv /= 4
    np.testing.assert_array_equal(d.get(), h)
    hm, dm = both(np.arange(4, dtype=np.float32).reshape(2, 2))
    hm @= np.eye(2, dtype=np.float32) * 3
    dm @= cp.asarray(np.eye(2, dtype=np.float32) * 3)
    np.testing.assert_array_equal(dm.get(), hm)


@pytest.mark.parametrize("op", ["%", "&", "|", "^"])
def test_reflected_operators_with_a_python_scalar_on_the_left(op):
    h, d = both(np.array([1, 2, 3, 6], dtype=np.int32))
    np.testing.assert_array_equal(eval(f"5 {op} d").get(), eval(f"5 {op} h"))


# ---- broadcast views are read-only -----------------------------------------------------------
def test_a_broadcast_view_is_read_only_as_numpys():
    d = cp.zeros(4)
    b = cp.broadcast_to(d[None], (1000, 4))
    assert not b.flags["WRITEABLE"] and d.flags["WRITEABLE"]
    assert not b[3:].flags["WRITEABLE"] and not b.T.flags["WRITEABLE"]  # its views too
    for write in (lambda: b.__iadd__(1), lambda: b.__setitem__(0, 1.0),
                  lambda: b.__setitem__([0, 1], 1.0), lambda: b[2:].fill(3.0),
                  lambda: cp.add(b, 1, out=b), lambda: cp.add.at(b, [0], 1.0)):
        with pytest.raises(ValueError, match="read-only"):
            write()
    np.testing.assert_array_equal(d.get(), np.zeros(4))  # nothing was written
    c = b.copy()
    c += 1
    np.testing.assert_array_equal(c.get(), np.ones((1000, 4)))
    with pytest.raises(ValueError, match="read-only"):  # NumPy refuses it alike
        np.broadcast_to(np.zeros(4)[None], (1000, 4))[0] = 1


@pytest.mark.parametrize("device", ["cpu", "cl"])
def test_a_gradient_that_is_a_broadcast_is_read_only_on_both_devices(device):
    x = lk.tensor(np.ones((64, 64), np.float32), device=device, requires_grad=True)
    x.sum().backward()
    with pytest.raises(ValueError, match="read-only"):
        x.grad.data *= 2
    np.testing.assert_array_equal(x.grad.numpy(), np.ones((64, 64)))


# ---- methods take NumPy's positional order ---------------------------------------------------
def test_methods_take_numpys_positional_arguments():
    h, d = both(np.arange(1, 13, dtype=np.int32).reshape(3, 4))
    cases = [("prod", (0, np.int64)), ("sum", (1, np.int64, None, True)),
             ("mean", (0, np.float64, None, True)), ("max", (0, None, True)),
             ("min", (1, None, True)), ("argmax", (0, None)), ("any", (0,)),
             ("all", (1,)), ("var", (0, np.float64, None, 1)),
             ("std", (1, np.float64, None, 0, True))]
    for name, args in cases:
        want, got = getattr(h, name)(*args), getattr(d, name)(*args).get()
        assert got.shape == want.shape and got.dtype == want.dtype, (name, args)
        np.testing.assert_allclose(got, want, rtol=1e-6, err_msg=name)
    with pytest.raises(TypeError, match="at most"):
        d.max(0, None, True, 5)
    with pytest.raises(TypeError, match="out= is not supported"):
        d.sum(0, None, d)
    with pytest.raises(TypeError, match="multiple values for argument 'axis'"):
        d.sum(0, axis=1)


# ---- setitem ---------------------------------------------------------------------------------
def test_setitem_drops_a_values_extra_leading_axes_of_size_one():
    h, d = both(np.zeros((3, 4), np.float32))
    h[0] = np.ones((1, 4))
    d[0] = cp.ones((1, 4))
    h[[1]] = np.full((1, 1, 4), 2)
    d[[1]] = cp.full((1, 1, 4), 2.0)
    h[1:, 1] = np.full((1, 1, 1, 2), 3)
    d[1:, 1] = cp.full((1, 1, 1, 2), 3.0)
    np.testing.assert_array_equal(d.get(), h)
    with pytest.raises(ShapeError):
        d[0] = cp.ones((2, 4))


@pytest.mark.parametrize("dtype, value", [(np.int8, 300), (np.int8, -129), (np.uint8, -1),
                                          (np.uint8, 256), (np.int64, 2 ** 63)])
def test_a_python_int_out_of_the_dtypes_range_is_an_overflow_error_not_wrapped(dtype, value):
    d = cp.zeros(3, dtype)
    for write in (lambda: d.__setitem__(0, value), lambda: d.__setitem__([0], value),
                  lambda: d.fill(value), lambda: cp.full(2, value, dtype)):
        with pytest.raises(OverflowError, match=f"{value} out of bounds"):
            write()
    with pytest.raises(OverflowError):  # NumPy 2 alike
        np.zeros(3, dtype)[0] = value
    np.testing.assert_array_equal(d.get(), np.zeros(3))


def test_in_range_values_still_cast_as_numpy_casts_them():
    h, d = both(np.zeros(4, np.int8))
    for k, v in [(0, 127), (1, -128), (2, 2.7), (3, True)]:
        h[k] = v
        d[k] = v
    np.testing.assert_array_equal(d.get(), h)
    assert cp.full(2, 7).dtype == np.full(2, 7).dtype == np.int64
    assert cp.full(2, True).dtype == np.bool_


# ---- reductions and creation -----------------------------------------------------------------
@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.float32])
def test_mean_and_var_in_an_integer_dtype_are_in_that_dtype(dtype):
    h, d = both(np.arange(6))
    for name in ("mean", "var", "std"):
        want = getattr(h, name)(dtype=dtype)
        got = getattr(d, name)(dtype=dtype).get()
        assert got.dtype == want.dtype, name
        np.testing.assert_allclose(got, want, rtol=1e-6, err_msg=name)


def test_zeros_and_ones_of_dtype_none_are_float64_as_numpys():
    for f in ("zeros", "ones"):
        assert getattr(cp, f)(3, dtype=None).dtype == getattr(np, f)(3, dtype=None).dtype
        assert getattr(cp, f)(3, None).dtype == np.float64


def test_argmax_of_a_tuple_of_axes_is_refused_as_numpy_refuses_it():
    d = cp.asarray(np.arange(6).reshape(2, 3))
    for f in (d.argmax, d.argmin):
        with pytest.raises(TypeError, match="axis must be one integer"):
            f(axis=(0, 1))
    with pytest.raises(TypeError):
        np.arange(6).reshape(2, 3).argmax(axis=(0, 1))


# ---- shapes, indices, exponents --------------------------------------------------------------
def test_add_at_values_must_broadcast_to_the_indexed_shape():
    for values in (np.arange(4.0), np.arange(6.0).reshape(2, 3), np.arange(6.0)):
        with pytest.raises(ShapeError, match="do not broadcast to the indexed shape"):
            cp.add.at(cp.zeros((3, 2)), [0, 1], cp.asarray(values.astype(np.float32)))
        with pytest.raises(ValueError):
            np.add.at(np.zeros((3, 2)), [0, 1], values)
    h, d = both(np.zeros((3, 2), np.float32))
    for idx, values in [([0, 0, 2], np.float32(1.5)), ([[0, 1], [1, 2]], np.ones((2, 2, 2))),
                        ([2, 0], np.arange(2.0)[:, None]), ([1], np.arange(2.0))]:
        np.add.at(h, idx, values)
        cp.add.at(d, idx, cp.asarray(np.asarray(values, np.float32)))
    np.testing.assert_array_equal(d.get(), h)


def test_expand_dims_refuses_a_repeated_axis():
    d = cp.zeros((3, 4))
    with pytest.raises(ShapeError, match="repeated axis"):
        d.expand_dims((0, 0))
    with pytest.raises(ValueError, match="repeated axis"):
        np.expand_dims(np.zeros((3, 4)), (0, 0))
    assert d.expand_dims((0, -1)).shape == np.expand_dims(np.zeros((3, 4)), (0, -1)).shape


def test_zero_d_bool_index_numpy_integer_sections_and_an_int_shape():
    h, d = both(np.arange(12, dtype=np.float32).reshape(3, 4))
    for flag in (True, False):
        got = d[cp.asarray(np.array(flag))]
        want = h[np.array(flag)]
        assert got.shape == want.shape
        np.testing.assert_array_equal(got.get(), want)
    parts = cp.split(d, np.int64(2), axis=1)
    for got, want in zip(parts, np.split(h, np.int64(2), axis=1)):
        np.testing.assert_array_equal(got.get(), want)
    np.testing.assert_array_equal(cp.broadcast_to(cp.asarray(np.array(1.0, np.float32)), 3)
                                  .get(), np.broadcast_to(np.float32(1.0), 3))


def test_integer_powers_follow_numpys_promotion():
    u = np.array([2, 4], np.uint64)
    e = np.array([-1, 2], np.int8)
    np.testing.assert_allclose((cp.asarray(u) ** cp.asarray(e)).get(), u ** e)  # float64
    with pytest.raises(ValueError, match="negative integer powers"):
        cp.asarray(np.array([True, False])) ** np.int8(-2)
    with pytest.raises(ValueError, match="negative integer powers"):
        np.array([True, False]) ** np.int8(-2)
    with pytest.raises(ValueError, match="negative integer powers"):
        cp.asarray(np.array([1, 2], np.int32)) ** -1
    np.testing.assert_array_equal((cp.asarray(np.array([1, 2], np.int32)) ** 3).get(), [1, 8])


def test_a_list_of_python_ints_out_of_range_is_refused_as_numpy_refuses_it():
    h, d = both(np.zeros(3, np.int8))
    with pytest.raises(OverflowError):
        h[[0]] = [300]
    with pytest.raises(OverflowError, match="300 out of bounds for int8"):
        d[[0]] = [300]
    h[[0, 1]] = np.array([300, 2])  # an array is cast as NumPy casts it
    d[[0, 1]] = np.array([300, 2])
    np.testing.assert_array_equal(d.get(), h)


def test_an_optimizer_does_not_write_into_a_read_only_parameter():
    x = cp.asarray(np.ones(4, np.float32))
    p = lk.tensor(np.ones(4, np.float32), device="cl", requires_grad=True)
    p.data = cp.broadcast_to(x, (4,))  # read-only, and contiguous: the fused update's path
    opt = lk.optimizers.SGD(lr=0.1).setup({"p": p})
    (p * p).sum().backward()
    with pytest.raises(ValueError, match="read-only"):
        opt.update()
    np.testing.assert_array_equal(x.get(), np.ones(4))
