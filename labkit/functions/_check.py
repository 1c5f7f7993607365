"""Argument checks run by every public function of ``labkit.functions`` before it computes
anything (Chainer's ``type_check``, without the expression trees).

Each check returns the argument in the form the op uses (an axis as a non-negative int, a shape
as a tuple of ints, labels as a device array) or raises one of labkit's errors, whose message
names the op, the argument, what was expected, what was found and the fix::

    expand_dims: axis 7 is out of range for a result of 3 dimensions (x.shape=(2, 3));
    use -3 <= axis < 3

Errors: ``DTypeError`` (a ``TypeError``) for a value of the wrong type or dtype, ``ShapeError``
(a ``ValueError``) for shapes and axes that do not fit, ``ValueError`` for an option out of
range, ``IndexError`` for labels and ids out of range (as NumPy's indexing), and
``DeviceMismatchError`` for arrays on another device.

NOTE: these run on every step, inside backward passes too, so each is a few type tests and
comparisons of small tuples; nothing here reads device memory except ``indices`` on an OpenCL
device with ``LABKIT_CHECK_INDICES`` on (one scalar read per call, as index bounds checks).
"""

from __future__ import annotations

import numbers
import operator

import numpy as np

from .. import config
from ..autograd.tensor import Tensor
from ..autograd.trace import host, tracer
from ..backend import opencl as cl
from ..backend.opencl import context as opencl_context
from ..backend.opencl import xent as _xent
from ..errors import DeviceMismatchError, DTypeError, IndexingError, ShapeError


def _found(v) -> str:
    """What ``v`` is, for a message: ``a numpy.ndarray of shape (3,)``, ``a list``, ``None``."""
    if v is None:
        return "None"
    if isinstance(v, np.ndarray):
        return f"a numpy.ndarray of shape {v.shape}"
    if isinstance(v, cl.ndarray):
        return f"an OpenCL array of shape {v.shape} (not a Tensor)"
    name = type(v).__name__
    return f"{'an' if name[:1] in 'aeiou' else 'a'} {name}"


# ---- Tensors -------------------------------------------------------------------------------


def tensor(x, op: str, name: str = "x") -> Tensor:
    """``x`` if it is a Tensor; else ``DTypeError`` that says how to make one."""
    if isinstance(x, Tensor):
        return x
    raise DTypeError(f"{op}: {name} must be a Tensor, got {_found(x)}; make one with "
                     f"lk.tensor({name}, device=...)")


def tensors(xs, op: str, name: str = "xs") -> list:
    """A non-empty list or tuple of Tensors of one dtype, as a list."""
    if isinstance(xs, Tensor) or not isinstance(xs, (list, tuple)):
        raise DTypeError(f"{op}: {name} must be a list or tuple of Tensors, got {_found(xs)}; "
                         f"pass a list such as [x, y]")
    if not xs:
        raise ValueError(f"{op}: {name} is empty; give at least one Tensor")
    for i, x in enumerate(xs):
        tensor(x, op, f"{name}[{i}]")
    dt = xs[0].dtype
    for i, x in enumerate(xs):
        if x.dtype != dt:
            raise DTypeError(f"{op}: {name}[{i}] is {x.dtype} but {name}[0] is {dt}; cast one "
                             f"with .astype(...) (no silent promotion)")
    return list(xs)


def floating(x: Tensor, op: str, name: str = "x") -> Tensor:
    """A Tensor of a floating dtype (a differentiable input)."""
    tensor(x, op, name)
    if x.dtype.kind != "f":
        raise DTypeError(f"{op}: {name} must be floating, got dtype {x.dtype}; cast it with "
                         f"{name}.astype(np.float32)")
    return x


