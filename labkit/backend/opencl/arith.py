"""Floor division, remainder and power with NumPy's rules where C's differ: the signs of a
remainder and the rounding of a quotient, integers past 2**63, and integers to a negative
power (an error, as NumPy's)."""

from __future__ import annotations

import numpy as np

from .core import _binary
from .ndarray import ndarray
from .promotion import BOOL_INT8

# NOTE: NumPy's floats (npy_divmod): the remainder from fmod (exact), moved to the divisor's
# sign; the quotient from (a - remainder) / b, rounded to the nearest integer below. floor(a /
# b) gave 10 for 1.0 // 0.1 (NumPy 9), and a - floor(a / b) * b gave -2 for 1e17 % 7 and NaN
# for 5 % inf
_M = "fmod(v0, v1)"
_ADJ = f"(({_M} != 0) && ((v1 < 0) != ({_M} < 0)))"
_MOD = f"((v1 == 0 || {_M} != {_M}) ? {_M} : ({_M} != 0 ? ({_ADJ} ? {_M} + v1 : {_M}) : " \
       f"copysign({_M} * 0, v1)))"
_Q = f"((v0 - {_M}) / v1 - ({_ADJ} ? 1 : 0))"
_FDIV = f"((v1 == 0) ? v0 / v1 : ({_Q} != 0 ? floor({_Q}) + ({_Q} - floor({_Q}) > 0.5f ? 1 : 0)" \
        f" : copysign({_Q} * 0, v0 / v1)))"
# NOTE: integers: C's own / and % where neither is negative (unsigned types: always, where
# the long arithmetic of lk_floordiv was wrong from 2**63 on), lk_floordiv/lk_mod otherwise
floor_divide = _binary("floor_divide", _FDIV, "((v0 < 0 || v1 < 0) ? lk_floordiv(v0, v1) : "
                       "(v1 == 0 ? 0 : v0 / v1))", bools=BOOL_INT8)
mod = _binary("mod", _MOD, "((v0 < 0 || v1 < 0) ? lk_mod(v0, v1) : (v1 == 0 ? 0 : v0 % v1))",
              bools=BOOL_INT8)
remainder = mod
_power = _binary("power", "pow(v0, v1)", "lk_powi(v0, v1)", bools=BOOL_INT8)


def _integer_result(a, b) -> bool:
    """Whether ``a ** b`` is computed in an integer dtype (NumPy's promotion: uint64 with
    int8 is float64; bool with int8 is int8)."""
    dts = [x.dtype if isinstance(x, ndarray) else x for x in (a, b)]
    try:
        dt = np.result_type(*dts)
    except (TypeError, ValueError):
        return False
    return dt.kind in "iub"


def power(a, b, out=None):
    """Elementwise ``power`` with NumPy broadcasting and dtype promotion. Integers to a
    negative integer power raise ``ValueError``, as NumPy's do (the kernel's ``lk_powi``
    gives 0 there: ``[1, -2, 3] ** -1`` was ``[1, 0, 0]`` on OpenCL)."""
    if _integer_result(a, b):
        # NOTE: an exponent array is read back (a copy: integer powers of integer arrays
        # are rare, and the error must come before the result is used)
        low = (int(b) if isinstance(b, (int, np.integer)) else
               int(b.get().min()) if isinstance(b, ndarray) and b.size and b.dtype.kind == "i"
               else 0)
        if low < 0:
            raise ValueError("Integers to negative integer powers are not allowed.")
    return _power(a, b, out)
