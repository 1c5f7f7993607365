"""Function: one differentiable op, and the node that records one application of it.

A subclass implements ``forward(*arrays)`` on device arrays (NumPy or labkit's OpenCL arrays)
and ``backward(inputs, grad_outputs)`` **in labkit functions** on Tensors, so every gradient can
be differentiated again (double backprop, Hessian-vector products, jvp).
"""

from __future__ import annotations

import itertools
import threading

import numpy as np

from ..errors import DeviceMismatchError
from . import trace as _trace
from .tensor import Tensor


class _State(threading.local):
    """Per thread: whether ops record (``no_grad``), and the brick whose forward runs (its
    path, a node's ``brick``). The class attributes are every thread's defaults, so a read
    is a plain attribute lookup (``getattr`` with a default on a missing attribute of a
    thread-local took about 0.4 us, once per op)."""

    enabled = True
    brick = None


_state = _State()
_seq = itertools.count()


def grad_enabled() -> bool:
    return _state.enabled


def set_grad_enabled(flag: bool) -> bool:
    old = grad_enabled()
    _state.enabled = bool(flag)
    return old


class no_grad:
    """Context manager (and decorator): ops inside record no graph.

    Examples
    --------
    >>> import labkit as lk
    >>> x = lk.tensor([1.0, 2.0], requires_grad=True)
    >>> with lk.no_grad():
    ...     y = x * 2
    >>> y.requires_grad
    False
    """

    def __enter__(self):
        self._old = set_grad_enabled(False)

    def __exit__(self, *exc):
        set_grad_enabled(self._old)

    def __call__(self, f):
        def wrapped(*a, **k):
            with no_grad():
                return f(*a, **k)

        wrapped.__name__, wrapped.__doc__ = f.__name__, f.__doc__
        return wrapped


class enable_grad(no_grad):
    def __enter__(self):
        self._old = set_grad_enabled(True)


def _device_name(a) -> str:
    from ..backend.opencl import ndarray

    return f"cl:{a.rt.info.index}" if isinstance(a, ndarray) else "cpu"


class Function:
    """Base class of differentiable ops. One instance records one application."""

    __slots__ = ("inputs", "seq", "out_meta", "out_hooks", "freed", "brick", "__dict__")
    name = "function"
    n_out = 1

    def forward(self, *xs):  # pragma: no cover - abstract
        raise NotImplementedError

    def backward(self, inputs, grads):  # pragma: no cover - abstract
        """Gradients w.r.t. ``inputs`` (Tensors or None), from ``grads`` of the outputs."""
        raise NotImplementedError(f"{self.name}: backward is not implemented")

    def apply(self, inputs):
        # NOTE: one input (most ops of a chain: a constant's add or multiply, an activation)
        # takes no list, no device check and no generator for ``any``
        if len(inputs) == 1:
            t = inputs[0]
            xs = (t.data,)
            wants = t.requires_grad
        else:
            xs = [t.data for t in inputs]
            t0 = type(xs[0])
            rt0 = getattr(xs[0], "rt", None)
            for x in xs[1:]:
                if type(x) is not t0 or getattr(x, "rt", None) is not rt0:
                    if (isinstance(x, np.ndarray) and isinstance(xs[0], np.ndarray)
                            and (hasattr(x, "_lk_given") or hasattr(xs[0], "_lk_given"))):
                        continue  # NOTE: a traced step's marked argument (compile/argmarks)
                    names = sorted({_device_name(a) for a in xs})
                    raise DeviceMismatchError(
                        f"{self.name}: inputs are on different devices ({' and '.join(names)}); "
                        f"move them to one with .to('{names[-1]}')")
            wants = False
            for t in inputs:
                if t.requires_grad:
                    wants = True
                    break
        tr = _trace._tls.__dict__.get("tracer")
        if tr is not None:
            xs = tr.unmark(self, xs)  # NOTE: NumPy arguments marked by the tracer
            before = dict(self.__dict__)  # what the op was made with (the tracer's constants)
        ys = self.forward(*xs)
        record = wants and _state.enabled
        if self.n_out == 1:
            out = Tensor._wrap(ys, record)
            if record:  # NOTE: _record for one output, inline (most ops: ~0.5 us less)
                self.inputs = tuple(inputs)
                self.seq = next(_seq)
                d = out.data
                self.out_meta = ((d.shape, d.dtype),)
                self.out_hooks = None
                self.freed = False
                self.brick = _state.brick
                out.creator = self
            if tr is not None:
                tr.record(self, before, inputs, (out,))
            return out
        outs = tuple(Tensor._wrap(y, record) for y in ys)
        if record:
            self._record(inputs, outs)
        if tr is not None:
            tr.record(self, before, inputs, outs)
        return outs

    def _record(self, inputs, outs):
        self.inputs = tuple(inputs)
        self.seq = next(_seq)
        self.out_meta = tuple((o.data.shape, o.data.dtype) for o in outs)
        self.out_hooks = None
        self.freed = False
        self.brick = _state.brick
        for i, o in enumerate(outs):
            o.creator = self
            o.index = i

    def free(self) -> None:
        """Drop what backward needs (inputs and saved values); a second backward then fails."""
        self.inputs = ()
        self.__dict__.clear()
        self.freed = True

    def __repr__(self):
        return f"<{type(self).__name__} {self.name}>"

