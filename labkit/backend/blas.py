"""Two BLAS calls that NumPy has no function for, made on NumPy's own BLAS library.

* ``axpy(alpha, x, y)``: ``y += alpha * x`` in one pass, in place (SGD's update: NumPy needs
  a multiply into a temporary and a subtract, two passes over the parameter and its gradient;
  for a 512 x 784 parameter here 200 us against 21).
* ``outer(a, b)``: ``a @ b`` with an inner dimension of 1 (a weight gradient at batch 1), which
  NumPy's matmul does not hand to BLAS (420 us for (512, 1) @ (1, 784) here). It is a rank-1
  update (``ger``) of a zeroed array: one pass over the result, on BLAS's threads, where a
  GEMM with an inner dimension of 1 makes two (it zeroes the result first) and NumPy's
  broadcast product ``a * b`` runs a scalar loop. In the compiled MLP step at batch 1, whose
  two weight gradients write 2.6 MB, the step took 0.66 ms against 0.81 with the GEMM
  (the result freshly zeroed by ``np.zeros``, whose pages the kernel hands over zeroed, was
  also faster than a GEMM or a ``ger`` into an array zeroed by ``fill``).

Only NumPy's bundled OpenBLAS (the ``scipy-openblas`` of NumPy's wheels, 64-bit integers, its
symbols prefixed ``scipy_``) is used: the very library NumPy has loaded, so its thread pool is
NumPy's (a second BLAS with its own pool would make the two contend for the cores). Where it
is not found (NumPy built on MKL, Accelerate, a system BLAS), both functions return False and
the caller keeps its NumPy code.

Both are exact where NumPy's code is: ``outer`` computes each ``a_i * b_j`` once, rounded once
(as ``a * b`` does; a ``-0.0`` comes out as ``+0.0``, added to a zero); ``axpy`` rounds
``y + alpha * x`` once where the CPU has fused multiply-add (NumPy rounds the product first), so
an SGD step may differ from NumPy's in the last bit, the same in every run on one machine.
"""

from __future__ import annotations

import ctypes
import glob
import os

import numpy as np

from .. import config

_I64, _P = ctypes.c_int64, ctypes.c_void_p
_ROW_MAJOR = 101
_FUNCS: dict | None = None
#: False turns both functions off (the callers use NumPy), as ``LABKIT_NUMPY_BLAS=off`` does
ENABLED = True


def _on() -> bool:
    return ENABLED and config.get("LABKIT_NUMPY_BLAS")


def _library():
    """NumPy's bundled OpenBLAS, or None."""
    try:
        blas = np.show_config(mode="dicts")["Build Dependencies"]["blas"]
    except Exception:  # NOTE: an older NumPy, or a build without the record
        return None
    if blas.get("name") != "scipy-openblas" or "USE64BITINT" not in str(
            blas.get("openblas configuration", "")):
        return None
    root = os.path.dirname(os.path.dirname(np.__file__))
    names = (glob.glob(os.path.join(root, "numpy.libs", "libscipy_openblas64_*"))
             + glob.glob(os.path.join(os.path.dirname(np.__file__), ".dylibs",
                                      "libscipy_openblas64_*")))
    for name in names:
        try:
            lib = ctypes.CDLL(name)
            lib.scipy_cblas_saxpy64_  # noqa: B018  NOTE: the symbols this module calls
            lib.scipy_cblas_sger64_  # noqa: B018
        except (OSError, AttributeError):
            continue
        return lib
    return None


def _functions() -> dict:
    global _FUNCS
    if _FUNCS is None:
        lib, funcs = _library(), {}
        if lib is not None:
            for dtype, c, prefix in ((np.float32, ctypes.c_float, "s"),
                                     (np.float64, ctypes.c_double, "d")):
                axpy = getattr(lib, f"scipy_cblas_{prefix}axpy64_")
                axpy.argtypes = [_I64, c, _P, _I64, _P, _I64]
                axpy.restype = None
                ger = getattr(lib, f"scipy_cblas_{prefix}ger64_")
                ger.argtypes = [ctypes.c_int, _I64, _I64, c, _P, _I64, _P, _I64, _P, _I64]
                ger.restype = None
                funcs[np.dtype(dtype)] = (axpy, ger)
        _FUNCS = funcs
    return _FUNCS


def available() -> bool:
    return _on() and bool(_functions())


def _plain(a, dtype) -> bool:
    """A NumPy array this module may hand to BLAS as a pointer: exactly ``dtype``, native
    byte order, aligned and C-contiguous."""
    return (type(a) is np.ndarray and a.dtype == dtype and a.flags.c_contiguous
            and a.flags.aligned and a.dtype.isnative)


def axpy(alpha, x: np.ndarray, y: np.ndarray) -> bool:
    """``y += alpha * x`` in place (``x`` and ``y`` of one shape and dtype, float32 or
    float64; ``alpha`` a number, rounded to that dtype first); False, with ``y`` untouched,
    where BLAS is not used (the caller then does it with NumPy)."""
    if not _on():
        return False
    funcs = _functions().get(y.dtype)
    if (funcs is None or not _plain(x, y.dtype) or not _plain(y, y.dtype)
            or x.shape != y.shape or not y.flags.writeable or y.size == 0):
        return False
    if x is not y and np.shares_memory(x, y):
        return False  # NOTE: a partial overlap would read what it has written
    funcs[0](y.size, alpha, x.ctypes.data, 1, y.ctypes.data, 1)
    return True


def outer(a: np.ndarray, b: np.ndarray):
    """``a @ b`` for a column ``a`` (m, 1) and a row ``b`` (1, n) of one dtype, float32 or
    float64, as a new C-contiguous array; None where BLAS is not used."""
    if not _on():
        return None
    funcs = _functions().get(a.dtype)
    if (funcs is None or a.ndim != 2 or b.ndim != 2 or a.shape[1] != 1 or b.shape[0] != 1
            or not _plain(a, a.dtype) or not _plain(b, a.dtype)):
        return None
    m, n = a.shape[0], b.shape[1]
    out = np.zeros((m, n), a.dtype)
    if out.size:  # NOTE: out += 1.0 * a b^T: each element 0 + a_i * b_j, rounded once
        funcs[1](_ROW_MAJOR, m, n, 1.0, a.ctypes.data, 1, b.ctypes.data, 1, out.ctypes.data, n)
    return out


def ger(alpha, a: np.ndarray, b: np.ndarray, c: np.ndarray) -> bool:
    """``c += alpha * (a @ b)`` in place for a column ``a`` (m, 1), a row ``b`` (1, n) and a
    C-contiguous ``c`` (m, n), all of one dtype (float32 or float64): one pass over ``c``
    (plain SGD of a weight from its gradient at batch 1, without the gradient). Rounds
    otherwise than ``axpy(alpha, outer(a, b), c)``: ``alpha`` multiplies one of the vectors
    first. False, with ``c`` untouched, where BLAS is not used."""
    if not _on():
        return False
    funcs = _functions().get(c.dtype)
    if (funcs is None or a.ndim != 2 or b.ndim != 2 or a.shape[1] != 1 or b.shape[0] != 1
            or c.shape != (a.shape[0], b.shape[1]) or not _plain(a, c.dtype)
            or not _plain(b, c.dtype) or not _plain(c, c.dtype) or not c.flags.writeable
            or c.size == 0 or np.shares_memory(a, c) or np.shares_memory(b, c)):
        return False
    m, n = c.shape
    funcs[1](_ROW_MAJOR, m, n, alpha, a.ctypes.data, 1, b.ctypes.data, 1, c.ctypes.data, n)
    return True
