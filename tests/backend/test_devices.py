import numpy as np
import pytest

import labkit as lk
from labkit.backend.opencl import probe


def test_devices_lists_cpu_then_every_opencl_device():
    devs = lk.devices()
    assert devs[0] == lk.Device("cpu")
    cl = [d for d in devs if d.kind == "cl"]
    assert [d.name for d in cl] == [f"cl:{i}" for i in range(len(probe()))]
    assert cl, "CI needs an OpenCL device: pocl-binary-distribution provides one"


def test_device_parsing():
    assert lk.device("cpu").name == "cpu"
    assert lk.device("cl:0").name == "cl:0"
    assert lk.device("cl").kind == "cl"
    assert lk.device(lk.device("cl:0")) is lk.device("cl:0") or lk.device("cl:0") == "cl:0"
    assert lk.device("cl:0") == "cl:0" and lk.device("cpu") != "cl:0"


@pytest.mark.parametrize("spec,needle", [("gpu", "use 'cpu', 'cl'"), ("cl:99", "does not exist"),
                                         ("cl:x", "integer")])
def test_bad_device_names_say_what_exists(spec, needle):
    with pytest.raises(lk.DeviceError, match=needle):
        lk.device(spec)


def test_default_device_from_env(monkeypatch):
    monkeypatch.setenv("LABKIT_DEVICE", "cl:0")
    assert lk.default_device() == "cl:0"
    monkeypatch.setenv("LABKIT_DEVICE", "")
    assert lk.default_device() == "cpu"
    monkeypatch.setenv("LABKIT_DEVICE", "tpu")
    with pytest.raises(lk.DeviceError, match="LABKIT_DEVICE='tpu'"):
        lk.default_device()


def test_probe_reads_capabilities():
    info = lk.device("cl:0").info
    assert info.name and info.vendor and info.version.startswith("OpenCL")
    assert info.compute_units >= 1 and info.max_work_group_size >= 1
    assert info.local_mem_size > 0 and isinstance(info.fp64, bool)
    assert set(info.to_dict()) >= {"name", "vendor", "fp64", "compute_units"}


def test_get_array_module_serves_one_body_for_both(dev):
    def softplus(x):
        xp = lk.get_array_module(x)
        return xp.maximum(x, 0) + xp.log1p(xp.exp(-xp.abs(x)))

    x = np.linspace(-30, 30, 101).astype(np.float32)
    got = softplus(lk.asarray(x, device=dev))
    got = got if isinstance(got, np.ndarray) else got.get()
    np.testing.assert_allclose(got, np.logaddexp(0, x.astype(np.float64)), rtol=1e-5, atol=1e-6)
    assert got.dtype == np.float32


def test_float64_on_a_device_without_fp64_is_a_clear_error(cp, monkeypatch):
    from dataclasses import replace

    from labkit.backend.opencl.ndarray import check_dtype

    rt = cp.runtime(0)
    no64 = type("RT", (), {"info": replace(rt.info, fp64=False)})()
    with pytest.raises(lk.DTypeError, match="no float64 support.*float32"):
        check_dtype(np.float64, no64, "asarray")
    with pytest.raises(lk.DTypeError, match="complex128 is not supported"):
        cp.asarray(np.zeros(2, np.complex128))


def test_no_platform_message_names_the_fix(monkeypatch):
    from labkit.backend.opencl.context import NO_PLATFORM_HELP

    assert "pocl-binary-distribution" in NO_PLATFORM_HELP and "OCL_ICD_VENDORS" in NO_PLATFORM_HELP
