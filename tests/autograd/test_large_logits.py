"""The softmax family under a large row maximum: log-softmax is (x - max) - log(sum(exp(x -
max))), never x - logsumexp(x), which rounded the log-sum into the max (logits of 1e4: a
softmax summing to 1 - 3e-4; of 1e7, a cross-entropy gradient of [-0.63, 0.37] for [-0.5,
0.5] and a loss of 1 for log 2). Against float64 NumPy on both devices, through the one-launch
kernels (a last axis, contiguous) and the composed paths (another axis, strided, N-d)."""

from __future__ import annotations

import numpy as np
import pytest

import labkit as lk
import labkit.functions as F

SCALES = [1e2, 1e4, 1e6, 1e7]


def _rows(M):
    """Rows whose max is about M, with ties and near-ties at the top, as float32."""
    return np.array([[M, M, M - 1, 0], [M, M - 2, -M, M - 0.5], [-M, M, 3, M]], np.float32)


def _ref(x, axis):
    x = x.astype(np.float64)
    z = x - x.max(axis=axis, keepdims=True)
    ls = z - np.log(np.exp(z).sum(axis=axis, keepdims=True))
    return ls, np.exp(ls)


@pytest.mark.parametrize("M", SCALES)
@pytest.mark.parametrize("layout", ["rows", "columns", "strided"])
def test_softmax_and_log_softmax_keep_their_precision(dev, M, layout):
    x = _rows(M)
    if layout == "columns":
        x, axis = np.ascontiguousarray(x.T), 0
    else:
        axis = 1
    xt = lk.tensor(x, device=dev)
    if layout == "strided":
        xt = F.transpose(lk.tensor(np.ascontiguousarray(x.T), device=dev), (1, 0))
    ls_ref, p_ref = _ref(x, axis)
    p = F.softmax(xt, axis=axis).numpy()
    ls = F.log_softmax(xt, axis=axis).numpy()
    np.testing.assert_allclose(p.sum(axis=axis), 1, rtol=0, atol=4e-7)
    np.testing.assert_allclose(p, p_ref, rtol=2e-6, atol=1e-7)
    big = p_ref > 1e-30  # NOTE: log-softmax where its float64 value is representable
    np.testing.assert_allclose(ls[big], ls_ref[big], rtol=2e-6, atol=2e-6)


@pytest.mark.parametrize("M", SCALES)
@pytest.mark.parametrize("shape", ["2d", "strided", "nd"])
def test_cross_entropy_loss_and_gradient_under_large_logits(dev, M, shape):
    x = _rows(M)
    t = np.array([0, 3, 1])
    if shape == "nd":  # NOTE: (N, C, L): the composed path on cl
        x = np.stack([x, x[::-1]], axis=2)
        t = np.stack([t, t[::-1]], axis=1)
    xt = (F.transpose(lk.tensor(np.ascontiguousarray(x.T), device=dev), (1, 0))
          if shape == "strided" else lk.tensor(x, device=dev))
    leaf = xt if shape != "strided" else None
    if leaf is not None:
        leaf.requires_grad = True
    y = F.softmax_cross_entropy(xt, lk.tensor(t, device=dev), reduce="none")
    ls_ref, p_ref = _ref(x, 1)
    picked = np.take_along_axis(ls_ref, np.expand_dims(t, 1), axis=1).squeeze(1)
    np.testing.assert_allclose(y.numpy(), -picked, rtol=2e-6, atol=2e-6)
    if leaf is not None:
        y.sum().backward()
        g = p_ref.copy()
        np.put_along_axis(g, np.expand_dims(t, 1), np.take_along_axis(g, np.expand_dims(
            t, 1), axis=1) - 1, axis=1)
        np.testing.assert_allclose(leaf.grad.numpy(), g, rtol=0, atol=4e-7)


def test_huge_opposite_logits_agree_on_both_devices():
    x = np.array([[1e30, -1e30, 0, 1e30]], np.float32)
    for f in (lambda t: F.softmax(t, axis=1), lambda t: F.log_softmax(t, axis=1)):
        cpu = f(lk.tensor(x)).numpy()
        cl = f(lk.tensor(x, device="cl")).numpy()
        np.testing.assert_array_equal(cl, cpu)
    np.testing.assert_array_equal(F.softmax(lk.tensor(x), axis=1).numpy(), [[0.5, 0, 0, 0.5]])


@pytest.mark.parametrize("M", SCALES)
def test_logsumexp_gradient_is_the_softmax(dev, M):
    x = _rows(M)
    xt = lk.tensor(x, device=dev, requires_grad=True)
    F.logsumexp(xt, axis=1).sum().backward()
    np.testing.assert_allclose(xt.grad.numpy(), _ref(x, 1)[1], rtol=2e-6, atol=1e-7)
