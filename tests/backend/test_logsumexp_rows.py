"""logsumexp over trailing axes as one kernel (``lse._lse_rows``): the composed form's
results, special values included, and NumPy's in float64."""

import numpy as np
import pytest

from labkit.backend import opencl as cp
from labkit.backend.opencl import lse as red

from .helpers import special_rows


def _ref(x, axis, keepdims=False):
    x = x.astype(np.float64)
    m = np.max(x, axis=axis, keepdims=True)
    m = np.where(np.isfinite(m), m, 0)
    with np.errstate(all="ignore"):
        r = np.log(np.exp(x - m).sum(axis=axis, keepdims=True)) + m
    return r if keepdims else np.squeeze(r, axis=axis)


@pytest.mark.parametrize("shape,axis", [((64, 10), 1), ((32, 3, 7), (1, 2)), ((16, 1000), -1),
                                        ((20, 5, 4), 2)])
@pytest.mark.parametrize("keepdims", [False, True])
def test_rows_match_float64(shape, axis, keepdims, rng):
    x = (rng.standard_normal(shape) * 30).astype(np.float32)
    got = cp.logsumexp(cp.asarray(x), axis=axis, keepdims=keepdims).get()
    want = _ref(x, axis, keepdims)
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=2e-6, atol=1e-5)


def test_special_values_as_the_composed_form(monkeypatch, rng):
    x = special_rows(rng)
    calls = []
    real = red._lse_rows
    monkeypatch.setattr(red, "_lse_rows", lambda *a: calls.append(1) or real(*a))
    got = cp.logsumexp(cp.asarray(x), axis=1).get()
    assert calls == [1]
    with np.errstate(all="ignore"):
        np.testing.assert_allclose(got, _ref(x, 1), rtol=2e-6, equal_nan=True)
    assert np.isnan(got[0]) and got[1] == -np.inf and got[2] == np.inf and got[3] == np.inf


def test_other_layouts_use_the_composed_form(monkeypatch, rng):
    calls = []
    real = red._lse_rows
    monkeypatch.setattr(red, "_lse_rows", lambda *a: calls.append(1) or real(*a))
    x = rng.standard_normal((64, 10)).astype(np.float32)
    d = cp.asarray(x)
    np.testing.assert_allclose(cp.logsumexp(d, axis=0).get(), _ref(x, 0), rtol=2e-6)
    few_long = rng.standard_normal((4, 2000)).astype(np.float32)
    np.testing.assert_allclose(cp.logsumexp(cp.asarray(few_long), axis=1).get(),
                               _ref(few_long, 1), rtol=2e-6)
    assert calls == []  # an axis not trailing, a few long rows
    np.testing.assert_allclose(cp.logsumexp(d[:4], axis=1).get(), _ref(x[:4], 1), rtol=2e-6)
    assert calls == [1]  # a few short rows (a small batch's classes): one kernel
    # NOTE: a transposed view is copied to the kernel, as log_softmax's kernel copies it
    np.testing.assert_allclose(cp.logsumexp(d.T, axis=1).get(), _ref(x.T, 1), rtol=2e-6)
    assert calls == [1, 1]
