"""Pooling over windows: max_pool2d, avg_pool2d (NCHW)."""

from __future__ import annotations

import numpy as np

from ..autograd.function import Function
from ..autograd.trace import host, tracer
from ..backend.opencl import pool as _pool_cl
from ..errors import ShapeError
from . import _check
from .array import expand_dims
from .connection import _cnhw, _im2col, _pair
from .math import MulConstant
from .reduction import mean


def _check_pool(x, ksize, stride, pad, op):
    """The window, stride and padding of a pooling of ``x``, checked."""
    _check.tensor(x, op)
    if x.ndim != 4:
        raise ShapeError(f"{op}: x must be (N, C, H, W), got shape {x.shape}")
    k = _pair(ksize, "ksize", op, 1)
    s = _pair(stride if stride is not None else ksize, "stride", op, 1)
    p = _pair(pad, "pad", op)
    if p[0] * 2 > k[0] or p[1] * 2 > k[1]:
        raise ShapeError(f"{op}: padding {p} must be at most half the window {k}")
    return k, s, p


def _windows(x, ksize, stride, pad, value, op):
    k, s, p = _check_pool(x, ksize, stride, pad, op)
    # NOTE: a contiguous copy of the windows: NumPy reduced the strided view 2x slower than
    # it copies and reduces (CNN step 118 ms vs 50 ms)
    col, _ = _im2col(x, k, s, p, (1, 1), value)
    return col  # (N, C, kh, kw, OH, OW)


class WindowMax(Function):
    """Max over axes (2, 3) of (N, C, kh, kw, OH, OW) windows; ties share the gradient, as
    in F.max.
    A class so that forward keeps the equality mask it already computed.
    NOTE: not argmax: NumPy's argmax along a middle axis measured 13x slower than max here."""

    name = "max_pool2d"

    def forward(self, w):
        y = w.max(axis=(2, 3), keepdims=True)
        self.mask = (w == y) | (w != w)  # NOTE: a NaN is the max it made (as F.max's ties)
        return y.reshape(y.shape[:2] + y.shape[4:])

    def backward(self, inputs, gy):
        # NOTE: host: a compiled step shares each call's ties again
        m = host(_shares, self.mask, inputs[0].data, name="max_pool2d.shares")
        return MulConstant(m).apply((expand_dims(gy, (2, 3)),))


def _shares(mask, w):
    m = mask.astype(w.dtype)
    return m / m.sum(axis=(2, 3), keepdims=True)


def _tiles(x, ksize, stride, pad):
    """The (kh, kw) of windows that tile ``x`` exactly (stride == window, no padding, sides
    divisible), else None."""
    if x.ndim != 4:
        return None
    k = _pair(ksize, "ksize")
    s = _pair(stride if stride is not None else ksize, "stride")
    if s != k or _pair(pad, "pad") != (0, 0) or x.shape[2] % k[0] or x.shape[3] % k[1]:
        return None
    return k


def _canonical(a):
    """``a`` (N, C, H, W) as a C-contiguous array with the same last two axes, and the
    permutation (its own inverse) that gives it: a convolution's output is laid out
    (C, N, H, W) in memory."""
    if _cnhw(a):
        return a.transpose(1, 0, 2, 3), (1, 0, 2, 3)
    return np.ascontiguousarray(a), (0, 1, 2, 3)


def _in(a, perm):
    """``a`` in the layout ``perm`` (C-contiguous)."""
    return np.ascontiguousarray(a.transpose(perm))


