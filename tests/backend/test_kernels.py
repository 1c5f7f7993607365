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


@pytest.mark.parametrize("off", ["0", "off"])
def test_disk_cache_can_be_disabled(tmp_path, monkeypatch, off):
    monkeypatch.setenv("LABKIT_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("LABKIT_KERNEL_CACHE", off)
    build(runtime(0), SRC % {"0": "5.0f", "off": "5.5f"}[off])  # a source not built before
    assert not list(tmp_path.glob("**/*.bin"))


def test_binaries_are_written_atomically(tmp_path, monkeypatch):
    from labkit.backend.opencl import program

    monkeypatch.setenv("LABKIT_CACHE_DIR", str(tmp_path))
    writes = []
    real = program.atomic_write
    monkeypatch.setattr(program, "atomic_write", lambda p, data: writes.append(p) or real(p, data))
    build(runtime(0), SRC % "9.0f")
    (binary,) = (tmp_path / "kernels").iterdir()  # no temporary file left beside it
    assert writes == [binary] and binary.suffix == ".bin" and binary.stat().st_size > 0


def test_header_is_the_one_place_that_enables_fp64():
    from labkit.backend.opencl.program import header
    from labkit.backend.testing import device_without_fp64

    rt = runtime(0)
    assert header(rt, ("float", "int"), {"T": "float"}) == "#define T float\n"
    assert header(rt, ("double",)).startswith("#pragma OPENCL EXTENSION cl_khr_fp64 : enable")
    assert header(rt, ()) == ""
    no64 = runtime(device_without_fp64().index)
    with pytest.raises(lk.DTypeError, match=r"sum: cl:\d+ \(.*\[no fp64\]\) has no float64"):
        header(no64, ("double",), what="sum")
    for path in kernels_dir().glob("*.cl"):  # no kernel source enables it by itself
        assert "cl_khr_fp64" not in path.read_text(), path.name


def _flaky_builds(monkeypatch, failures, log):
    """pyopencl.Program whose first ``failures`` builds from source fail with ``log`` (what
    PoCL says when another process writes the same program to its cache: no diagnostic)."""
    import pyopencl as cl

    real, calls = cl.Program, []

    class Flaky:
        def __init__(self, ctx, src):
            self.made = real(ctx, src)

        def build(self, options=""):
            calls.append(options)
            if len(calls) <= failures:
                raise cl.RuntimeError(cl._cl._ErrorRecord(
                    msg=log, code=-11, routine="clBuildProgram"))
            return self.made.build(options=options)

    monkeypatch.setattr(cl, "Program", Flaky)
    return calls


def test_a_build_failing_without_a_diagnostic_is_tried_again(monkeypatch):
    from labkit.backend.opencl import program

    monkeypatch.setenv("LABKIT_KERNEL_CACHE", "off")
    src = "__kernel void raced(__global float* x) { x[0] = 1.0f; } // tried again\n"
    calls = _flaky_builds(monkeypatch, program.BUILD_TRIES - 1,
                          "clBuildProgram failed: BUILD_PROGRAM_FAILURE\n\nDevice cpu "
                          "failed to build the program")
    assert build(runtime(0), src, name="raced.cl").raced is not None
    assert len(calls) == program.BUILD_TRIES


def test_a_build_failing_each_time_or_with_a_diagnostic_is_an_error_at_once(monkeypatch):
    from labkit.backend.opencl import program

    monkeypatch.setenv("LABKIT_KERNEL_CACHE", "off")
    src = "__kernel void raced(__global float* x) { x[0] = 2.0f; } // always fails\n"
    calls = _flaky_builds(monkeypatch, 99, "BUILD_PROGRAM_FAILURE")
    with pytest.raises(lk.KernelBuildError, match="raced.cl failed on cl:0"):
        build(runtime(0), src, name="raced.cl")
    assert len(calls) == program.BUILD_TRIES
    src = "__kernel void raced(__global float* x) { x[0] = 3.0f; } // a real error\n"
    calls = _flaky_builds(monkeypatch, 99, "error: t.cl:1:44: use of undeclared identifier 'q'")
    with pytest.raises(lk.KernelBuildError, match="undeclared identifier 'q'"):
        build(runtime(0), src, name="raced.cl")
    assert len(calls) == 1


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
