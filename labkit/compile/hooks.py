"""What a traced step does to tensors outside labkit ops, seen as it does it, so that a replay
changes what Python code sees where the eager call did.

While a call is traced, ``Tensor.data`` and ``Tensor.grad`` are properties over their slots
(:func:`watching`), and the tracer's :class:`Watch` is told:

- a ``.data`` the step sets on a tensor that outlives the call becomes a :class:`SetData`
  node where it set it (an optimizer or host function after it sees the new array; a replay
  raising later keeps it; one set back in a ``finally`` block or an ``__exit__`` is set back
  when a replay raises in between);
- a ``.grad`` an ``lk.compile.host`` function reads through a model, that the call set or
  cleared, becomes a :class:`SetGrad` node just before that function (a replay writes the
  other gradients when it ends);
- a ``.data`` such a function sets through a model becomes a :class:`ReadData` node just
  after it (what the step reads of the tensor afterwards is that array).

Eager code pays nothing outside a trace: the class gets its slot descriptors back when the
trace ends, except on Python 3.13 and later after ``SWAPS`` traces, where changing the class
at every trace would use up its type versions (attribute lookups on every tensor would stay
unspecialised for the life of the process): the properties then stay.
"""

from __future__ import annotations

import ast
import linecache
import os
import sys
import threading
from contextlib import contextmanager

from ..autograd import trace as _trace
from ..autograd.tensor import Tensor

#: the slot descriptors of ``Tensor.data`` and ``.grad``
DATA, GRAD = Tensor.__dict__["data"], Tensor.__dict__["grad"]
#: traces after which the properties stay installed, where ``KEEP`` (see the module's doc)
SWAPS = 300
KEEP = sys.version_info >= (3, 13)
_state = {"depth": 0, "swaps": 0, "stay": False}
_lock = threading.Lock()


class _Set:
    """What a replay sets on a tensor: the tensor, or a tensor argument's index (the replay's
    argument then: program.py writes ``AT[k]``)."""

    __slots__ = ("tensor", "arg")

    def __init__(self, tensor, arg=None):
        self.tensor = None if arg is not None else tensor
        self.arg = arg

    @property
    def key(self):
        """The same for the same tensor in two traced calls."""
        return id(self.tensor) if self.arg is None else ("argument", self.arg)


class SetData(_Set):
    """A replay's ``tensor.data = array`` where the traced call set it (``cleanup``: set in a
    ``finally`` block or an ``__exit__``, which runs as an exception unwinds)."""

    __slots__ = ("cleanup",)

    def __init__(self, tensor, arg=None, cleanup=False):
        super().__init__(tensor, arg)
        self.cleanup = cleanup

    def __call__(self, arr):
        self.tensor.data = arr


class SetGrad(_Set):
    """A replay's ``tensor.grad = Tensor(array)`` (or None) just before a host function that
    reads it through a model (a gradient-norm log, a hand-written update): without it, the
    function would read the gradient the previous call left."""

    __slots__ = ()

    def __call__(self, arr=None):
        self.tensor.grad = None if arr is None else Tensor(arr)


class ReadData:
    """A replay's read of ``tensor.data`` just after a host function that set it."""

    __slots__ = ("tensor",)

    def __init__(self, tensor):
        self.tensor = tensor

    def __call__(self):
        return self.tensor.data


