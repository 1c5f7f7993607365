"""Connections: matmul, linear, conv2d, conv_transpose2d, embed_id."""

from __future__ import annotations

import numpy as np

from ..autograd.function import Function
from ..autograd.tensor import Tensor
from ..backend import blas as _blas
from ..backend import zeros
from ..errors import ShapeError
from . import _check
from ._util import operands, strided_view, xp_of
from .array import concat, getitem, pad
from .math import add, reshape, sum_to, transpose


def _swap_last(x):
    axes = list(range(x.ndim))
    axes[-1], axes[-2] = axes[-2], axes[-1]
    return transpose(x, axes)


def _outer_product_blas(a, b):
    """``a @ b`` for NumPy arrays when the inner dimension is 1, through BLAS.

    NOTE: NumPy's matmul does not call BLAS when the inner dimension is 1 (an outer product,
    e.g. a weight gradient at batch 1): 420 us for (512, 1) @ (1, 784) here. NumPy's own BLAS
    called directly (``backend.blas.outer``, a rank-1 update of a zeroed array) takes about a
    quarter of that; where it is not available, a zero column and row are appended (137 us):
    every element is ``a_i * b_j + 0 * 0``, the same value (only a -0.0 becomes +0.0, as from
    the direct call)."""
    out = _blas.outer(a, b)
    if out is not None:
        return out
    a2 = np.zeros((a.shape[0], 2), a.dtype)
    a2[:, :1] = a
    b2 = np.zeros((2, b.shape[1]), b.dtype)
    b2[:1] = b
    return a2 @ b2


class MatMul(Function):
    name = "matmul"

    def forward(self, a, b):
        if (type(a) is np.ndarray and a.ndim == 2 and b.ndim == 2 and a.shape[1] == 1
                and a.dtype == b.dtype and a.shape[0] * b.shape[1] >= 4096):
            return _outer_product_blas(a, b)
        return a @ b

    def backward(self, inputs, gy):
        a, b = inputs
        return (sum_to(matmul(gy, _swap_last(b)), a.shape) if a.requires_grad else None,
                sum_to(matmul(_swap_last(a), gy), b.shape) if b.requires_grad else None)


class MatMulAdd(Function):
    """``a @ b + c`` (2-D ``a``, ``b``; ``c`` broadcast to the product): what lk.compile makes
    of an addition whose operand is a matrix product only it reads. On an OpenCL device one
    kernel, ``c`` added in the product's epilogue; bit for bit ``c + a @ b``."""

    name = "matmul_add"

    def forward(self, a, b, c):
        if isinstance(a, np.ndarray):
            y = a @ b
            if y.shape == np.broadcast_shapes(y.shape, c.shape):
                y += c
                return y
            return c + y
        from ..backend.opencl.gemm import matmul_add as cl_matmul_add

        return cl_matmul_add(a, b, c)

    def backward(self, inputs, gy):
        a, b, c = inputs
        return (matmul(gy, _swap_last(b)) if a.requires_grad else None,
                matmul(_swap_last(a), gy) if b.requires_grad else None,
                sum_to(gy, c.shape) if c.requires_grad else None)


class MatMulMask(Function):
    """relu's gradient of a product, ``(a @ b)`` where ``m > 0``, else 0: what lk.compile
    makes of a ``relu_grad`` whose input is a 2-D product only it reads (on OpenCL one GEMM
    kernel, the mask read in its epilogue); bit for bit the product, then the mask."""

    name = "matmul_relu_grad"

    def forward(self, a, b, m):
        from .activation import ReLUGrad

        if isinstance(a, np.ndarray):
            return ReLUGrad(m).forward(a @ b)
        from ..backend.opencl.gemm import matmul_add as cl_matmul_add

        return cl_matmul_add(a, b, m, mask=True)

    def backward(self, inputs, gy):
        from .activation import ReLUGrad

        a, b, m = inputs
        g = ReLUGrad(m.data).apply((gy,))
        return (matmul(g, _swap_last(b)) if a.requires_grad else None,
                matmul(_swap_last(a), g) if b.requires_grad else None, None)


