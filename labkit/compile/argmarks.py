"""A traced step's NumPy arguments, marked: what its raw NumPy code computes from them.

A compiled step replays labkit ops, not the Python between them. An array that the step's own
NumPy code computes from an argument (``mask = ids != 0``, ``x / 255``, ``x.astype(...)``) and
gives to labkit looks, to the trace, like a constant made inside the step: one that had the
same values in the two traced calls (a padding mask all ones in the first two batches) was
replayed with them, whatever the later batches held. A Python value read from an argument
(``if (ids == 0).any():``, ``n = int(lengths.max())``) froze a branch or a number the same way.

While a step is traced, each NumPy array among its arguments (a plain array or a memmap, at
the top level and in tuples, lists and dicts) is given to it as a view of a subclass of
``np.ndarray`` that marks it, one per argument. NumPy gives that subclass to what the step's
code computes from the view (operators, ufuncs, methods, ``x.copy()``, reductions as 0-d
arrays, functions such as ``np.where``, ``np.concatenate`` and ``np.count_nonzero``), so the
tracer refuses such an array where labkit gets it (an op's operand, ``lk.tensor``, an index, a
number, a result) and a Python value read from it (``bool``, ``int``, ``float``, ``round``,
``item``, an element, iteration, ``.flat``), naming the argument as the step names it and the
step's line. A refusal is kept: one the step's code catches (a logging handler formatting
``x.mean()``) still refuses the call when it ends. Shape-only functions (``np.zeros_like``)
give plain arrays. For everything else the view is the argument: labkit's ops run on the
argument itself, a view with its exact layout (``np.asarray(x)``) is the argument, labkit's own
checks read its values (labels in range), and a step returning it returns the argument. Lists
and dicts get their arrays back after the call (their identity, and what the step stored in
them, are kept); a view the step kept elsewhere is a plain array once the trace is over (it
pickles as one).

While a step with NumPy arguments is traced, ``np.asarray``, ``np.array``,
``np.ascontiguousarray`` and ``np.asfortranarray`` give the step's code the marked view back
for a marked array (itself where NumPy's result is a view of its layout, else the result
marked; for a list or tuple of them, the result marked), as ``x.view(np.ndarray)`` does:
``np.asarray(ids) != 0`` made a plain array before, and a mask all ones in the two traced
calls was replayed for every batch. They keep NumPy's signatures and pickle as NumPy's;
labkit's and NumPy's own calls get plain arrays as before, and a function the user put in
their place stays (wrapped while tracing). NumPy's array printing (``np.array2string``,
``repr``) reads values freely: a string for a log.

Not seen (documented limits): those functions held before the trace (``from numpy import
asarray``, a dict of them); what leaves NumPy's arrays (``x.tobytes()``, ``memoryview(x)``,
``np.frombuffer``, pickling, ``torch.from_numpy``), record-array views and scalar
constructors (``np.float32(x)`` of a 0-d argument); NumPy code run by another thread; shapes
that follow values (``len(ids[ids != 0])``); formatting with f-strings or ``print`` (harmless:
a log of the traced calls; ``np.savetxt`` and ``tolist()`` read values and are refused);
other array types (masked arrays), tuple subclasses and namedtuples, and raw code on a
Tensor argument's ``.data``.
"""

from __future__ import annotations

import os
import sys
import threading
import weakref

import numpy as np

from ..autograd import trace as _hook
from ..errors import CompileError

_PKG = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
_NUMPY = os.path.dirname(os.path.abspath(np.__file__)) + os.sep
_STDLIB = os.path.dirname(os.path.abspath(os.__file__)) + os.sep
#: not the user's line: NumPy, labkit, Python's library and installed packages (pytest's log
#: capture, a logging handler)
_NOT_USER = (_NUMPY, _PKG, _STDLIB)
#: functions whose result depends on the argument's shape only (unless a marked value is
#: passed besides, np.full_like(x, x.max())): plain arrays and numbers
_SHAPE_ONLY = frozenset((np.zeros_like, np.ones_like, np.empty_like, np.full_like, np.size,
                         np.ndim, np.shape))