class Watch:
    """One traced call's view of tensors' ``.data`` and ``.grad`` (``tracer.watch``)."""

    def __init__(self, t, named):
        self.t = t
        #: id -> (tensor, grad, data) of the tensors the step's code names (guards)
        self.named = named
        self.created: set = set()       # ids of tensors made during the trace
        self.grad_set: set = set()      # ids of tensors whose .grad the call set or cleared
        self.grad_before: dict = {}     # id -> the .grad it had before the call set it
        # NOTE: also the trace's, for writes.record_writes when the call ends
        t.created, t.grad_before = self.created, self.grad_before
        self.grad_reads: list = []      # (tensor, its .grad) a host function read
        self.host_sets: list = []       # (tensor, old data) a host function set

    def outside(self, tensor):
        """(whether ``tensor`` outlives the call: made before it, given, or named; its
        argument index or None)."""
        t = self.t
        arg = next((k for k, x in t.arg_tensors.items() if x is tensor), None)
        return (arg is not None or id(tensor) in self.named
                or id(tensor) not in self.created), arg

    def grad0(self, tensor):
        """``tensor``'s gradient when the call began."""
        key = id(tensor)
        if key in self.grad_before:
            return self.grad_before[key]
        return GRAD.__get__(tensor, Tensor)

    def data_set(self, tensor, value, old, frame) -> None:
        """The step set ``tensor.data = value`` (it was ``old``): for a tensor that outlives
        the call and an array the trace knows, a node that sets it there at each replay."""
        from .trace import Node, is_array, where

        t = self.t
        outside, arg = self.outside(tensor)
        if not outside:
            return
        if arg is None and id(tensor) not in t.live:
            # NOTE: its data when the call began (a target network's parameter set before
            # it is read, if at all): checked and written back as those of tensors read
            t.live[id(tensor)] = (tensor, self.grad0(tensor), old)
        s = t.ids.get(id(value))
        if s is None and is_array(value):
            # NOTE: the data of another tensor the step names, not read yet (A.data =
            # B.data): read from it at each replay (raw array code stays refused)
            other = next((x for x, _, _ in self.named.values()
                          if x is not tensor and DATA.__get__(x, Tensor) is value), None)
            if other is not None:
                s = t.slot_of(value, other)
        if s is None:
            return
        fn = SetData(tensor, arg, _cleanup(frame))
        t.nodes.append(Node("host", fn, [s], [], "set .data", where(),
                            ("host", "set .data", fn.key), effect=True, idx=len(t.nodes)))

    def host_start(self) -> None:
        """A host function begins (what one that raised left is dropped)."""
        self.grad_reads, self.host_sets = [], []

    def host_done(self) -> None:
        """After a host function ran (its node the trace's last): each ``.grad`` it read that
        the call set or cleared is set by a node just before it, and each ``.data`` it set is
        read by a node just after it."""
        if not self.grad_reads and not self.host_sets:
            return
        from .trace import Node, where

        t = self.t
        fn_node = t.nodes.pop()
        # NOTE: a gradient the function changed in place (mutates=): as it was before
        older = {new: old for old, new in fn_node.versions}
        reads, self.grad_reads = self.grad_reads, []
        set_here = self.grad_set | set(t.cleared)
        seen: set = set()
        for p, g in reads:  # NOTE: g: the .grad when the function read it
            outside, arg = self.outside(p)
            if id(p) in seen or not outside or id(p) not in set_here:
                continue  # NOTE: one from before the call: a replay's is that too
            seen.add(id(p))
            s = None
            if g is not None:
                s = t.ids.get(id(DATA.__get__(g, Tensor)))
                s = older.get(s, s)
            if g is not None and s is None:
                continue  # NOTE: an array no op made: refused when the call ends
            fn = SetGrad(p, arg)
            t.nodes.append(Node("host", fn, [] if s is None else [s], [], "set .grad",
                                where(), ("host", "set .grad", fn.key), effect=True,
                                idx=len(t.nodes)))
        fn_node.idx = len(t.nodes)
        t.nodes.append(fn_node)
        sets, self.host_sets = self.host_sets, []
        done: set = set()
        for x, old in sets:
            outside, arg = self.outside(x)
            if not outside or arg is not None or id(x) in done:
                continue  # NOTE: an argument's: refused when the call ends
            done.add(id(x))
            t.live.setdefault(id(x), (x, self.grad0(x), old))
            s = t.produce(DATA.__get__(x, Tensor))
            t.nodes.append(Node("host", ReadData(x), [], [s], "read .data", where(),
                                ("host", "read .data", id(x)), idx=len(t.nodes)))


# ---- the properties ----------------------------------------------------------------------


def _watch():
    tr = _trace.tracer()
    return None if tr is None else getattr(tr, "watch", None)


def _get_grad(self):
    g = GRAD.__get__(self, Tensor)
    if _trace.in_host():
        w = _watch()
        if w is not None:
            w.grad_reads.append((self, g))
    return g


