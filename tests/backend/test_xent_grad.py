"""The cross-entropy's gradient through its logits in one launch on OpenCL
(backend/opencl/xent.py ``grad``, functions/loss.py ``_XentGrad``): the same bits as the
composed gradient it replaces (weights, scale, softmax, one-hot, subtract, multiply), which a
backward recording a graph still runs; and against float64 NumPy."""

import numpy as np
import pytest

import labkit as lk
import labkit.functions as F
from labkit.backend import opencl as cp
from labkit.backend.opencl import xent
from labkit.functions import loss as loss_mod


def _grads(x, t, reduce, ignore, dtype, gy=None):
    """The logits' gradient with the fused launch (no graph recorded) and composed
    (``create_graph=True``), and the loss of the first."""
    out = []
    for create_graph in (False, True):
        xt = lk.tensor(x.astype(dtype), device="cl", requires_grad=True)
        loss = F.softmax_cross_entropy(xt, t, reduce=reduce, ignore_label=ignore)
        gys = None if gy is None else [lk.tensor(gy.astype(dtype), device="cl")]
        (g,) = lk.grad([loss], [xt], grad_outputs=gys, create_graph=create_graph)
        out.append(g.numpy())
    return out


def _numpy_grad(x, t, reduce, ignore, gy):
    x = x.astype(np.float64)
    p = np.exp(x - x.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    valid = (t != ignore) if ignore is not None else np.ones(len(t), bool)
    oh = np.zeros_like(p)
    oh[np.arange(len(t))[valid], t[valid]] = 1
    w = valid.astype(np.float64)
    if reduce == "mean":
        w /= max(valid.sum(), 1)
    return (p - oh) * (w * gy)[:, None]


@pytest.fixture
def launches(monkeypatch):
    """Counts the fused gradient's launches."""
    got = []
    real = xent.grad

    def counted(*a, **k):
        got.append(a)
        return real(*a, **k)
    monkeypatch.setattr(xent, "grad", counted)
    return got


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("reduce", ["mean", "sum", "none"])
@pytest.mark.parametrize("n,c", [(1, 10), (32, 10), (7, 33), (64, 1000), (300, 1),
                                 (xent.GRAD_COUNT_MAX, 5), (xent.GRAD_COUNT_MAX + 1, 5)])
def test_the_fused_gradient_is_the_composed_one_bit_for_bit(dtype, reduce, n, c, launches):
    rng = np.random.default_rng(n * 7 + c)
    x = rng.standard_normal((n, c)) * 3
    t = rng.integers(0, c, n)
    t[::3] = -1
    gy = rng.standard_normal(n) if reduce == "none" else None
    fused, composed = _grads(x, lk.tensor(t, device="cl"), reduce, -1, dtype, gy)
    assert len(launches) == 1  # NOTE: the fused path ran once, for the first only
    np.testing.assert_array_equal(fused, composed)
    want = _numpy_grad(x, t, reduce, -1, np.ones(n) if gy is None else gy)
    tol = 2e-6 if dtype == np.float32 else 1e-13
    np.testing.assert_allclose(fused, want, rtol=tol * 10, atol=tol)


@pytest.mark.parametrize("n,c", [(4, 2000), (15, 1025), (8, 4096)])
def test_few_long_rows_keep_the_composed_gradient(n, c, launches):
    """Fewer than 16 rows of over 1,024 classes: the softmax is not the row kernel's (it is
    exp of the log-softmax, rounded otherwise), so the fused op does not run there."""
    rng = np.random.default_rng(c)
    x = rng.standard_normal((n, c)) * 3
    t = rng.integers(0, c, n)
    fused, composed = _grads(x, lk.tensor(t, device="cl"), "mean", -1, np.float32)
    assert not launches
    np.testing.assert_array_equal(fused, composed)
    np.testing.assert_allclose(fused, _numpy_grad(x, t, "mean", -1, np.ones(n)), atol=1e-7)


@pytest.mark.parametrize("tdt", [np.int8, np.uint8, np.int32, np.uint64])
def test_label_types_and_no_ignored_label(tdt, launches):
    rng = np.random.default_rng(5)
    x = rng.standard_normal((40, 6))
    t = rng.integers(0, 6, 40).astype(tdt)
    for ignore in (-1, None, 2):
        if ignore == 2 and np.dtype(tdt).kind == "u":
            continue
        fused, composed = _grads(x, lk.tensor(t, device="cl"), "mean", ignore, np.float32)
        np.testing.assert_array_equal(fused, composed)
        want = _numpy_grad(x, t.astype(np.int64), "mean", -1 if ignore is None else ignore,
                           np.ones(40))
        np.testing.assert_allclose(fused, want, rtol=2e-5, atol=2e-7)
    assert len(launches) >= 2


def test_non_finite_logits_and_rows_all_ignored_keep_the_composed_values(launches):
    rng = np.random.default_rng(2)
    x = rng.standard_normal((8, 40))
    x[0, 3] = -np.inf  # a mask: finite gradient
    x[1, 5] = np.nan
    x[2, :] = -np.inf
    x[3, 7] = np.inf
    t = rng.integers(0, 40, 8)
    fused, composed = _grads(x, lk.tensor(t, device="cl"), "mean", -1, np.float32)
    np.testing.assert_array_equal(fused, composed)  # NOTE: NaN where the composed has NaN
    assert np.isfinite(fused[0]).all() and fused[0, 3] == 0
    assert np.isnan(fused[1]).all()
    allign = np.full(8, -1)
    fused, composed = _grads(np.ones((8, 4)), lk.tensor(allign, device="cl"), "mean", -1,
                             np.float32)
    np.testing.assert_array_equal(fused, np.zeros((8, 4), np.float32))
    np.testing.assert_array_equal(composed, fused)
    assert len(launches) == 2


def test_views_of_logits_labels_and_gradient_are_read_at_their_offsets():
    """The op takes any layout: a replay of a compiled step may hand it strided labels or a
    gradient that its trace saw contiguous; it makes them contiguous first."""
    rng = np.random.default_rng(9)
    x = rng.standard_normal((12, 7)).astype(np.float32)
    t = rng.integers(0, 7, 24)
    gy = rng.standard_normal(24).astype(np.float32)
    xd, td, gd = cp.asarray(x), cp.asarray(t), cp.asarray(gy)
    for tv, gv in ((td[::2], gd[::2]), (td[5:17], gd[3:15])):
        got = loss_mod._XentGrad(tv, "none", -1).forward(xd[:, :], gv).get()
        want = _numpy_grad(x, tv.get(), "none", -1, gv.get())
        np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-7)
    xs = cp.asarray(np.ascontiguousarray(np.repeat(x, 2, axis=1)))[:, ::2]
    got = loss_mod._XentGrad(td[:12], "mean", -1).forward(xs, cp.asarray(np.float32(2))).get()
    np.testing.assert_allclose(got, _numpy_grad(x, t[:12], "mean", -1, np.full(12, 2.0)),
                               rtol=2e-5, atol=2e-7)


