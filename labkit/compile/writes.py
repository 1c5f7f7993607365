"""What a traced call changed outside its ops' results: the ``.data`` and ``.grad`` of the
tensors it read that it replaced, checked and recorded in the trace's ``writes`` (a replay
writes them back when it ends). While a call is traced, ``Tensor.data`` and ``.grad`` are
properties over their slots (``data_writes``): a ``.data`` the step sets becomes a ``SetData``
node where it set it, and a ``.grad`` a host function reads through a model a ``SetGrad``
node just before that function, so a replay changes what Python code sees where the eager
call did."""

from __future__ import annotations

import ast
import inspect
import sys
import textwrap
import threading
from contextlib import contextmanager

from ..autograd import trace as _trace
from ..autograd.tensor import Tensor
from ..errors import CompileError

#: the slot descriptors of ``Tensor.data`` and ``.grad`` (properties over them while a step
#: is traced)
_DATA, _GRAD = Tensor.__dict__["data"], Tensor.__dict__["grad"]
_hooked = [0]
_hook_lock = threading.Lock()


class SetData:
    """A replay's ``tensor.data = array`` at the place in the step where the traced call set
    it (a node): a host step reading the tensor after it sees the new array, and a replay
    raising later keeps it, as an eager call does."""

    __slots__ = ("tensor", "arg", "cleanup")

    def __init__(self, tensor, arg=None, cleanup=False):
        # NOTE: a tensor argument by its index: a replay sets that call's argument's data;
        # cleanup: set in a finally block or an __exit__ (runs when the step raises)
        self.tensor, self.arg, self.cleanup = tensor, arg, cleanup

    def __call__(self, arr):
        self.tensor.data = arr


_FINALLY: dict = {}


def _cleanup_code(frame) -> bool:
    """Whether ``frame`` runs an ``__exit__`` or the ``finally`` block of a ``try`` (code that
    runs as an exception unwinds), from the source of its function (read once per code)."""
    code = frame.f_code
    if code.co_name == "__exit__":
        return True
    lines = _FINALLY.get(code)
    if lines is None:
        lines = set()
        try:
            src, first = inspect.getsourcelines(code)
            tree = ast.parse(textwrap.dedent("".join(src)))
        except (OSError, TypeError, SyntaxError, IndentationError):
            tree, first = None, 0
        for node in ast.walk(tree) if tree is not None else ():
            if isinstance(node, ast.Try) and node.finalbody:
                lines.update(range(node.finalbody[0].lineno + first - 1,
                                   node.finalbody[-1].end_lineno + first))
        _FINALLY[code] = lines
    return frame.f_lineno in lines


class ReadData:
    """A replay's read of ``tensor.data`` just after a host function that set it (swapped in
    averaged weights through a model): what the step reads of the tensor after it is that
    array, not its data when the call began."""

    __slots__ = ("tensor",)

    def __init__(self, tensor):
        self.tensor = tensor

    def __call__(self):
        return self.tensor.data


class SetGrad:
    """A replay's ``tensor.grad = Tensor(array)`` (or None) just before a host function that
    reads it through the model (``lk.compile.host(log_grad_norms)``, a hand-written update):
    a replay writes gradients when it ends, so the function read the previous call's."""

    __slots__ = ("tensor", "arg")

    def __init__(self, tensor, arg=None):
        self.tensor, self.arg = tensor, arg

    def __call__(self, arr=None):
        self.tensor.grad = None if arr is None else Tensor(arr)


def _get_data(self):
    return _DATA.__get__(self, Tensor)


def _get_grad(self):
    g = _GRAD.__get__(self, Tensor)
    if _trace.in_host():
        tr = _trace.tracer()
        if tr is not None:
            tr.__dict__.setdefault("grad_reads", []).append(self)
    return g


def _set_data(self, value):
    tr = _trace.tracer()
    old = None
    if tr is not None:
        try:
            old = _DATA.__get__(self, Tensor)
        except AttributeError:  # NOTE: a tensor being made: it does not outlive the call
            tr.__dict__.setdefault("created", set()).add(id(self))
    _DATA.__set__(self, value)
    if old is not None and not _trace.in_host():
        data_set(tr, self, value, old, sys._getframe(1))
    elif old is not None:  # NOTE: by a host function (swapping in averaged weights)
        tr.__dict__.setdefault("host_sets", []).append((self, old))


