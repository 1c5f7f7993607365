"""The one place that gives :class:`ndarray` its NumPy methods and operators.

They run kernels, which sit above ``ndarray.py`` (the elementwise core, reductions, GEMM and
indexing all import it), so ``ndarray.py`` cannot call them itself: :func:`install` attaches
them, once, when ``labkit.backend.opencl`` is imported.
"""

from __future__ import annotations

import numpy as np

from . import advanced, arith, core, gemm, indexing, reduce
from .ndarray import ndarray


def _astype(self, dtype, copy=True):
    dt = np.dtype(dtype)
    if dt == self.dtype and not copy:
        return self
    return core.astype(self, dt)


def _fill(self, value) -> None:
    advanced.setitem(self, Ellipsis, value)


def _reflected(f):
    return lambda self, other: f(other, self)


def _inplace(f):
    return lambda self, other: f(self, other, out=self)


def _keywords(f, *names):
    """A method ``a.f(axis=None, ...)`` that passes its arguments on as keywords, taken in
    NumPy's positional order for the method (``names``; it may differ from the function's).
    ``out`` is NumPy's too: these methods make a new array, so only ``out=None`` is taken."""
    def method(self, *args, **kwargs):
        if len(args) > len(names):
            raise TypeError(f"{f.__name__}() takes at most {len(names)} positional arguments "
                            f"({', '.join(names)}), got {len(args)}")
        for name, value in zip(names, args):
            if name in kwargs:
                raise TypeError(f"{f.__name__}() got multiple values for argument {name!r}")
            kwargs[name] = value
        if kwargs.pop("out", None) is not None:
            raise TypeError(f"{f.__name__}(): out= is not supported for OpenCL arrays; assign "
                            "the result instead (a[...] = a.f(...))")
        return f(self, **kwargs)

    method.__name__ = f.__name__
    method.__doc__ = f.__doc__
    return method


METHODS = {
    # copies, casts, transfers
    "copy": core.copy, "astype": _astype, "fill": _fill, "to": core.to,
    "__getitem__": advanced.getitem, "__setitem__": advanced.setitem,
    # reductions
    "sum": _keywords(reduce.sum, "axis", "dtype", "out", "keepdims"),
    "mean": _keywords(reduce.mean, "axis", "dtype", "out", "keepdims"),
    "prod": _keywords(reduce.prod, "axis", "dtype", "out", "keepdims"),
    "max": _keywords(reduce.max, "axis", "out", "keepdims"),
    "min": _keywords(reduce.min, "axis", "out", "keepdims"),
    "argmax": _keywords(reduce.argmax, "axis", "out"),  # NOTE: keepdims is keyword-only
    "argmin": _keywords(reduce.argmin, "axis", "out"),
    "var": _keywords(reduce.var, "axis", "dtype", "out", "ddof", "keepdims"),
    "std": _keywords(reduce.std, "axis", "dtype", "out", "ddof", "keepdims"),
    "any": _keywords(reduce.any, "axis", "out", "keepdims"),
    "all": _keywords(reduce.all, "axis", "out", "keepdims"),
    # others
    "clip": lambda self, lo=None, hi=None: core.clip(self, lo, hi),
    "dot": gemm.matmul, "take": _keywords(indexing.take, "indices", "axis"),
    # operators
    "__add__": core.add, "__radd__": _reflected(core.add),
    "__sub__": core.subtract, "__rsub__": _reflected(core.subtract),
    "__mul__": core.multiply, "__rmul__": _reflected(core.multiply),
    "__truediv__": core.true_divide, "__rtruediv__": _reflected(core.true_divide),
    "__floordiv__": arith.floor_divide, "__rfloordiv__": _reflected(arith.floor_divide),
    "__mod__": arith.mod, "__pow__": arith.power, "__rpow__": _reflected(arith.power),
    "__matmul__": gemm.matmul, "__rmatmul__": _reflected(gemm.matmul),
    "__neg__": core.negative, "__pos__": lambda self: self, "__abs__": core.absolute,
    "__invert__": core.invert, "__and__": core.bitwise_and, "__or__": core.bitwise_or,
    "__xor__": core.bitwise_xor, "__rand__": _reflected(core.bitwise_and),
    "__ror__": _reflected(core.bitwise_or), "__rxor__": _reflected(core.bitwise_xor),
    "__rmod__": _reflected(arith.mod),
    "__eq__": core.equal, "__ne__": core.not_equal, "__lt__": core.less,
    "__le__": core.less_equal, "__gt__": core.greater, "__ge__": core.greater_equal,
    "__iadd__": _inplace(core.add), "__isub__": _inplace(core.subtract),
    "__imul__": _inplace(core.multiply), "__itruediv__": _inplace(core.true_divide),
    # NOTE: each in-place operator writes into the array (a view's base sees it); one left
    # out fell back to x = x % 2, a new array: v %= 2 left its base as it was
    "__ifloordiv__": _inplace(arith.floor_divide), "__imod__": _inplace(arith.mod),
    "__ipow__": _inplace(arith.power), "__iand__": _inplace(core.bitwise_and),
    "__ior__": _inplace(core.bitwise_or), "__ixor__": _inplace(core.bitwise_xor),
    "__imatmul__": lambda self, other: gemm.matmul(self, other, out=self),
}


def install() -> None:
    """Attach :data:`METHODS` to :class:`ndarray` (idempotent)."""
    for name, f in METHODS.items():
        setattr(ndarray, name, f)