def float_input(x: Tensor, op: str, least=np.float16) -> Tensor:
    """``x`` (a Tensor), an integer or bool one cast to the float dtype NumPy computes its
    float functions in (float16 for bools and 8-bit integers, float64 for 32- and 64-bit
    ones; float16 refused on OpenCL devices, naming the cast to make). Functions composed of
    several steps (``x - max``, ``-|x|``) take it first: in the integer dtype those steps
    wrapped around (a softmax of uint8 logits was all zeros). ``least=np.float32`` for a
    reduction: a sum of 65,504 exponentials overflows float16."""
    tensor(x, op)
    if x.dtype.kind in "biu":
        if isinstance(x.data, np.ndarray) or least != np.float16:
            ft = np.result_type(x.dtype, least)
        else:
            from ..backend.opencl.promotion import float_of

            ft = float_of(op, [x.data], x.dtype)
        return x.astype(ft)
    return x


def same_dtype(op: str, **named) -> None:
    """Tensors (None skipped) that must share one dtype: ``same_dtype("linear", x=x, W=W)``."""
    first = None
    for name, t in named.items():
        if t is None:
            continue
        if first is None:
            first = (name, t.dtype)
        elif t.dtype is not first[1] and t.dtype != first[1]:  # NOTE: `is` first: 10x faster
            raise DTypeError(f"{op}: {name} is {t.dtype} but {first[0]} is {first[1]}; cast "
                             f"one with .astype(...) (no silent promotion)")


# ---- axes and shapes -----------------------------------------------------------------------


def integer(v, op: str, name: str) -> int:
    """A Python or NumPy integer as an int (a bool or a float is an error, not 1 or 1.0)."""
    if type(v) is int:
        return v
    if isinstance(v, (bool, np.bool_)) or not isinstance(v, (numbers.Integral, np.integer)):
        raise DTypeError(f"{op}: {name} must be an int, got {v!r} ({type(v).__name__})")
    return operator.index(v)


def axis(a, ndim: int, op: str, shape, name: str = "axis", what: str = "x") -> int:
    """One axis of an ``ndim``-dimensional array, in ``[0, ndim)`` (negative counts from the
    end); an axis that would wrap around is an error, not a different axis."""
    a = integer(a, op, name)
    if -ndim <= a < ndim:
        return a + ndim if a < 0 else a
    if not ndim:
        raise ShapeError(f"{op}: {name} {a} given for a 0-dimensional {what}; use {name}=None")
    where = (f"{what} of shape {shape}" if len(shape) == ndim else
             f"a result of {ndim} dimensions ({what}.shape={shape})")
    raise ShapeError(f"{op}: {name} {a} is out of range for {where}; use "
                     f"{-ndim} <= {name} < {ndim}")


def axes(value, ndim: int, op: str, shape, name: str = "axis", what: str = "x"):
    """``None`` (every axis) or the sorted tuple of distinct axes in ``value`` (an int or a
    tuple/list of ints)."""
    if value is None:
        return None
    if type(value) is int and 0 <= value < ndim:  # the common case, without calls
        return (value,)
    if not isinstance(value, (tuple, list)):
        return (axis(value, ndim, op, shape, name, what),)
    out = tuple(axis(a, ndim, op, shape, name, what) for a in value)
    if len(set(out)) != len(out):
        rep = next(a for a in out if out.count(a) > 1)
        raise ShapeError(f"{op}: {name} {tuple(value)} names axis {rep} twice ({what}.shape="
                         f"{shape}); give each axis once")
    return tuple(sorted(out))


def permutation(value, ndim: int, op: str, shape, what: str = "x") -> tuple:
    """``value`` as a permutation of ``range(ndim)`` (negative axes count from the end)."""
    if not isinstance(value, (tuple, list)):
        raise DTypeError(f"{op}: axes must be a tuple of ints, got {value!r}")
    if len(value) != ndim:
        raise ShapeError(f"{op}: axes {tuple(value)} has {len(value)} entries but {what} has "
                         f"{ndim} dimensions ({what}.shape={shape}); give each of "
                         f"0..{ndim - 1} once")
    out = tuple(integer(a, op, "axes") for a in value)
    out = tuple(a + ndim if a < 0 else a for a in out)
    if len(set(out)) != ndim or not all(0 <= a < ndim for a in out):
        raise ShapeError(f"{op}: axes {tuple(value)} is not a permutation of the {ndim} axes "
                         f"of {what} ({what}.shape={shape}); give each of 0..{ndim - 1} once")
    return out


