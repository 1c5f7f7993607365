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


def test_default_device_from_env(monkeypatch, cp):
    monkeypatch.setenv("LABKIT_DEVICE", "cl:0")
    assert lk.default_device() == "cl:0"
    assert cp.zeros(2).rt is cp.runtime(0)  # the OpenCL namespace's default follows it
    monkeypatch.setenv("LABKIT_DEVICE", "")
    assert lk.default_device() == "cpu"
    monkeypatch.setenv("LABKIT_DEVICE", "tpu")
    with pytest.raises(lk.ConfigError, match=r"LABKIT_DEVICE='tpu': expected cpu, cl or cl:N"):
        lk.default_device()
    with pytest.raises(lk.ConfigError, match="LABKIT_DEVICE='tpu'"):
        cp.zeros(2)
    monkeypatch.setenv("LABKIT_DEVICE", "cl:99")  # well-formed, but no such device
    with pytest.raises(lk.DeviceError, match="LABKIT_DEVICE='cl:99' is not usable.*does not "
                                             "exist"):
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


def test_unsupported_dtype_is_a_clear_error(cp):
    with pytest.raises(lk.DTypeError, match="complex128 is not supported"):
        cp.asarray(np.zeros(2, np.complex128))


def test_cl_arrays_know_their_device_and_move(cp):
    a = cp.arange(3, dtype=np.float32)
    assert a.device == lk.device("cl:0") and isinstance(a.device, lk.Device)
    assert isinstance(a.to("cpu"), np.ndarray) and a.to(lk.device("cpu")).tolist() == [0, 1, 2]
    assert a.to("cl:0") is a
    with pytest.raises(lk.DeviceError, match="'cpu' is not an OpenCL device"):
        cp.zeros(2, device="cpu")


def test_no_platform_message_names_the_fix(monkeypatch):
    from labkit.backend.opencl.context import NO_PLATFORM_HELP

    assert "pocl-binary-distribution" in NO_PLATFORM_HELP and "OCL_ICD_VENDORS" in NO_PLATFORM_HELP


def test_two_threads_first_using_a_device_get_one_runtime(monkeypatch):
    """Both threads pass a barrier, then ask for the runtime of a device nobody used yet. The
    first to construct it is held inside the constructor until the other has either entered
    the constructor too (the race: two runtimes) or is waiting inside runtime() for the first
    (no race), so the interleaving that used to build two runtimes happens on every run."""
    import sys
    import threading

    from labkit.backend.opencl import context

    index = context.derive_device(0, label="race")  # a device with no runtime yet
    real = context.Runtime
    built, inside, release = [], threading.Event(), threading.Event()

    def make(*args):
        built.append(threading.get_ident())
        if len(built) == 1:
            inside.set()
            release.wait()
        return real(*args)

    monkeypatch.setattr(context, "Runtime", make)
    start = threading.Barrier(2)
    got = {}

    def first_use():
        start.wait()
        got[threading.get_ident()] = context.runtime(index)

    threads = [threading.Thread(target=first_use) for _ in range(2)]
    for t in threads:
        t.start()
    inside.wait()
    other = next(t for t in threads if t.ident != built[0])

    def in_runtime(ident):  # is the thread executing context.runtime (or below it)?
        f = sys._current_frames().get(ident)
        while f is not None:
            if f.f_code is context.runtime.__code__:
                return True
            f = f.f_back
        return False

    while len(built) < 2 and not in_runtime(other.ident):
        threading.Event().wait(0.001)  # poll until the other thread is inside runtime()
    release.set()
    for t in threads:
        t.join()
    assert len(built) == 1, f"{len(built)} runtimes were built for cl:{index}"
    a, b = got.values()
    assert a is b is context.runtime(index)
    assert lk.device(f"cl:{index}").info.name.endswith("[race]")