def matmul(a, b):
    """Matrix product with NumPy's rules: 1-D operands are promoted, batch dims broadcast,
    dtypes promote as in the other arithmetic ops (layers such as linear insist on one)."""
    a, b = operands(a, b, "matmul")
    if a.ndim == 0 or b.ndim == 0:
        raise ShapeError(f"matmul: operands need at least one dimension, got shapes {a.shape} "
                         f"and {b.shape}; use mul for scalars")
    ka = a.shape[-1]
    kb = b.shape[0] if b.ndim == 1 else b.shape[-2]
    if ka != kb:
        raise ShapeError(f"matmul: a has {ka} columns but b has {kb} rows; a.shape={a.shape}, "
                         f"b.shape={b.shape}")
    if a.ndim > 2 and b.ndim > 2:
        _check.broadcast("matmul", a.shape[:-2], b.shape[:-2], ("a's batch", "b's batch"))
    if a.ndim == 1:  # NOTE: (K,) @ (K,) is a dot product: a 0-d result, as NumPy's
        return reshape(matmul(reshape(a, (1, -1)), b),
                       () if b.ndim == 1 else b.shape[:-2] + b.shape[-1:])
    if b.ndim == 1:
        return reshape(matmul(a, reshape(b, (-1, 1))), a.shape[:-1])
    return MatMul().apply((a, b))


def _relu_fn():
    from .activation import relu

    return relu


def _relu_wanted(activation, op):
    """True for ``activation="relu"`` (or ``F.relu`` itself), False for None; anything else
    is an error that names what is fused."""
    if activation is None:
        return False
    if (isinstance(activation, str) and activation == "relu") or activation is _relu_fn():
        return True
    raise ValueError(f"{op}: activation={activation!r} cannot be fused; pass 'relu' or None "
                     f"and apply other activations to the result")


def linear(x, W, b=None, activation=None):
    """``x @ W.T + b`` with ``W`` of shape (out, in), as PyTorch. ``activation="relu"``
    applies relu in the same node (on an OpenCL device, in the GEMM kernel's epilogue): the
    result and its gradients are bit for bit those of ``relu(linear(x, W, b))``.

    Examples
    --------
    >>> import labkit as lk, labkit.functions as F
    >>> x = lk.tensor([[1.0, -2.0]])
    >>> W = lk.tensor([[1.0, 1.0], [0.5, 0.0]])
    >>> F.linear(x, W, activation="relu").tolist()
    [[0.0, 0.5]]
    """
    relu = activation is not None and _relu_wanted(activation, "linear")
    # NOTE: the usual call passes with two type tests and two identity tests; the checker's
    # calls (which word the error) run only when one fails: linear runs every layer, every step
    if not (isinstance(x, Tensor) and isinstance(W, Tensor)
            and (b is None or isinstance(b, Tensor))):
        _check.tensor(x, "linear", "x")
        _check.tensor(W, "linear", "W")
        _check.tensor(b, "linear", "b")
    if W.dtype is not x.dtype or (b is not None and b.dtype is not x.dtype):
        _check.same_dtype("linear", x=x, W=W, b=b)
    if x.ndim == 0:
        raise ShapeError("linear: x must have at least one dimension (features last), got a "
                         "0-dimensional x")
    if W.ndim != 2:
        raise ShapeError(f"linear: W must be 2-D (out, in), got W.shape={W.shape}")
    if x.shape[-1] != W.shape[1]:
        raise ShapeError(f"linear: x has {x.shape[-1]} features but W expects {W.shape[1]}; "
                         f"x.shape={x.shape}, W.shape={W.shape}")
    if b is not None and b.shape != (W.shape[0],):
        raise ShapeError(f"linear: b must have shape ({W.shape[0]},), got b.shape={b.shape}")
    if x.ndim != 2:
        lead = x.shape[:-1]
        y = Linear(relu).apply((reshape(x, (-1, x.shape[-1])), W) if b is None else
                               (reshape(x, (-1, x.shape[-1])), W, b))
        return reshape(y, lead + (W.shape[0],))
    return Linear(relu).apply((x, W) if b is None else (x, W, b))


