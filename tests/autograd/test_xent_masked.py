"""softmax_cross_entropy with masked logits (-inf at classes a row may not take): the loss is
``-log_softmax`` at the label, finite, as in PyTorch; it was NaN (a one-hot times -inf) while
its gradient was finite. Against float64 NumPy, on both devices, through the kernel (contiguous
(N, C) logits on cl) and the composed path (strided, N-d), eager and compiled."""

from __future__ import annotations

import numpy as np
import pytest

import labkit as lk
import labkit.functions as F

inf, nan = np.inf, np.nan


def _ref(x, t, ignore=-1):
    """Each row's loss in float64, over axis 1 (N, C, ...): lse - x[label]; 0 where ignored."""
    x = np.moveaxis(np.asarray(x, np.float64), 1, -1)  # (N, ..., C)
    m = x.max(-1, keepdims=True)
    with np.errstate(all="ignore"):
        lse = np.log(np.exp(x - m).sum(-1)) + m[..., 0]
    idx = np.where(t == ignore, 0, t)
    picked = np.take_along_axis(x, idx[..., None], -1)[..., 0]
    return np.where(t == ignore, 0.0, lse - picked)


def _logits(rng, shape):
    x = rng.standard_normal(shape).astype(np.float32)
    t = rng.integers(0, shape[1], (shape[0],) + shape[2:])
    # NOTE: mask a third of the classes that are not the label
    mask = rng.random(shape) < 0.35
    np.put_along_axis(mask, t[:, None], False, axis=1)
    x[mask] = -inf
    return x, t


@pytest.mark.parametrize("reduce", ["none", "mean", "sum"])
def test_masked_logits_give_the_finite_loss_and_gradient(dev, reduce):
    rng = np.random.default_rng(0)
    x, t = _logits(rng, (37, 10))
    xt = lk.tensor(x, device=dev, requires_grad=True)
    y = F.softmax_cross_entropy(xt, lk.tensor(t, device=dev), reduce=reduce)
    (y.sum() if y.ndim else y).backward()
    per_row = _ref(x, t)
    want = {"none": per_row, "mean": per_row.mean(), "sum": per_row.sum()}[reduce]
    assert np.all(np.isfinite(y.numpy()))
    np.testing.assert_allclose(y.numpy(), want, rtol=1e-5, atol=1e-6)
    p = np.exp(x.astype(np.float64) - x.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    p[np.arange(37), t] -= 1
    g = xt.grad.numpy()
    np.testing.assert_allclose(g, p / (37 if reduce == "mean" else 1), rtol=1e-5, atol=1e-7)
    assert np.all(g[x == -inf] == 0)


def test_a_masked_label_is_an_infinite_loss_and_broken_rows_stay_nan(dev):
    x = np.array([[1, -inf, 2], [-inf, 0, 1], [nan, 0, 1], [inf, 0, 1], [-inf, -inf, -inf]],
                 np.float32)
    t = np.array([0, 0, 1, 1, 2])
    with np.errstate(all="ignore"):
        y = F.softmax_cross_entropy(lk.tensor(x, device=dev), lk.tensor(t, device=dev),
                                    reduce="none").numpy()
    assert np.isclose(y[0], np.log(np.e + np.e ** 2) - 1, rtol=1e-6)
    assert y[1] == inf                          # the label's class was masked: -log(0)
    assert np.isnan(y[2:]).all()                # a NaN, +inf or all -inf row has no loss


@pytest.mark.parametrize("ignore", [-1, 0])
def test_an_ignored_row_is_zero_masked_or_not_and_nan_when_broken(dev, ignore):
    x = np.array([[1, -inf, 2], [-inf, 0, 1], [0.5, 0.25, -1], [nan, 0, 1]], np.float32)
    t = np.array([2, ignore, ignore, ignore]) if ignore == -1 else np.array([2, 0, 0, 0])
    with np.errstate(all="ignore"):
        y = F.softmax_cross_entropy(lk.tensor(x, device=dev), lk.tensor(t, device=dev),
                                    reduce="none", ignore_label=ignore).numpy()
        total = F.softmax_cross_entropy(lk.tensor(x[:3], device=dev),
                                        lk.tensor(t[:3], device=dev),
                                        ignore_label=ignore).numpy()
    np.testing.assert_allclose(y[:3], [_ref(x[:1], t[:1])[0], 0, 0], rtol=1e-6)
    assert np.isnan(y[3])
    np.testing.assert_allclose(total, _ref(x[:1], t[:1])[0], rtol=1e-6)  # mean over 1 row


def test_strided_and_n_dimensional_logits_take_the_same_rule(dev):
    """Paths the one-launch kernel does not take: a transposed view, and (N, C, L) logits."""
    rng = np.random.default_rng(1)
    x, t = _logits(rng, (6, 5, 7))
    y = F.softmax_cross_entropy(lk.tensor(x, device=dev), lk.tensor(t, device=dev),
                                reduce="none")
    np.testing.assert_allclose(y.numpy(), _ref(x, t), rtol=1e-5, atol=1e-6)
    x2, t2 = _logits(rng, (9, 4))
    xv = F.transpose(lk.tensor(np.ascontiguousarray(x2.T), device=dev), (1, 0))
    y2 = F.softmax_cross_entropy(xv, lk.tensor(t2, device=dev), reduce="none")
    np.testing.assert_allclose(y2.numpy(), _ref(x2, t2), rtol=1e-5, atol=1e-6)


def test_a_compiled_step_with_masked_logits_gives_the_eager_loss(dev):
    rng = np.random.default_rng(2)
    x, t = _logits(rng, (16, 8))
    W0 = rng.standard_normal((8, 8)).astype(np.float32)
    mask = np.where(x == -inf, -inf, 0).astype(np.float32)

    def run(compiled):
        W = lk.tensor(W0.copy(), device=dev, requires_grad=True)
        opt = lk.optimizers.SGD(0.1).setup({"W": W})

        def step(xb, mb, tb):
            loss = F.softmax_cross_entropy(xb @ W + mb, tb)
            opt.zero_grad()
            loss.backward()
            opt.update()
            return loss

        f = lk.compile(step) if compiled else step
        args = [lk.tensor(a, device=dev) for a in (np.where(x == -inf, 0, x), mask, t)]
        return [float(f(*args).item()) for _ in range(4)], W.numpy()

    (le, we), (lc, wc) = run(False), run(True)
    assert all(np.isfinite(le))
    np.testing.assert_allclose(lc, le, rtol=1e-6)
    np.testing.assert_allclose(wc, we, rtol=1e-6, atol=1e-7)
