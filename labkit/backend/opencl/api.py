"""The NumPy-like namespace over labkit's OpenCL ndarray (re-exported by
``labkit.backend.opencl``), as explicit re-exports of the modules that implement it.

One function body can serve both devices: ``xp = labkit.backend.get_array_module(a)`` gives
``numpy`` for NumPy arrays and this namespace for OpenCL arrays.
"""

from __future__ import annotations

import math

import numpy as np

from .arith import floor_divide, mod, power, remainder
from .core import (
    abs,
    absolute,
    arange,
    arctan,
    arctan2,
    array,
    asarray,
    ascontiguousarray,
    asnumpy,
    astype,
    bitwise_and,
    bitwise_or,
    bitwise_xor,
    ceil,
    class_indices,
    clip,
    copy,
    cos,
    divide,
    empty,
    empty_like,
    equal,
    erf,
    erfc,
    exp,
    expm1,
    eye,
    floor,
    full,
    full_like,
    greater,
    greater_equal,
    invert,
    isfinite,
    isinf,
    isnan,
    less,
    less_equal,
    linspace,
    log,
    log1p,
    log2,
    logical_and,
    logical_not,
    logical_or,
    logical_xor,
    maximum,
    minimum,
    multiply,
    negative,
    nonzero,
    not_equal,
    ones,
    ones_like,
    reciprocal,
    result_type,
    rint,
    sigmoid,
    sign,
    sin,
    sqrt,
    square,
    subtract,
    tan,
    tanh,
    true_divide,
    trunc,
    where,
    zeros,
    zeros_like,
)
from .gemm import dot, matmul
from .indexing import add, concatenate, scatter_add, split, stack, take
from .lse import logsumexp
from .reduce import (
    all,
    amax,
    amin,
    any,
    argmax,
    argmin,
    max,
    mean,
    min,
    prod,
    std,
    sum,
    var,
)
from .shapes import (
    broadcast_arrays,
    broadcast_shapes,
    broadcast_to,
    expand_dims,
    moveaxis,
    ndim,
    ravel,
    reshape,
    shape,
    size,
    squeeze,
    swapaxes,
    transpose,
)

# dtype aliases and constants, so that `xp.float32` or `xp.pi` work on both namespaces
float32, float64 = np.float32, np.float64
int8, int16, int32, int64 = np.int8, np.int16, np.int32, np.int64
uint8, uint32, bool_ = np.uint8, np.uint32, np.bool_
dtype = np.dtype
newaxis = None
pi, e, inf, nan = math.pi, math.e, math.inf, math.nan

__all__ = [
    # creation
    "arange", "array", "asarray", "ascontiguousarray", "asnumpy", "class_indices", "empty",
    "empty_like", "eye", "full", "full_like", "linspace", "ones", "ones_like", "zeros",
    "zeros_like",
    # elementwise
    "abs", "absolute", "add", "arctan", "arctan2", "astype", "bitwise_and", "bitwise_or",
    "bitwise_xor", "ceil", "clip", "copy", "cos", "divide", "equal", "erf", "erfc", "exp",
    "expm1",
    "floor", "floor_divide", "greater", "greater_equal", "invert", "isfinite", "isinf", "isnan",
    "less", "less_equal", "log", "log1p", "log2", "logical_and", "logical_not", "logical_or",
    "logical_xor", "maximum", "minimum", "mod", "multiply", "negative", "not_equal", "power",
    "reciprocal", "remainder", "result_type", "rint", "sigmoid", "sign", "sin", "sqrt",
    "square", "subtract", "tan", "tanh", "true_divide", "trunc", "where",
    # reductions
    "all", "amax", "amin", "any", "argmax", "argmin", "logsumexp", "max", "mean", "min",
    "prod", "std", "sum", "var",
    # linear algebra
    "dot", "matmul",
    # indexing, joining, splitting
    "concatenate", "nonzero", "scatter_add", "split", "stack", "take",
    # shapes
    "broadcast_arrays", "broadcast_shapes", "broadcast_to", "expand_dims", "moveaxis", "ndim",
    "ravel", "reshape", "shape", "size", "squeeze", "swapaxes", "transpose",
    # dtypes and constants
    "bool_", "dtype", "e", "float32", "float64", "inf", "int16", "int32", "int64", "int8",
    "nan", "newaxis", "pi", "uint32", "uint8",
]
