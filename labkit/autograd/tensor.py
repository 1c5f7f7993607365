"""Tensor: a device array with an optional gradient, recorded as ops run (define-by-run)."""

from __future__ import annotations

import operator

import numpy as np

from ..backend.device import Device
from ..backend.device import device as _device
from . import trace as _trace

F = None  # labkit.functions, bound on first use (it imports this module)


def _functions():
    global F
    if F is None:
        from .. import functions

        F = functions
    return F


class Tensor:
    """An array on a device (NumPy on ``cpu``, labkit's OpenCL array on ``cl:N``) that
    records the ops applied to it when it, or an input, requires a gradient.

    Examples
    --------
    >>> import labkit as lk
    >>> x = lk.tensor([1.0, 2.0, 3.0], requires_grad=True)
    >>> (x * x).sum().backward()
    >>> x.grad.numpy()
    array([2., 4., 6.], dtype=float32)
    """

    __slots__ = ("data", "grad", "requires_grad", "creator", "index", "name", "role",
                 "_hooks", "__weakref__")
    __array_ufunc__ = None  # np_array * tensor comes to Tensor.__rmul__, never silently numpy

    def __init__(self, data, requires_grad: bool = False, name: str | None = None):
        if isinstance(data, np.generic):
            data = np.asarray(data)
        self.data = data
        self.grad = None
        self.requires_grad = requires_grad
        self.creator = None
        self.index = 0
        self.name = name
        self.role = None
        self._hooks = None

    @classmethod
    def _wrap(cls, data, requires_grad):
        if isinstance(data, np.generic):
            data = np.asarray(data)  # NOTE: NumPy turns 0-d results into scalars
        t = cls.__new__(cls)
        t.data = data
        t.grad = None
        t.requires_grad = requires_grad
        t.creator = None
        t.index = 0
        t.name = None
        t.role = None
        t._hooks = None
        return t

    # ---- properties ---------------------------------------------------------------------
    @property
    def shape(self) -> tuple:
        return self.data.shape

    @property
    def dtype(self):
        return self.data.dtype

    @property
    def ndim(self) -> int:
        return len(self.data.shape)

    @property
    def size(self) -> int:
        return self.data.size

    @property
    def device(self) -> Device:
        if isinstance(self.data, np.ndarray):
            return Device("cpu")
        return self.data.device

    @property
    def xp(self):
        """The array namespace of this tensor's device (numpy or labkit.backend.opencl)."""
        if isinstance(self.data, np.ndarray):
            return np
        from ..backend import opencl

        return opencl

    @property
    def is_leaf(self) -> bool:
        return self.creator is None

    def __len__(self):
        return self.shape[0]

    def __repr__(self) -> str:
        body = np.array2string(self.numpy(), separator=", ", prefix="tensor(")
        extra = ", requires_grad=True" if self.requires_grad else ""
        fn = f", grad_fn={self.creator.name}" if self.creator is not None else ""
        return f"tensor({body}, dtype={self.dtype}, device='{self.device}'{extra}{fn})"

    # ---- conversion ---------------------------------------------------------------------
    def numpy(self) -> np.ndarray:
        """The values as a NumPy array (a copy from an OpenCL device; the array itself on cpu)."""
        if _trace._tls.__dict__.get("tracer") is not None:
            _trace.reading(f"the values of a tensor of shape {self.shape} (.numpy(), .item(), "
                           "float(), bool() or print)")
        d = self.data
        return d if isinstance(d, np.ndarray) else d.get()

    def item(self):
        if self.size != 1:
            raise ValueError(f"item: only a tensor of one element converts to a Python "
                             f"number, this one has shape {self.shape}")
        return self.numpy().reshape(()).item()

    def tolist(self):
        return self.numpy().tolist()

    def __float__(self):
        return float(self.item())

    def __int__(self):
        return int(self.item())

    def __bool__(self):
        return bool(self.item())

    def __array__(self, dtype=None, copy=None):
        a = self.numpy()
        return a if dtype is None else a.astype(dtype)

    def to(self, device) -> Tensor:
        """This tensor on ``device``; differentiable (the gradient flows back to this device)."""
        dev = _device(device)
        if dev == self.device:
            return self
        return _functions().to_device(self, dev)

    def detach(self) -> Tensor:
        """The same data, cut from the graph."""
        return Tensor(self.data)

    def astype(self, dtype) -> Tensor:
        return _functions().cast(self, dtype)

    def requires_grad_(self, flag: bool = True) -> Tensor:
        if self.creator is not None and not flag:
            raise RuntimeError("requires_grad_(False) on a non-leaf tensor; use .detach()")
        self.requires_grad = flag
        return self

    def zero_grad(self) -> None:
        self.grad = None

    # ---- autograd -----------------------------------------------------------------------
    def backward(self, grad=None, retain_graph: bool = False, create_graph: bool = False):
        """Accumulate d(self)/d(leaf) into each leaf's ``.grad``. ``grad`` defaults to ones
        for a one-element tensor."""
        from . import engine

        grad = output_grad(self, grad, "backward")
        engine.run([self], [grad], retain_graph=retain_graph or create_graph,
                   create_graph=create_graph)

    def register_hook(self, fn):
        """Call ``fn(grad)`` when this tensor's gradient is computed; a returned Tensor
        replaces the gradient."""
        if self.creator is None:
            self._hooks = (self._hooks or []) + [fn]
        else:
            node = self.creator
            node.out_hooks = node.out_hooks or {}
            node.out_hooks.setdefault(self.index, []).append(fn)
        return fn

    def register_grad_ready_hook(self, fn):
        """Call ``fn(tensor)`` once per ``backward()``, when this leaf's ``.grad`` is final
        (every use accumulated), while the rest of backward may still run; not called when no
        gradient reached it, nor by ``lk.grad``. Returns a handle whose ``remove()``
        unregisters it. (Data-parallel training starts its all-reduce from here.)"""
        from . import engine

        if self.creator is not None:
            raise RuntimeError("register_grad_ready_hook: only a leaf tensor (a parameter) has "
                               "a .grad to be ready; use register_hook on intermediate values")
        return engine.add_final_hook(self, fn)

    # ---- methods and operators ----------------------------------------------------------
    def sum(self, axis=None, keepdims=False):
        return _functions().sum(self, axis=axis, keepdims=keepdims)

    def mean(self, axis=None, keepdims=False):
        return _functions().mean(self, axis=axis, keepdims=keepdims)

    def max(self, axis=None, keepdims=False):
        return _functions().max(self, axis=axis, keepdims=keepdims)

    def min(self, axis=None, keepdims=False):
        return _functions().min(self, axis=axis, keepdims=keepdims)

    def var(self, axis=None, keepdims=False):
        return _functions().var(self, axis=axis, keepdims=keepdims)

    def reshape(self, *shape):
        if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
            shape = tuple(shape[0])
        return _functions().reshape(self, shape)

    def transpose(self, *axes):
        if len(axes) == 1 and isinstance(axes[0], (tuple, list)):
            axes = tuple(axes[0])
        return _functions().transpose(self, axes or None)

    @property
    def T(self):
        return _functions().transpose(self)

    def flatten(self):
        return _functions().flatten(self)

    def squeeze(self, axis=None):
        return _functions().squeeze(self, axis)

    def expand_dims(self, axis):
        return _functions().expand_dims(self, axis)

    def __getitem__(self, key):
        return _functions().getitem(self, key)

    def __add__(self, o): return _functions().add(self, o)
    def __radd__(self, o): return _functions().add(o, self)
    def __sub__(self, o): return _functions().sub(self, o)
    def __rsub__(self, o): return _functions().sub(o, self)
    def __mul__(self, o): return _functions().mul(self, o)
    def __rmul__(self, o): return _functions().mul(o, self)
    def __truediv__(self, o): return _functions().div(self, o)
    def __rtruediv__(self, o): return _functions().div(o, self)
    def __pow__(self, o): return _functions().pow(self, o)
    def __rpow__(self, o): return _functions().pow(o, self)
    def __matmul__(self, o): return _functions().matmul(self, o)
    def __rmatmul__(self, o): return _functions().matmul(o, self)
    def __neg__(self): return _functions().neg(self)
    def __abs__(self): return _functions().abs(self)

    # comparisons are not differentiable: they give plain boolean tensors (host: a compiled
    # step compares each call's values again)
    def __lt__(self, o): return _compare(operator.lt, self, o)
    def __le__(self, o): return _compare(operator.le, self, o)
    def __gt__(self, o): return _compare(operator.gt, self, o)
    def __ge__(self, o): return _compare(operator.ge, self, o)
    def __eq__(self, o): return _compare(operator.eq, self, o)  # type: ignore[override]
    def __ne__(self, o): return _compare(operator.ne, self, o)  # type: ignore[override]
    __hash__ = object.__hash__