def test_a_gradient_differentiated_again_runs_composed_and_is_right(launches):
    """With create_graph the backward records a graph: the composed form runs (the fused op
    has no gradient), and the Hessian-vector product matches the CPU's."""
    rng = np.random.default_rng(4)
    x = rng.standard_normal((5, 6))
    t = rng.integers(0, 6, 5)
    v = rng.standard_normal((5, 6))
    res = []
    for dev in ("cpu", "cl"):
        xt = lk.tensor(x, device=dev, requires_grad=True)
        (g,) = lk.grad([F.softmax_cross_entropy(xt, lk.tensor(t, device=dev))], [xt],
                       create_graph=True)
        (h,) = lk.grad([(g * lk.tensor(v, device=dev)).sum()], [xt])
        res.append(h.numpy())
    np.testing.assert_allclose(res[1], res[0], rtol=1e-10, atol=1e-12)
    assert not launches


def test_a_training_step_launches_it_once_eager_and_compiled(launches):
    rng = np.random.default_rng(1)
    w0 = rng.standard_normal((6, 5)).astype(np.float32)

    def make():
        w = lk.tensor(w0, device="cl", requires_grad=True)

        def step(x, y):
            w.grad = None
            loss = F.softmax_cross_entropy(F.matmul(x, w), y)
            loss.backward()
            return loss, w.grad
        return step
    eager, f = make(), lk.compile(make())
    for _ in range(5):
        x = lk.tensor(rng.standard_normal((9, 6)).astype(np.float32), device="cl")
        y = lk.tensor(rng.integers(0, 5, 9), device="cl")
        n = len(launches)
        want = eager(x, y)
        assert len(launches) == n + 1
        got = f(x, y)
        assert got[0].item() == want[0].item()
        np.testing.assert_array_equal(got[1].numpy(), want[1].numpy())
    assert f.stats["traces"] == 2
