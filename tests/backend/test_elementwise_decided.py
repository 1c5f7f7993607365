"""Repeated elementwise calls take a shortcut (labkit/backend/opencl/core._DECIDED): what the
first call of a signature decided (result dtype, shape, layout, kernel plan) is reused. These
tests hold the shortcut to the full path's answers: views at other offsets, scalars of other
values and types, memory layouts, and integer operands (which never take it)."""

import numpy as np
import pytest

from labkit.backend import opencl as cp
from labkit.backend.opencl import core
from labkit.errors import DTypeError


def _twice(f):
    """f() called cold (the full path) and warm (the shortcut)."""
    core._DECIDED.clear()
    first = f()
    second = f()
    return first, second


def test_views_at_other_offsets_and_other_scalar_values(rng):
    h = rng.standard_normal(40).astype(np.float32)
    d = cp.asarray(h)
    core._DECIDED.clear()
    for lo, c in [(0, 2.0), (3, -1.5), (7, 0.25), (0, 9.0)]:
        got = cp.add(cp.multiply(d[lo:lo + 20], c), d[20:])
        np.testing.assert_array_equal(got.get(), h[lo:lo + 20] * np.float32(c) + h[20:])
    assert any(k[0] == "multiply" for k in core._DECIDED)


@pytest.mark.parametrize("scalar", [2.0, np.float64(2.0), np.float32(2.0), 2, True])
def test_scalar_types_promote_as_numpy_does(scalar, rng):
    h = rng.standard_normal(9).astype(np.float32)
    want = h * scalar
    for got in _twice(lambda: cp.multiply(cp.asarray(h), scalar)):
        assert got.dtype == want.dtype
        np.testing.assert_array_equal(got.get(), want)


def test_a_python_float_then_a_numpy_float64_scalar_differ():
    d = cp.asarray(np.ones(4, np.float32))
    core._DECIDED.clear()
    assert cp.multiply(d, 3.0).dtype == np.float32
    assert cp.multiply(d, np.float64(3.0)).dtype == np.float64
    assert cp.multiply(d, 3.0).dtype == np.float32


def test_a_transposed_layout_is_kept_on_the_shortcut(rng):
    h = rng.standard_normal((3, 4, 5, 6)).astype(np.float32)
    d = cp.asarray(np.ascontiguousarray(h.transpose(1, 0, 2, 3))).transpose(1, 0, 2, 3)
    for got in _twice(lambda: cp.maximum(d, 0)):
        assert got.transpose(1, 0, 2, 3).is_contiguous
        np.testing.assert_array_equal(got.get(), np.maximum(h, 0))


def test_broadcasting_and_unary_ops(rng):
    a = rng.standard_normal((5, 1, 3)).astype(np.float32)
    b = rng.standard_normal((4, 1)).astype(np.float32)
    for got in _twice(lambda: cp.subtract(cp.asarray(a), cp.asarray(b))):
        np.testing.assert_array_equal(got.get(), a - b)
    for got in _twice(lambda: cp.exp(cp.asarray(a))):
        np.testing.assert_allclose(got.get(), np.exp(a), rtol=2e-7)


def test_integer_operands_take_the_full_path():
    d = cp.asarray(np.array([1, 2, 3], np.int8))
    core._DECIDED.clear()
    got = cp.add(d, 1)
    assert got.dtype == np.int8 and got.get().tolist() == [2, 3, 4]
    assert not core._DECIDED


def test_empty_results_and_errors_are_not_remembered():
    core._DECIDED.clear()
    e = cp.asarray(np.ones((0, 3), np.float32))
    assert cp.multiply(e, 2.0).shape == (0, 3)
    with pytest.raises(DTypeError, match="needs integer or bool"):
        cp.bitwise_and(cp.asarray(np.ones(3, np.float32)), 1.0)
    assert not core._DECIDED


def test_scalars_are_decided_afresh_where_numpy_promotes_by_value(monkeypatch):
    """NumPy 1 promotes float32 + 1e300 to float64 and float32 + 2.0 to float32: there a call
    with a scalar never takes the shortcut (simulated here on NumPy 2)."""
    monkeypatch.setattr(core, "_SCALARS_BY_TYPE", False)
    core._DECIDED.clear()
    d = cp.asarray(np.ones(4, np.float32))
    cp.multiply(d, 2.0)
    cp.multiply(d, np.float32(2.0))
    assert not core._DECIDED
    cp.multiply(d, d)  # arrays only: still remembered
    assert core._DECIDED


def test_the_memory_of_decisions_is_bounded(monkeypatch):
    monkeypatch.setattr(core, "_DECIDED_MAX", 3)
    core._DECIDED.clear()
    for n in range(1, 8):  # a new shape each call
        got = cp.multiply(cp.asarray(np.ones(n, np.float32)), 2.0)
        assert got.get().tolist() == [2.0] * n
        assert len(core._DECIDED) <= 3


def test_where_positive_is_where_of_a_positive_mask_in_one_kernel(rng):
    from labkit.backend.opencl.core import where_positive

    g = rng.standard_normal((6, 70)).astype(np.float32)
    g.flat[:4] = [np.nan, -0.0, np.inf, -np.inf]
    m = rng.standard_normal((6, 70)).astype(np.float32)
    m.flat[4:8] = [np.nan, -0.0, 0.0, 1e-45]
    got = where_positive(cp.asarray(g), cp.asarray(m)).get()
    want = np.where(m > 0, g, np.float32(0))
    assert got.dtype == want.dtype
    assert np.array_equal(got.view(np.uint32), want.view(np.uint32))
    with pytest.raises(DTypeError, match="one float dtype"):
        where_positive(cp.asarray(g), cp.asarray(m.astype(np.float64)))


def test_a_view_into_a_buffer_past_31_bits_gets_64_bit_offsets(monkeypatch, rng):
    """The index type follows the size of an operand's buffer (index_ctype), so a view into a
    buffer of more than 2**31 elements must not reuse the 32-bit plan of a small array of the
    same shape and layout (its offsets would overflow). The buffer's size is claimed on a small
    array here (``_nbuf``), as allocating 8 GiB is not a unit test."""
    from labkit.backend.opencl import elementwise

    seen = []
    real = elementwise.index_ctype
    monkeypatch.setattr(elementwise, "index_ctype", lambda *a: seen.append(real(*a)) or seen[-1])
    h = rng.standard_normal(40).astype(np.float32)
    d = cp.asarray(h)
    monkeypatch.setattr(d.rt, "kernels", {})  # plans made afresh here, not by earlier tests
    core._DECIDED.clear()
    small = cp.multiply(d[3:23], 2.0)   # decides (and plans) the signature with 32-bit offsets
    assert seen[-1] == "int"
    wide = d[3:23]
    wide._nbuf = 2**31
    got = cp.multiply(wide, 2.0)
    assert seen[-1] == "long"
    np.testing.assert_array_equal(got.get(), small.get())
    np.testing.assert_array_equal(got.get(), h[3:23] * np.float32(2.0))
