"""labkit's OpenCL ndarray: shape, strides and an offset over a pooled pyopencl buffer.

Strides and offsets are kept in *elements* (``_st``, ``offset``); ``strides`` gives them in bytes
as NumPy does. Views (reshape of contiguous data, transpose, slices with steps, expand_dims,
broadcast_to) share the buffer and keep their ``base`` alive.

This module holds the array's data and views. Its NumPy methods and operators (``+``, ``sum``,
``[...]``, ``copy``, ...) run kernels, which sit above this module: ``methods.py`` installs
them, once, when ``labkit.backend.opencl`` is imported.
"""

from __future__ import annotations

import numpy as np

from ...errors import DeviceMismatchError, DTypeError, ShapeError
from .context import Runtime, no_fp64_error, runtime
from .shapes import (
    broadcast_strides,
    c_strides,
    nocopy_reshape_strides,
    normalize_axis,
    prod,
    resolve_shape,
)

CTYPES = {
    np.dtype(np.float32): "float",
    np.dtype(np.float64): "double",
    np.dtype(np.int8): "char",
    np.dtype(np.uint8): "uchar",
    np.dtype(np.int16): "short",
    np.dtype(np.uint16): "ushort",
    np.dtype(np.int32): "int",
    np.dtype(np.uint32): "uint",
    np.dtype(np.int64): "long",
    np.dtype(np.uint64): "ulong",
    np.dtype(np.bool_): "uchar",
}


def check_dtype(dtype, rt: Runtime, op: str) -> np.dtype:
    dt = np.dtype(dtype)
    if dt not in CTYPES:
        supported = ", ".join(sorted({str(d) for d in CTYPES}))
        raise DTypeError(f"{op}: dtype {dt} is not supported on OpenCL devices (supported: "
                         f"{supported}); convert with .astype(np.float32)")
    if dt == np.float64 and not rt.info.fp64:
        raise no_fp64_error(rt.info, op)
    return dt


#: the numpy type of kernel index arguments, by the OpenCL type name the kernel uses
IDX_NP = {"int": np.int32, "long": np.int64}


def index_ctype(*arrays) -> str:
    """``"int"`` when every offset into the buffers of ``arrays`` fits in 31 bits (faster
    index arithmetic), else ``"long"``."""
    wide = any(isinstance(a, ndarray) and max(a._nbuf, a.size) > 2**31 - 1 for a in arrays)
    return "long" if wide else "int"


