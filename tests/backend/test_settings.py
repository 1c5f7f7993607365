"""The backend's LABKIT_* settings go through labkit.config: a bad value is a ConfigError that
names the setting, and every switch accepts on/off as config.py documents."""

from pathlib import Path

import numpy as np
import pytest

import labkit as lk
from labkit.backend import memory
from labkit.backend import opencl as cp

BACKEND = Path(lk.__file__).parent / "backend"


def test_no_setting_is_read_from_the_environment_outside_config():
    for path in sorted(BACKEND.rglob("*.py")):
        text = path.read_text()
        for needle in ("os.environ", "getenv", "env_flag"):
            assert needle not in text, f"{path.relative_to(BACKEND)} reads {needle}: use config.get"


@pytest.mark.parametrize("value", ["off", "0", "no", "False"])
def test_check_indices_off_skips_the_device_check(monkeypatch, value):
    d = cp.asarray(np.arange(12, dtype=np.float32).reshape(3, 4))
    bad = cp.asarray(np.array([0, 3]))
    monkeypatch.setenv("LABKIT_CHECK_INDICES", "on")
    with pytest.raises(IndexError, match="index 3 is out of bounds for axis 0 with size 3"):
        cp.take(d, bad, axis=0)
    monkeypatch.setenv("LABKIT_CHECK_INDICES", value)
    out = cp.take(d, bad, axis=0)  # NOTE: unchecked: the kernel clamps, memory stays safe
    assert out.shape == (2, 4)
    np.testing.assert_array_equal(out.get()[0], [0, 1, 2, 3])
    # host indices cost no device read, so they are always checked
    with pytest.raises(IndexError, match="index 3 is out of bounds"):
        cp.take(d, np.array([3]), axis=0)


@pytest.mark.parametrize("name,call", [
    ("LABKIT_CHECK_INDICES", lambda: cp.take(cp.ones(3), cp.asarray(np.array([1])))),
    ("LABKIT_KERNEL_CACHE", lambda: cp.ones(3) * 7.25),
    ("LABKIT_DEVICE", lambda: cp.ones(3)),
    ("LABKIT_KEEP_FREED_MEMORY", memory.keep_freed_memory_unless_disabled),
    ("LABKIT_NUMPY_BLAS", lambda: __import__("labkit.backend.blas").backend.blas.available()),
])
def test_a_switch_with_a_bad_value_is_a_config_error(monkeypatch, tmp_path, name, call):
    monkeypatch.setenv("LABKIT_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv(name, "maybe")
    if name == "LABKIT_KERNEL_CACHE":  # a kernel no runtime has built yet reads the switch
        from labkit.backend.opencl.context import derive_device

        rt = cp.runtime(derive_device(0, label="kernel cache"))
        call = lambda: cp.ones(3, device=rt) * 7.25  # noqa: E731
    with pytest.raises(lk.ConfigError, match=f"{name}='maybe'"):
        call()


def test_keep_freed_memory_off_applies_nothing(monkeypatch):
    calls = []
    monkeypatch.setattr(memory, "keep_freed_memory", lambda: calls.append(1) or True)
    monkeypatch.setenv("LABKIT_KEEP_FREED_MEMORY", "off")
    assert memory.keep_freed_memory_unless_disabled() is False and not calls
    monkeypatch.setenv("LABKIT_KEEP_FREED_MEMORY", "on")
    assert memory.keep_freed_memory_unless_disabled() is True and calls == [1]


@pytest.mark.parametrize("value", ["8,2", "8,2,3", "a,b,c", "0,2,16"])
def test_gemm_config_is_checked_before_any_kernel(monkeypatch, value):
    monkeypatch.setenv("LABKIT_GEMM_CONFIG", value)
    a = cp.ones((64, 64))
    with pytest.raises(lk.ConfigError, match=f"LABKIT_GEMM_CONFIG='{value}': expected three"):
        a @ a
    monkeypatch.setenv("LABKIT_GEMM_CONFIG", "4,1,16")
    assert (a @ a).get()[0, 0] == 64
