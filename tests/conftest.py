import os
import tempfile

import numpy as np
import pytest

# Tests never touch the user's caches, datasets, run store or default device.
os.environ.setdefault("LABKIT_DEVICE", "cpu")
os.environ["LABKIT_HOME"] = tempfile.mkdtemp(prefix="labkit-test-home-")


def pytest_report_header(config):
    from labkit.backend.opencl.context import probe

    devs = ", ".join(f"cl:{i.index} {i.name} ({i.platform})" for i, _ in probe()) or "none"
    return f"labkit devices: cpu, {devs}"


DEVICES = ["cpu", "cl"]


@pytest.fixture(params=DEVICES)
def dev(request):
    """Every device test runs on cpu (NumPy) and on cl (PoCL in CI)."""
    import labkit as lk

    return lk.device(request.param)


@pytest.fixture
def cp():
    from labkit.backend import opencl

    return opencl


@pytest.fixture
def rng():
    return np.random.default_rng(1234)
