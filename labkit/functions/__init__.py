"""Every differentiable op, NumPy/PyTorch conventions (NCHW, W of shape (out, in)).

Arguments are checked before anything is computed (``_check.py``); an error names the op, the
argument, what was expected, what was found and the fix. The rule for what may be passed:

- **Differentiable inputs are Tensors.** ``F.relu(np_array)`` or ``F.linear(x, [[...]])`` raise
  ``DTypeError`` (a ``TypeError``) that says ``make one with lk.tensor(x, device=...)``.
- **Except the constant operand of an arithmetic op** (``add``, ``sub``, ``mul``, ``div``,
  ``pow``, ``maximum``, ``minimum``, ``where``'s ``a``/``b``, ``matmul``,
  ``mean_squared_error``): when the other operand is a Tensor, it may be a number, a list or an
  array. Numbers and lists are values: they go to the tensor's device, floats in its dtype.
  Arrays keep their dtype and must already be on the tensor's device (a NumPy array beside a
  ``cl`` tensor is a ``DeviceMismatchError``, never a hidden copy per op).
- **Non-differentiable inputs** (labels, targets, ids, masks, ``where``'s ``cond``) may be a
  Tensor, a device array, a NumPy array or a list; host values are copied to the data's device.
- **Layers insist on one dtype** (``linear``, ``conv2d``, ``batch_normalization``, ``lstm``,
  ``concat``...): float32 data with float64 weights is a ``DTypeError``, not a silent float64
  computation. The arithmetic ops promote as NumPy does.
- **Axes never wrap**: an axis outside ``[-ndim, ndim)`` or named twice is a ``ShapeError``.
- **Labels and ids are in range**: a label outside ``[0, C)`` that is not ``ignore_label``, or
  an id outside ``[0, vocab)``, is an ``IndexError``. On an OpenCL device this needs one
  device-to-host read, done only while ``LABKIT_CHECK_INDICES`` is on (``labkit.config``).

Examples
--------
>>> import numpy as np, labkit as lk, labkit.functions as F
>>> x = lk.tensor(np.zeros((2, 3), np.float32))
>>> try:
...     F.expand_dims(x, 7)
... except lk.ShapeError as e:
...     print(*str(e).split("; "), sep=chr(10))
expand_dims: axis 7 is out of range for a result of 3 dimensions (x.shape=(2, 3))
use -3 <= axis < 3
>>> F.relu([1.0, -1.0])
Traceback (most recent call last):
    ...
labkit.errors.DTypeError: relu: x must be a Tensor, got a list; make one with lk.tensor(x, ...
"""

from .activation import elu, gelu, leaky_relu, log_softmax, relu, softmax
from .array import (
    cast,
    concat,
    expand_dims,
    flatten,
    getitem,
    pad,
    split,
    squeeze,
    stack,
    to_device,
    unbind,
)
from .connection import conv2d, conv_transpose2d, embed_id, linear, matmul
from .loss import accuracy, mean_squared_error, sigmoid_cross_entropy, softmax_cross_entropy
from .math import (
    abs,
    add,
    broadcast_to,
    clip,
    cos,
    div,
    erf,
    erfc,
    exp,
    expm1,
    log,
    log1p,
    log_sigmoid,
    maximum,
    minimum,
    mul,
    neg,
    pow,
    reshape,
    sigmoid,
    sin,
    softplus,
    sqrt,
    sub,
    sum_to,
    tanh,
    transpose,
    where,
)
from .noise import dropout
from .normalization import batch_normalization, layer_normalization
from .pooling import avg_pool2d, max_pool2d
from .recurrent import lstm
from .reduction import logsumexp, max, mean, min, sum, var

__all__ = [
    "abs", "accuracy", "add", "avg_pool2d", "batch_normalization", "broadcast_to", "cast",
    "clip", "concat", "conv2d", "conv_transpose2d", "cos", "div", "dropout", "elu", "embed_id",
    "erf", "erfc", "exp", "expand_dims", "expm1", "flatten", "gelu", "getitem",
    "layer_normalization",
    "leaky_relu", "linear", "log", "log1p", "log_sigmoid", "log_softmax", "logsumexp", "lstm",
    "matmul", "max", "max_pool2d", "maximum", "mean", "mean_squared_error", "min", "minimum",
    "mul", "neg", "pad", "pow", "relu", "reshape", "sigmoid", "sigmoid_cross_entropy", "sin",
    "softmax", "softmax_cross_entropy", "softplus", "split", "sqrt", "squeeze", "stack", "sub",
    "sum", "sum_to", "tanh", "to_device", "transpose", "unbind", "var", "where",
]