class Linear(Function):
    """``x @ W.T + b`` for 2-D x, then relu with ``relu=True``. A class, not matmul(x,
    transpose(W)) + b: the composed version returns W's gradient as a transposed view (the
    gradient of W.T), which every optimizer step then walks with strides, and it records four
    nodes instead of one. On an OpenCL device the bias and the relu are the GEMM kernel's
    epilogue (no pass of their own over the output); integer arrays take separate ops."""

    name = "linear"

    def __init__(self, relu=False):
        if relu:
            self.relu = True
            self.name = "linear_relu"

    def forward(self, x, W, b=None):
        relu = self.__dict__.get("relu", False)
        if not isinstance(x, np.ndarray) and x.dtype.kind == "f":
            from ..backend.opencl.gemm import linear as cl_linear

            y = cl_linear(x, W.T, b, axis=1, relu=relu)
        elif isinstance(x, np.ndarray):
            y = x @ W.T
            if b is not None:
                y += b
            if relu:
                np.maximum(y, 0, out=y)
        else:  # integer OpenCL arrays: the epilogue is for floats
            y = x @ W.T
            y = y if b is None else y + b
            y = xp_of(y).maximum(y, 0) if relu else y
        if relu:
            self.y = y  # the mask of the gradient: y > 0 exactly where x @ W.T + b > 0
        return y

    def backward(self, inputs, gy):
        x, W = inputs[0], inputs[1]
        if "relu" in self.__dict__:
            from .activation import ReLUGrad

            gy = ReLUGrad(self.y).apply((gy,))
        gx = matmul(gy, W) if x.requires_grad else None
        gW = matmul(transpose(gy), x) if W.requires_grad else None
        if len(inputs) == 2:
            return gx, gW
        from .reduction import sum as _sum

        return gx, gW, _sum(gy, axis=0) if inputs[2].requires_grad else None


def _pair(v, name, op="conv2d", low=0):
    """An int or a pair of ints, each at least ``low``, as a pair."""
    return _check.window(v, op, name, low)


def _out_size(n, k, s, p, d):
    return (n + 2 * p - d * (k - 1) - 1) // s + 1


class Im2Col(Function):
    """(N, C, H, W) -> (N, C, kh, kw, OH, OW) windows of an already padded input, or with
    ``cfirst`` (C, kh, kw, N, OH, OW): then a convolution is one large GEMM
    (C*kh*kw, N*OH*OW) instead of N small ones."""

    name = "im2col"

    def __init__(self, k, s, d, out_hw, cfirst=False):
        self.k, self.s, self.d, self.out_hw, self.cfirst = k, s, d, out_hw, cfirst

    def forward(self, x):
        self.in_shape = x.shape
        if xp_of(x) is not np:  # one kernel (backend conv.py)
            from ..backend.opencl import conv

            return conv.im2col(x, self.k, self.s, self.d, self.out_hw, self.cfirst)
        xc = x if (x.flags["C_CONTIGUOUS"]) else xp_of(x).ascontiguousarray(x)
        n, c, h, w = x.shape
        (kh, kw), (sh, sw), (dh, dw), (oh, ow) = self.k, self.s, self.d, self.out_hw
        st = (c * h * w, h * w, w * dh, dw, w * sh, sw)
        v = strided_view(xc, (n, c, kh, kw, oh, ow), st)
        if self.cfirst:
            v = v.transpose(1, 2, 3, 0, 4, 5)
        return xp_of(x).ascontiguousarray(v) if xp_of(x) is np else v.copy()

    def backward(self, inputs, gy):
        return Col2Im(self.k, self.s, self.d, self.in_shape, self.cfirst).apply((gy,))


def _sum_windows_cnhw(out, col, k, s, d, out_hw):
    """Add each window slice ``col[:, i, j]`` ((C, kh, kw, N, OH, OW) columns) into ``out``
    (C, N, H, W) at its strided position; returns ``out``.

    NOTE: summed in (C, N, H, W) order, where each window slice of col is contiguous (the
    caller returns a transposed view): 4.2 ms -> 1.6 ms for the CNN benchmark's second
    convolution."""
    (kh, kw), (sh, sw), (dh, dw) = k, s, d
    oh, ow = out_hw
    for i in range(kh):
        for j in range(kw):
            out[:, :, i * dh: i * dh + sh * (oh - 1) + 1: sh,
                j * dw: j * dw + sw * (ow - 1) + 1: sw] += col[:, i, j]
    return out


