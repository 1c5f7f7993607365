"""An LSTM's time steps in one launch on a CPU device (backend/opencl/lstm_loop.py): bit for
bit lstm_gemm's launch per step, step after step; refused where it could not be."""

import numpy as np
import pytest

from labkit.backend import opencl as cp
from labkit.backend.opencl import lstm, lstm_gemm, lstm_loop

BLOCKING = {np.float32: "8,2,16", np.float64: "4,2,8"}

pytestmark = pytest.mark.skipif(not cp.runtime(0).info.is_cpu,
                                reason="the loop is for CPU devices (a GPU keeps a launch a step)")


def _case(rng, M, T, H, dtype, scale=1.0, time_major=False):
    u = cp.asarray((rng.standard_normal((4 * H, H)) * 0.3 * scale).astype(dtype))
    wide = cp.asarray((rng.standard_normal((M, 2 * H + 3)) * scale).astype(dtype))
    h0, c0 = wide[:, 1:H + 1], wide[:, H + 2:2 * H + 2]  # NOTE: strided rows
    if time_major:
        pre = cp.asarray((rng.standard_normal((T, M, 4 * H)) * scale).astype(dtype))
        xws = [pre[t] for t in range(T)]
    else:
        pre = cp.asarray((rng.standard_normal((M, T, 4 * H)) * scale).astype(dtype))
        xws = [pre[:, t] for t in range(T)]
    ut = u.T.copy()
    return h0, ut, lstm_gemm.interleave(ut, lstm.vector_width(u.rt, u.dtype, H)), xws, c0


def _same(a, b):
    a, b = a.get(), b.get()
    assert a.dtype == b.dtype and a.shape == b.shape
    np.testing.assert_array_equal(a.view(f"u{a.itemsize}"), b.view(f"u{b.itemsize}"))


def _steps(h, ut, ug, xws, c):
    out = []
    for xw in xws:
        x, c, h = lstm_gemm.forward(h, ug, xw, c, lstm_gemm.plan(h, ug, xw, c, ut))
        out.append((x, c, h))
    return out


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("M,T,H,scale,time_major", [
    (32, 7, 128, 1.0, False), (16, 3, 64, 1.0, True), (24, 5, 64, 8.0, False),
    (6, 2, 128, 30.0, True), (10, 4, 128, 1.0, False), (33, 3, 64, 1.0, False)])
def test_one_launch_is_every_steps_launch_bit_for_bit(dtype, M, T, H, scale, time_major, rng,
                                                       monkeypatch):
    """Batch- or time-major inputs, strided first h and c, gates from small to saturated,
    batches whose rows the blocking divides in 4, 2 or 1."""
    if dtype == np.float64 and not cp.runtime(0).info.fp64:
        pytest.skip("this OpenCL device has no float64")
    monkeypatch.setenv("LABKIT_GEMM_CONFIG", BLOCKING[dtype])
    h0, ut, ug, xws, c0 = _case(rng, M, T, H, dtype, scale, time_major)
    planned = lstm_loop.plan(h0, ug, xws, c0, ut)
    assert planned is not None
    got = lstm_loop.forward(h0, ug, xws, c0, planned)
    want = _steps(h0, ut, ug, xws, c0)
    assert len(got) == T
    for t, (g, w) in enumerate(zip(got, want)):
        for a, b in zip(g, w):
            _same(a, b)
            assert a.is_contiguous and a.shape == b.shape, t


@pytest.mark.parametrize("M,H", [(12, 32), (3, 64), (1, 32)])
def test_a_product_a_step_would_not_run_blocked_is_not_looped(M, H, rng, monkeypatch):
    """Small products run as dot products or the general kernel, step by step: their sums
    are not the blocked kernel's, so they keep their launches."""
    monkeypatch.setenv("LABKIT_GEMM_CONFIG", BLOCKING[np.float32])
    h0, ut, ug, xws, c0 = _case(rng, M, 4, H, np.float32)
    assert lstm_gemm.plan(h0, ug, xws[0], c0, ut) is None
    assert lstm_loop.plan(h0, ug, xws, c0, ut) is None