def shape(value, op: str, name: str = "shape", allow_minus_one: bool = False) -> tuple:
    """A shape as a tuple of non-negative ints (one ``-1`` where ``allow_minus_one``)."""
    if type(value) is tuple:  # the common case, without calls
        for d in value:
            if type(d) is not int or d < 0:
                break
        else:
            return value
    if not isinstance(value, (tuple, list)):
        value = (value,)
    out = tuple(integer(d, op, name) for d in value)
    for d in out:
        if d < 0 and not (allow_minus_one and d == -1 and out.count(-1) == 1):
            hint = " (one -1 at most)" if allow_minus_one else ""
            raise ShapeError(f"{op}: {name} {out} has a negative size{hint}")
    return out


def broadcast(op: str, a, b, names=("a", "b")) -> tuple:
    """The broadcast of shapes ``a`` and ``b`` (NumPy's rule), or ``ShapeError`` naming the
    axis that does not fit."""
    if a == b:
        return a
    # NOTE: plain loops over the shorter shape (no padding, generators or zip): every
    # broadcasting binary op calls this
    long, short = (a, b) if len(a) >= len(b) else (b, a)
    k = len(long) - len(short)
    out = list(long)
    for i in range(len(short)):
        x, y = long[k + i], short[i]
        if x != y:
            if x == 1:
                out[k + i] = y
            elif y != 1:
                ax = i - len(short)  # from the end: both shapes have this axis
                raise ShapeError(f"{op}: shapes {tuple(a)} and {tuple(b)} do not broadcast "
                                 f"(axis {ax}: {a[ax]} against {b[ax]}); {names[0]}.shape="
                                 f"{tuple(a)}, {names[1]}.shape={tuple(b)}")
    return tuple(out)


def window(value, op: str, name: str, low: int) -> tuple:
    """An int or a pair of ints, each at least ``low``, as a pair."""
    v = (value, value) if not isinstance(value, (tuple, list)) else tuple(value)
    if len(v) != 2:
        raise ValueError(f"{op}: {name} must be an int or a pair of ints, got {value!r}")
    v = tuple(integer(a, op, name) for a in v)
    if v[0] < low or v[1] < low:
        raise ValueError(f"{op}: {name} must be at least {low}, got {value!r}")
    return v


# ---- values --------------------------------------------------------------------------------


def scalar(v, op: str, name: str):
    """A real Python or NumPy number."""
    if isinstance(v, (numbers.Real, np.integer, np.floating)) and not isinstance(v, bool):
        return v
    if hasattr(v, "_lk_given"):  # NOTE: NumPy code on a traced step's argument (argmarks.py)
        v._lk_given()
    raise DTypeError(f"{op}: {name} must be a real number, got {v!r} ({type(v).__name__})")


def choice(v, options, op: str, name: str):
    """One of ``options`` (``reduce="mean"``)."""
    if v not in options:
        raise ValueError(f"{op}: {name} must be one of {', '.join(map(repr, options))}, got "
                         f"{v!r}")
    return v


def data(v, like: Tensor, op: str, name: str, move: bool = True):
    """A non-differentiable input (labels, targets, ids, masks): a Tensor, a device array, a
    NumPy array or a list, as an array on ``like``'s device (host values are copied there: the
    input pipeline's copy; with ``move=False`` they stay NumPy arrays)."""
    d = v.data if isinstance(v, Tensor) else v
    if isinstance(d, (list, tuple, np.generic)):  # NOTE: np.generic: a 0-d array's value
        d = np.asarray(d)
    if isinstance(d, np.ndarray):
        if d.dtype.kind not in "biuf":
            raise DTypeError(f"{op}: {name} must hold numbers, got dtype {d.dtype}")
        if move and isinstance(like.data, cl.ndarray):
            rt = like.data.rt
            # NOTE: a replay of a compiled step copies that call's array (an argument)
            return host(lambda a: cl.asarray(a, device=rt), d, name=f"upload {name}")
        return d
    if isinstance(d, cl.ndarray):
        if not isinstance(like.data, cl.ndarray) or d.rt is not like.data.rt:
            raise DeviceMismatchError(
                f"{op}: {name} is on {d.device} but the op's tensors are on {like.device}; move "
                f"it with lk.tensor({name}, device='{like.device}')")
        return d
    raise DTypeError(f"{op}: {name} must be an array, a list or a Tensor, got {_found(v)}")