class Col2Im(Function):
    """The adjoint of Im2Col: windows summed back into (N, C, H, W)."""

    name = "col2im"

    def __init__(self, k, s, d, shape, cfirst=False):
        self.k, self.s, self.d, self.shape, self.cfirst = k, s, d, shape, cfirst

    def forward(self, col):
        (kh, kw), (sh, sw), (dh, dw) = self.k, self.s, self.d
        n, c, h, w = self.shape
        oh, ow = col.shape[4], col.shape[5]
        if xp_of(col) is not np:  # one kernel that gathers each element's windows
            from ..backend.opencl import conv

            return conv.col2im(col, self.k, self.s, self.d, self.shape, self.cfirst)
        if self.cfirst:  # (C, kh, kw, N, OH, OW)
            if (sh, sw) == (kh, kw) and (dh, dw) == (1, 1) and (h, w) == (oh * kh, ow * kw):
                col = col.transpose(3, 0, 1, 2, 4, 5)
                return col.transpose(0, 1, 4, 2, 5, 3).reshape(self.shape)
            out = _sum_windows_cnhw(zeros((c, n, h, w), col.dtype, col), col, self.k, self.s,
                                    self.d, (oh, ow))
            return out.transpose(1, 0, 2, 3)
        if (sh, sw) == (kh, kw) and (dh, dw) == (1, 1) and (h, w) == (oh * kh, ow * kw):
            # windows tile the input exactly (pooling): col2im is a permutation, one copy
            return col.transpose(0, 1, 4, 2, 5, 3).reshape(self.shape)
        out = zeros(self.shape, col.dtype, col)
        for i in range(kh):
            for j in range(kw):
                v = out[:, :, i * dh: i * dh + sh * (oh - 1) + 1: sh,
                        j * dw: j * dw + sw * (ow - 1) + 1: sw]
                v += col[:, :, i, j]
        return out

    def backward(self, inputs, ggy):
        out_hw = inputs[0].shape[4:]
        return Im2Col(self.k, self.s, self.d, out_hw, self.cfirst).apply((ggy,))


def _im2col(x, k, s, p, d, value=0.0, cfirst=False):
    n, c, h, w = x.shape
    oh = _out_size(h, k[0], s[0], p[0], d[0])
    ow = _out_size(w, k[1], s[1], p[1], d[1])
    if oh <= 0 or ow <= 0:
        raise ShapeError(f"conv/pool: a {k[0]}x{k[1]} window (dilation {d}, padding {p}) does "
                         f"not fit an input of {h}x{w}")
    if p != (0, 0):
        x = pad(x, ((0, 0), (0, 0), (p[0], p[0]), (p[1], p[1])), value)
    return Im2Col(k, s, d, (oh, ow), cfirst).apply((x,)), (oh, ow)


class _Geometry:
    """A convolution's window, stride, padding, dilation and its input and output sizes."""

    __slots__ = ("k", "s", "p", "d", "in_hw", "out_hw")

    def __init__(self, k, s, p, d, in_hw, out_hw):
        self.k, self.s, self.p, self.d, self.in_hw, self.out_hw = k, s, p, d, in_hw, out_hw


def _cnhw(a):
    """True when ``a`` (N, C, H, W) is laid out (C, N, H, W) in memory (a convolution's
    output)."""
    return not a.flags["C_CONTIGUOUS"] and a.transpose(1, 0, 2, 3).flags["C_CONTIGUOUS"]


