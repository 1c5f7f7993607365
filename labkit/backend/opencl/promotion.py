"""NumPy's dtype rules for elementwise ops beyond ``np.result_type``: the float type of a
transcendental op on integers, what an arithmetic op does with bools, and comparisons of
integers of mixed signs (exact, where the promoted type is float64).

NumPy computes bools and 8-bit integers in float16 (``sqrt(uint8)``, ``arctan2(int8, int8)``),
a dtype OpenCL arrays do not have: that is a DTypeError naming the cast to make, not a silently
different float32.
"""

from __future__ import annotations

import operator

import numpy as np

from ...errors import DTypeError
from .ndarray import ndarray

#: what an op does with bool operands where NumPy does not keep bool: computes in int8
#: (``square``, ``floor_divide``, ``mod``, ``power``, ``reciprocal``), or refuses (a message)
BOOL_INT8 = np.dtype(np.int8)
NO_BOOL_SUBTRACT = ("numpy boolean subtract, the `-` operator, is not supported; use the "
                    "bitwise_xor, the `^` operator, or the logical_xor function instead")
NO_BOOL_NEGATIVE = ("the numpy boolean negative, the `-` operator, is not supported; use the "
                    "`~` operator or the logical_not function instead")
NO_BOOL_SIGN = "sign is not defined for bool arrays (NumPy has no loop for it)"


def bool_rule(op: str, rule) -> np.dtype:
    """The compute dtype of ``op`` on bools under ``rule`` (a dtype, or a refusal)."""
    if isinstance(rule, str):
        raise DTypeError(f"{op}: {rule}")
    return np.dtype(rule)


def float_of(op: str, xs, dt: np.dtype) -> np.dtype:
    """The float dtype NumPy computes ``op`` on ``xs`` in, their promoted dtype being ``dt``:
    ``dt`` itself when it is a float, else the smallest float every operand casts to safely
    (Python scalars weakly typed): int16 and uint16 with int8 are float32, int32 is float64,
    bools and 8-bit integers float16 (refused: OpenCL arrays have no float16)."""
    if dt.kind == "f":
        return dt
    # NOTE: a Python scalar takes the promoted dtype (with a bool array, a Python int is int64)
    dts = [x.dtype if isinstance(x, (ndarray, np.generic)) else dt for x in xs]
    ft = np.result_type(*dts, np.float16)
    if ft == np.float16:
        raise DTypeError(f"{op}: NumPy computes {', '.join(sorted({d.name for d in dts}))} in "
                         "float16, which OpenCL arrays do not support; cast first, e.g. "
                         "x.astype(np.float32)")
    return ft


# ---- integer comparisons ----------------------------------------------------------------------
_CMP = {"==": operator.eq, "!=": operator.ne, "<": operator.lt, "<=": operator.le,
        ">": operator.gt, ">=": operator.ge}
_I64, _U64 = (-2 ** 63, 2 ** 63 - 1), (0, 2 ** 64 - 1)


def _is_int(x) -> bool:
    if isinstance(x, (ndarray, np.generic)):
        return x.dtype.kind in "iub"
    return type(x) in (int, bool)


def needs_exact(xs, dt: np.dtype) -> bool:
    """A comparison of integers that the promoted dtype ``dt`` would not do exactly: int64
    with uint64 (float64), or a Python int beyond the array's dtype."""
    if not all(_is_int(x) for x in xs):
        return False
    if all(type(x) in (int, bool) or x.dtype == np.bool_ for x in xs):
        for x in xs:  # NOTE: NumPy's too: bools compare with a Python int as int64
            if type(x) is int and not _I64[0] <= x <= _I64[1]:
                raise OverflowError(f"Python integer {x} out of bounds for int64")
    if dt.kind not in "iu":
        return True
    info = np.iinfo(dt)
    return any(type(x) is int and not info.min <= x <= info.max for x in xs)


def exact_compare(sym: str, xs):
    """``(expr, ctypes)`` computing ``v0 sym v1`` exactly for integer operands ``xs``: each
    side read as ``long`` or ``ulong``, a negative signed side below every unsigned value. Or
    ``(bool, None)``, the result everywhere, when a Python int lies beyond every 64-bit
    value."""
    for j, x in enumerate(xs):
        if type(x) is int and not _I64[0] <= x <= _U64[1]:
            s = 1 if x > 0 else -1
            return _CMP[sym](*((0, s) if j else (s, 0))), None
    cts = tuple("ulong" if (x.dtype.kind == "u" if isinstance(x, (ndarray, np.generic))
                            else x > _I64[1]) else "long" for x in xs)
    if cts[0] == cts[1]:
        return f"(v0 {sym} v1)", cts
    if cts[0] == "long":
        return f"((v0) < 0 ? (-1 {sym} 0) : ((ulong)(v0) {sym} (v1)))", cts
    return f"((v1) < 0 ? (0 {sym} -1) : ((v0) {sym} (ulong)(v1)))", cts


def finite_for_int(value, dtype) -> None:
    """NumPy's refusals of a float NaN or infinity stored into an integer array (``full``
    only warns, as NumPy's does)."""
    if dtype.kind in "iu" and isinstance(value, (float, np.floating)) and not np.isfinite(value):
        if np.isnan(value):
            raise ValueError("cannot convert float NaN to integer")
        raise OverflowError("cannot convert float infinity to integer")


def check_int_range(v, dtype, op: str = "") -> None:
    """NumPy 2's OverflowError for a Python integer out of integer ``dtype``'s range (stored,
    it wrapped: 300 was 44 in int8, -1 was 255 in uint8)."""
    if type(v) is int and dtype.kind in "iu":
        info = np.iinfo(dtype)
        if not info.min <= v <= info.max:
            raise OverflowError(f"{op + ': ' if op else ''}Python integer {v} out of bounds "
                                f"for {dtype}")


def _cast_scalar(v, dtype):
    """A Python or NumPy scalar as a NumPy scalar of ``dtype`` (NumPy's unsafe cast; a Python
    integer out of an integer dtype's range refused: ``check_int_range``)."""
    check_int_range(v, dtype)
    if isinstance(v, (bool, int, float, np.generic)):
        with np.errstate(all="ignore"):
            x = np.asarray(v).astype(dtype)[()]
        return int(x) if x.dtype == np.bool_ else x.item()  # NOTE: what the kernel args take
    return v