def _set_grad(self, value):
    _GRAD.__set__(self, value)
    tr = _trace.tracer()
    if tr is not None and not _trace.in_host():
        # NOTE: the call set or cleared this gradient (a host function reading it after is
        # given this call's: grads_read)
        tr.__dict__.setdefault("grad_set", set()).add(id(self))


@contextmanager
def data_writes():
    """While a step is traced, ``tensor.data = ...`` is seen (``data_set``): a property over
    the slot for the time of the trace (every thread's eager code pays for it only then)."""
    with _hook_lock:
        if _hooked[0] == 0:
            Tensor.data = property(_get_data, _set_data, _DATA.__delete__)
            Tensor.grad = property(_get_grad, _set_grad, _GRAD.__delete__)
        _hooked[0] += 1
    try:
        yield
    finally:
        with _hook_lock:
            _hooked[0] -= 1
            if _hooked[0] == 0:
                Tensor.data, Tensor.grad = _DATA, _GRAD


def _outside(tracer, tensor):
    """(whether ``tensor`` outlives the call: one made before it, given, or that its code
    names; its argument index or None)."""
    t = tracer.t
    arg = next((k for k, x in t.arg_tensors.items() if x is tensor), None)
    return (arg is not None or id(tensor) in t.live or id(tensor) in getattr(
        tracer, "named", ()) or id(tensor) not in tracer.__dict__.get("created", ())), arg


def grads_read(tracer) -> None:
    """After a host function ran: each ``.grad`` it read of a tensor that outlives the call,
    that the call set (or cleared), is set by a node just before it at each replay; each
    ``.data`` it set of such a tensor is read by a node just after it."""
    from .trace import Node, where

    reads, tracer.grad_reads = tracer.__dict__.get("grad_reads") or [], []
    t = tracer.t
    fn_node = t.nodes.pop()
    # NOTE: a gradient the function changed in place (mutates=) is read as it was before
    older = {new: old for old, new in fn_node.versions}
    set_here = tracer.__dict__.get("grad_set", set()) | set(t.cleared)
    seen: set = set()
    for p in reads:
        outside, arg = _outside(tracer, p)
        if id(p) in seen or not outside or id(p) not in set_here:
            continue  # NOTE: one from before the call: a replay's is that too
        seen.add(id(p))
        g = _GRAD.__get__(p, Tensor)
        s = None if g is None else t.ids.get(id(_DATA.__get__(g, Tensor)))
        s = older.get(s, s)
        if g is not None and s is None:
            continue  # NOTE: an array no op made: refused when the call ends
        key = id(p) if arg is None else ("argument", arg)
        t.nodes.append(Node("host", SetGrad(p, arg), [] if s is None else [s], [],
                            "set .grad", where(), ("host", "set .grad", key), effect=True,
                            idx=len(t.nodes)))
    fn_node.idx = len(t.nodes)
    t.nodes.append(fn_node)
    sets, tracer.host_sets = tracer.__dict__.get("host_sets") or [], []
    done: set = set()
    for x, old in sets:
        outside, arg = _outside(tracer, x)
        if outside and id(x) not in done:
            done.add(id(x))
            if arg is None:  # NOTE: its data when the call began, if the first set was this
                t.live.setdefault(id(x), (x, _GRAD.__get__(x, Tensor), old))
            key = id(x) if arg is None else ("argument", arg)
            s = t.produce(_DATA.__get__(x, Tensor))
            t.nodes.append(Node("host", ReadData(x), [], [s], "read .data", where(),
                                ("host", "read .data", key), idx=len(t.nodes)))


def data_set(tracer, tensor, value, old, frame=None) -> None:
    """The step set ``tensor.data = value`` (it was ``old``): for a tensor that outlives the
    call and an array the trace knows, a node that sets it there at each replay. (The replay
    still writes the final ``.data`` when it ends: compile/program.py.)"""
    from .trace import Node, is_array, where

    t = tracer.t
    outside, arg = _outside(tracer, tensor)
    if not outside:
        return
    if arg is None and id(tensor) not in t.live:
        # NOTE: its data when the call began (a target network's parameter set before it is
        # read, if at all): checked and written back at the end as those of tensors read
        t.live[id(tensor)] = (tensor, _GRAD.__get__(tensor, Tensor), old)
    key = id(tensor) if arg is None else ("argument", arg)
    s = t.ids.get(id(value))
    if s is None and is_array(value):
        # NOTE: the data of another tensor the step names, not read yet (A.data = B.data):
        # read from it at each replay (raw array code stays refused when the call ends)
        other = next((x for x, _, _ in getattr(tracer, "named", {}).values()
                      if x is not tensor and _DATA.__get__(x, Tensor) is value), None)
        if other is not None:
            s = t.slot_of(value, other)
    if s is None:
        return
    cleanup = frame is not None and _cleanup_code(frame)
    t.nodes.append(Node("host", SetData(tensor, arg, cleanup), [s], [], "set .data", where(),
                        ("host", "set .data", key), effect=True, idx=len(t.nodes)))


