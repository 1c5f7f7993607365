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
