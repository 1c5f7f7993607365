"""Found by comparing ops with NumPy and PyTorch (probe 17): a zero Hessian's product,
integer inputs of the functions composed of several steps, Python ints beside integer
tensors."""

import numpy as np
import pytest

import labkit as lk
import labkit.functions as F


@pytest.mark.parametrize("f", [
    lambda x: F.sum(F.relu(x)),
    lambda x: F.sum(x * 3),
    lambda x: F.sum(F.max_pool2d(F.reshape(x, (1, 1, 2, 2)), 2)),
    lambda x: F.sum(F.clip(x, -1.0, 1.0)),
])
def test_hvp_of_a_zero_hessian_is_zeros(dev, f):
    """It raised (the product of the gradient with v carried no graph)."""
    x = lk.tensor(np.array([1.5, -2.0, 0.5, 3.0]), device=dev)
    v = lk.tensor(np.ones(4), device=dev)
    (hv,) = lk.autograd.hvp(f, [x], [v])
    assert hv.shape == (4,) and hv.dtype == np.float64
    assert hv.numpy().tobytes() == np.zeros(4).tobytes()  # NOTE: +0.0, not -0.0


def test_hvp_where_f_reads_one_input_only(dev):
    x = lk.tensor(np.array([1.0, -2.0]), device=dev)
    y = lk.tensor(np.array([3.0]), device=dev)
    hx, hy = lk.autograd.hvp(lambda x, y: F.sum(x * x * x), [x, y],
                             [lk.tensor(np.ones(2), device=dev),
                              lk.tensor(np.ones(1), device=dev)])
    np.testing.assert_array_equal(hx.numpy(), [6.0, -12.0])
    np.testing.assert_array_equal(hy.numpy(), [0.0])


def test_jvp_of_a_constant_function_is_zeros(dev):
    x = lk.tensor(np.array([1.0, -2.0]), device=dev)
    out = lk.autograd.jvp(lambda x: lk.tensor(np.ones(3), device=dev), [x],
                          [lk.tensor(np.ones(2), device=dev)])
    assert out.numpy().tobytes() == np.zeros(3).tobytes()


def _numpy_ref(name, x):
    x = x.astype(np.result_type(x.dtype, np.float32 if name in REDUCTIONS else np.float16)
                 ).astype(np.float64)
    m = x.max(axis=1, keepdims=True)
    lse = np.log(np.exp(x - m).sum(axis=1, keepdims=True)) + m
    with np.errstate(over="ignore"):
        return {"logsumexp": lse[:, 0], "log_softmax": x - lse, "softmax": np.exp(x - lse),
                "sigmoid": 1 / (1 + np.exp(-x)), "softplus": np.logaddexp(0, x),
                "log_sigmoid": -np.logaddexp(0, -x)}[name]


REDUCTIONS = ("logsumexp", "log_softmax", "softmax")
FUNCS = {"logsumexp": lambda t: F.logsumexp(t, axis=1),
         "log_softmax": lambda t: F.log_softmax(t, axis=1),
         "softmax": lambda t: F.softmax(t, axis=1), "sigmoid": F.sigmoid,
         "softplus": F.softplus, "log_sigmoid": F.log_sigmoid}


@pytest.mark.parametrize("name", sorted(FUNCS))
@pytest.mark.parametrize("x", [np.array([[-100, 0, 100, 50]], np.int8),
                               np.array([[0, 1, 4, 200]], np.uint8),
                               np.array([[-3000, 7, 2000, 1]], np.int16),
                               np.array([[-70000, 3, 70000, 9]], np.int32),
                               np.array([[True, False, True, True]])],
                         ids=["int8", "uint8", "int16", "int32", "bool"])
def test_integer_inputs_compute_in_numpys_float_dtype(name, x):
    """x - max and -x wrapped around in the integer dtype (a uint8 softmax was all zeros, a
    bool sigmoid a TypeError); NumPy computes them in float16, float32 or float64."""
    y = FUNCS[name](lk.tensor(x))
    # NOTE: the reductions in float32 at least (a sum of 65,504 exponentials overflows float16)
    want_dt = np.result_type(x.dtype, np.float32 if name in REDUCTIONS else np.float16)
    assert y.dtype == want_dt
    tol = {2: 2e-3, 4: 1e-6, 8: 1e-12}[want_dt.itemsize]
    np.testing.assert_allclose(y.numpy().astype(np.float64), _numpy_ref(name, x), rtol=tol,
                               atol=tol)


@pytest.mark.parametrize("name", sorted(FUNCS))
def test_integer_inputs_on_opencl(name):
    """int32 computes in float64 as on the CPU; an 8-bit one in float32 for the reductions,
    in float16 (as NumPy; OpenCL arrays lack it: refused naming the cast) for the others."""
    x = np.array([[-70000, 3, 70000, 9]], np.int32)
    y = FUNCS[name](lk.tensor(x, device="cl"))
    np.testing.assert_allclose(y.numpy(), FUNCS[name](lk.tensor(x)).numpy(), rtol=1e-12,
                               atol=1e-12)
    u8 = lk.tensor(np.array([[1, 2]], np.uint8), device="cl")
    if name in REDUCTIONS:
        np.testing.assert_allclose(FUNCS[name](u8).numpy(),
                                   FUNCS[name](lk.tensor(u8.numpy())).numpy(), rtol=1e-6)
    else:
        with pytest.raises(lk.errors.DTypeError, match=r"float16.*astype\(np.float32\)"):
            FUNCS[name](u8)


@pytest.mark.parametrize("x", [np.zeros((1, 70_000), np.uint8), np.ones((1, 100_000), bool)])
def test_a_long_integer_softmax_does_not_overflow(x):
    """A sum of 70,000 exponentials is past float16's largest (a review found the softmax of
    70,000 uint8 zeros all zeros, its logsumexp inf)."""
    n = x.shape[1]
    assert np.allclose(F.softmax(lk.tensor(x), axis=1).numpy(), 1 / n, rtol=1e-5)
    assert np.allclose(F.logsumexp(lk.tensor(x), axis=1).numpy(),
                       np.log(n) + float(x.max()), rtol=1e-6)
    assert np.isfinite(F.log_softmax(lk.tensor(x), axis=1).numpy()).all()


def test_a_python_int_beside_an_integer_tensor_is_weak(dev):
    x = lk.tensor(np.array([1, -2, 3], np.int8), device=dev)
    c = np.array([True, False, True])
    assert F.where(c, x, 0).dtype == np.int8 and F.where(c, 1, x).dtype == np.int8
    assert F.maximum(x, 0).dtype == np.int8 and F.minimum(0, x).dtype == np.int8
    np.testing.assert_array_equal(F.maximum(x, 0).numpy(), [1, 0, 3])
    assert F.where(c, x, 0.5).dtype == np.float64  # NOTE: a float is not an int8
    with pytest.raises(OverflowError, match="300 out of bounds for int8"):
        F.where(c, x, 300)
