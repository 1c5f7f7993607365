"""labkit's OpenCL ndarray: shape, strides and an offset over a pooled pyopencl buffer.

Strides and offsets are kept in *elements* (``_st``, ``offset``); ``strides`` gives them in bytes
as NumPy does. Views (reshape of contiguous data, transpose, slices with steps, expand_dims,
broadcast_to) share the buffer and keep their ``base`` alive.
"""

from __future__ import annotations

import numpy as np

from ...errors import DeviceMismatchError, DTypeError, ShapeError
from .context import Runtime, runtime

_api = None  # labkit.backend.opencl.api, bound when that module is imported

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
        raise DTypeError(
            f"{op}: cl:{rt.info.index} ({rt.info.name}) has no float64 support (cl_khr_fp64); "
            "use float32 (x.astype(np.float32)) or run on the cpu device")
    return dt


def c_strides(shape) -> tuple:
    st, acc = [], 1
    for d in reversed(shape):
        st.append(acc)
        acc *= d
    return tuple(reversed(st))


def _prod(shape) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


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

    __slots__ = ("shape", "_st", "offset", "dtype", "data", "rt", "size", "base", "_nbuf",
                 "__weakref__")
    # NOTE: NumPy ufuncs refuse these arrays (np.exp(a) raises instead of silently copying
    # to the host), and numpy-scalar * ndarray comes to our reflected operators.
    __array_ufunc__ = None

    def __init__(self, rt: Runtime, shape, dtype, data=None, strides=None, offset=0, base=None):
        shape = tuple(int(d) for d in shape)
        self.rt = rt
        self.shape = shape
        self.dtype = np.dtype(dtype)
        self.size = _prod(shape)
        self._st = c_strides(shape) if strides is None else tuple(strides)
        self.offset = offset
        self.base = base
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
    def device(self):
        from ..device import device

        return device(f"cl:{self.rt.info.index}")

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
        return {"C_CONTIGUOUS": self.is_contiguous, "OWNDATA": self.base is None}

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("len() of unsized object")
        return self.shape[0]

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
        a = self.get()
        return a if dtype is None else a.astype(dtype)

    def __iter__(self):
        for i in range(len(self)):
            yield self[i]

    # ---- transfer -----------------------------------------------------------------------
    def get(self) -> np.ndarray:
        """Copy to a new C-contiguous NumPy array (waits for queued work on this array)."""
        import pyopencl as cl

        out = np.empty(self.shape, self.dtype)
        if self.size == 0:
            return out
        src = self if self.is_contiguous else self.copy()
        cl.enqueue_copy(self.rt.queue, out, src.data, src_offset=src.offset * self.itemsize,
                        is_blocking=True)
        return out

    numpy = get

    def item(self):
        if self.size != 1:
            raise ValueError(f"item: can only convert an array of size 1, got shape {self.shape}")
        return self.get().reshape(()).item()

    def tolist(self):
        return self.get().tolist()

    def to(self, device):
        from ..device import device as _device

        dev = _device(device)
        if dev.kind == "cpu":
            return self.get()
        if dev.index == self.rt.info.index:
            return self
        return _api.asarray(self.get(), device=dev)

    # ---- views --------------------------------------------------------------------------
    def _view(self, shape, strides, offset) -> ndarray:
        return ndarray(self.rt, shape, self.dtype, data=self.data, strides=strides,
                       offset=offset, base=self.base if self.base is not None else self)

    def reshape(self, *shape, order="C") -> ndarray:
        if order != "C":
            raise NotImplementedError("reshape: only order='C' is supported")
        if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
            shape = tuple(shape[0])
        shape = _resolve_shape(shape, self.size, self.shape)
        if shape == self.shape:
            return self
        st = _nocopy_reshape_strides(self.shape, self._st, shape)
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
        shape, st = list(self.shape), list(self._st)
        for a in axes:
            shape.insert(a, 1)
            st.insert(a, 0)
        return self._view(tuple(shape), tuple(st), self.offset)

    def broadcast_to(self, shape) -> ndarray:
        shape = tuple(int(d) for d in shape)
        st = broadcast_strides(self.shape, self._st, shape, "broadcast_to")
        return self._view(shape, st, self.offset)

    def __getitem__(self, key):
        return _api.getitem(self, key)

    def __setitem__(self, key, value):
        _api.setitem(self, key, value)

    # ---- copies and casts ---------------------------------------------------------------
    def copy(self) -> ndarray:
        return _api.copy(self)

    def astype(self, dtype, copy=True) -> ndarray:
        dt = np.dtype(dtype)
        if dt == self.dtype and not copy:
            return self
        return _api.astype(self, dt)

    def fill(self, value) -> None:
        _api.setitem(self, Ellipsis, value)

    # ---- reductions and methods ---------------------------------------------------------
    def sum(self, axis=None, dtype=None, keepdims=False):
        return _api.sum(self, axis=axis, dtype=dtype, keepdims=keepdims)

    def mean(self, axis=None, dtype=None, keepdims=False):
        return _api.mean(self, axis=axis, dtype=dtype, keepdims=keepdims)

    def max(self, axis=None, keepdims=False):
        return _api.max(self, axis=axis, keepdims=keepdims)

    def min(self, axis=None, keepdims=False):
        return _api.min(self, axis=axis, keepdims=keepdims)

    def argmax(self, axis=None, keepdims=False):
        return _api.argmax(self, axis=axis, keepdims=keepdims)

    def argmin(self, axis=None, keepdims=False):
        return _api.argmin(self, axis=axis, keepdims=keepdims)

    def var(self, axis=None, ddof=0, keepdims=False):
        return _api.var(self, axis=axis, ddof=ddof, keepdims=keepdims)

    def std(self, axis=None, ddof=0, keepdims=False):
        return _api.std(self, axis=axis, ddof=ddof, keepdims=keepdims)

    def prod(self, axis=None, keepdims=False):
        return _api.prod(self, axis=axis, keepdims=keepdims)

    def any(self, axis=None, keepdims=False):
        return _api.any(self, axis=axis, keepdims=keepdims)

    def all(self, axis=None, keepdims=False):
        return _api.all(self, axis=axis, keepdims=keepdims)

    def clip(self, lo=None, hi=None):
        return _api.clip(self, lo, hi)

    def dot(self, other):
        return _api.matmul(self, other)

    def take(self, indices, axis=None):
        return _api.take(self, indices, axis=axis)

    # ---- operators ----------------------------------------------------------------------
    def __add__(self, o): return _api.add(self, o)
    def __radd__(self, o): return _api.add(o, self)
    def __sub__(self, o): return _api.subtract(self, o)
    def __rsub__(self, o): return _api.subtract(o, self)
    def __mul__(self, o): return _api.multiply(self, o)
    def __rmul__(self, o): return _api.multiply(o, self)
    def __truediv__(self, o): return _api.true_divide(self, o)
    def __rtruediv__(self, o): return _api.true_divide(o, self)
    def __floordiv__(self, o): return _api.floor_divide(self, o)
    def __rfloordiv__(self, o): return _api.floor_divide(o, self)
    def __mod__(self, o): return _api.mod(self, o)
    def __pow__(self, o): return _api.power(self, o)
    def __rpow__(self, o): return _api.power(o, self)
    def __matmul__(self, o): return _api.matmul(self, o)
    def __rmatmul__(self, o): return _api.matmul(o, self)
    def __neg__(self): return _api.negative(self)
    def __pos__(self): return self
    def __abs__(self): return _api.absolute(self)
    def __invert__(self): return _api.invert(self)
    def __and__(self, o): return _api.bitwise_and(self, o)
    def __or__(self, o): return _api.bitwise_or(self, o)
    def __xor__(self, o): return _api.bitwise_xor(self, o)
    def __eq__(self, o): return _api.equal(self, o)  # type: ignore[override]
    def __ne__(self, o): return _api.not_equal(self, o)  # type: ignore[override]
    def __lt__(self, o): return _api.less(self, o)
    def __le__(self, o): return _api.less_equal(self, o)
    def __gt__(self, o): return _api.greater(self, o)
    def __ge__(self, o): return _api.greater_equal(self, o)

    def __iadd__(self, o): return _api.add(self, o, out=self)
    def __isub__(self, o): return _api.subtract(self, o, out=self)
    def __imul__(self, o): return _api.multiply(self, o, out=self)
    def __itruediv__(self, o): return _api.true_divide(self, o, out=self)

    __hash__ = None  # type: ignore[assignment]


