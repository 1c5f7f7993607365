"""Normalization: batch_normalization (train and inference, running statistics),
layer_normalization."""

from __future__ import annotations

from ..autograd.tensor import Tensor
from ..autograd.trace import host
from ..errors import DeviceMismatchError, DTypeError, ShapeError
from . import _check
from .array import reshape
from .math import sqrt
from .reduction import mean


def _bshape(x, axis=1):
    return tuple(x.shape[axis] if i == axis else 1 for i in range(x.ndim))


def check_batch_norm(op, x, gamma, beta, running_mean, running_var, momentum, eps):
    """The arguments of a batch normalization (``op`` names it in the errors)."""
    _check.floating(x, op)
    _check.tensor(gamma, op, "gamma")
    _check.tensor(beta, op, "beta")
    _check.same_dtype(op, x=x, gamma=gamma, beta=beta)
    if x.ndim < 2:
        raise ShapeError(f"{op}: x must be (N, C, ...), got shape {x.shape}")
    c = x.shape[1]
    if (running_mean is None) != (running_var is None):
        raise ValueError(f"{op}: give both running_mean and running_var, or neither")
    for name, r in (("running_mean", running_mean), ("running_var", running_var)):
        if r is not None:
            if isinstance(r, Tensor):
                raise DTypeError(f"{op}: {name} must be an array on x's device (updated in "
                                 f"place), got a Tensor; pass its .data")
            if tuple(r.shape) != (c,):
                raise ShapeError(f"{op}: {name} must have shape ({c},) for x of shape "
                                 f"{x.shape}, got {tuple(r.shape)}")
            if type(r) is not type(x.data):
                raise DeviceMismatchError(f"{op}: {name} is not on x's device ({x.device}); "
                                          f"move the brick with .to('{x.device}')")
    if not 0.0 <= _check.scalar(momentum, op, "momentum") <= 1.0:
        raise ValueError(f"{op}: momentum must be in [0, 1], got {momentum}")
    if not _check.scalar(eps, op, "eps") >= 0:
        raise ValueError(f"{op}: eps must be non-negative, got {eps}")
    if gamma.shape != (c,) or beta.shape != (c,):
        raise ShapeError(f"{op}: gamma and beta must have shape ({c},) for x of "
                         f"shape {x.shape}; got {gamma.shape} and {beta.shape}")


def batch_normalization(x, gamma, beta, running_mean=None, running_var=None, training=True,
                        momentum=0.1, eps=1e-5):
    """Normalize over every axis but the channel axis 1 (N, C, ...).

    In training, batch statistics are used and ``running_mean`` / ``running_var`` (arrays on
    x's device, updated in place) move by ``momentum``; in inference, the running statistics
    are used.
    """
    check_batch_norm("batch_normalization", x, gamma, beta, running_mean, running_var,
                     momentum, eps)
    c = x.shape[1]
    axes = (0,) + tuple(range(2, x.ndim))
    bs = _bshape(x)
    if training:
        if x.size // max(c, 1) == 1:
            # NOTE: as PyTorch: one value per channel has no spread (its variance is 0, the
            # output beta, and the running variance drained towards 0 at every step)
            raise ShapeError(f"batch_normalization: expected more than 1 value per channel "
                             f"in training, got x of shape {x.shape}; use a batch of 2 or "
                             "more, or training=False (the running statistics)")
        m = mean(x, axis=axes, keepdims=True)
        d = x - m
        v = mean(d * d, axis=axes, keepdims=True)
        if running_mean is not None:
            n = x.size // c

            def update(md, vd):  # NOTE: in place; a compiled step runs it at each replay
                mm = md.reshape(c)
                vv = vd.reshape(c) * (n / max(n - 1, 1))
                running_mean[...] = running_mean * (1 - momentum) + mm * momentum
                running_var[...] = running_var * (1 - momentum) + vv * momentum

            host(update, m.data, v.data, effect=True, mutates=(running_mean, running_var),
                 name="batch_norm.running_stats")
        xhat = d / sqrt(v + eps)
    else:
        if running_mean is None or running_var is None:
            raise ValueError("batch_normalization: inference (training=False) needs "
                             "running_mean and running_var")
        # NOTE: the running statistics are read at each call of a compiled step (host)
        rm = host(lambda: running_mean.reshape(bs), name="batch_norm.running_mean")
        rv = host(lambda: (running_var + eps).reshape(bs), name="batch_norm.running_var")
        xhat = (x - Tensor(rm)) / Tensor(rv) ** 0.5
    return xhat * reshape(gamma, bs) + reshape(beta, bs)


def layer_normalization(x, gamma=None, beta=None, eps=1e-5):
    """Normalize over the last axis, then scale by ``gamma`` and shift by ``beta``."""
    op = "layer_normalization"
    _check.floating(x, op)
    if x.ndim < 1:
        raise ShapeError(f"{op}: x must have at least one axis, got a 0-dimensional x")
    for name, g in (("gamma", gamma), ("beta", beta)):
        if g is not None:
            _check.tensor(g, op, name)
            if g.shape != x.shape[-1:]:
                raise ShapeError(f"{op}: {name} must have shape {x.shape[-1:]} for x of shape "
                                 f"{x.shape}, got {g.shape}")
    _check.same_dtype(op, x=x, gamma=gamma, beta=beta)
    if not _check.scalar(eps, op, "eps") >= 0:
        raise ValueError(f"{op}: eps must be non-negative, got {eps}")
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