def _caller():
    """Whether the innermost frame outside NumPy is labkit's, and the ``file:line`` of the
    innermost frame outside NumPy and labkit (the user's line)."""
    f = sys._getframe(2)
    while f is not None and (f.f_code.co_filename.startswith(_NUMPY)
                             or f.f_code.co_filename == __file__):
        f = f.f_back
    inside = f is None or f.f_code.co_filename.startswith(_PKG)
    while f is not None and (f.f_code.co_filename.startswith(_NOT_USER)
                             or os.sep + "site-packages" + os.sep in f.f_code.co_filename):
        f = f.f_back
    at = "?" if f is None else f"{os.path.basename(f.f_code.co_filename)}:{f.f_lineno}"
    return inside, at


#: NumPy's array printing (numpy/_core from NumPy 2, numpy/core before)
_ARRAYPRINT = frozenset(os.path.join(_NUMPY, d, "arrayprint.py") for d in ("_core", "core"))


def _formatting() -> bool:
    """Whether NumPy's array printing (``np.array2string``, ``repr``) is reading: a string
    for a log, harmless as ``print(x)`` is."""
    f = sys._getframe(2)
    while f is not None and (f.f_code.co_filename.startswith(_NUMPY)
                             or f.f_code.co_filename == __file__):
        if f.f_code.co_filename in _ARRAYPRINT:
            return True
        f = f.f_back
    return False


def _reading(name, what):
    """``np.ndarray``'s method ``name``, reading values into Python as ``what``: seen
    (``Marked._read``) before it runs."""
    method = getattr(np.ndarray, name)

    def read(self, *args):
        self._read(what)
        return method(self, *args)

    read.__name__ = name
    return read


class Marked(np.ndarray):
    """A traced step's argument, or what NumPy computed from one (see the module's doc)."""

    _lk_arg = "an argument"
    _lk_trace = staticmethod(lambda: None)

    def _live(self):
        """This array's trace, while it is the one running, else None."""
        tr = _hook.tracer()
        trace = self._lk_trace()
        return trace if tr is not None and tr.t is trace else None

    def _read(self, what):
        trace = self._live()
        if trace is None:
            return
        inside, at = _caller()
        if _formatting():
            return  # NOTE: np.array2string(np.asarray(x)) in a log line, as print(x)
        # NOTE: labkit's own checks read an argument's values (labels in range), not an index
        # computed from it (t[:, :lengths.max()] bakes the traced call's bound)
        if inside and (id(self) in trace.arg_views or what != "an index"):
            return
        refuse(trace, f"lk.compile: {trace.fn_name} reads the values of {self._lk_arg} (a "
                      f"NumPy array) into Python ({what}) at {at} while it is traced; a "
                      "replay would reuse this call's value (a branch, a number). Compute "
                      "with labkit ops on lk.tensor(...) of it, check it before calling the "
                      "step, or pass the value as an argument of its own (Python numbers are "
                      "checked at every call)")

    __bool__ = _reading("__bool__", "bool")
    __int__ = _reading("__int__", "int")
    __float__ = _reading("__float__", "float")
    __complex__ = _reading("__complex__", "complex")
    __index__ = _reading("__index__", "an index")
    item = _reading("item", "item()")
    tolist = _reading("tolist", "tolist()")

    def __round__(self, ndigits=None):
        self._read("round")
        return round(np.ndarray.item(self), ndigits)

    def __getitem__(self, key):
        r = np.ndarray.__getitem__(self, key)
        if isinstance(r, np.generic):
            self._read("an element")
        return r

    @property
    def flat(self):
        self._read("flat")
        return np.ndarray.flat.__get__(self)

    @flat.setter
    def flat(self, value):
        np.ndarray.flat.__set__(self, value)

    def _lk_given(self):
        """Called where labkit refuses a value of the wrong type (a 0-d array for a number):
        one computed from an argument is refused as such, with the fix."""
        trace = self._live()
        if trace is not None:
            check_raw(trace, self)

    def __iter__(self):
        if self.ndim == 1:
            self._read("its elements")
        return np.ndarray.__iter__(self)

    def __repr__(self):
        return repr(_plain(self))

    def __str__(self):
        return str(_plain(self))

    def __reduce__(self):  # NOTE: pickled (a view a step kept) as the plain array it is
        return _plain(self).__reduce__()

    def view(self, *args, **kwargs):
        # NOTE: x.view(np.ndarray) in the step's code is the argument's values still
        return _seen(self, np.ndarray.view(self, *args, **kwargs))

    def __array_wrap__(self, arr, context=None, return_scalar=False):
        # NOTE: marked while the user's code computes during its trace: a reduction is a
        # marked 0-d array (its reads are seen); otherwise plain results, scalars as scalars
        if self._live() is not None and not _caller()[0]:
            return super().__array_wrap__(arr, context, return_scalar)
        arr = np.ndarray.view(arr, np.ndarray)
        return arr[()] if return_scalar else arr

    def __array_function__(self, func, types, args, kwargs):
        if func in _SHAPE_ONLY and not any(isinstance(v, Marked)
                                           for v in (*args[1:], *kwargs.values())):
            return func(*[_plain(a) for a in args], **kwargs)
        r = super().__array_function__(func, types, args, kwargs)
        if self._live() is None or _caller()[0]:
            return r
        mark = type(self)
        if type(r) is np.ndarray:
            return r.view(mark)
        if isinstance(r, (int, float, np.generic)) and not isinstance(r, bool):
            return np.asarray(r).view(mark)  # NOTE: np.count_nonzero(ids): a number
        if type(r) in (tuple, list):
            return type(r)(x.view(mark) if type(x) is np.ndarray else x for x in r)
        return r


