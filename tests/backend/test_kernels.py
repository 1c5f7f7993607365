import subprocess
import sys

import pytest

import labkit as lk
from labkit.backend.opencl import runtime
from labkit.backend.opencl.program import build, kernels_dir

SRC = "__kernel void k(__global float* x) { x[get_global_id(0)] *= %s; }"


def test_every_kernel_family_is_shipped():
    names = {p.stem for p in kernels_dir().glob("*.cl")}
    assert {"common", "elementwise", "reduce", "gemm", "indexing", "random"} <= names


def test_build_is_cached_in_memory_and_on_disk(tmp_path, monkeypatch):
    monkeypatch.setenv("LABKIT_CACHE_DIR", str(tmp_path))
    rt = runtime(0)
    p1 = build(rt, SRC % "3.0f")
    assert build(rt, SRC % "3.0f") is p1
    assert len(list((tmp_path / "kernels").glob("*.bin"))) == 1
    # a fresh process loads the binary instead of compiling
    code = ("from labkit.backend.opencl import runtime; from labkit.backend.opencl.program "
            f"import build; build(runtime(0), {SRC % '3.0f'!r}); print('ok')")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={**__import__('os').environ, "LABKIT_CACHE_DIR": str(tmp_path)})
    assert out.stdout.strip() == "ok", out.stderr


def test_disk_cache_can_be_disabled(tmp_path, monkeypatch):
    monkeypatch.setenv("LABKIT_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("LABKIT_KERNEL_CACHE", "0")
    build(runtime(0), SRC % "5.0f")
    assert not list(tmp_path.glob("**/*.bin"))


def test_build_failure_carries_log_and_device():
    with pytest.raises(lk.KernelBuildError) as ei:
        build(runtime(0), "__kernel void broken(__global float* x) { x[0] = undefined_name; }",
              name="broken.cl")
    e = ei.value
    assert e.device == "cl:0" and e.source_name == "broken.cl"
    assert "undefined_name" in e.log
    assert "cl:0" in str(e) and runtime(0).info.name in str(e)


def test_doctor_lists_devices_and_self_tests():
    out = subprocess.run([sys.executable, "-m", "labkit.cli", "doctor"], capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "cl:0" in out.stdout and "self-test: ok" in out.stdout
    assert "fp64" in out.stdout and "kernel cache" in out.stdout


def test_demo_runs_on_every_device_and_matches_numpy():
    out = subprocess.run([sys.executable, "-m", "labkit.cli", "demo", "--check-devices"],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.count(" ok") >= 2 and "MISMATCH" not in out.stdout
