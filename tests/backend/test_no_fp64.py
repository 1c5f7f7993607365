"""A device without fp64, derived from cl:0 in this process (labkit.backend.testing): it must
behave exactly like one, so float64 leaking into float32 code shows up on CI's PoCL (which has
fp64)."""

import numpy as np
import pytest

import labkit as lk
from labkit.backend import opencl as cp
from labkit.backend.opencl import context, program
from labkit.backend.random import Generator


def test_it_is_a_distinct_device_that_reports_no_fp64(dev_no_fp64):
    base = lk.device("cl:0")
    assert dev_no_fp64.kind == "cl" and dev_no_fp64.index >= len(context.probe())
    assert dev_no_fp64 != base and lk.device(dev_no_fp64.name) == dev_no_fp64
    assert dev_no_fp64 not in lk.devices()  # reached by name only
    info = dev_no_fp64.info
    assert info.fp64 is False and not dev_no_fp64.supports_float64
    assert info.name == f"{base.info.name} [no fp64]" and "cl_khr_fp64" not in info.extensions
    assert cp.runtime(dev_no_fp64.index) is not cp.runtime(0)
    from labkit.backend.testing import device_without_fp64

    assert device_without_fp64() == dev_no_fp64  # one per process


def test_float64_is_refused_with_the_usual_error(dev_no_fp64):
    msg = rf"cl:{dev_no_fp64.index} \(.*\[no fp64\]\) has no float64 support.*float32"
    f32 = cp.ones(3, device=dev_no_fp64)
    for make in (lambda: cp.asarray(np.zeros(2), device=dev_no_fp64),
                 lambda: cp.zeros(2, np.float64, device=dev_no_fp64),
                 lambda: f32.astype(np.float64),
                 lambda: f32 * np.float64(2),           # NumPy promotes to float64
                 lambda: cp.arange(3, device=dev_no_fp64) / 2,  # int / int is float64
                 lambda: Generator(0, dev_no_fp64).uniform((3,), dtype=np.float64),
                 lambda: lk.tensor(np.zeros(2), device=dev_no_fp64)):
        with pytest.raises(lk.DTypeError, match=msg):
            make()


def test_kernels_are_built_without_the_fp64_pragma(monkeypatch):
    # a device of its own, so every kernel below is built here (none comes from a cache)
    rt = cp.runtime(context.derive_device(0, fp64=False, label="no fp64, fresh"))
    sources = []
    real = program.build

    def spy(rt_, src, options="", *, name="<generated>"):
        if rt_ is rt:
            sources.append(src)
        return real(rt_, src, options, name=name)

    monkeypatch.setattr(program, "build", spy)
    rng = np.random.default_rng(0)
    h = rng.standard_normal((70, 65)).astype(np.float32)
    a = cp.asarray(h, device=rt)
    got = {
        "elementwise": cp.tanh(a * 2 + 1), "sum": a.sum(axis=0), "argmax": a.argmax(axis=1),
        "matmul": a @ a.T, "take": cp.take(a, [3, -1], axis=0), "mean": a.mean(),
        "where": cp.where(a > 0, a, 0.5), "leaky": (a > 0) * np.float32(0.8) + 0.2,
    }
    want = {
        "elementwise": np.tanh(h * 2 + 1), "sum": h.sum(axis=0), "argmax": h.argmax(axis=1),
        "matmul": h @ h.T, "take": h[[3, -1]], "mean": h.mean(),
        "where": np.where(h > 0, h, np.float32(0.5)), "leaky": (h > 0) * np.float32(0.8) + 0.2,
    }
    for k, v in got.items():
        assert v.dtype == want[k].dtype, k
        np.testing.assert_allclose(v.get(), want[k], rtol=1e-4, atol=1e-4, err_msg=k)
    g = Generator(3, lk.device(f"cl:{rt.info.index}"))
    np.testing.assert_array_equal(g.uniform((9,)).get(), Generator(3).uniform((9,)))
    assert len(sources) >= 8
    assert not [s for s in sources if "cl_khr_fp64" in s]


def test_a_derived_device_shares_binaries_and_tunings_with_its_hardware(monkeypatch, tmp_path):
    # the same source on the same hardware is the same binary: a derived device loads the one
    # its base built from the disk cache (and reads its GEMM tunings) instead of building again
    monkeypatch.setenv("LABKIT_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(program, "POCL", "another platform")  # its binary stored at once
    base = cp.runtime(0)
    derived = cp.runtime(context.derive_device(0, fp64=False, label="no fp64, shares"))
    assert derived.info.hardware == base.info.hardware != ""
    assert "hardware" not in derived.info.to_dict()
    src = "__kernel void twice(__global float* x) { x[get_global_id(0)] *= 2.0f; }\n"
    program.build(base, src, name="twice")
    binaries = sorted(p.name for p in tmp_path.rglob("*.bin"))
    assert len(binaries) == 1
    built = []
    import pyopencl as cl

    real = cl.Program

    def spy(ctx, *args):
        built.append("source" if isinstance(args[0], str) else "binary")
        return real(ctx, *args)

    monkeypatch.setattr(cl, "Program", spy)
    prg = program.build(derived, src, name="twice")
    assert built == ["binary"]
    assert sorted(p.name for p in tmp_path.rglob("*.bin")) == binaries
    x = cp.ones(4, device=derived)
    prg.twice(derived.queue, (4,), None, x.data)
    assert x.get().tolist() == [2.0] * 4
    from labkit.backend.opencl import gemm

    assert gemm.tuning_key(derived, "float", 1024) == gemm.tuning_key(base, "float", 1024)