class ndarray:
    """An array on an OpenCL device, with NumPy's semantics.

    Create one with :func:`labkit.backend.opencl.asarray` (or ``zeros``, ``arange``, ...);
    read it back with :meth:`get`.

    Examples
    --------
    >>> import numpy as np
    >>> from labkit.backend import opencl as clnp
    >>> a = clnp.asarray(np.arange(6, dtype=np.float32).reshape(2, 3))
    >>> (a.T * 2 + 1).get()
    array([[ 1.,  7.],
           [ 3.,  9.],
           [ 5., 11.]], dtype=float32)
    """

    # NOTE: _ro: read-only (a broadcast_to view, as NumPy's: its elements share memory, so
    # a write raced); views of it are too. fresh() and elementwise.maker set it as well
    __slots__ = ("shape", "_st", "offset", "dtype", "data", "rt", "size", "base", "_nbuf",
                 "_ro", "__weakref__")
    # NOTE: NumPy ufuncs refuse these arrays (np.exp(a) raises instead of silently copying
    # to the host), and numpy-scalar * ndarray comes to our reflected operators.
    __array_ufunc__ = None

    def __init__(self, rt: Runtime, shape, dtype, data=None, strides=None, offset=0, base=None):
        shape = tuple(int(d) for d in shape)
        self.rt = rt
        self.shape = shape
        self.dtype = np.dtype(dtype)
        self.size = prod(shape)
        self._st = c_strides(shape) if strides is None else tuple(strides)
        self.offset = offset
        self.base = base
        self._ro = False
        if data is None:
            data = rt.allocate(self.size * self.dtype.itemsize)
            self._nbuf = self.size
        else:
            self._nbuf = base._nbuf if base is not None else self.size
        self.data = data

    # ---- basic properties -------------------------------------------------------------
    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def itemsize(self) -> int:
        return self.dtype.itemsize

    @property
    def nbytes(self) -> int:
        return self.size * self.dtype.itemsize

    @property
    def strides(self) -> tuple:
        return tuple(s * self.dtype.itemsize for s in self._st)

    @property
    def is_contiguous(self) -> bool:
        """C-contiguous, ignoring strides of dimensions of size 1 (NumPy's rule)."""
        acc = 1
        for d, s in zip(reversed(self.shape), reversed(self._st)):
            if d != 1 and s != acc:
                return self.size == 0
            acc *= d
        return True

    @property
    def flags(self):
        return {"C_CONTIGUOUS": self.is_contiguous, "OWNDATA": self.base is None,
                "WRITEABLE": not self._ro}

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("len() of unsized object")
        return self.shape[0]

    def __copy__(self) -> ndarray:
        # NOTE: as NumPy's: a copy of the elements (on the device), not a view; deepcopy of
        # a model on cl (a target network) raised on the buffer
        return self.copy()

    def __deepcopy__(self, memo) -> ndarray:
        return self.copy()

    def __repr__(self) -> str:
        body = np.array2string(self.get(), separator=", ", prefix="cl_array(")
        return f"cl_array({body}, dtype={self.dtype}, device='cl:{self.rt.info.index}')"

    def __bool__(self) -> bool:
        if self.size != 1:
            raise ValueError("the truth value of an array with more than one element is "
                             "ambiguous; use .any() or .all()")
        return bool(self.get())

    def __float__(self):
        return float(self.item())

    def __int__(self):
        return int(self.item())

    def __index__(self):
        if self.dtype.kind not in "iub" or self.size != 1:
            raise TypeError("only integer scalar arrays can be converted to an index")
        return int(self.item())

    def __array__(self, dtype=None, copy=None):
        if copy is False:  # NOTE: NumPy 2's protocol: a copy is needed, so say so
            raise ValueError("a labkit OpenCL array lives on its device: it cannot be a NumPy "
                             "array without a copy (np.asarray(x, copy=False)); use x.get()")
        a = self.get()
        return a if dtype is None else a.astype(dtype)

    def __iter__(self):
        for i in range(len(self)):
            yield self[i]

    # ---- transfer -----------------------------------------------------------------------
    def get(self) -> np.ndarray:
        """Copy to a new C-contiguous NumPy array (waits for queued work on this array)."""
        out = np.empty(self.shape, self.dtype)
        if self.size == 0:
            return out
        src = self if self.is_contiguous else self.copy()
        self.rt.syncs += 1
        self.rt.read_into(out, src.data, src.offset * self.itemsize)
        return out

    numpy = get

    def item(self):
        if self.size != 1:
            raise ValueError(f"item: can only convert an array of size 1, got shape {self.shape}")
        return self.get().reshape(()).item()

    def tolist(self):
        return self.get().tolist()

    # ---- views --------------------------------------------------------------------------
    def _view(self, shape, strides, offset) -> ndarray:
        v = ndarray(self.rt, shape, self.dtype, data=self.data, strides=strides,
                    offset=offset, base=self.base if self.base is not None else self)
        v._ro = self._ro
        return v

    def reshape(self, *shape, order="C") -> ndarray:
        if order != "C":
            raise NotImplementedError("reshape: only order='C' is supported")
        if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
            shape = tuple(shape[0])
        shape = resolve_shape(shape, self.size, self.shape)
        if shape == self.shape:
            return self
        st = nocopy_reshape_strides(self.shape, self._st, shape)
        if st is None:
            return self.copy().reshape(shape)
        return self._view(shape, st, self.offset)

    def ravel(self) -> ndarray:
        return self.reshape(-1)

    def flatten(self) -> ndarray:
        return self.copy().reshape(-1)

    def transpose(self, *axes) -> ndarray:
        if not axes or axes == (None,):
            axes = tuple(range(self.ndim))[::-1]
        elif len(axes) == 1 and isinstance(axes[0], (tuple, list)):
            axes = tuple(axes[0])
        axes = tuple(normalize_axis(a, self.ndim, "transpose") for a in axes)
        if sorted(axes) != list(range(self.ndim)):
            raise ShapeError(f"transpose: axes {axes} are not a permutation of "
                             f"0..{self.ndim - 1} for an array of shape {self.shape}")
        return self._view(tuple(self.shape[a] for a in axes), tuple(self._st[a] for a in axes),
                          self.offset)

    @property
    def T(self) -> ndarray:
        return self.transpose()

    def swapaxes(self, a, b) -> ndarray:
        axes = list(range(self.ndim))
        a, b = normalize_axis(a, self.ndim, "swapaxes"), normalize_axis(b, self.ndim, "swapaxes")
        axes[a], axes[b] = axes[b], axes[a]
        return self.transpose(axes)

    def squeeze(self, axis=None) -> ndarray:
        if axis is None:
            keep = [i for i, d in enumerate(self.shape) if d != 1]
        else:
            axes = {normalize_axis(a, self.ndim, "squeeze")
                    for a in (axis if isinstance(axis, (tuple, list)) else (axis,))}
            for a in axes:
                if self.shape[a] != 1:
                    raise ShapeError(f"squeeze: axis {a} has size {self.shape[a]}, not 1 "
                                     f"(shape {self.shape})")
            keep = [i for i in range(self.ndim) if i not in axes]
        return self._view(tuple(self.shape[i] for i in keep), tuple(self._st[i] for i in keep),
                          self.offset)

    def expand_dims(self, axis) -> ndarray:
        axes = axis if isinstance(axis, (tuple, list)) else (axis,)
        nd = self.ndim + len(axes)
        axes = sorted(normalize_axis(a, nd, "expand_dims") for a in axes)
        if len(set(axes)) != len(axes):
            raise ShapeError(f"expand_dims: repeated axis in {axis!r}")
        shape, st = list(self.shape), list(self._st)
        for a in axes:
            shape.insert(a, 1)
            st.insert(a, 0)
        return self._view(tuple(shape), tuple(st), self.offset)

    def broadcast_to(self, shape) -> ndarray:
        """A read-only view of shape ``shape`` (as NumPy's: a write would race on the
        elements that share memory); ``.copy()`` it to write."""
        shape = (int(shape),) if isinstance(shape, (int, np.integer)) else \
            tuple(int(d) for d in shape)
        st = broadcast_strides(self.shape, self._st, shape, "broadcast_to")
        v = self._view(shape, st, self.offset)
        v._ro = True
        return v

    __hash__ = None  # type: ignore[assignment]