def refuse_changed_made(t, fn_name: str) -> None:
    """Refuse an array a labkit op made that raw code then changed in place (``p.grad.data
    *= 0.5``, a hook's ``g.data *= 0.5``, ``logits.data[mask] = 0``): a replay runs the op and
    not the change, so it trained on the unchanged array (manual gradient clipping dropped
    from the third call on). Arrays changed by host steps that say so (``mutates=``), and
    what shares their memory, are not checked."""
    from .passes import root_id as root
    from .trace import checksum

    changed = {root(t.values[old]) for n in t.nodes for old, _ in n.versions
               if old in t.values}
    changed |= {root(v) for v in t.values.values() if id(v) in t.mutated}
    made_by = {o: n for n in t.nodes for o in n.outs}
    for s, total in t.sums.items():
        arr = t.values.get(s)
        if (s in t.sources or arr is None or root(arr) in changed
                or checksum(arr) == total):
            continue
        n = made_by.get(s)
        at = f" (made by {n.name} at {n.where})" if n is not None else ""
        raise CompileError(
            f"lk.compile: {fn_name} changed an array of shape {tuple(arr.shape)} that a labkit "
            f"op made{at} in place outside labkit ops (p.grad.data *= 0.5, x.data[...] = ..., a "
            "hook changing g.data); a replay would not repeat that change. Use labkit ops "
            "(a hook returning g * 0.5, F.clip, F.where), or wrap the raw code in "
            "lk.compile.host(fn, *arrays, effect=True, mutates=(...))")


def record_writes(t, fn_name: str) -> None:
    """Record in ``t.writes`` each replaced ``.data`` and ``.grad`` of the tensors the call
    read (``t.live``) and the ``.grad`` of its tensor arguments; refuse what a replay could
    not repeat."""
    sets = [n for n in t.nodes if isinstance(n.fn, SetData)]
    for n in sets:
        src = t.sources.get(n.ins[0])
        if src is not None and n.fn.arg is None and t.live[id(n.fn.tensor)][2] is not src.value:
            # NOTE: a tensor the step set to an array from outside is not where a replay reads
            # that array (its data when the call begins is another)
            src.tensors = [x for x in src.tensors if x is not n.fn.tensor]
    # NOTE: nor is a tensor the step set to an argument's array (P.data = x.data) that
    # argument's alias, to be checked at each call (every call was traced again)
    t.arg_alias = [(k, x) for k, x in t.arg_alias
                   if not any(n.fn.tensor is x and t.sources.get(n.ins[0]) is not None
                              and t.sources[n.ins[0]].kind == "arg" for n in sets)]
    last = {id(n.fn.tensor): n for n in sets}
    index = _index(t)
    for tensor, grad0, arr0 in t.live.values():
        n = last.get(id(tensor))
        if n is not None and tensor.data is not arr0 and t.values.get(n.ins[0]) is tensor.data:
            # NOTE: set where the step set it, last: nothing to write when the replay ends
            _refuse_replaced_then_changed(t, fn_name, tensor, n.ins[0], index)
        elif tensor.data is not arr0:
            s = t.ids.get(id(tensor.data))
            if s is None or s in t.sources:
                what = "None" if tensor.data is None else "an array no labkit op made"
                raise CompileError(
                    f"lk.compile: {fn_name} replaced the data of a tensor of shape "
                    f"{_shape(arr0)} with {what} (.data = ... or an "
                    "in-place NumPy update); a replay could not repeat it. Update "
                    "parameters with an optimizer, or wrap raw array code in "
                    "lk.compile.host(fn, *arrays)")
            _refuse_replaced_then_changed(t, fn_name, tensor, s, index)
            t.writes.append((tensor, "data", s))
        g = tensor.grad
        if g is None:
            if grad0 is not None:
                t.writes.append((tensor, "grad", None))
        elif g is not grad0:
            s = t.ids.get(id(g.data))
            if s is None:
                raise CompileError(
                    f"lk.compile: {fn_name} set the .grad of a tensor of shape "
                    f"{_shape(arr0)} to an array no labkit op made")
            t.writes.append((tensor, "grad", s))
    written = {id(x) for x, kind, _ in t.writes if kind == "grad"}
    for key, tensor in t.cleared.items():
        # NOTE: set to None by the step (zero_grad), and None at its end: None after a replay
        # too, whatever it was when traced (a program traced while it was None already)
        if key not in written and tensor.grad is None:
            t.writes.append((tensor, "grad", None))
    for k, tensor in t.arg_tensors.items():
        if not any(x.kind == "arg" and x.value is tensor.data for x in t.sources.values()) \
                and not any(
                isinstance(n.fn, SetData) and n.fn.tensor is tensor
                and t.values.get(n.ins[0]) is tensor.data for n in t.nodes):
            # NOTE: an argument's .data replaced where the assignment was not seen (in a host
            # function): a replay left it as given, silently
            raise CompileError(
                f"lk.compile: {fn_name} replaced the data of its tensor argument {k} (now "
                f"{_shape(tensor.data)}) in a way a replay cannot repeat; set it with a labkit "
                "op's result in the step itself (x.data = F.clip(x, -1, 1).data), or return the "
                "new tensor from the step")
        g = tensor.grad
        if g is not None and id(g.data) in t.ids and t.ids[id(g.data)] not in t.sources:
            t.writes.append((k, "arg_grad", t.ids[id(g.data)]))


