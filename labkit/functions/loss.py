"""Losses and metrics: softmax_cross_entropy, sigmoid_cross_entropy, mean_squared_error,
accuracy."""

from __future__ import annotations

import numpy as np

from ..autograd.function import Function
from ..autograd.tensor import Tensor
from ..errors import ShapeError
from ._util import xp_of
from .activation import relu
from .math import MulConstant, abs, exp, log1p, mean, mul, neg, sum


def _labels(t, x, op):
    d = t.data if isinstance(t, Tensor) else t
    xd = x.data
    if isinstance(d, (list, tuple)) or (isinstance(d, np.ndarray) and xp_of(xd) is not np):
        d = np.asarray(d)
        if xp_of(xd) is not np:
            from ..backend import opencl

            d = opencl.asarray(d, device=xd.rt)
    if d.dtype.kind not in "iu":
        raise TypeError(f"{op}: labels must be integers, got dtype {d.dtype}")
    return d


def softmax_cross_entropy(logits, labels, reduce="mean", ignore_label=-1):
    """Cross-entropy of ``softmax(logits)`` (N, C, ...) against integer ``labels`` (N, ...).

    ``reduce``: "mean" (over labels that are not ``ignore_label``), "sum" or "none".
    Stable for logits of any magnitude (log_softmax through logsumexp).
    """
    if reduce not in ("mean", "sum", "none"):
        raise ValueError(f"softmax_cross_entropy: reduce must be 'mean', 'sum' or 'none', "
                         f"got {reduce!r}")
    t = _labels(labels, logits, "softmax_cross_entropy")
    x = logits
    if x.ndim < 2 or t.shape != x.shape[:1] + x.shape[2:]:
        raise ShapeError(f"softmax_cross_entropy: labels of shape {t.shape} do not match "
                         f"logits of shape {x.shape}; expected labels of shape "
                         f"{x.shape[:1] + x.shape[2:]} (logits are (N, C, ...))")
    return SoftmaxCrossEntropy(t, reduce, ignore_label).apply((x,))


class SoftmaxCrossEntropy(Function):
    """A class, not log_softmax + pick + mean: one node instead of seven forward and a dozen
    backward, which is most of a small model's step. The backward is composed of labkit
    functions ((softmax(x) - onehot) * scale), so it is differentiable again."""

    name = "softmax_cross_entropy"

    def __init__(self, t, reduce, ignore_label):
        self.t, self.reduce, self.ignore = t, reduce, ignore_label

    def _onehot(self, x):
        xp = xp_of(x)
        c = x.shape[1]
        classes = (np.arange(c) if xp is np else xp.arange(c, device=x.rt)).reshape(
            (1, c) + (1,) * (x.ndim - 2))
        t = self.t
        # ignore_label matches no class: its row is all zeros
        return (classes == t.reshape(t.shape[:1] + (1,) + t.shape[1:])).astype(x.dtype)

    def _scale(self, x):
        """Per-label weight of the reduction: valid / count for "mean", valid otherwise."""
        xp = xp_of(x)
        valid = (self.t != self.ignore).astype(x.dtype)
        if self.reduce == "mean":
            count = xp.maximum(valid.sum(), 1).astype(x.dtype)
            valid = valid / count
        return valid

    def forward(self, x):
        xp = xp_of(x)
        m = x.max(axis=1, keepdims=True)
        z = x - m
        lse = xp.log(xp.exp(z).sum(axis=1, keepdims=True))
        nll = -((z - lse) * self._onehot(x)).sum(axis=1)
        if self.reduce == "none":
            return nll
        w = self._scale(x)
        return (nll * w).sum()

    def backward(self, inputs, gy):
        from .activation import softmax
        from .array import expand_dims
        from .math import broadcast_to

        (x,) = inputs
        xd = x.data
        w = self._scale(xd)
        if self.reduce == "none":
            g = gy * w
        else:
            g = MulConstant(w).apply((broadcast_to(gy, w.shape),))
        diff = softmax(x, axis=1) - Tensor(self._onehot(xd))
        return diff * expand_dims(g, 1)


def sigmoid_cross_entropy(x, t, reduce="mean"):
    """Binary cross-entropy of sigmoid(x) against targets t in [0, 1], stable for any x:
    max(x, 0) - x t + log(1 + e^-|x|)."""
    td = t.data if isinstance(t, Tensor) else t
    if tuple(td.shape) != x.shape:
        raise ShapeError(f"sigmoid_cross_entropy: targets of shape {td.shape} do not match "
                         f"x of shape {x.shape}")
    loss = relu(x) - MulConstant(td.astype(x.dtype)).apply((x,)) + log1p(exp(neg(abs(x))))
    return mean(loss) if reduce == "mean" else (sum(loss) if reduce == "sum" else loss)


def mean_squared_error(a, b):
    if a.shape != b.shape:
        raise ShapeError(f"mean_squared_error: shapes {a.shape} and {b.shape} differ")
    d = a - b
    return mean(d * d)


def accuracy(y, t, ignore_label=None):
    """Fraction of rows whose argmax matches ``t`` (not differentiable); a float."""
    td = _labels(t, y, "accuracy")
    pred = y.data.argmax(axis=1)
    hit = pred == td
    if ignore_label is not None:
        valid = td != ignore_label
        n = int(valid.sum())
        return float((hit & valid).sum() if xp_of(hit) is np else
                     xp_of(hit).logical_and(hit, valid).sum()) / max(n, 1)
    return float(hit.mean() if xp_of(hit) is np else hit.astype(np.float32).mean())


_ = mul  # re-exported by __init__
