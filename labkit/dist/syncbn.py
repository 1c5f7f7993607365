"""Synchronised batch normalization: the statistics of the global batch, summed over the ranks.

Each rank normalizes its shard with the mean and variance of the whole global batch, as one
process would, instead of its shard's own (which, on small shards, are noisy and make the
ranks' training differ from one process's). The sums go through ``AllReduceSum``, a Function
whose gradient is the same sum of the gradients over the ranks, so the backward pass is exact
(and differentiable again): two all-reduces of C + 1 and C numbers forward, two of C backward.

On one rank (or in inference) this is ``F.batch_normalization``.
"""

from __future__ import annotations

from ..autograd.function import Function
from ..autograd.tensor import Tensor
from ..autograd.trace import host
from ..backend import full
from ..bricks.layers import BatchNorm
from ..functions import array as A
from ..functions import normalization as N
from ..functions.math import sqrt
from ..functions.reduction import sum as _sum
from .comm import Communicator, _host, world


class AllReduceSum(Function):
    """``x`` summed elementwise over the ranks of ``comm``. Its gradient is the same sum of
    the ranks' gradients (every rank's loss depends on every rank's ``x`` through it), each
    weighted by its rank's ``comm.loss_weight`` and divided by this rank's: data parallel
    averages the ranks' parameter gradients weighted by their shards' sizes, and with uneven
    shards that weighting must reach the terms the other ranks' losses contribute here too.

    NOTE: a compiled step reads the weight when it is traced; it is the shard's size, which
    a retrace follows (the batch's shape changes with it)."""

    name = "allreduce_sum"

    def __init__(self, comm: Communicator):
        self.comm = comm

    def forward(self, x):
        return self.comm.allreduce(x, "sum")

    def backward(self, inputs, gy):
        w = self.comm.loss_weight
        if w == 1.0:
            return AllReduceSum(self.comm).apply((gy,))
        return AllReduceSum(self.comm).apply((gy * w,)) / w


def allreduce_sum(x: Tensor, comm: Communicator | None = None) -> Tensor:
    """``x`` summed over the ranks, differentiably (see ``AllReduceSum``)."""
    return AllReduceSum(comm or world()).apply((x,))


def sync_batch_normalization(x, gamma, beta, running_mean=None, running_var=None,
                             training=True, momentum=0.1, eps=1e-5,
                             comm: Communicator | None = None):
    """``F.batch_normalization`` with the statistics of the global batch: every rank's
    shard, summed over the ranks of ``comm`` (default: every rank). The running statistics
    move by the global mean and (unbiased) variance, the same on every rank. Every rank must
    call it in the same order (a collective), with the same channels; shards may differ in
    size.

    The global count of values per channel travels with the sums in ``x``'s dtype: exact up to
    2**24 (float32) values per channel over all ranks, within float32 rounding beyond.
    """
    comm = comm or world()
    if not training or comm.size == 1:
        return N.batch_normalization(x, gamma, beta, running_mean, running_var, training,
                                     momentum, eps)
    N.check_batch_norm("sync_batch_normalization", x, gamma, beta, running_mean, running_var,
                       momentum, eps)
    c = x.shape[1]
    axes = (0,) + tuple(range(2, x.ndim))
    bs = tuple(c if i == 1 else 1 for i in range(x.ndim))
    local = Tensor(full((1,), x.size // c, x.dtype, x.data))  # this shard's count
    totals = allreduce_sum(A.concat([_sum(x, axis=axes), local]), comm)
    n = A.getitem(totals, slice(c, c + 1))
    m = A.reshape(A.getitem(totals, slice(0, c)) / n, bs)
    d = x - m
    v = A.reshape(allreduce_sum(_sum(d * d, axis=axes), comm) / n, bs)
    if running_mean is not None:
        def update(md, vd, nd):  # NOTE: in place; a compiled step runs it at each replay
            k = float(_host(nd).reshape(-1)[0])
            mm = md.reshape(c)
            vv = vd.reshape(c) * (k / max(k - 1, 1))
            running_mean[...] = running_mean * (1 - momentum) + mm * momentum
            running_var[...] = running_var * (1 - momentum) + vv * momentum

        host(update, m.data, v.data, n.data, effect=True, mutates=(running_mean, running_var),
             name="sync_batch_norm.running_stats")
    xhat = d / sqrt(v + eps)
    return xhat * A.reshape(gamma, bs) + A.reshape(beta, bs)


class SyncBatchNorm(BatchNorm):
    """``BatchNorm`` whose training statistics are the global batch's over the ranks
    (``sync_batch_normalization``). The same parameters and buffers as BatchNorm, so
    checkpoints load either way; ``convert_sync_batchnorm(model)`` turns a model's
    BatchNorm bricks into these.

    Examples
    --------
    >>> import numpy as np
    >>> import labkit as lk
    >>> bn = lk.dist.SyncBatchNorm(3)            # one process: plain BatchNorm
    >>> bn(lk.tensor(np.ones((4, 3), np.float32))).shape
    (4, 3)
    """

    comm: Communicator | None = None

    def forward(self, x):
        return sync_batch_normalization(x, self.gamma, self.beta, self.running_mean,
                                        self.running_var, training=self.training,
                                        momentum=self.momentum, eps=self.eps,
                                        comm=self.comm)


def convert_sync_batchnorm(model, comm: Communicator | None = None):
    """Turn every ``BatchNorm`` brick in ``model`` (itself included) into a
    ``SyncBatchNorm`` in place, keeping its parameters, buffers and settings; returns
    ``model``. ``comm``: the ranks to synchronise over (default: every rank)."""
    for brick in _bricks(model):
        if type(brick) is BatchNorm:
            brick.__class__ = SyncBatchNorm
            if comm is not None:
                brick.comm = comm
    return model


def _bricks(model):
    return model.bricks() if hasattr(model, "bricks") else [model]