def _set_data(self, value):
    w = _watch()
    if w is None:
        DATA.__set__(self, value)
        return
    try:
        old = DATA.__get__(self, Tensor)
    except AttributeError:  # NOTE: a tensor being made: it does not outlive the call
        old = None
        w.created.add(id(self))
    DATA.__set__(self, value)
    if old is None:
        return
    if _trace.in_host():  # NOTE: by a host function (swapping in averaged weights)
        w.host_sets.append((self, old))
    else:
        w.data_set(self, value, old, sys._getframe(1))


def _set_grad(self, value):
    w = _watch()
    if w is not None and not _trace.in_host() and id(self) not in w.created:
        # NOTE: the call set or cleared this gradient (what a host function reading it
        # after is given: Watch.host_done); the one before, for the end of the call
        try:
            w.grad_before.setdefault(id(self), GRAD.__get__(self, Tensor))
        except AttributeError:
            pass
        w.grad_set.add(id(self))
    GRAD.__set__(self, value)


@contextmanager
def watching():
    """The properties over ``Tensor.data`` and ``.grad`` while a call is traced (nested and
    threaded traces share them; each thread's tracer sees its own sets)."""
    with _lock:
        if _state["depth"] == 0 and not _state["stay"]:
            Tensor.data = property(DATA.__get__, _set_data, DATA.__delete__)
            Tensor.grad = property(_get_grad, _set_grad, GRAD.__delete__)
            _state["swaps"] += 1
        _state["depth"] += 1
    try:
        yield
    finally:
        with _lock:
            _state["depth"] -= 1
            if _state["depth"] == 0 and not _state["stay"]:
                if KEEP and _state["swaps"] >= SWAPS:
                    _state["stay"] = True
                else:
                    Tensor.data, Tensor.grad = DATA, GRAD


def _forked() -> None:
    """In a child forked during a trace: only the forking thread lives on, tracing or not."""
    global _lock
    _lock = threading.Lock()
    _state["depth"] = 1 if _watch() is not None else 0
    if _state["depth"] == 0 and not _state["stay"]:
        Tensor.data, Tensor.grad = DATA, GRAD


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forked)


# ---- finally blocks -------------------------------------------------------------------------

#: filename -> (its lines, the line numbers inside ``finally`` blocks)
_FINALLY: dict = {}
_TRIES = (ast.Try, ast.TryStar) if hasattr(ast, "TryStar") else (ast.Try,)


def _cleanup(frame, depth: int = 8) -> bool:
    """Whether the assignment in ``frame`` runs as an exception would unwind: in an
    ``__exit__`` or a ``finally`` block, in that frame or one of the few that called it
    (``finally: restore(w, old)``, an ``ExitStack`` callback), up to the step's call. From
    the source file (read once per file); False where there is none (``exec``)."""
    stop = os.path.dirname(os.path.abspath(__file__))
    while frame is not None and depth > 0:
        code, name = frame.f_code, frame.f_code.co_filename
        if not name.startswith("<") and os.path.dirname(os.path.abspath(name)) == stop:
            return False  # NOTE: lk.compile's own frames: above the step
        # NOTE: a @contextmanager's __exit__ runs its code after the yield, which runs on an
        # exception only in that code's own finally (found in its frame)
        if (code.co_name == "__exit__" and type(frame.f_locals.get("self")).__name__
                != "_GeneratorContextManager" or frame.f_lineno in _finally_lines(name)):
            return True
        frame, depth = frame.f_back, depth - 1
    return False


def _finally_lines(filename) -> set:
    if filename.startswith("<"):
        return set()
    lines = linecache.getlines(filename)
    held = _FINALLY.get(filename)
    if held is not None and held[0] is lines:
        return held[1]
    out: set = set()
    try:
        tree = ast.parse("".join(lines)) if lines else None
    except Exception:  # noqa: BLE001 - a file that does not parse: no finally known
        tree = None
    for node in ast.walk(tree) if tree is not None else ():
        if isinstance(node, _TRIES) and node.finalbody:
            out.update(range(node.finalbody[0].lineno, node.finalbody[-1].end_lineno + 1))
    _FINALLY[filename] = (lines, out)
    return out