# ---- shape helpers (shared by the api module) ---------------------------------------------
def normalize_axis(axis, ndim: int, op: str) -> int:
    try:
        a = int(axis)
    except TypeError:
        raise TypeError(f"{op}: axis must be an integer, got {axis!r}") from None
    if not -ndim <= a < max(ndim, 1) or (ndim == 0 and a not in (0, -1)):
        raise ShapeError(f"{op}: axis {axis} is out of bounds for an array of dimension {ndim}")
    return a % ndim if ndim else 0


def _resolve_shape(shape, size: int, old) -> tuple:
    shape = tuple(int(d) for d in shape)
    if shape.count(-1) > 1:
        raise ShapeError(f"reshape: can only infer one dimension (-1), got {shape}")
    if -1 in shape:
        known = _prod(d for d in shape if d != -1)
        if known == 0 or size % known:
            raise ShapeError(f"reshape: cannot reshape an array of shape {old} (size {size}) "
                             f"into {shape}")
        shape = tuple(size // known if d == -1 else d for d in shape)
    if _prod(shape) != size or any(d < 0 for d in shape):
        raise ShapeError(f"reshape: cannot reshape an array of shape {old} (size {size}) into "
                         f"shape {shape} (size {_prod(shape)})")
    return shape


def _nocopy_reshape_strides(old_shape, old_st, new_shape):
    """Strides that view ``old`` as ``new_shape`` without a copy, or None (NumPy's rule)."""
    if _prod(old_shape) == 0:
        return c_strides(new_shape)
    old = [(d, s) for d, s in zip(old_shape, old_st) if d != 1]
    new_st = [0] * len(new_shape)
    oi, ni = 0, 0
    nnew = len(new_shape)
    # walk groups of old dims and new dims whose products agree
    while ni < nnew:
        if new_shape[ni] == 1:
            new_st[ni] = 0
            ni += 1
            continue
        if oi >= len(old):
            return None
        o0, n0 = oi, ni
        po, pn = old[oi][0], new_shape[ni]
        while po != pn:
            if po < pn:
                oi += 1
                if oi >= len(old):
                    return None
                po *= old[oi][0]
            else:
                ni += 1
                while ni < nnew and new_shape[ni] == 1:
                    ni += 1
                if ni >= nnew:
                    return None
                pn *= new_shape[ni]
        # the old dims o0..oi must be contiguous among themselves
        for k in range(o0, oi):
            if old[k][1] != old[k + 1][1] * old[k + 1][0]:
                return None
        st = old[oi][1]
        for k in range(ni, n0 - 1, -1):
            new_st[k] = st if new_shape[k] != 1 else 0
            st *= new_shape[k]
        oi += 1
        ni += 1
    return tuple(new_st)


def broadcast_shapes(*shapes, op: str = "broadcast") -> tuple:
    nd = max((len(s) for s in shapes), default=0)
    out = [1] * nd
    for s in shapes:
        for i, d in enumerate(s, nd - len(s)):
            o = out[i]
            if d != o:
                if o == 1:
                    out[i] = d
                elif d != 1:
                    raise ShapeError(
                        f"{op}: shapes {' and '.join(str(tuple(x)) for x in shapes)} do not "
                        f"broadcast (dimension {i - nd} is {o} in one and {d} in another); "
                        "reshape one of them, e.g. with expand_dims, so that each dimension "
                        "matches or is 1")
    return tuple(out)


def broadcast_strides(shape, st, to, op: str) -> tuple:
    if len(to) < len(shape):
        raise ShapeError(f"{op}: cannot broadcast an array of shape {shape} to {to}")
    pad = len(to) - len(shape)
    out = [0] * pad
    for d, s, t in zip(shape, st, to[pad:]):
        if d == t:
            out.append(s if d != 1 else 0)
        elif d == 1:
            out.append(0)
        else:
            raise ShapeError(f"{op}: cannot broadcast an array of shape {shape} to {to}")
    return tuple(out)


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
