"""Max pooling's fast path (windows that tile the input, NumPy) against references: ties share
the gradient as in the general path, any memory layout, and its gradient differentiates
again."""

import numpy as np
import pytest

import labkit as lk
import labkit.functions as F
from labkit.functions.pooling import TiledMax


def np_pool_grad(x, g, k):
    """d/dx of sum(g * maxpool(x)) with ties sharing: (N, C, H, W)."""
    n, c, h, w = x.shape
    win = x.reshape(n, c, h // k, k, w // k, k)
    top = win.max(axis=(3, 5), keepdims=True)
    m = (win == top).astype(np.float64)
    m /= m.sum(axis=(3, 5), keepdims=True)
    return (m * g[:, :, :, None, :, None]).reshape(x.shape)


def test_ties_share_the_gradient_like_the_general_path(rng):
    x = rng.integers(0, 3, (2, 3, 6, 8)).astype(np.float32)  # many ties
    g = rng.standard_normal((2, 3, 3, 4)).astype(np.float32)
    t = lk.tensor(x, requires_grad=True)
    y = F.max_pool2d(t, 2)
    assert isinstance(y.creator, TiledMax)
    np.testing.assert_array_equal(y.numpy(), x.reshape(2, 3, 3, 2, 4, 2).max(axis=(3, 5)))
    (y * lk.tensor(g)).sum().backward()
    np.testing.assert_allclose(t.grad.numpy(), np_pool_grad(x, g, 2), rtol=1e-6)
    # the general path (padding 0 given as a window copy: stride 1 then every second output)
    t2 = lk.tensor(x, requires_grad=True)
    y2 = F.max_pool2d(t2, 2, 1)[:, :, ::2, ::2]
    np.testing.assert_array_equal(y2.numpy(), y.numpy())
    (y2 * lk.tensor(g)).sum().backward()
    np.testing.assert_allclose(t2.grad.numpy(), t.grad.numpy(), rtol=1e-6)


@pytest.mark.parametrize("layout", ["nchw", "cnhw", "strided"])
def test_any_memory_layout(layout, rng):
    base = rng.standard_normal((3, 4, 8, 12)).astype(np.float32)
    if layout == "cnhw":  # a convolution's output
        x = np.ascontiguousarray(base.transpose(1, 0, 2, 3)).transpose(1, 0, 2, 3)
    elif layout == "strided":
        x = np.repeat(base, 2, axis=3)[..., ::2]
    else:
        x = base
    g = rng.standard_normal((3, 4, 4, 6)).astype(np.float32)
    t = lk.tensor(x, requires_grad=True)
    y = F.max_pool2d(t, 2)
    np.testing.assert_array_equal(y.numpy(), base.reshape(3, 4, 4, 2, 6, 2).max(axis=(3, 5)))
    (y * lk.tensor(g)).sum().backward()
    np.testing.assert_allclose(t.grad.numpy(), np_pool_grad(base, g, 2), rtol=1e-6)


def test_its_gradient_differentiates_again(rng):
    x = rng.standard_normal((2, 2, 4, 6))
    x[0, 0, 0, :2] = 5.0  # a tie in one tile
    t = lk.tensor(x, requires_grad=True)
    u = lk.tensor(rng.standard_normal((2, 2, 2, 3)), requires_grad=True)
    v = rng.standard_normal(x.shape)
    gx, = lk.grad([F.max_pool2d(t, 2)], [t], grad_outputs=[u], create_graph=True)
    np.testing.assert_allclose(gx.numpy(), np_pool_grad(x, u.numpy(), 2))
    gu, = lk.grad([(gx * lk.tensor(v)).sum()], [u], create_graph=True)
    # gx is linear in u: d/du sum(v * gx) = the tile sums of v at the winners, shared
    n, c, h, w = x.shape
    win = x.reshape(n, c, h // 2, 2, w // 2, 2)
    m = (win == win.max(axis=(3, 5), keepdims=True)).astype(float)
    m /= m.sum(axis=(3, 5), keepdims=True)
    np.testing.assert_allclose(gu.numpy(), (m * v.reshape(win.shape)).sum(axis=(3, 5)))
    # and once more: d/dv of sum(w * gu) goes back through TileScatter
    vt = lk.tensor(v, requires_grad=True)
    gx2, = lk.grad([F.max_pool2d(t, 2)], [t], grad_outputs=[u], create_graph=True)
    gu2, = lk.grad([(gx2 * vt).sum()], [u], create_graph=True)
    wgt = rng.standard_normal(gu2.shape)
    gv, = lk.grad([(gu2 * lk.tensor(wgt)).sum()], [vt])
    np.testing.assert_allclose(gv.numpy(), np_pool_grad(x, wgt, 2))


CASES = ["plain", "ties", "nan", "transposed", "inf-gradient", "signed-zeros"]


def _pool_grads(dev, x, gy, gg, transposed):
    t = lk.tensor(x, device=dev, requires_grad=True)
    y = F.max_pool2d(F.transpose(t, (1, 0, 2, 3)) if transposed else t, 2)
    g = lk.tensor(gy, device=dev, requires_grad=True)
    gx, = lk.grad([y], [t], [g], create_graph=True)
    ggy, = lk.grad([gx], [g], [lk.tensor(gg, device=dev)])
    return y, gx, ggy


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("width", [6, 8, 14, 22])
def test_the_opencl_kernels_equal_the_cpu_path_bit_for_bit(case, width, rng):
    """pool_max, pool_scatter and pool_gather (backend/opencl/pool.py) against the NumPy
    path: values, ties sharing, NaN windows, -0 against 0, a (C, N, H, W) layout, an infinite
    upstream gradient, and the gradient's own gradient; rows of 3, 4, 7 and 11 windows (CPU
    devices take four at a time, then the rest one by one)."""
    from labkit.functions.pooling import PoolScatterCL, TiledMaxCL

    x = rng.standard_normal((3, 4, 6, width)).astype(np.float32)
    if case == "ties":
        x = np.round(x).astype(np.float32)
    if case == "nan":
        x[0, 0, 0, 0] = x[1, 2, 3, 3] = x[2, 3, 5, width - 1] = np.nan
    if case == "signed-zeros":
        x = np.where(rng.random(x.shape) < 0.5, np.float32(0), np.float32(-0.0))
    transposed = case == "transposed"
    ow = width // 2
    gy = rng.standard_normal((4, 3, 3, ow) if transposed else (3, 4, 3, ow)).astype(np.float32)
    if case == "inf-gradient":
        gy[0, 0, 0, 0] = np.inf
    gg = rng.standard_normal(x.shape).astype(np.float32)
    with np.errstate(invalid="ignore"):
        want = _pool_grads("cpu", x, gy, gg, transposed)
    got = _pool_grads("cl", x, gy, gg, transposed)
    assert isinstance(got[0].creator, TiledMaxCL)
    assert transposed or isinstance(got[1].creator, PoolScatterCL)
    for w, g in zip(want, got):
        assert g.dtype == w.dtype and g.numpy().tobytes() == w.numpy().tobytes()


def test_a_float64_upstream_gradient_is_promoted_as_on_the_cpu(rng):
    x = rng.standard_normal((2, 3, 4, 4)).astype(np.float32)
    grads = []
    for dev in ("cpu", "cl"):
        t = lk.tensor(x, device=dev, requires_grad=True)
        y = F.max_pool2d(t, 2)
        y.backward(lk.tensor(np.full(y.shape, 3.0), device=dev))  # float64
        grads.append(t.grad.numpy())
    assert grads[1].dtype == grads[0].dtype
    np.testing.assert_array_equal(grads[1], grads[0])
    assert sorted(set(grads[1].ravel().tolist())) == [0.0, 3.0]


@pytest.mark.parametrize("k", [2, 3, (2, 3)], ids=str)
@pytest.mark.parametrize("transposed", [False, True], ids=["nchw", "cnhw"])
def test_tiled_average_pooling_equals_the_window_mean_bit_for_bit(k, transposed, rng):
    """TiledAvg (no window copies; one kernel on cl) against the mean of the window copies it
    replaced, on both devices: values, gradient, and the gradient's gradient."""
    from labkit.functions.pooling import TiledAvg, _windows
    from labkit.functions.reduction import mean

    x = rng.standard_normal((3, 4, 6, 12)).astype(np.float32)
    shape = None
    out = {}
    for dev in ("cpu", "cl"):
        t = lk.tensor(x, device=dev, requires_grad=True)
        xx = F.transpose(t, (1, 0, 2, 3)) if transposed else t
        y = F.avg_pool2d(xx, k)
        assert isinstance(y.creator, TiledAvg)
        old = mean(_windows(xx, k, None, 0, 0.0, "avg_pool2d"), axis=(2, 3))
        shape = shape or y.shape
        g = lk.tensor(np.linspace(-1, 1, int(np.prod(shape)), dtype=np.float32)
                      .reshape(shape), device=dev, requires_grad=True)
        gx, = lk.grad([y], [t], [g], create_graph=True)
        gx_old, = lk.grad([old], [t], [g])
        ggy, = lk.grad([gx], [g], [lk.tensor(np.full(x.shape, 0.5, np.float32), device=dev)])
        assert y.numpy().tobytes() == old.numpy().tobytes()
        assert gx.numpy().tobytes() == gx_old.numpy().tobytes()
        out[dev] = [a.numpy().tobytes() for a in (y, gx, ggy)]
    assert out["cl"] == out["cpu"]


@pytest.mark.parametrize("shape", [(0, 2, 4, 4), (2, 0, 4, 4)])
@pytest.mark.parametrize("pool", ["max", "avg"])
def test_an_empty_batch_or_channel_axis_pools_and_differentiates(dev, shape, pool):
    """The tiled path (stride = window, no padding) on an empty axis: its backward took the
    maximum of no winners' counts (ValueError on cpu)."""
    f = F.max_pool2d if pool == "max" else F.avg_pool2d
    x = lk.tensor(np.zeros(shape, np.float32), device=dev, requires_grad=True)
    y = f(x, 2)
    assert y.shape == shape[:2] + (2, 2)
    F.sum(y).backward()
    assert x.grad.shape == shape
    y = f(x, 2, stride=1)  # NOTE: the general path too
    F.sum(y).backward()
    assert x.grad.shape == shape
