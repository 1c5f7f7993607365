"""Elementwise kernels that take a chunk of a long innermost dimension per work-item (CPU
devices, labkit/backend/opencl/elementwise.ROW_MIN/ROW_CHUNK, from ROW_MIN_SIZE elements):
against NumPy bit for bit at the chunk's edges, with broadcasting, strides, offsets and more
than two dimensions. The tests lower ROW_MIN_SIZE so that small arrays take the path."""

import numpy as np
import pytest

from labkit.backend import opencl as cp
from labkit.backend.opencl import elementwise as ew


@pytest.fixture(autouse=True)
def _rows_for_small_arrays(monkeypatch):
    monkeypatch.setattr(ew, "ROW_MIN_SIZE", 64)


@pytest.mark.parametrize("inner", [ew.ROW_MIN - 1, ew.ROW_MIN, ew.ROW_CHUNK - 1, ew.ROW_CHUNK,
                                   ew.ROW_CHUNK + 1, 3 * ew.ROW_CHUNK + 7])
def test_a_row_broadcast_at_the_chunk_edges(inner, rng):
    a = rng.standard_normal((7, inner)).astype(np.float32)
    b = rng.standard_normal(inner).astype(np.float32)
    np.testing.assert_array_equal(cp.add(cp.asarray(a), cp.asarray(b)).get(), a + b)
    np.testing.assert_array_equal(cp.multiply(cp.asarray(b), cp.asarray(a)).get(), b * a)


def test_three_dimensions_strides_offsets_and_scalars(rng):
    x = rng.standard_normal((4, 5, 150)).astype(np.float32)
    g = rng.standard_normal((5, 1)).astype(np.float32)
    dx = cp.asarray(x)
    # a transposed view with an offset, a column broadcast and a scalar
    view, hview = dx[1:, :, 3:].transpose(1, 0, 2), x[1:, :, 3:].transpose(1, 0, 2)
    got = cp.subtract(cp.multiply(view, cp.asarray(g)[:, :, None]), 0.5)
    want = hview * g[:, :, None] - np.float32(0.5)
    np.testing.assert_array_equal(got.get(), want)
    # a reversed innermost axis
    np.testing.assert_array_equal(cp.maximum(dx[:, :, ::-1], 0).get(),
                                  np.maximum(x[:, :, ::-1], 0))
    # out= into a strided view
    out = cp.zeros((4, 5, 300), np.float32)
    cp.add(dx, 1.0, out=out[:, :, ::2])
    host = np.zeros((4, 5, 300), np.float32)
    host[:, :, ::2] = x + np.float32(1.0)
    np.testing.assert_array_equal(out.get(), host)


def test_integer_and_bool_results(rng):
    i = rng.integers(-50, 50, (6, 200)).astype(np.int32)
    row = rng.integers(1, 9, 200).astype(np.int32)
    np.testing.assert_array_equal(cp.floor_divide(cp.asarray(i), cp.asarray(row)).get(),
                                  i // row)
    np.testing.assert_array_equal(cp.greater(cp.asarray(i), cp.asarray(row)).get(), i > row)


def test_a_large_row_broadcast_takes_chunks(rng, monkeypatch):
    monkeypatch.setattr(ew, "ROW_MIN_SIZE", 1 << 16)
    a = rng.standard_normal((300, 1000)).astype(np.float32)
    b = rng.standard_normal(1000).astype(np.float32)
    da, db = cp.asarray(a), cp.asarray(b)
    np.testing.assert_array_equal(cp.add(da, db).get(), a + b)
    out = cp.empty((300, 1000))
    plan = ew._plan(out.rt, "add", "(v0 + v1)", out, [da, db], ("float", "float"))  # uncached
    assert plan[1] == 300 * -(-1000 // ew.ROW_CHUNK)  # work-items: chunks, not elements