def integers(d, op: str, name: str):
    """An array of integers (labels, ids): a float array is refused, not truncated."""
    if d.dtype.kind not in "iu":
        raise DTypeError(f"{op}: {name} must be integers, got dtype {d.dtype}; cast them with "
                         f".astype(np.int64)")
    return d


def indices(d, n: int, op: str, name: str, what: str, ignore=None) -> None:
    """Integer ``d`` (NumPy or OpenCL) in ``[0, n)``, or equal to ``ignore``; else
    ``IndexError`` naming the first bad value and where it is.

    NOTE: an OpenCL array is checked on the device and one flag read back (a sync), only when
    ``LABKIT_CHECK_INDICES`` is on; NumPy arrays always (two reductions of the labels).

    Inside a compiled step's trace the check is recorded, so that every replay checks that
    call's indices as an eager call would (a replay never computes with a bad label silently).
    A replay reads the device's flag back without waiting (``opencl.context.deferred_checks``)
    and looks at it before its next step that changes state (an optimizer's update) and
    before it returns, so the call raises before anything is updated, without draining the
    queue in the middle of the step."""
    if tracer() is not None:
        def check(a):
            _indices(a, n, op, name, what, ignore)
        check.lk_check = True  # NOTE: a replay does not wait for earlier checks before it
        host(check, d, effect=True, name=f"{op}: check {name}")
        return
    _indices(d, n, op, name, what, ignore)


def _indices(d, n, op, name, what, ignore):
    if not d.size:
        return
    if isinstance(d, np.ndarray):
        if d.size <= 256:  # NOTE: Python's min/max of a short list: 1 us, NumPy's: 5 us each
            flat = d.ravel().tolist()
            lo, hi = min(flat), max(flat)
        else:
            lo, hi = d.min(), d.max()
        if 0 <= lo and hi < n:
            return
        bad = (d >= n) | (d < 0)
        if ignore is not None and not (d.dtype.kind == "u" and ignore < 0):
            bad &= d != ignore  # NOTE: an unsigned label never equals a negative ignore
        if bad.any():
            _raise(d, bad, n, op, name, what, ignore)
        return
    if not config.get("LABKIT_CHECK_INDICES"):
        return
    never = ignore is None or (d.dtype.kind == "u" and ignore < 0)
    if d.is_contiguous:  # NOTE: one launch
        anybad = _xent.any_outside(d, n, ignore)
    else:
        bad = cl.logical_or(d >= n, d < 0)
        if not never:
            bad = cl.logical_and(bad, d != ignore)
        anybad = bad.any()
    if opencl_context.deferring():  # NOTE: a compiled step's replay (see indices)
        opencl_context.defer_check(
            anybad, lambda: _bad_labels(d.get(), n, op, name, what, ignore, never))
    elif bool(anybad.item()):
        _bad_labels(d.get(), n, op, name, what, ignore, never)


def _bad_labels(h, n, op, name, what, ignore, never):
    """Raise the IndexError for the host copy ``h`` of labels a device check found bad."""
    bad = (h >= n) | (h < 0)
    if not never:
        bad &= h != ignore
    if not bad.any():  # NOTE: changed in place after the check was queued
        raise IndexingError(f"{op}: {name} were outside [0, {n}) for {what} when checked on "
                            "the device and have changed since; pass the step its own copy")
    _raise(h, bad, n, op, name, what, ignore)


def _raise(h, bad, n, op, name, what, ignore):
    pos = tuple(int(i) for i in np.argwhere(bad)[0])
    val = int(h[pos])
    ign = "" if ignore is None else f" or ignore_label={ignore}"
    raise IndexingError(f"{op}: {name}{list(pos)} is {val}, outside [0, {n}) for {what}; "
                     f"every {name[:-1] if name.endswith('s') else name} must be in "
                     f"[0, {n}){ign}")
