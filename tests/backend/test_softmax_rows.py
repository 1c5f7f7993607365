"""softmax and log-softmax over the last axis, and their gradients, one launch each
(``backend/opencl/softmax.py``): log-softmax bitwise the composed form's results, softmax
closer to float64 than it, special values as it; other layouts take the composed form."""

import numpy as np
import pytest

import labkit as lk
import labkit.functions as F
from labkit.backend import opencl as cp
from labkit.backend.opencl import softmax as sm
from labkit.backend.opencl.lse import logsumexp_parts

from .helpers import special_rows


def _ref(x, axis=-1):
    x = x.astype(np.float64)
    m = np.max(x, axis=axis, keepdims=True)
    m = np.where(np.isfinite(m), m, 0)
    with np.errstate(all="ignore"):
        ls = x - (np.log(np.exp(x - m).sum(axis=axis, keepdims=True)) + m)
    return ls, np.exp(ls)


def _composed(d, axis, log):
    """(x - shift) - log-sum from logsumexp_parts (the rows' kernel on a last axis)."""
    shift, logsum = logsumexp_parts(d, axis)
    ls = cp.subtract(cp.subtract(d, shift), logsum)
    return ls if log else cp.exp(ls)


@pytest.fixture
def calls(monkeypatch):
    seen = []
    for name in ("softmax", "grad"):
        real = getattr(sm, name)
        monkeypatch.setattr(sm, name, lambda *a, _r=real, _n=name, **k: seen.append(_n)
                            or _r(*a, **k))
    return seen


@pytest.mark.parametrize("shape", [(64, 10), (16, 1000), (20, 5, 4), (3, 7)])
@pytest.mark.parametrize("log", [True, False])
def test_rows_equal_the_composed_form_and_float64(shape, log, rng, calls):
    x = (rng.standard_normal(shape) * 20).astype(np.float32)
    d = cp.asarray(x)
    got = sm.softmax(d, -1, log=log).get()
    if log:
        np.testing.assert_array_equal(got, _composed(d, -1, log).get())
        np.testing.assert_allclose(got, _ref(x)[0], rtol=3e-6, atol=1e-5)  # NOTE: ulp(lse)
    else:  # NOTE: exp(x - m) / s: closer to float64 than the composed exp(x - lse)
        want = _ref(x)[1]
        normal = want > 1e-30  # NOTE: float32's subnormals carry few bits
        err = np.abs(got - want)[normal] / want[normal]
        old = np.abs(_composed(d, -1, log).get() - want)[normal] / want[normal]
        # NOTE: x - max rounds to float32 (ulp(|x - max|) / 2 relative after exp) in both
        assert err.max() < 1e-5 and err.mean() <= old.mean()
    assert calls == ["softmax"]


def test_special_values_as_the_composed_form(rng):
    x = special_rows(rng)
    x[5, :] = [-200, 0.5, 100, 3, 0, 0]  # exp underflows to 0 in float32
    d = cp.asarray(x)
    for log in (True, False):
        with np.errstate(all="ignore"):
            got, old = sm.softmax(d, -1, log=log).get(), _composed(d, -1, log).get()
        if log:
            np.testing.assert_array_equal(got, old)
        else:
            np.testing.assert_array_equal(got[:4], old[:4])  # NOTE: rows of NaN, inf, -inf
            # NOTE: 1e30 - logsumexp is 0 in float32, so the composed form gives 1 six times
            np.testing.assert_allclose(got[4], np.full(6, 1 / 6), rtol=1e-7)
            np.testing.assert_allclose(got[5:], old[5:], rtol=2e-5, atol=0)


def test_float64_rows(rng):
    if not lk.device("cl").info.fp64:
        pytest.skip("this OpenCL device has no fp64")
    x = rng.standard_normal((40, 9)) * 5
    np.testing.assert_allclose(sm.softmax(cp.asarray(x), 1, log=True).get(), _ref(x)[0],
                               rtol=1e-13, atol=1e-13)


@pytest.mark.parametrize("log", [True, False])
def test_gradients_match_float64_from_a_broadcast_or_transposed_g(log, rng):
    x = rng.standard_normal((24, 7)).astype(np.float32)
    y = _ref(x)[1]
    for g in (rng.standard_normal((24, 7)).astype(np.float32),
              np.broadcast_to(rng.standard_normal((1, 7)).astype(np.float32), (24, 7)),
              rng.standard_normal((7, 24)).astype(np.float32).T):
        dg = cp.asarray(np.ascontiguousarray(g))
        if g.strides[0] == 0:
            dg = cp.broadcast_to(cp.asarray(g[:1]), g.shape)  # a view: stride 0
        elif not g.flags.c_contiguous:
            dg = cp.asarray(np.ascontiguousarray(g.T)).T
        assert sm.grad_fits(cp.asarray(y.astype(np.float32)), dg, 1)
        got = sm.grad(cp.asarray(y.astype(np.float32)), dg, 1, log=log).get()
        g64 = g.astype(np.float64)
        want = (g64 - y * g64.sum(1, keepdims=True) if log
                else y * (g64 - (g64 * y).sum(1, keepdims=True)))
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_other_layouts_take_the_composed_form(rng, calls):
    x = rng.standard_normal((8, 5, 6)).astype(np.float32)
    t = lk.tensor(x, device="cl")
    np.testing.assert_allclose(F.softmax(t, axis=1).numpy(), _ref(x, 1)[1], rtol=3e-6,
                               atol=1e-7)
    few_long = rng.standard_normal((2, 3000)).astype(np.float32)
    np.testing.assert_allclose(F.log_softmax(lk.tensor(few_long, device="cl"), axis=1).numpy(),
                               _ref(few_long)[0], rtol=3e-6, atol=1e-5)
    assert calls == []  # an axis not last; a few long rows


