"""Normalization: batch_normalization (train and inference, running statistics),
layer_normalization."""

from __future__ import annotations

from ..autograd.tensor import Tensor
from ..errors import ShapeError
from .array import reshape
from .math import mean, sqrt


def _bshape(x, axis=1):
    return tuple(x.shape[axis] if i == axis else 1 for i in range(x.ndim))


def batch_normalization(x, gamma, beta, running_mean=None, running_var=None, training=True,
                        momentum=0.1, eps=1e-5):
    """Normalize over every axis but the channel axis 1 (N, C, ...).

    In training, batch statistics are used and ``running_mean`` / ``running_var`` (arrays on
    x's device, updated in place) move by ``momentum``; in inference, the running statistics
    are used.
    """
    c = x.shape[1]
    if gamma.shape != (c,) or beta.shape != (c,):
        raise ShapeError(f"batch_normalization: gamma and beta must have shape ({c},) for x of "
                         f"shape {x.shape}; got {gamma.shape} and {beta.shape}")
    axes = (0,) + tuple(range(2, x.ndim))
    bs = _bshape(x)
    if training:
        m = mean(x, axis=axes, keepdims=True)
        d = x - m
        v = mean(d * d, axis=axes, keepdims=True)
        if running_mean is not None:
            n = x.size // c
            mm = m.data.reshape(c)
            vv = v.data.reshape(c) * (n / max(n - 1, 1))
            running_mean[...] = running_mean * (1 - momentum) + mm * momentum
            running_var[...] = running_var * (1 - momentum) + vv * momentum
        xhat = d / sqrt(v + eps)
    else:
        if running_mean is None or running_var is None:
            raise ValueError("batch_normalization: inference (training=False) needs "
                             "running_mean and running_var")
        xhat = (x - Tensor(running_mean.reshape(bs))) / Tensor(
            (running_var + eps).reshape(bs)) ** 0.5
    return xhat * reshape(gamma, bs) + reshape(beta, bs)


def layer_normalization(x, gamma=None, beta=None, eps=1e-5):
    """Normalize over the last axis, then scale by ``gamma`` and shift by ``beta``."""
    m = mean(x, axis=-1, keepdims=True)
    d = x - m
    v = mean(d * d, axis=-1, keepdims=True)
    y = d / sqrt(v + eps)
    if gamma is not None:
        if gamma.shape != x.shape[-1:]:
            raise ShapeError(f"layer_normalization: gamma must have shape {x.shape[-1:]}, got "
                             f"{gamma.shape}")
        y = y * gamma
    if beta is not None:
        y = y + beta
    return y
