"""The label side of softmax cross-entropy's gradient on OpenCL (backend/opencl/xent.py):
each row's weight and the one-hot, one launch each, against the NumPy form they replace."""

import numpy as np
import pytest

from labkit.backend import opencl as cp
from labkit.backend.opencl import xent


def _weights_numpy(t, ignore, mean, dtype):
    if t.dtype.kind == "u" and ignore < 0:  # an unsigned label is never a negative ignore
        valid = np.ones(t.shape, dtype)
    else:
        valid = (t != ignore).astype(dtype)
    return valid / np.maximum(valid.sum(), 1).astype(dtype) if mean else valid


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("tdt", [np.int8, np.uint8, np.int32, np.int64, np.uint64])
@pytest.mark.parametrize("n", [1, 2, 255, 257, 3000])
@pytest.mark.parametrize("ignore", [-1, 2])
def test_row_weights_and_onehot_are_the_composed_numbers(dtype, tdt, n, ignore):
    rng = np.random.default_rng(n)
    t = rng.integers(0, 5, n).astype(tdt)
    if np.dtype(tdt).kind == "i":
        t[::3] = ignore
    td = cp.asarray(t)
    for mean in (False, True):
        got = xent.row_weights(td, ignore, mean, dtype).get()
        want = _weights_numpy(t, ignore, mean, dtype)
        assert got.dtype == want.dtype
        np.testing.assert_array_equal(got, want)
    oh = xent.onehot(td, 5, dtype).get()
    want = (np.arange(5)[None] == t.astype(np.int64)[:, None]).astype(dtype)
    np.testing.assert_array_equal(oh, want)


def test_every_row_ignored_weighs_zero_and_a_view_of_labels_is_read_at_its_offset():
    t = np.array([7, -1, -1, -1, 3, 0], np.int64)
    td = cp.asarray(t)
    np.testing.assert_array_equal(xent.row_weights(td[1:4], -1, True, np.float32).get(),
                                  np.zeros(3, np.float32))
    np.testing.assert_array_equal(xent.row_weights(td[3:], -1, True, np.float32).get(),
                                  np.array([0, 0.5, 0.5], np.float32))
    np.testing.assert_array_equal(xent.onehot(td[4:], 4, np.float32).get(),
                                  np.array([[0, 0, 0, 1], [1, 0, 0, 0]], np.float32))
    assert not xent.labels_fit(td[::2]) and not xent.labels_fit(td[:0])