def ones_like(t: Tensor) -> Tensor:
    """A Tensor of ones with ``t``'s shape, dtype and device (not recorded)."""
    from ..backend import full

    return Tensor(full(t.shape, 1, t.dtype, t.data))


def output_grad(y: Tensor, g, op: str) -> Tensor:
    """The gradient fed into ``y``: ``g`` as a Tensor on y's device, or ones when ``g`` is
    None and y has one element."""
    if not y.requires_grad:
        raise RuntimeError(f"{op}: the output does not require grad; none of its inputs had "
                           "requires_grad=True (or it was computed under no_grad, or it is "
                           "the result of an lk.compile step, which carries no graph: call "
                           "backward inside the step)")
    if g is None:
        if y.size != 1:
            raise RuntimeError(f"{op}: the gradient can be implied only for a one-element "
                               f"output, this one has shape {y.shape}; pass it explicitly")
        return ones_like(y)
    return g if isinstance(g, Tensor) else tensor(g, dtype=y.dtype, device=y.device)


def _raw(o):
    return o.data if isinstance(o, Tensor) else o


def _compare(op, a, o):
    if _trace._tls.__dict__.get("tracer") is None:
        return Tensor(op(a.data, _raw(o)))
    if isinstance(o, Tensor) or isinstance(o, (np.ndarray,)) or hasattr(o, "rt"):
        return Tensor(_trace.host(op, a.data, _raw(o), name=f"compare.{op.__name__}"))
    return Tensor(_trace.host(lambda d: op(d, o), a.data, name=f"compare.{op.__name__}"))


