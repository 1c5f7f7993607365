import os
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


def _build_in_a_new_process(cache, src):
    code = ("from labkit.backend.opencl import runtime; from labkit.backend.opencl.program "
            f"import build; build(runtime(0), {src!r}); print('ok')")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={**os.environ, "LABKIT_CACHE_DIR": str(cache)})
    assert out.stdout.strip() == "ok", out.stderr


def test_build_is_cached_in_memory_and_on_disk(tmp_path, monkeypatch):
    from labkit.backend.opencl import program

    monkeypatch.setenv("LABKIT_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(program, "POCL", "another platform")  # stored at the first build
    rt = runtime(0)
    p1 = build(rt, SRC % "3.0f")
    assert build(rt, SRC % "3.0f") is p1
    assert [p.suffix for p in (tmp_path / "kernels").iterdir()] == [".bin"]
    # a fresh process loads the binary instead of compiling
    _build_in_a_new_process(tmp_path, SRC % "3.0f")


def test_on_pocl_a_binary_is_stored_at_the_second_build(tmp_path, monkeypatch):
    """PoCL compiles every kernel again to hand a binary back (0.2-0.5 s a program): the
    first process to build a program only marks it, the next stores it, later ones load it."""
    import pyopencl as cl

    from labkit.backend.opencl import program

    rt = runtime(0)
    if rt.info.platform != program.POCL:
        pytest.skip(f"cl:0 is {rt.info.platform}, not PoCL")
    monkeypatch.setenv("LABKIT_CACHE_DIR", str(tmp_path))
    src = SRC % "3.25f"
    build(rt, src)
    kdir = tmp_path / "kernels"
    assert [p.suffix for p in kdir.iterdir()] == [".built"]
    _build_in_a_new_process(tmp_path, src)
    assert sorted(p.suffix for p in kdir.iterdir()) == [".bin", ".built"]
    binary = program._unsealed(next(kdir.glob("*.bin")).read_bytes())
    assert binary and cl.Program(rt.context, [rt.cl_device], [binary]).build().k is not None
    before = next(kdir.glob("*.bin")).stat().st_mtime_ns
    _build_in_a_new_process(tmp_path, src)  # loads it: nothing written
    assert next(kdir.glob("*.bin")).stat().st_mtime_ns == before


_RUN = ("import numpy as np, pyopencl as cl\n"
        "from labkit.backend.opencl import runtime\n"
        "from labkit.backend.opencl.program import build\n"
        "rt = runtime(0)\n"
        "x = np.ones(4, np.float32)\n"
        "b = cl.Buffer(rt.context, cl.mem_flags.READ_WRITE | cl.mem_flags.COPY_HOST_PTR, "
        "hostbuf=x)\n"
        "build(rt, {src!r}).k(rt.queue, (4,), None, b)\n"
        "cl.enqueue_copy(rt.queue, x, b)\n"
        "print(x.tolist())\n")


@pytest.mark.parametrize("damage", ["cut short", "a byte changed", "empty", "unsealed"])
def test_a_damaged_binary_is_built_again_from_source(tmp_path, monkeypatch, damage):
    """PoCL crashed the process (a segmentation fault) on a stored binary cut in half: each
    binary is sealed with its SHA-256, and one that is not whole is built again from source
    (in a fresh process here: a crash fails the test, not the test run)."""
    from labkit.backend.opencl import program

    monkeypatch.setenv("LABKIT_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(program, "POCL", "another platform")  # its binary stored at once
    src = SRC % "4.5f"
    rt = runtime(0)
    rt.kernels.pop(program._key(rt, src, ""), None)  # NOTE: built by an earlier case
    build(rt, src)
    (path,) = (tmp_path / "kernels").glob("*.bin")
    data = path.read_bytes()
    assert data.startswith(program.SEAL)
    n = len(program.SEAL) + 32
    path.write_bytes({"cut short": data[:len(data) // 2],
                      "a byte changed": data[:n + 100] + bytes([data[n + 100] ^ 1])
                      + data[n + 101:],
                      "empty": b"",
                      "unsealed": data[n:]}[damage])
    for _ in range(2):  # NOTE: on PoCL the second process stores the binary again
        out = subprocess.run([sys.executable, "-c", _RUN.format(src=src)], capture_output=True,
                             text=True, env={**os.environ, "LABKIT_CACHE_DIR": str(tmp_path)})
        assert out.returncode == 0 and out.stdout.strip() == "[4.5, 4.5, 4.5, 4.5]", out.stderr
    assert path.read_bytes().startswith(program.SEAL)
    assert program._unsealed(path.read_bytes()) is not None


@pytest.mark.parametrize("off", ["0", "off"])
def test_disk_cache_can_be_disabled(tmp_path, monkeypatch, off):
    monkeypatch.setenv("LABKIT_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("LABKIT_KERNEL_CACHE", off)
    from labkit.backend.opencl import program

    rt, src = runtime(0), SRC % {"0": "5.0f", "off": "5.5f"}[off]  # not built before
    for _ in range(2):  # NOTE: on PoCL the binary is stored at a program's second build
        build(rt, src)
        rt.kernels.pop(program._key(rt, src, ""))
    assert not [p for p in tmp_path.rglob("*") if p.is_file()]


def test_binaries_are_written_atomically(tmp_path, monkeypatch):
    from labkit.backend.opencl import program

    monkeypatch.setenv("LABKIT_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(program, "POCL", "another platform")  # its binary stored at once
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