def test_inputs_that_are_not_one_arrays_steps_are_refused(rng, monkeypatch):
    monkeypatch.setenv("LABKIT_GEMM_CONFIG", BLOCKING[np.float32])
    h0, ut, ug, xws, c0 = _case(rng, 16, 4, 64, np.float32)
    assert lstm_loop.plan(h0, ug, xws, c0, ut) is not None
    apart = [x.copy() for x in xws]  # NOTE: four buffers
    assert lstm_loop.plan(h0, ug, apart, c0, ut) is None
    skipped = xws[:2] + xws[3:]  # NOTE: one buffer, not evenly apart
    assert lstm_loop.plan(h0, ug, skipped, c0, ut) is None
    assert lstm_loop.plan(h0, ug, xws[:1], c0, ut) is None  # NOTE: one step: its own launch
    monkeypatch.setattr(lstm_loop, "MAX_U_BYTES", ug.size * ug.itemsize - 1)
    assert lstm_loop.plan(h0, ug, xws, c0, ut) is None  # NOTE: U past a core's cache


def test_a_blocking_whose_vectors_are_not_the_cells_is_refused(rng, monkeypatch):
    monkeypatch.setenv("LABKIT_GEMM_CONFIG", "8,4,8")
    h0, ut, ug, xws, c0 = _case(rng, 16, 4, 64, np.float32)
    assert lstm_loop.plan(h0, ug, xws, c0, ut) is None


def _grad_case(rng, M, T, H, dtype, scale):
    A = lambda *s: cp.asarray((rng.standard_normal(s) * scale).astype(dtype))  # noqa: E731
    cs, xs, adds = A(T, M, H), A(T, M, 4 * H), A(M, T, H)
    u = cp.asarray((rng.standard_normal((4 * H, H)) * 0.1).astype(dtype))
    wide = A(M, 2 * H + 3)
    gc, gh = wide[:, 1:H + 1], wide[:, H + 2:2 * H + 2]  # NOTE: strided rows
    back = range(T - 1, -1, -1)
    return ([cs[t] for t in back], [xs[t] for t in back], gc, gh, u,
            [adds[:, t] for t in back])


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("M,T,H,scale,add", [
    (32, 6, 128, 1.0, False), (32, 4, 128, 1.0, True), (16, 3, 64, 8.0, True),
    (24, 5, 64, 30.0, False), (10, 2, 128, 1.0, True)])
def test_one_launch_is_every_steps_gradient_bit_for_bit(dtype, M, T, H, scale, add, rng,
                                                        monkeypatch):
    """The steps' gradients, the last first, each reading the one before's, with and
    without an array added to each step's product (a loss reading every step's h)."""
    if dtype == np.float64 and not cp.runtime(0).info.fp64:
        pytest.skip("this OpenCL device has no float64")
    monkeypatch.setenv("LABKIT_GEMM_CONFIG", BLOCKING[dtype])
    cps, xs, gc, gh, u, adds = _grad_case(rng, M, T, H, dtype, scale)
    adds = adds if add else None
    planned = lstm_loop.plan_grad(cps, xs, gc, gh, u, adds)
    assert planned is not None
    got = lstm_loop.grad(cps, xs, gc, gh, u, planned, adds)
    assert len(got) == T
    for t in range(T):
        more = (adds[t],) if add else ()
        want = lstm_gemm.grad_product(cps[t], xs[t], gc, gh, u,
                                      lstm_gemm.plan_grad(cps[t], xs[t], gc, gh, u, *more),
                                      *more)
        for a, b in zip(got[t], want):
            _same(a, b)
        gc, gh = want[0], want[2]


def test_gradients_of_steps_not_in_one_array_are_refused(rng, monkeypatch):
    monkeypatch.setenv("LABKIT_GEMM_CONFIG", BLOCKING[np.float32])
    cps, xs, gc, gh, u, adds = _grad_case(rng, 16, 4, 64, np.float32, 1.0)
    assert lstm_loop.plan_grad(cps, xs, gc, gh, u, adds) is not None
    apart = [c.copy() for c in cps]
    assert lstm_loop.plan_grad(apart, xs, gc, gh, u) is None
    assert lstm_loop.plan_grad(cps, [x.copy() for x in xs], gc, gh, u) is None
    assert lstm_loop.plan_grad(cps, xs, gc, gh, u, [a.copy() for a in adds]) is None
    assert lstm_loop.plan_grad(apart, xs, gc, gh, u, stacked=True) is not None  # NOTE: told
    monkeypatch.setattr(lstm_loop, "MAX_U_BYTES", u.size * u.itemsize - 1)
    assert lstm_loop.plan_grad(cps, xs, gc, gh, u) is None