_FLOAT_DEFAULT = np.float32


def tensor(data, dtype=None, device=None, requires_grad: bool = False, name=None) -> Tensor:
    """A leaf tensor on ``device`` (default: ``LABKIT_DEVICE``, else cpu).

    NumPy arrays keep their dtype; Python floats and lists of them become float32 (as in
    PyTorch). ``requires_grad`` needs a floating dtype.
    """
    if isinstance(data, Tensor):
        data = data.data
    dev = _device(device)
    from ..backend import opencl

    if (_trace._tls.__dict__.get("tracer") is not None
            and isinstance(data, (np.ndarray, opencl.ndarray))):
        # NOTE: a replay of a compiled step makes this copy again, from that call's array
        arr = _trace.host(lambda a: _array(a, dtype, dev, opencl), data, name="tensor")
        return _leaf(arr, requires_grad, name)
    return _leaf(_array(data, dtype, dev, opencl), requires_grad, name)


def _array(data, dtype, dev, opencl):
    """tensor()'s array: ``data`` copied to ``dev`` (cast to ``dtype``)."""
    if isinstance(data, (np.ndarray, np.generic, opencl.ndarray)):
        arr = data
    else:
        arr = np.asarray(data)
        if arr.dtype == np.float64 and dtype is None:
            arr = arr.astype(_FLOAT_DEFAULT)
    if dtype is None and isinstance(arr, (np.ndarray, np.generic)) and not arr.dtype.isnative:
        # NOTE: big-endian data (from a file) as the same numbers in this machine's order, on
        # every device (the ops and the OpenCL arrays assume native order)
        dtype = arr.dtype.newbyteorder("=")
    if dev.kind == "cpu":
        if isinstance(arr, opencl.ndarray):
            arr = arr.get()  # a fresh host copy: cast it in place of a second copy
            if dtype is not None:
                arr = arr.astype(dtype, copy=False)
        else:
            arr = np.array(arr, dtype=dtype)
    else:
        arr = opencl.asarray(arr, dtype=dtype, device=dev)
        if arr is data:
            arr = arr.copy()
    return arr


def _leaf(arr, requires_grad, name):
    if requires_grad and arr.dtype.kind != "f":
        raise TypeError(f"tensor: only floating tensors can require grad, got dtype {arr.dtype}; "
                        "pass dtype=np.float32")
    return Tensor(arr, requires_grad=requires_grad, name=name)