@pytest.mark.parametrize("fn", [F.softmax, F.log_softmax])
def test_functions_on_cl_launch_once_each_way_and_agree_with_cpu(fn, rng, calls):
    x = (rng.standard_normal((32, 10)) * 4).astype(np.float32)
    w = rng.standard_normal((32, 10)).astype(np.float32)
    out = {}
    for dev in ("cpu", "cl"):
        t = lk.tensor(x, device=dev, requires_grad=True)
        y = fn(t, axis=1)
        (y * lk.tensor(w, device=dev)).sum().backward()
        out[dev] = (y.numpy(), t.grad.numpy())
    assert calls == ["softmax", "softmax", "grad"]  # forward; backward: softmax, gradient
    np.testing.assert_allclose(out["cl"][0], out["cpu"][0], rtol=2e-6, atol=1e-6)
    np.testing.assert_allclose(out["cl"][1], out["cpu"][1], rtol=2e-5, atol=1e-6)


def test_a_float64_gradient_of_a_float32_softmax_is_promoted(rng):
    x = rng.standard_normal((20, 6)).astype(np.float32)
    for dev in ("cpu", "cl"):
        if dev == "cl" and not lk.device("cl").info.fp64:
            continue
        t = lk.tensor(x, device=dev, requires_grad=True)
        y = F.log_softmax(t, axis=1)
        (y * lk.tensor(np.ones((20, 6)), device=dev)).sum().backward()  # float64 upstream
        want = 1 - 6 * _ref(x)[1]
        np.testing.assert_allclose(t.grad.numpy(), want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("c", [16, 37, 1000])
def test_long_rows_with_special_values_in_the_vector_body_and_the_tail(dtype, c, rng):
    """CPU devices read rows in vectors (kernels_cl/rowlse.cl and the softmax's vector kernel):
    NaN, +-inf and huge values early in a row (its vectors) and at its end (the tail) keep
    the composed form's values, log-softmax stays bitwise the composed form, and finite rows
    stay close to float64."""
    x = (rng.standard_normal((12, c)) * 5).astype(dtype)
    x[0, 1] = np.nan
    x[1, -1] = np.nan
    x[2, 3] = np.inf
    x[3, -1] = np.inf
    x[4, :] = -np.inf
    x[5, 2] = -np.inf
    x[6, -1] = -np.inf
    x[7, 0] = 1e30
    x[8, :] = 0
    d = cp.asarray(x)
    with np.errstate(all="ignore"):
        for log in (True, False):
            got, old = sm.softmax(d, -1, log=log).get(), _composed(d, -1, log).get()
            if log:
                np.testing.assert_array_equal(got, old)
            else:
                np.testing.assert_array_equal(got[:5], old[:5])  # NaN, inf, -inf rows
                want = _ref(x)[1]
                np.testing.assert_allclose(got[5:], want[5:], rtol=2e-5 if dtype == np.float32
                                           else 1e-12, atol=0)
        lse = cp.logsumexp(d, axis=-1).get()
        ref = _ref(x)[0]
    assert np.isnan(lse[:2]).all() and (lse[2:4] == np.inf).all() and lse[4] == -np.inf
    fin = np.isfinite(x).all(axis=1)
    np.testing.assert_allclose(sm.softmax(d, -1, log=True).get()[fin], ref[fin],
                               rtol=3e-6 if dtype == np.float32 else 1e-12, atol=1e-5)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape", [(64, 17), (64, 300), (64, 1000)])
@pytest.mark.parametrize("layout", ["transposed", "sliced"])
def test_log_softmax_of_any_layout_is_bitwise_the_composed_form(dtype, shape, layout, rng):
    """logsumexp copies a non-contiguous array to its row kernel as log_softmax's kernel does,
    so the two agree bit for bit whatever the layout (they differed on transposed views)."""
    n, c = shape
    if layout == "transposed":
        d = cp.asarray(rng.standard_normal((c, n)).astype(dtype) * 4).T
    else:
        d = cp.asarray(rng.standard_normal((n, 2 * c)).astype(dtype) * 4)[:, ::2]
    assert not d.is_contiguous
    got = sm.softmax(d, -1, log=True).get()
    np.testing.assert_array_equal(got, _composed(d, -1, True).get())