def refuse(trace, message):
    """Raise the refusal, and keep it: one caught by the step's code (a log call's handler)
    still refuses the trace when the call ends."""
    if trace.refused is None:
        trace.refused = message
    raise CompileError(message)


def _plain(a):
    return np.ndarray.view(a, np.ndarray) if isinstance(a, Marked) else a


def _seen(a, r):
    """What NumPy's ``np.asarray(a)``-like call (or ``a.view(np.ndarray)``) gave, ``r``,
    as the step's code gets it while ``a``, a marked array, is traced: ``a`` itself where
    ``r`` is a plain view with its exact layout (the argument, to labkit), else ``r`` marked
    as computed from it (a copy, another dtype), so that NumPy code on it is seen."""
    if type(r) is not np.ndarray or a._live() is None or _caller()[0]:
        return r
    if (r.shape == a.shape and r.strides == a.strides and r.dtype == a.dtype
            and r.__array_interface__["data"][0] == a.__array_interface__["data"][0]):
        return a
    return np.ndarray.view(r, type(a))


#: NumPy's functions that give a plain array for a marked one (``subok=False``), seen while a
#: step is traced (``seeing``): ``np.asarray(ids) != 0`` was not (a mask all ones in the two
#: traced calls was replayed for every batch). Code holding the function itself (``from
#: numpy import asarray``, bound before) is not seen.
_CONVERTERS = ("asarray", "array", "ascontiguousarray", "asfortranarray")
#: how many traces are seeing, and what the numpy module held before the first began
_SEEING = {"count": 0, "lock": threading.Lock(), "held": {}}


def _marked_in(a):
    """The marked array ``a`` is, or the first one a list or tuple ``a`` holds (the rows of a
    batch given as a list: ``np.array(rows) != 0``), else None."""
    if isinstance(a, Marked):
        return a
    if type(a) in (list, tuple):
        return next((x for x in a if isinstance(x, Marked)), None)
    return None