def _shape(a):
    return tuple(a.shape) if hasattr(a, "shape") else a


def _refuse_replaced_then_changed(t, fn_name, tensor, s, index) -> None:
    """A tensor's data replaced by an op's result that a host step then changed in place
    (``w.data = (w * 0.9).data`` before ``opt.update()``) replays where the replay sets the
    data where the step did (a ``SetData`` node, before the host step), and is refused where
    it does not (the assignment was not seen: the host step would update the old array, and
    the write when the replay ends would drop the update). ``index``: ``_index(t)``."""
    older, changer, sets = index
    chain = [s]
    while chain[-1] in older:
        chain.append(older[chain[-1]])
    # NOTE: set where the step set it (a SetData node): the host step changes the new array
    set_at = min((n.idx for n in sets.get(id(tensor), ()) if n.ins[0] in chain), default=None)
    first = min((changer[x] for x in chain if x in changer), key=lambda n: n.idx, default=None)
    if first is not None and (set_at is None or first.idx < set_at):
        raise CompileError(
            f"lk.compile: {fn_name} replaced the data of a tensor of shape "
            f"{_shape(tensor.data)} with an op's result (.data = ...), which {first.name} at "
            f"{first.where} then changed in place; a replay would change the old data "
            "instead. Replace the data after the update (that is replayed), or change the "
            "parameters with the optimizer (a rule such as weight_decay, or constraints=)")


def _index(t) -> tuple:
    """(newer version -> older, slot -> the first node changing it in place, id(tensor) ->
    its SetData nodes), once for all the tensors of ``record_writes``."""
    older, changer, sets = {}, {}, {}
    for n in t.nodes:
        for old, new in n.versions:
            older[new] = old
            changer.setdefault(old, n)
        if isinstance(n.fn, SetData):
            sets.setdefault(id(n.fn.tensor), []).append(n)
    return older, changer, sets


def refuse_changed_consts(t, fn_name: str) -> None:
    """After ``compare``: refuse a constant of the trace (an array the step made with the same
    values at both calls, not with a labkit op) that a node then changed in place (a
    parameter's ``.data`` set to it before the optimizer's update): its traced value is the
    changed one, and a replay would start each call from it."""
    from .trace import checksum

    changed = {old: n for n in t.nodes for old, _ in n.versions}
    for s, src in t.sources.items():
        n = changed.get(s)
        if src.kind == "const" and n is not None and checksum(src.value) != t.sums.get(s):
            raise CompileError(
                f"lk.compile: {fn_name} made an array of shape {tuple(src.value.shape)} "
                f"outside labkit ops (the same values at each call) that {n.name} at "
                f"{n.where} then changed in place; a replay would start from the changed "
                "values. Make it with a labkit op (lk.tensor(a) * 1.0), or pass it in as an "
                "argument")
