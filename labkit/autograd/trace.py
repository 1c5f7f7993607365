"""The hook ``lk.compile`` traces through (it lives here, below the functions, so that every
layer can report to it without importing the compiler).

While a step is traced, ``Function.apply`` reports each op it runs, and code that computes with
raw arrays outside labkit functions reports that computation with :func:`host`, so that a
replay runs it again instead of reusing the value of the traced call (a dropout mask, labels
uploaded to a device, an optimizer's in-place update, running statistics).
"""

from __future__ import annotations

import threading

_tls = threading.local()


def tracer():
    """The active tracer of this thread (``lk.compile``'s), or None: outside a trace, None."""
    return getattr(_tls, "tracer", None)


def set_tracer(tr):
    old = getattr(_tls, "tracer", None)
    _tls.tracer = tr
    return old


def grad_cleared(tensor) -> None:
    """Called where ``tensor.grad`` is set to None (an optimizer's ``zero_grad``): inside a
    trace, a replay sets it to None too at its end, unless the step gave it a gradient after,
    though the step read nothing else of it (a parameter the step did not use this time
    keeps no gradient of an earlier step, as in an eager call)."""
    tr = getattr(_tls, "tracer", None)
    if tr is not None:
        tr.t.cleared[id(tensor)] = tensor


def host(fn, *arrays, effect: bool = False, mutates=(), name: str | None = None):
    """``fn(*arrays)``, recorded when a compiled step is being traced.

    For code that computes with raw device arrays (NumPy or labkit's OpenCL arrays) outside
    labkit functions inside a step: a compiled replay calls ``fn`` again with that call's
    arrays, so its result is never a stale value of the traced call. ``arrays`` are the
    arrays ``fn`` reads that the step computes or receives; anything else ``fn`` reads (an
    optimizer's state, a generator) is read when it runs (a replay sets a ``.data`` the step
    set where the step set it, and a ``.grad`` that ``fn`` reads just before it).
    ``effect=True`` marks a call that changes state (an update in place): it always runs,
    even when its result is unused;
    ``mutates`` names the arrays it changes in place (the tracer refuses a step that changes
    any other array it read, since a replay would not repeat that change).
    ``fn`` returns an array, a tuple of arrays, or None.

    Examples
    --------
    >>> import numpy as np
    >>> from labkit.autograd.trace import host
    >>> host(np.add, np.ones(2), np.ones(2))
    array([2., 2.])
    """
    tr = getattr(_tls, "tracer", None)
    if tr is None:
        return fn(*arrays)
    if in_host():  # NOTE: inside another: a replay runs that one, and this in it
        codes = getattr(tr, "host_codes", None)
        if codes is not None and hasattr(fn, "__code__"):
            codes.add(fn.__code__)  # NOTE: what it changes, it changes at each replay
        return fn(*arrays)
    from .tensor import Tensor

    for i, a in enumerate(arrays):
        if isinstance(a, Tensor):  # NOTE: it failed deep in the tracer (no attribute 'get')
            raise TypeError(
                f"lk.compile.host({getattr(fn, '__name__', 'fn')}, ...): argument {i} is a "
                f"Tensor of shape {a.shape}; pass its array (x.data), and wrap the result in "
                "lk.Tensor(...) where labkit ops use it")
    watch = getattr(tr, "watch", None)
    if watch is not None:
        watch.host_start()
    # NOTE: counted on the tracer: a step compiled and traced inside fn has its own
    tr.host_depth = getattr(tr, "host_depth", 0) + 1
    try:
        r = tr.host(fn, arrays, effect, name or getattr(fn, "__name__", "host"), mutates)
    finally:
        tr.host_depth -= 1
    if watch is not None:
        watch.host_done()  # NOTE: lk.compile: the .grad fn read, the .data it set
    return r


def in_host() -> bool:
    """Whether this thread's tracer runs a function through :func:`host` (a replay runs it
    again: a host call inside it is not recorded apart)."""
    return getattr(getattr(_tls, "tracer", None), "host_depth", 0) > 0


def reading(what: str) -> None:
    """Called where a tensor's values are read into Python (``item``, ``numpy``, ``bool``):
    inside a trace that would freeze a value of the traced call, so the tracer refuses."""
    tr = getattr(_tls, "tracer", None)
    if tr is not None:
        tr.refuse_read(what)