class TiledMax(Function):
    """Max pooling when the windows tile the input (the usual 2x2 stride 2): the max of the
    kh*kw strided slices, with no window copy, in the input's own memory layout.

    NOTE: on the CNN benchmark's (64, 32, 28, 28) this forward takes 0.7 ms; copying the
    windows (im2col) and reducing them took 5.4 ms, and its backward (col2im) 4.6 ms. Working
    across the memory layout (a convolution's output is (C, N, H, W) in memory) made the
    backward 3x slower."""

    name = "max_pool2d"

    def __init__(self, k):
        self.k = k

    def forward(self, x):
        kh, kw = self.k
        xt, self.perm = _canonical(x)
        rows = xt[:, :, 0::kh]
        for i in range(1, kh):
            rows = np.maximum(rows, xt[:, :, i::kh])
        y = rows[..., 0::kw]
        for j in range(1, kw):
            y = np.maximum(y, rows[..., j::kw])
        self.yt = y
        return y.transpose(self.perm)

    def backward(self, inputs, gy):
        # ties share the gradient, as in F.max and the general path
        # NOTE: host: a compiled step finds each call's winners again, and always shares
        # them (whether a call has ties is its data's: no branch is taken on it)
        always = tracer() is not None
        found = host(lambda xd, yt: self._winners(xd, yt, always), inputs[0].data, self.yt,
                     name="max_pool2d.winners")
        winners, share = list(found[:-1]), found[-1]
        return TileScatter(winners, None if share.size == 0 else share, self.k,
                           self.perm).apply((gy,))

    def _winners(self, xd, yt, always):
        """(winner masks per tile position..., share): share empty when every window has
        one winner (and not ``always``)."""
        kh, kw = self.k
        xt = _in(xd, self.perm)
        tiles = [xt[:, :, i::kh, j::kw] for i in range(kh) for j in range(kw)]
        winners = [(t == yt) | (t != t) for t in tiles]  # NOTE: a NaN is the max it made
        count = winners[0].view(np.uint8).copy()
        for w in winners[1:]:
            count += w.view(np.uint8)
        if not always and (count.size == 0 or (count.max() <= 1 and count.min() == 1)):
            share = np.empty(0, yt.dtype)
        else:
            # NOTE: every window has a winner (a window whose max is nan: its nans)
            with np.errstate(divide="ignore"):
                share = (1 / count).astype(yt.dtype)
        return (*winners, share)


class _TileLinear(Function):
    """What TileScatter and TileGather (each the other's adjoint) share: the winners of each
    tile position, their ``share``, the window and the layout."""

    def __init__(self, winners, share, k, perm):
        self.winners, self.share, self.k, self.perm = winners, share, k, perm

    def _apply_other(self, cls, g):
        return cls(self.winners, self.share, self.k, self.perm).apply((g,))


