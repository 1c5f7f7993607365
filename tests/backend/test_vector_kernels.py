"""The vector kernels of the transcendental ops on CPU devices (``elementwise._vector_plan``):
the same results as the scalar kernels and NumPy, tails and offsets handled, special values
kept, and the largest error against float64 held to what the README states."""

import numpy as np
import pytest

from labkit.backend import opencl as cp
from labkit.backend.opencl import elementwise, runtime

from .helpers import check

OPS = ["exp", "expm1", "log", "log1p", "log2", "sin", "cos", "erf", "erfc", "tanh", "sigmoid"]


def _ref(name, x):
    x64 = x.astype(np.float64)
    if name == "sigmoid":
        return 1 / (1 + np.exp(-x64))
    if name in ("erf", "erfc"):
        import math

        return np.vectorize(getattr(math, name))(x64)
    return getattr(np, name)(x64)


def _input(name, n, rng):
    x = rng.standard_normal(n).astype(np.float32) * 3
    if name.startswith("log"):
        x = np.abs(x) + np.float32(1e-3)
    return x


def _is_cpu():
    return runtime(0).info.is_cpu


@pytest.mark.parametrize("name", OPS)
@pytest.mark.parametrize("n", [elementwise.VECTOR_MIN, elementwise.VECTOR_MIN + 13, 100_003])
def test_vector_kernels_match_float64_and_handle_the_tail(name, n, rng):
    x = _input(name, n, rng)
    got = getattr(cp, name)(cp.asarray(x)).get()
    want = _ref(name, x)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("name", OPS)
def test_vector_and_scalar_kernels_agree_on_every_element(name, rng):
    """A contiguous array takes the vector kernel, a strided view of the same values the
    scalar one: the two agree to an ulp or two everywhere, the tail included."""
    x = _input(name, elementwise.VECTOR_MIN * 2 + 5, rng)
    wide = np.zeros((x.size, 2), np.float32)
    wide[:, 0] = x
    vec = getattr(cp, name)(cp.asarray(x)).get()
    sca = getattr(cp, name)(cp.asarray(wide)[:, 0]).get()
    np.testing.assert_array_max_ulp(vec, sca, maxulp=2)


def test_offsets_out_and_in_place_are_respected(rng):
    n = elementwise.VECTOR_MIN * 3
    x = rng.standard_normal(n + 7).astype(np.float32)
    d = cp.asarray(x)
    view = d[7:]  # contiguous, at an offset that is no multiple of the vector width
    check(cp.exp(view), np.exp(x[7:]), rtol=1e-6)
    out = cp.zeros(n + 3)
    cp.tanh(view, out=out[3:])
    got = out.get()
    assert (got[:3] == 0).all()
    np.testing.assert_allclose(got[3:], np.tanh(x[7:]), rtol=1e-6, atol=1e-7)
    cp.exp(view, out=view)  # in place
    np.testing.assert_allclose(d.get()[7:], np.exp(x[7:]), rtol=1e-6)
    np.testing.assert_array_equal(d.get()[:7], x[:7])


@pytest.mark.parametrize("name", ["exp", "tanh", "sigmoid", "log"])
def test_aligned_and_unaligned_arrays_give_the_same_bits(name, rng):
    """Whole vectors go through vector pointers where the arrays start on a vector's
    alignment, through vloadN/vstoreN where not: the same vector math, the same bits."""
    n = elementwise.VECTOR_MIN * 2 + 5
    x = _input(name, n, rng)
    got = {}
    for skip in (0, 16, 7):
        d = cp.asarray(np.concatenate([np.ones(skip, np.float32), x]))
        out = cp.zeros(n + skip)
        getattr(cp, name)(d[skip:], out=out[skip:])
        got[skip] = out.get()[skip:]
    assert got[0].tobytes() == got[16].tobytes() == got[7].tobytes()


def test_special_values_in_the_vector_body():
    n = elementwise.VECTOR_MIN
    sp = np.array([0, -0.0, np.inf, -np.inf, np.nan, -1, 1e-45, 88.8, -110, 30, -30, 9.5,
                   10, -10, 1e30], np.float32)
    x = np.resize(sp, n)  # every special value lands inside a vector, not only in the tail
    with np.errstate(all="ignore"):
        for name in ("exp", "log", "tanh", "sigmoid"):
            got = getattr(cp, name)(cp.asarray(x)).get()
            want = _ref(name, x).astype(np.float32)
            np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-38, equal_nan=True,
                                       err_msg=name)
    t = cp.tanh(cp.asarray(x)).get()
    assert (t[np.abs(x) >= 10] == np.sign(x[np.abs(x) >= 10])).all()  # exactly +-1 there
    assert np.signbit(cp.tanh(cp.asarray(x)).get()[1])  # tanh(-0) is -0


#: the largest error of each float32 op against float64, in ulps, stated in the README
ULP_BOUND = {"exp": 1.5, "log": 1.5, "tanh": 2.0}


@pytest.mark.parametrize("name", sorted(ULP_BOUND))
def test_largest_error_against_float64_is_within_the_stated_bound(name):
    rng = np.random.default_rng(7)
    if name == "exp":
        x = rng.uniform(-87, 88.7, 1_000_000)
    elif name == "log":
        x = np.concatenate([np.exp(rng.uniform(-87, 88, 500_000)), rng.uniform(0.5, 2, 500_000)])
    else:
        x = np.concatenate([rng.uniform(-10, 10, 500_000), rng.uniform(-0.6, 0.6, 500_000)])
    x = x.astype(np.float32)
    got = getattr(cp, name)(cp.asarray(x)).get().astype(np.float64)
    want = _ref(name, x)
    ulp = np.spacing(np.abs(want).astype(np.float32)).astype(np.float64)
    err = np.abs(got - want) / ulp
    assert err.max() <= ULP_BOUND[name], (name, err.max(), x[np.argmax(err)])


def test_only_cpu_devices_take_the_vector_kernels():
    x = cp.asarray(np.ones(elementwise.VECTOR_MIN, np.float32))
    cp.exp(x)
    names = {k[0] for k in runtime(0).kernels if isinstance(k, tuple) and len(k) > 3}
    assert "exp" in names  # the plan was made
    plan = next(v for k, v in runtime(0).kernels.items()
                if isinstance(k, tuple) and len(k) > 3 and k[0] == "exp"
                and k[3] == (elementwise.VECTOR_MIN,))
    kernel_name = plan[0].function_name
    assert kernel_name == ("ewv_exp" if _is_cpu() else "ew_exp")


@pytest.mark.parametrize("name", ["exp", "log", "tanh", "sigmoid"])
def test_float64_vector_kernels_keep_double_precision(name, rng):
    if not runtime(0).info.fp64:
        pytest.skip("this OpenCL device has no float64")
    x = rng.standard_normal(elementwise.VECTOR_MIN + 3) * 3
    if name == "log":
        x = np.abs(x) + 1e-3
    x[:4] = [25.0, -25.0, 0.0, -0.0] if name != "log" else x[:4]
    got = getattr(cp, name)(cp.asarray(x)).get()
    np.testing.assert_allclose(got, _ref(name, x), rtol=1e-13, atol=1e-300)