def _seeing_fn(fn, name):
    """``fn`` (NumPy's ``name``, or what stood there) giving the step's code a marked result
    for a marked array (``_seen``); every other call as it was, any signature."""
    def convert(*args, **kwargs):
        r = fn(*args, **kwargs)
        m = _marked_in(args[0] if args else kwargs.get("a", kwargs.get("object")))
        # NOTE: for a list of rows, r is a copy: never the argument's own layout, so marked
        return r if m is None else _seen(m, r)

    # NOTE: pickled as NumPy's own (pickle finds it under this name in numpy), as a
    # multiprocessing pool sent np.asarray from another thread is
    convert.__name__ = convert.__qualname__ = name
    convert.__module__ = "numpy"
    convert.__doc__ = getattr(fn, "__doc__", None)
    convert.__wrapped__ = fn
    convert.lk_seeing = True
    return convert


def _start_seeing():
    with _SEEING["lock"]:
        if _SEEING["count"] == 0:
            held = {name: getattr(np, name) for name in _CONVERTERS}
            _SEEING["held"] = held
            for name, fn in held.items():
                setattr(np, name, _seeing_fn(fn, name))
        _SEEING["count"] += 1


def _stop_seeing():
    with _SEEING["lock"]:
        _SEEING["count"] -= 1
        if _SEEING["count"] == 0:
            for name, fn in _SEEING["held"].items():
                # NOTE: what the user's code put there meanwhile (a mock) is left
                if getattr(getattr(np, name, None), "lk_seeing", False) is True:
                    setattr(np, name, fn)
            _SEEING["held"] = {}


def _names(fn, n):
    """The names of ``fn``'s first ``n`` positional parameters, for messages (``ids``,
    ``args[2]``; ``argument 1`` where the signature says nothing)."""
    import inspect

    out = [f"argument {i}" for i in range(n)]
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        return out
    for i in range(n):
        if i < len(params) and params[i].kind in (params[i].POSITIONAL_ONLY,
                                                  params[i].POSITIONAL_OR_KEYWORD):
            out[i] = params[i].name
        else:
            star = next((p for p in params if p.kind == p.VAR_POSITIONAL), None)
            if star is not None:
                first = params.index(star)
                out[i] = f"{star.name}[{i - first}]"
    return out


def unmarked(trace, obj):
    """A step's result with each argument's marked view given back as the argument (a step
    returning its argument returns that array, as an eager call does)."""
    views = trace.arg_views
    if id(obj) in views:
        return views[id(obj)]
    if type(obj) in (tuple, list):
        new = [unmarked(trace, x) for x in obj]
        return obj if all(a is b for a, b in zip(new, obj)) else type(obj)(new)
    if type(obj) is dict:
        new = {k: unmarked(trace, v) for k, v in obj.items()}
        return obj if all(new[k] is obj[k] for k in obj) else new
    return obj


def mark_args(trace, fn, args, kwargs):
    """The step's ``(args, kwargs)`` with each NumPy array (a plain array or a memmap)
    replaced by a marked view that ``trace`` knows as that argument, and a function giving
    lists and dicts their items back. ``trace.arg_views`` maps each view's id to the
    argument. Leaves are walked as ``lk.compile`` flattens them (Tensors and OpenCL arrays
    are left as they are)."""
    from ..autograd.tensor import Tensor
    from ..backend import opencl

    swapped: list = []
    ref = weakref.ref(trace)

    def view(a, label):
        if type(a) not in (np.ndarray, np.memmap):  # NOTE: a masked array is not its data
            return a
        cls = type("ndarray", (Marked,), {"_lk_arg": label, "_lk_trace": ref,
                                          "__module__": "numpy"})
        v = a.view(cls)
        trace.arg_views[id(v)] = a
        trace.ids[id(v)] = trace.ids[id(a)]
        trace.keep.append(v)
        return v

    def walk(obj, label):
        if isinstance(obj, np.ndarray):
            return view(obj, label)
        if isinstance(obj, (Tensor, opencl.ndarray)):
            return obj
        if type(obj) is tuple:
            return tuple(walk(x, f"{label}[{i}]") for i, x in enumerate(obj))
        if type(obj) in (list, dict):  # NOTE: a subclass's __setitem__ is not called
            keys = range(len(obj)) if type(obj) is list else list(obj)
            for key in keys:
                old = obj[key]
                new = walk(old, f"{label}[{key!r}]")
                if new is not old:
                    obj[key] = new
                    swapped.append((obj, key, old, new))
        return obj  # NOTE: a namedtuple or other tuple type is not rebuilt (not marked)

    names = _names(fn, len(args))
    new_args = tuple(walk(x, names[i]) for i, x in enumerate(args))
    new_kwargs = {k: walk(v, k) for k, v in kwargs.items()}
    seeing = bool(trace.arg_views)
    if seeing:
        _start_seeing()

    def restore():
        nonlocal seeing
        if seeing:
            seeing = False
            _stop_seeing()
        for obj, key, old, new in reversed(swapped):
            try:
                if obj[key] is new:
                    obj[key] = old
            except (IndexError, KeyError):
                pass

    return new_args, new_kwargs, restore