class TileScatter(_TileLinear):
    """``gy`` (N, C, OH, OW) given to the tile positions that won (``winners``: a bool
    (N, C, OH, OW) array per position i*kw + j, in the layout ``perm``), times ``share``
    (1 / the winners in the tile; None: one winner each). Linear in ``gy``; its adjoint is
    TileGather.

    NOTE: one pass per tile position over quarter-size arrays: full-size masks and repeats
    measured 3x slower."""

    name = "max_pool2d_grad"

    def forward(self, gy):
        kh, kw = self.k
        g = _in(gy, self.perm)
        if self.share is not None:
            g = g * self.share
        n, c, oh, ow = g.shape
        gx = np.empty((n, c, oh * kh, ow * kw), g.dtype)
        for p, w in enumerate(self.winners):
            np.multiply(g, w, out=gx[:, :, p // kw::kh, p % kw::kw])
        return gx.transpose(self.perm)

    def backward(self, inputs, ggx):
        return self._apply_other(TileGather, ggx)


class TileGather(_TileLinear):
    """The adjoint of TileScatter: the sum over each tile of the winners' values, times
    ``share``."""

    name = "max_pool2d_grad_t"

    def forward(self, g):
        kh, kw = self.k
        gt = _in(g, self.perm)
        out = None
        for p, w in enumerate(self.winners):
            part = gt[:, :, p // kw::kh, p % kw::kw] * w
            out = part if out is None else out + part
        if self.share is not None:
            out = out * self.share
        return out.transpose(self.perm)

    def backward(self, inputs, gout):
        return self._apply_other(TileScatter, gout)


class TiledMaxCL(Function):
    """TiledMax on an OpenCL device: one launch forward (``backend/opencl/pool.py``), one for
    the gradient (PoolScatterCL), whose own gradient is its adjoint (PoolGatherCL), so max
    pooling stays differentiable twice; ties share the gradient as on the cpu."""

    name = "max_pool2d"

    def __init__(self, k):
        self.k = k

    def forward(self, x):
        self.y = _pool_cl.max_pool(x, self.k)
        return self.y

    def backward(self, inputs, gy):
        return PoolScatterCL(inputs[0].data, self.y, self.k).apply((gy,))


class _PoolLinearCL(Function):
    """What PoolScatterCL and PoolGatherCL (each the other's adjoint) share: the pooled input
    ``x``, its window maxima ``y`` (the winners are where x equals them) and the window."""

    def __init__(self, x, y, k):
        self.x, self.y, self.k = x, y, k


class PoolScatterCL(_PoolLinearCL):
    name = "max_pool2d_grad"

    def forward(self, gy):
        return _pool_cl.max_pool_scatter(self.x, self.y, gy, self.k)

    def backward(self, inputs, ggx):
        return PoolGatherCL(self.x, self.y, self.k).apply((ggx,))


class PoolGatherCL(_PoolLinearCL):
    name = "max_pool2d_grad_t"

    def forward(self, g):
        return _pool_cl.max_pool_gather(self.x, self.y, g, self.k)

    def backward(self, inputs, gout):
        return PoolScatterCL(self.x, self.y, self.k).apply((gout,))


def max_pool2d(x, ksize, stride=None, pad=0):
    """Max over ``ksize`` windows (stride defaults to ksize; padding never wins)."""
    _check_pool(x, ksize, stride, pad, "max_pool2d")
    k = _tiles(x, ksize, stride, pad)
    if k is not None and type(x.data) is np.ndarray:
        return TiledMax(k).apply((x,))
    if k is not None and _pool_cl.fits(x.data, k):
        return TiledMaxCL(k).apply((x,))
    return WindowMax().apply((_windows(x, ksize, stride, pad, float("-inf"), "max_pool2d"),))


class TiledAvg(Function):
    """Average pooling when the windows tile the input: each window's sum (rows, then columns
    within each) times 1 / (kh*kw), as ``mean`` of the window copies gives, without copying
    them; on an OpenCL device one launch (``backend/opencl/pool.py``). Its gradient is
    TileSpread, and the two are each other's adjoint, so it is differentiable twice."""

    name = "avg_pool2d"

    def __init__(self, k):
        self.k = k

    def forward(self, x):
        if type(x) is not np.ndarray:
            return _pool_cl.avg_pool(x, self.k)
        kh, kw = self.k
        s = None
        for i in range(kh):
            for j in range(kw):
                part = x[:, :, i::kh, j::kw]
                s = part.copy() if s is None else np.add(s, part, out=s)
        return s * x.dtype.type(1.0 / (kh * kw))

    def backward(self, inputs, gy):
        return TileSpread(self.k).apply((gy,))


class TileSpread(Function):
    """``gy`` (N, C, OH, OW) times 1 / (kh*kw), in every place of its window: the gradient of
    TiledAvg, whose own gradient is TiledAvg."""

    name = "avg_pool2d_grad"

    def __init__(self, k):
        self.k = k

    def forward(self, gy):
        if type(gy) is not np.ndarray:
            return _pool_cl.avg_spread(gy, self.k)
        kh, kw = self.k
        n, c, oh, ow = gy.shape
        v = gy * gy.dtype.type(1.0 / (kh * kw))
        gx = np.empty((n, c, oh * kh, ow * kw), gy.dtype)
        for i in range(kh):
            for j in range(kw):
                gx[:, :, i::kh, j::kw] = v
        return gx

    def backward(self, inputs, ggx):
        return TiledAvg(self.k).apply((ggx,))


def avg_pool2d(x, ksize, stride=None, pad=0):
    """Mean over ``ksize`` windows; padded zeros count (PyTorch's count_include_pad)."""
    _check_pool(x, ksize, stride, pad, "avg_pool2d")
    k = _tiles(x, ksize, stride, pad)
    if k is not None and x.dtype.kind == "f" and (type(x.data) is np.ndarray
                                                  or _pool_cl.fits(x.data, k)):
        return TiledAvg(k).apply((x,))
    return mean(_windows(x, ksize, stride, pad, 0.0, "avg_pool2d"), axis=(2, 3))