def _np_cols(x, g):
    """(C*kh*kw, N*OH*OW) windows of a NumPy ``x`` (N, C, H, W): one GEMM operand."""
    n, c, h, w = x.shape
    (kh, kw), (sh, sw), (ph, pw), (dh, dw) = g.k, g.s, g.p, g.d
    oh, ow = g.out_hw
    if ph or pw:
        # the padded copy keeps x's layout: gathering (C, kh, kw, N, OH, OW) from (C, N, H, W)
        # memory reads whole rows
        if _cnhw(x):
            xp = np.zeros((c, n, h + 2 * ph, w + 2 * pw), x.dtype).transpose(1, 0, 2, 3)
        else:
            xp = np.zeros((n, c, h + 2 * ph, w + 2 * pw), x.dtype)
        xp[:, :, ph:ph + h, pw:pw + w] = x
    else:
        xp = x
    sn, sc, sy, sx = xp.strides
    v = np.lib.stride_tricks.as_strided(
        xp, (c, kh, kw, n, oh, ow), (sc, sy * dh, sx * dw, sn, sy * sh, sx * sw), writeable=False)
    return np.ascontiguousarray(v).reshape(c * kh * kw, n * oh * ow)


def _gy2(gy):
    """(N, O, OH, OW) as (O, N*OH*OW), a view when gy is laid out (O, N, OH, OW)."""
    o = gy.shape[1]
    return gy.transpose(1, 0, 2, 3).reshape(o, -1)


def _cl_cols(x, g):
    """(C*kh*kw, N*OH*OW) windows of an OpenCL ``x`` (N, C, H, W) in any layout, padding
    included: one kernel."""
    from ..backend.opencl import conv

    c, n = x.shape[1], x.shape[0]
    (kh, kw), (oh, ow) = g.k, g.out_hw
    col = conv.im2col(x, g.k, g.s, g.d, g.out_hw, cfirst=True, pad=g.p)
    return col.reshape(c * kh * kw, n * oh * ow)


class Conv2d(Function):
    """conv2d as one node: im2col, one GEMM and the bias (with ``relu=True``, then relu), the
    output left in the GEMM's (O, N, OH, OW) memory order. On an OpenCL device that is two
    kernels, the bias and relu being the GEMM's epilogue. Its gradients are Conv2dGradX and
    Conv2dGradW, which differentiate again into each other and Conv2d (Chainer's scheme), so
    double backprop works.

    NOTE: composed of pad, im2col, reshape, matmul, transpose and add nodes, the CNN
    benchmark's step spent about 4 ms more in copies and broadcasts."""

    name = "conv2d"

    def __init__(self, g, relu=False):
        self.g = g
        if relu:
            self.relu = True
            self.name = "conv2d_relu"

    def forward(self, x, W, b=None):
        relu = self.__dict__.get("relu", False)
        o, n = W.shape[0], x.shape[0]
        if not isinstance(x, np.ndarray):
            from ..backend.opencl.gemm import linear as cl_linear

            col = _cl_cols(x, self.g)
            if x.dtype.kind == "f":
                y = cl_linear(W.reshape(o, -1), col, b, axis=0, relu=relu)
            else:  # integer arrays: the epilogue is for floats
                y = W.reshape(o, -1) @ col
                y = y if b is None else y + b.reshape(o, 1)
                y = xp_of(y).maximum(y, 0) if relu else y
        else:
            col = _np_cols(x, self.g)
            y = W.reshape(o, -1) @ col
            if b is not None:
                y += b[:, None]
            if relu:
                np.maximum(y, 0, out=y)
        self.col = col
        y = y.reshape((o, n) + self.g.out_hw).transpose(1, 0, 2, 3)
        if relu:
            self.y = y
        return y

    def backward(self, inputs, gy):
        x, W = inputs[0], inputs[1]
        if "relu" in self.__dict__:
            from .activation import ReLUGrad

            gy = ReLUGrad(self.y).apply((gy,))
        gx = Conv2dGradX(self.g).apply((gy, W)) if x.requires_grad else None
        gW = Conv2dGradW(self.g, W.shape, self.col).apply((x, gy)) if W.requires_grad else None
        if len(inputs) == 2:
            return gx, gW
        from .reduction import sum as _sum

        return gx, gW, _sum(gy, axis=(0, 2, 3)) if inputs[2].requires_grad else None