def same_as_arg(trace, arr):
    """The slot of the argument whose array ``arr`` is, laid out alike (its marked view, or a
    plain view of either such as ``np.asarray(x)``), else None."""
    if not isinstance(arr, np.ndarray):
        return None
    root = arr
    while root.base is not None and id(root) not in trace.arg_views:
        root = root.base
    orig = trace.arg_views.get(id(root))
    if orig is None:
        s = trace.ids.get(id(root))
        src = trace.sources.get(s) if s is not None else None
        if src is None or src.kind != "arg":
            return None
        orig = src.value
    if (arr.shape != orig.shape or arr.strides != orig.strides or arr.dtype != orig.dtype
            or arr.__array_interface__["data"][0] != orig.__array_interface__["data"][0]):
        return None
    return trace.ids[id(orig)]


def check_raw(trace, arr):
    """Refuse an array that raw array code made from the step's data, which a replay would
    not run again (its values would be those of the traced call): a view (a slice, a
    reshape) of an array the step computes, receives or reads, or what NumPy code computed
    from an argument."""
    root = arr
    while getattr(root, "base", None) is not None:
        root = root.base
    if root is not arr and id(root) in trace.ids:
        src = trace.sources.get(trace.ids[id(root)])
        what = ("an argument" if src is not None and src.kind == "arg" else
                "a tensor the step reads" if src is not None else "a value the step made")
        raise CompileError(
            f"lk.compile: {trace.fn_name} uses an array of shape {tuple(arr.shape)} made "
            f"from {what} with raw array code (a slice or reshape of a NumPy batch or of "
            f".data, such as ids[:, :-1]) at {_caller()[1]}; a replay would reuse the traced "
            "call's values. Use labkit ops on tensors (F.getitem, F.reshape), or compute "
            "it in lk.compile.host(fn, *arrays)")
    x = arr
    while x is not None:
        if isinstance(x, Marked) and x._lk_trace() is trace and id(x) not in trace.arg_views:
            refuse(trace,
                f"lk.compile: {trace.fn_name} gives labkit an array of shape "
                f"{tuple(arr.shape)} that NumPy code computed from {x._lk_arg} at "
                f"{_caller()[1]}; a replay would reuse this call's values. Compute it with "
                "labkit ops on lk.tensor(...) of the argument (lk.tensor(ids) != 0), compute "
                "it before calling the step and pass it in, or run the NumPy code in "
                "lk.compile.host(fn, *arrays)")
        x = getattr(x, "base", None)


def unmark_op(trace, fn, xs):
    """An op's inputs ``xs`` and its attributes (labels, indices it was made with) with each
    argument's marked view replaced by the argument: ops run on the step's own arrays."""
    views = trace.arg_views
    if not views:
        return xs
    d = fn.__dict__
    for k, v in d.items():
        if id(v) in views:
            d[k] = views[id(v)]
        elif type(v) in (tuple, list) and any(id(x) in views for x in v):
            d[k] = type(v)(views.get(id(x), x) for x in v)
    return unmark(trace, xs)


def unmark(trace, xs):
    """``xs`` with each argument's marked view replaced by the argument (ops run on it)."""
    views = trace.arg_views
    if not views:
        return xs
    for x in xs:
        if id(x) in views:
            return [views.get(id(y), y) for y in xs]
    return xs
