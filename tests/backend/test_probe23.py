"""OpenCL arrays at their limits (probe 23): a buffer over the device's largest is a
DeviceError naming both sizes (pyopencl's INVALID_BUFFER_SIZE, or a TypeError past 2**63);
NaN and infinity stored into an integer array are refused as NumPy refuses them;
np.asarray(x, copy=False) of a device array says a copy is needed."""

import numpy as np
import pytest

import labkit.backend.opencl as cp
from labkit.errors import DeviceError


@pytest.fixture(scope="module")
def limit():
    return cp.ones(1, np.float32).rt.info.max_alloc_size


@pytest.mark.parametrize("make", [
    lambda n: cp.empty((n // 4 + 1,), np.float32),
    lambda n: cp.empty((2**62,), np.float32),
    lambda n: cp.broadcast_to(cp.ones(1, np.float32), (n // 4 + 1,)) + 1,
])
def test_a_buffer_over_the_devices_largest_is_named(limit, make):
    with pytest.raises(DeviceError, match=r"cannot allocate .* bytes\) on .*: one buffer may "
                                          r"hold at most .*CL_DEVICE_MAX_MEM_ALLOC_SIZE"):
        make(limit)


@pytest.mark.parametrize("how", ["setitem", "fill", "slice"])
@pytest.mark.parametrize("value, error", [(float("nan"), ValueError),
                                          (float("inf"), OverflowError),
                                          (np.float32("-inf"), OverflowError)])
def test_nan_and_infinity_into_an_integer_array_are_refused_as_numpy_refuses(how, value,
                                                                            error):
    for mod in (np, cp):
        a = mod.zeros(3, np.int32)
        with pytest.raises(error):
            if how == "setitem":
                a[0] = value
            elif how == "fill":
                a.fill(value)
            else:
                a[1:] = value
        assert not (a.get() if mod is cp else a).any()  # NOTE: nothing written


def test_a_device_array_is_no_numpy_array_without_a_copy():
    a = cp.ones(3, np.float32)
    with pytest.raises(ValueError, match="without a copy"):
        np.asarray(a, copy=False)
    np.testing.assert_array_equal(np.asarray(a), np.ones(3, np.float32))


@pytest.mark.parametrize("seed", range(6))
def test_a_few_indices_into_a_long_axis_set_as_numpy_does(seed):
    """A few integer indices are written one view at a time (the whole axis was merged: 2.8 s
    and 1.7 GB for one element of a 2**26 array): duplicates (the last wins), negative
    indices, other axes, values that are views of the array itself."""
    rng = np.random.default_rng(seed)
    shape = (3, 200) if seed % 2 else (200, 3)
    axis = 1 if seed % 2 else 0
    x = rng.standard_normal(shape).astype(np.float32)
    idx = rng.integers(-200, 200, 5)
    idx[1] = idx[3]  # NOTE: a duplicate: the later value wins
    key = (slice(None), idx) if axis else (idx,)
    for value in (rng.standard_normal((3, 5) if axis else (5, 3)).astype(np.float32), 7.5):
        want, got = x.copy(), cp.asarray(x)
        want[key] = value
        got[key] = value if np.isscalar(value) else cp.asarray(value)
        np.testing.assert_array_equal(got.get(), want)
    want, got = x.copy(), cp.asarray(x)
    src = (slice(None), slice(10, 15)) if axis else (slice(10, 15),)
    want[key] = want[src].copy()
    got[key] = got[src]  # NOTE: a view of the array being written
    np.testing.assert_array_equal(got.get(), want)