class Conv2dGradW(Function):
    """The gradient of conv2d w.r.t. W: ``gy`` (N, O, OH, OW) against the windows of ``x``
    (those of the forward, when given)."""

    name = "conv2d_grad_w"

    def __init__(self, g, w_shape, col=None):
        self.g, self.w_shape, self.col = g, w_shape, col

    def forward(self, x, gy):
        if self.col is not None:
            col = self.col
        else:
            col = _np_cols(x, self.g) if isinstance(x, np.ndarray) else _cl_cols(x, self.g)
        self.col = None
        return (_gy2(gy) @ col.T).reshape(self.w_shape)

    def backward(self, inputs, ggW):
        x, gy = inputs
        return (Conv2dGradX(self.g).apply((gy, ggW)) if x.requires_grad else None,
                Conv2d(self.g).apply((x, ggW)) if gy.requires_grad else None)


class Conv2dGradX(Function):
    """The gradient of conv2d w.r.t. x (a transposed convolution): W's columns times ``gy``,
    summed back into the input's windows."""

    name = "conv2d_grad_x"

    def __init__(self, g):
        self.g = g

    def forward(self, gy, W):
        g = self.g
        o, c, kh, kw = W.shape
        n = gy.shape[0]
        (ph, pw), (h, w), (oh, ow) = g.p, g.in_hw, g.out_hw
        gcol = (W.reshape(o, -1).T @ _gy2(gy)).reshape(c, kh, kw, n, oh, ow)
        if not isinstance(gcol, np.ndarray):  # one kernel: windows gathered, padding cropped
            from ..backend.opencl import conv

            return conv.col2im(gcol, g.k, g.s, g.d, (n, c, h, w), cfirst=True, pad=g.p,
                               cnhw=True)
        out = _sum_windows_cnhw(np.zeros((c, n, h + 2 * ph, w + 2 * pw), gcol.dtype), gcol,
                                g.k, g.s, g.d, g.out_hw)
        return out[:, :, ph:ph + h, pw:pw + w].transpose(1, 0, 2, 3)

    def backward(self, inputs, ggx):
        gy, W = inputs
        return (Conv2d(self.g).apply((ggx, W)) if gy.requires_grad else None,
                Conv2dGradW(self.g, W.shape).apply((ggx, gy)) if W.requires_grad else None)


def conv2d(x, W, b=None, stride=1, pad=0, dilation=1, groups=1, activation=None):
    """2-D convolution (cross-correlation), NCHW, ``W`` of shape (out, in/groups, kh, kw).
    ``activation="relu"`` applies relu in the same node (with ``groups=1``; on an OpenCL
    device in the GEMM kernel's epilogue), bit for bit ``relu(conv2d(...))``."""
    relu = _relu_wanted(activation, "conv2d")
    _check.tensor(x, "conv2d", "x")
    _check.tensor(W, "conv2d", "W")
    if b is not None:
        _check.tensor(b, "conv2d", "b")
    _check.same_dtype("conv2d", x=x, W=W, b=b)
    groups = _check.integer(groups, "conv2d", "groups")
    if groups < 1:
        raise ValueError(f"conv2d: groups must be at least 1, got {groups}")
    if x.ndim != 4 or W.ndim != 4:
        raise ShapeError(f"conv2d: x must be (N, C, H, W) and W (out, in/groups, kh, kw); got "
                         f"x.shape={x.shape}, W.shape={W.shape}")
    n, c = x.shape[:2]
    o, cg, kh, kw = W.shape
    if c % groups or o % groups or c // groups != cg:
        raise ShapeError(f"conv2d: x has {c} channels but W expects {cg} per group with "
                         f"groups={groups} ({cg * groups} in all); x.shape={x.shape}, "
                         f"W.shape={W.shape}")
    if b is not None and b.shape != (o,):
        raise ShapeError(f"conv2d: b must have shape ({o},), got {b.shape}")
    s, p, d = _pair(stride, "stride", low=1), _pair(pad, "pad"), _pair(dilation, "dilation",
                                                                      low=1)
    if groups == 1:
        h, w = x.shape[2:]
        oh, ow = _out_size(h, kh, s[0], p[0], d[0]), _out_size(w, kw, s[1], p[1], d[1])
        if oh <= 0 or ow <= 0:
            raise ShapeError(f"conv2d: a {kh}x{kw} window (dilation {d}, padding {p}) does "
                             f"not fit an input of {h}x{w}")
        g = _Geometry((kh, kw), s, p, d, (h, w), (oh, ow))
        return Conv2d(g, relu).apply((x, W) if b is None else (x, W, b))
    col, (oh, ow) = _im2col(x, (kh, kw), s, p, d, cfirst=True)  # (C, kh, kw, N, OH, OW)
    outs = []
    og = o // groups
    for g in range(groups):
        cols = col if groups == 1 else getitem(col, slice(g * cg, (g + 1) * cg))
        cols = reshape(cols, (cg * kh * kw, n * oh * ow))
        wg = W if groups == 1 else getitem(W, slice(g * og, (g + 1) * og))
        outs.append(matmul(reshape(wg, (og, cg * kh * kw)), cols))  # one GEMM per group
    y = outs[0] if groups == 1 else concat(outs, axis=0)
    y = transpose(reshape(y, (o, n, oh, ow)), (1, 0, 2, 3))
    y = y if b is None else add(y, reshape(b, (1, o, 1, 1)))
    if relu:
        from .activation import relu as _relu

        y = _relu(y)
    return y


