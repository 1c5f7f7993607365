"""Pooling over windows: max_pool2d, avg_pool2d (NCHW)."""

from __future__ import annotations

import numpy as np

from ..autograd.function import Function
from ..errors import ShapeError
from .array import expand_dims
from .connection import _im2col, _pair
from .math import MulConstant, mean


def _windows(x, ksize, stride, pad, value, op):
    if x.ndim != 4:
        raise ShapeError(f"{op}: x must be (N, C, H, W), got shape {x.shape}")
    k = _pair(ksize, "ksize")
    s = _pair(stride if stride is not None else ksize, "stride")
    p = _pair(pad, "pad")
    if p[0] * 2 > k[0] or p[1] * 2 > k[1]:
        raise ShapeError(f"{op}: padding {p} must be at most half the window {k}")
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
        self.mask = w == y
        return y.reshape(y.shape[:2] + y.shape[4:])

    def backward(self, inputs, gy):
        w = inputs[0].data
        m = self.mask.astype(w.dtype)
        m = m / m.sum(axis=(2, 3), keepdims=True)
        return MulConstant(m).apply((expand_dims(gy, (2, 3)),))


def _tiles(x, ksize, stride, pad):
    """The (kh, kw) of windows that tile a NumPy ``x`` exactly (stride == window, no padding,
    sides divisible), else None."""
    if type(x.data) is not np.ndarray or x.ndim != 4:
        return None
    k = _pair(ksize, "ksize")
    s = _pair(stride if stride is not None else ksize, "stride")
    if s != k or _pair(pad, "pad") != (0, 0) or x.shape[2] % k[0] or x.shape[3] % k[1]:
        return None
    return k


class TiledMax(Function):
    """Max pooling when the windows tile the input (the usual 2x2 stride 2): the max of the
    kh*kw strided slices, with no window copy.

    NOTE: on the CNN benchmark's (64, 32, 28, 28) this forward takes 0.7 ms; copying the
    windows (im2col) and reducing them took 5.4 ms, and its backward (col2im) 4.6 ms."""

    name = "max_pool2d"

    def __init__(self, k):
        self.k = k

    def forward(self, x):
        kh, kw = self.k
        rows = x[:, :, 0::kh]
        for i in range(1, kh):
            rows = np.maximum(rows, x[:, :, i::kh])
        y = rows[..., 0::kw]
        for j in range(1, kw):
            y = np.maximum(y, rows[..., j::kw])
        self.y = y
        return y

    def backward(self, inputs, gy):
        # ties share the gradient, as in F.max and the general path
        x, y = inputs[0].data, self.y
        kh, kw = self.k
        masks = np.empty((kh, kw) + y.shape, x.dtype)
        for i in range(kh):
            for j in range(kw):
                np.equal(x[:, :, i::kh, j::kw], y, out=masks[i, j], casting="unsafe")
        masks /= masks.sum(axis=(0, 1))
        return TileScatter(masks).apply((gy,))


class TileScatter(Function):
    """``gy`` (N, C, OH, OW) spread over the tiles of (N, C, OH*kh, OW*kw), each position
    weighted by ``masks[i, j]``. Linear in ``gy``; its adjoint is TileGather."""

    name = "max_pool2d_grad"

    def __init__(self, masks):
        self.masks = masks

    def forward(self, gy):
        kh, kw = self.masks.shape[:2]
        n, c, oh, ow = gy.shape
        gx = np.empty((n, c, oh * kh, ow * kw), gy.dtype)
        for i in range(kh):
            for j in range(kw):
                np.multiply(self.masks[i, j], gy, out=gx[:, :, i::kh, j::kw])
        return gx

    def backward(self, inputs, ggx):
        return TileGather(self.masks).apply((ggx,))


class TileGather(Function):
    """The adjoint of TileScatter: the weighted sum over each tile."""

    name = "max_pool2d_grad_t"

    def __init__(self, masks):
        self.masks = masks

    def forward(self, g):
        kh, kw = self.masks.shape[:2]
        out = self.masks[0, 0] * g[:, :, 0::kh, 0::kw]
        for i in range(kh):
            for j in range(kw):
                if i or j:
                    out += self.masks[i, j] * g[:, :, i::kh, j::kw]
        return out

    def backward(self, inputs, gout):
        return TileScatter(self.masks).apply((gout,))


def max_pool2d(x, ksize, stride=None, pad=0):
    """Max over ``ksize`` windows (stride defaults to ksize; padding never wins)."""
    k = _tiles(x, ksize, stride, pad)
    if k is not None:
        return TiledMax(k).apply((x,))
    return WindowMax().apply((_windows(x, ksize, stride, pad, float("-inf"), "max_pool2d"),))


def avg_pool2d(x, ksize, stride=None, pad=0):
    """Mean over ``ksize`` windows; padded zeros count (PyTorch's count_include_pad)."""
    return mean(_windows(x, ksize, stride, pad, 0.0, "avg_pool2d"), axis=(2, 3))
