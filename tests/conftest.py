import os
import tempfile

import numpy as np
import pytest

# Tests never touch the user's caches, datasets, run store or default device.
os.environ.setdefault("LABKIT_DEVICE", "cpu")
os.environ["LABKIT_HOME"] = tempfile.mkdtemp(prefix="labkit-test-home-")

#: every device test runs on these
DEVICES = ["cpu", "cl"]
#: an OpenCL device that behaves as one without fp64 (derived from cl:0 in this process, see
#: labkit.backend.testing): CI's PoCL has fp64, so float64 leaking into a float32 computation
#: is invisible on "cl"
NO_FP64 = "cl-no-fp64"
#: the devices the shared op checker runs every op on (tests/autograd/checker.py)
OP_DEVICES = DEVICES + [NO_FP64]


def pytest_report_header(config):
    from labkit.backend.opencl.context import probe

    devs = ", ".join(f"cl:{i.index} {i.name} ({i.platform})" for i, _ in probe()) or "none"
    return f"labkit devices: cpu, {devs}"


def _device(name):
    import labkit as lk
    from labkit.backend.testing import device_without_fp64

    return device_without_fp64() if name == NO_FP64 else lk.device(name)


@pytest.fixture(params=DEVICES)
def dev(request):
    """Every device test runs on cpu (NumPy) and on cl (PoCL in CI)."""
    return _device(request.param)


@pytest.fixture(params=OP_DEVICES)
def op_dev(request):
    """cpu, cl, and an OpenCL device without fp64: the op checker's devices."""
    return _device(request.param)


@pytest.fixture
def dev_no_fp64():
    """An OpenCL device that behaves exactly like one without fp64 (``info.fp64`` False,
    float64 arrays refused, kernels built without the fp64 pragma)."""
    return _device(NO_FP64)


@pytest.fixture
def cp():
    from labkit.backend import opencl

    return opencl


@pytest.fixture
def rng():
    return np.random.default_rng(1234)
