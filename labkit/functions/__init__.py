"""Every differentiable op, NumPy/PyTorch conventions (NCHW, W of shape (out, in))."""

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
)
from .connection import conv2d, conv_transpose2d, embed_id, linear
from .loss import accuracy, mean_squared_error, sigmoid_cross_entropy, softmax_cross_entropy
from .math import (
    abs,
    add,
    broadcast_to,
    clip,
    cos,
    div,
    erf,
    exp,
    log,
    log1p,
    log_sigmoid,
    logsumexp,
    matmul,
    max,
    maximum,
    mean,
    min,
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
    sum,
    sum_to,
    tanh,
    transpose,
    var,
    where,
)
from .noise import dropout
from .normalization import batch_normalization, layer_normalization
from .pooling import avg_pool2d, max_pool2d
from .recurrent import lstm

__all__ = [
    "abs", "accuracy", "add", "avg_pool2d", "batch_normalization", "broadcast_to", "cast",
    "clip", "concat", "conv2d", "conv_transpose2d", "cos", "div", "dropout", "elu", "embed_id",
    "erf", "exp", "expand_dims", "flatten", "gelu", "getitem", "layer_normalization",
    "leaky_relu", "linear", "log", "log1p", "log_sigmoid", "log_softmax", "logsumexp", "lstm",
    "matmul", "max", "max_pool2d", "maximum", "mean", "mean_squared_error", "min", "minimum",
    "mul", "neg", "pad", "pow", "relu", "reshape", "sigmoid", "sigmoid_cross_entropy", "sin",
    "softmax", "softmax_cross_entropy", "softplus", "split", "sqrt", "squeeze", "stack", "sub",
    "sum", "sum_to", "tanh", "to_device", "transpose", "var", "where",
]
