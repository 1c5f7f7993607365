"""Losses and metrics: softmax_cross_entropy, sigmoid_cross_entropy, mean_squared_error,
accuracy."""

from __future__ import annotations

import numpy as np

from ..autograd.tensor import Tensor
from ..errors import ShapeError
from ._util import xp_of
from .activation import log_softmax, relu
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
    xp = xp_of(x.data)
    c = x.shape[1]
    classes = (np.arange(c) if xp is np else xp.arange(c, device=x.data.rt)).reshape(
        (1, c) + (1,) * (x.ndim - 2))
    tt = t.reshape(t.shape[:1] + (1,) + t.shape[1:])
    onehot = (classes == tt).astype(x.dtype)  # ignore_label matches no class: a zero row
    nll = neg(sum(MulConstant(onehot).apply((log_softmax(x, axis=1),)), axis=1))
    if reduce == "none":
        return nll
    total = sum(nll)
    if reduce == "sum":
        return total
    count = (t != ignore_label).sum()
    count = xp.maximum(count, 1).astype(x.dtype)
    return MulConstant(1 / count if xp is not np else x.dtype.type(1 / count)).apply((total,))


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