def conv_transpose2d(x, W, b=None, stride=1, pad=0, dilation=1, output_padding=0):
    """The transpose (gradient) of conv2d w.r.t. its input; ``W`` is (in, out, kh, kw)."""
    op = "conv_transpose2d"
    _check.tensor(x, op, "x")
    _check.tensor(W, op, "W")
    if b is not None:
        _check.tensor(b, op, "b")
    _check.same_dtype(op, x=x, W=W, b=b)
    if x.ndim != 4 or W.ndim != 4 or x.shape[1] != W.shape[0]:
        raise ShapeError(f"conv_transpose2d: x (N, C, H, W) with C == W.shape[0]; got "
                         f"x.shape={x.shape}, W.shape={W.shape}")
    n, c, h, w = x.shape
    _, o, kh, kw = W.shape
    if b is not None and b.shape != (o,):
        raise ShapeError(f"{op}: b must have shape ({o},), got {b.shape}")
    s, p = _pair(stride, "stride", op, 1), _pair(pad, "pad", op)
    d, q = _pair(dilation, "dilation", op, 1), _pair(output_padding, "output_padding", op)
    if q[0] >= s[0] and q[0] >= d[0] or q[1] >= s[1] and q[1] >= d[1]:
        raise ValueError(f"{op}: output_padding {q} must be smaller than the stride {s} or "
                         f"the dilation {d} (it adds rows the windows never reach)")
    hout = (h - 1) * s[0] - 2 * p[0] + d[0] * (kh - 1) + 1 + q[0]
    wout = (w - 1) * s[1] - 2 * p[1] + d[1] * (kw - 1) + 1 + q[1]
    if hout <= 0 or wout <= 0:
        raise ShapeError(f"{op}: padding {p} leaves no output for an input of {h}x{w} and a "
                         f"{kh}x{kw} window (output {hout}x{wout})")
    col = matmul(transpose(reshape(W, (c, o * kh * kw))), reshape(x, (n, c, h * w)))
    col = reshape(col, (n, o, kh, kw, h, w))
    full = Col2Im((kh, kw), s, d, (n, o, hout + 2 * p[0], wout + 2 * p[1])).apply((col,))
    y = getitem(full, (slice(None), slice(None), slice(p[0], p[0] + hout),
                       slice(p[1], p[1] + wout)))
    return y if b is None else add(y, reshape(b, (1, o, 1, 1)))


def embed_id(ids, W):
    """Rows of ``W`` (vocab, dim) picked by integer ``ids`` of any shape, each in
    ``[0, vocab)`` (checked on an OpenCL device when ``LABKIT_CHECK_INDICES`` is on)."""
    _check.tensor(W, "embed_id", "W")
    if W.ndim != 2:
        raise ShapeError(f"embed_id: W must be 2-D (vocab, dim), got W.shape={W.shape}")
    d = _check.integers(_check.data(ids, W, "embed_id", "ids", move=False), "embed_id", "ids")
    _check.indices(d, W.shape[0], "embed_id", "ids", f"W of {W.shape[0]} rows")
    return getitem(W, d)