def check_writeable(a: ndarray, op: str) -> None:
    """A ``ValueError`` for a write into a read-only array (NumPy's message)."""
    if a._ro:
        raise ValueError(f"{op}: assignment destination is read-only (a broadcast_to view: "
                         "its elements share memory); write into a copy (.copy())")


def fresh(rt: Runtime, shape: tuple, dtype: np.dtype, st: tuple, size: int) -> ndarray:
    """A new C-contiguous array, without ``ndarray.__init__``'s conversions: for a caller that
    made ``shape`` (ints), ``dtype`` (an np.dtype), ``st`` (its C strides) and ``size`` once
    and reuses them (reductions, GEMM). Code that generates its launches sets the same fields
    (:func:`fresh_fields`: a call less per small op)."""
    a = object.__new__(ndarray)
    a.rt, a.shape, a.dtype, a.size, a._st = rt, shape, dtype, size, st
    a.offset, a.base, a._nbuf, a._ro = 0, None, size, False
    a.data = rt.allocate(size * dtype.itemsize)
    return a


def fresh_fields(o: str, rt: str, shape: str, dtype: str, st: str, size: str) -> str:
    """Two lines of generated Python (indented once) that set the fields :func:`fresh` sets
    on the new ``object.__new__(ndarray)`` named ``o``, from the expressions ``rt`` ...
    ``size`` (elementwise.maker, compile/capture.py); its ``data`` is the caller's to set."""
    return (f"    {o}.rt, {o}.shape, {o}.dtype, {o}.size, {o}._st = "
            f"{rt}, {shape}, {dtype}, {size}, {st}\n"
            f"    {o}.offset, {o}.base, {o}._nbuf, {o}._ro = 0, None, {size}, False\n")


def same_device(op: str, arrays) -> Runtime:
    """The one runtime all ``arrays`` live on; a clear error when they live on two."""
    rt = None
    for a in arrays:
        if isinstance(a, ndarray):
            if rt is None:
                rt = a.rt
            elif a.rt is not rt:
                raise DeviceMismatchError(
                    f"{op}: arrays are on different devices, cl:{rt.info.index} and "
                    f"cl:{a.rt.info.index}; move one with .to('cl:{rt.info.index}')")
    for a in arrays:
        if isinstance(a, np.ndarray) and a.ndim > 0:
            where = f"cl:{rt.info.index}" if rt is not None else "cl:0"
            raise DeviceMismatchError(
                f"{op}: got a NumPy array (cpu, shape {a.shape}) and an array on {where}; "
                f"move it with labkit.backend.opencl.asarray(x, device='{where}') or bring "
                "the other to the cpu with .get()")
    return rt if rt is not None else runtime(0)
