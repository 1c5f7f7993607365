"""Tracing: one call of a step, run for real, recorded as a flat list of nodes over slots.

A slot is one array value of the step. It is made by a node (an op's output, an array an op
saved on itself, a host computation's result) or comes from outside: an argument of the step,
a tensor that lives on between calls (a parameter: read at each replay), or a constant made
inside the step. Whether an outside value is live or constant is decided by comparing two
traced calls (:func:`compare`): the same tensor or the same array object both times is live;
anything else must have the same value both times, or the step cannot be compiled.
"""

from __future__ import annotations

import numbers
import os
import sys
import zlib
from dataclasses import dataclass, field

import numpy as np

from ..autograd.function import Function
from ..autograd.tensor import Tensor
from ..backend import opencl
from ..errors import CompileError
from .argmarks import check_raw, same_as_arg, unmark, unmark_op
from .hostcode import host_codes_of
from .rngs import refuse_draw, rng_state
from .writes import record_writes, refuse_changed_made

_ARRAYS = (np.ndarray, opencl.ndarray)
_PKG = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def is_array(v) -> bool:
    return isinstance(v, _ARRAYS)


def where() -> str:
    """``file:line`` of the innermost frame outside labkit (the user's line that made an op)."""
    f = sys._getframe(2)
    while f is not None and f.f_code.co_filename.startswith(_PKG):
        f = f.f_back
    if f is None:
        return "inside labkit"
    return f"{os.path.basename(f.f_code.co_filename)}:{f.f_lineno}"


@dataclass(eq=False)
class Node:
    """One recorded computation: a labkit op (``fn`` a Function, replayed by its ``forward``;
    with ``into``, its ``forward_into``) or a host computation (a callable of arrays)."""

    kind: str                 # "op" | "host"
    fn: object
    ins: list                 # input slots
    outs: list                # output slots
    name: str
    where: str                # the user's line that made it
    sig: tuple = ()           # the op's type and constants, for comparing traces and merging
    attr_in: list = field(default_factory=list)    # (attribute, index or None, slot)
    attr_out: list = field(default_factory=list)   # (attribute, index or None, slot)
    effect: bool = False      # changes state: always runs
    consts: list = field(default_factory=list)     # (attribute, index, array) it was made with
    idx: int = -1             # its position in the trace (what other ops' refs name)
    multi: bool = False       # returns a tuple
    versions: list = field(default_factory=list)   # (slot, slot): changed in place by the node
    into: tuple | None = None  # (output, array): an op writes that output there (stacked.py)


@dataclass(eq=False)
class Source:
    """Where a slot not made by a node comes from."""

    kind: str                 # "arg" | "ext" (then "live", "live_array" or "const" after compare)
    arg: int = -1             # the argument's index among the step's array leaves
    tensor: object = None     # ext: the tensor it was read from (None: a raw array)
    value: object = None      # ext: the array
    tensors: list = field(default_factory=list)  # ext: every tensor it was read from


class Trace:
    """What one traced call did."""

    def __init__(self, arg_arrays):
        self.fn_name, self.out_tree = "the step", None
        self.nodes: list[Node] = []
        self.sources: dict[int, Source] = {}
        self.n_slots = 0
        self.ids: dict[int, int] = {}      # id(array) -> slot
        self.keep: list = []               # every array seen, alive (ids stay unique)
        self.live: dict[int, tuple] = {}   # id(tensor) -> (tensor, its grad and data when read)
        self.cleared: dict = {}            # id(tensor) -> a tensor whose .grad it set to None
        self.depends: list = []            # (object, attribute, value) the step read
        self.writes: list = []             # (tensor, "data" | "grad", slot or None)
        self.values: dict[int, object] = {}  # slot -> its array in this call
        self.sums: dict[int, int] = {}     # slot -> a checksum of its values when read or made
        self.mutated: set = set()          # ids of the arrays host effects change in place
        self.arg_tensors: dict[int, Tensor] = {}  # argument index -> the Tensor passed
        self.arg_alias: list = []          # (argument index, a tensor read whose data it is)
        self.made: set = set()             # ids of tensors an op made around an array operand
        self.arg_views: dict = {}          # id(marked view) -> the argument (argmarks.py)
        self.refused = None                # a refusal the step's code caught (argmarks.py)
        for k, a in enumerate(arg_arrays):
            if id(a) not in self.ids:
                s = self._new()
                self.sources[s] = Source("arg", arg=k, value=a)
                self.ids[id(a)] = s
                self.keep.append(a)
                self.values[s] = a
                self.sums[s] = checksum(a)  # NOTE: raw code changing it in place is refused

    def slim(self) -> None:
        """Keep only what ``compare`` reads of this trace (its nodes' kinds, signatures and
        slots, its sources, results and writes), not the step's intermediate arrays nor its
        functions (which hold them): a first call's trace waiting for the second is small."""
        self.values = {s: v for s, v in self.values.items() if s in self.sources}
        self.keep, self.live, self.sums, self.cleared, self.arg_views = [], {}, {}, {}, {}
        for n in self.nodes:
            n.fn = None

    def check_raw(self, arr):  # NOTE: argmarks.check_raw
        check_raw(self, arr)

    def made_here(self, tensor) -> None:
        """``tensor`` wraps an operand (``as_tensor``): it dies with the call, no alias."""
        self.made.add(id(tensor))
        self.keep.append(tensor)  # NOTE: alive, so that its id stays its own

    def _new(self) -> int:
        s = self.n_slots
        self.n_slots += 1
        return s

    def produce(self, arr) -> int:
        s = self._new()
        self.ids[id(arr)] = s
        # NOTE: a value that is a view of a buffer of its own (an OpenCL result laid out in
        # its operand's memory order is a transpose of one): slices of it are found by root
        root = getattr(arr, "base", None)
        while getattr(root, "base", None) is not None:
            root = root.base
        if root is not None and id(root) not in self.ids:
            self.ids[id(root)] = s
        self.keep.append(arr)
        self.values[s] = arr
        self.sums[s] = checksum(arr)  # NOTE: changed in place by raw code: refused
        return s

    def slot_of(self, arr, tensor=None) -> int:
        s = self.ids.get(id(arr))
        if s is None and self.arg_views and (s := same_as_arg(self, arr)) is not None:
            self.ids[id(arr)] = s  # NOTE: np.asarray(x) of an argument x: x
            self.keep.append(arr)
        if s is not None:
            src = self.sources.get(s)
            if (src is not None and src.kind == "arg" and tensor is not None
                    and tensor.creator is None and tensor is not self.arg_tensors.get(src.arg)
                    and id(tensor) not in self.made
                    and all(x is not tensor for _, x in self.arg_alias)):
                # NOTE: an argument that is the data of a tensor read elsewhere (W.data passed in,
                # and the brick holding W): a replay reads it for both: that tensor's data again
                self.arg_alias.append((src.arg, tensor))
            if src is not None and src.kind == "ext" and tensor is not None:
                # NOTE: another tensor on the same array (p and p.detach()): each is a
                # candidate for the one that lives on between calls
                if all(x is not tensor for x in src.tensors):
                    src.tensors.append(tensor)
                if tensor.creator is None and id(tensor) not in self.live:
                    self.live[id(tensor)] = (tensor, tensor.grad, arr)
            return s
        self.check_raw(arr)
        s = self._new()
        self.sources[s] = Source("ext", tensor=tensor, value=arr,
                                 tensors=[tensor] if tensor is not None else [])
        self.ids[id(arr)] = s
        self.keep.append(arr)
        self.values[s] = arr
        self.sums[s] = checksum(arr)
        if tensor is not None and tensor.creator is None and id(tensor) not in self.live:
            self.live[id(tensor)] = (tensor, tensor.grad, arr)
        return s


def hash_list(v, node_of):
    """A long list (an optimizer's parameter indices) summarised in one value."""
    return hash(tuple(_summary(x, node_of, 3) for x in v))


def checksum(a) -> int:
    """A checksum of an array's values (tracing only: it reads an OpenCL array back)."""
    h = a if isinstance(a, np.ndarray) else a.get()
    return zlib.crc32(np.ascontiguousarray(h).view(np.uint8).reshape(-1)) if h.size else 0


def _summary(v, node_of, depth=0):
    """A comparable summary of a constant an op was made with (arrays are compared apart)."""
    if v is None or isinstance(v, (bool, str, numbers.Number, np.generic, np.dtype, type)):
        return v if not isinstance(v, float) or v == v else "nan"
    if isinstance(v, (tuple, list)):
        if len(v) > 64:
            return (type(v).__name__, len(v), hash_list(v, node_of))
        return (type(v).__name__, tuple(_summary(x, node_of, depth) for x in v))
    if isinstance(v, slice):
        return ("slice", v.start, v.stop, v.step)
    if isinstance(v, dict):
        return ("dict", tuple((k, _summary(x, node_of, depth))
                              for k, x in sorted(v.items(), key=lambda kv: str(kv[0]))))
    if isinstance(v, Function):
        return ("op", node_of.get(id(v), type(v).__name__))
    if is_array(v):
        return ("array", tuple(v.shape), str(v.dtype))
    if callable(v) and hasattr(v, "__code__"):
        return ("code", v.__code__, _closure(v, node_of))
    if hasattr(v, "__func__") and hasattr(v, "__self__"):  # a bound method
        return ("method", v.__func__.__code__, _summary(v.__self__, node_of))
    fields = _fields(v)
    if fields is not None and depth < 3:
        return ("object", type(v).__name__,
                tuple((k, _summary(x, node_of, depth + 1)) for k, x in fields))
    return ("object", _Held(v, None))  # NOTE: held: an id is reused once it is freed


def _fields(v):
    """The attributes of a small plain object (a geometry, a config), or None."""
    if isinstance(v, (Tensor, np.ndarray, opencl.ndarray)) or callable(v):
        return None
    names = getattr(type(v), "__slots__", None)
    if names is not None:
        names = [names] if isinstance(names, str) else list(names)
        items = [(k, getattr(v, k, None)) for k in names if k != "__weakref__"]
    else:
        d = getattr(v, "__dict__", None)
        if d is None or len(d) > 16:
            return None
        items = sorted(d.items())
    # NOTE: only objects of plain values are compared by value; others (an optimizer, a
    # generator: state that a replay reads as it is then) by identity
    return items if all(_plain(x) for _, x in items) else None


def _plain(x):
    if x is None or isinstance(x, (bool, str, numbers.Number, np.generic, np.dtype)):
        return True
    return isinstance(x, tuple) and len(x) <= 16 and all(_plain(y) for y in x)


def _closure(fn, node_of, held=False):
    """What a function's closure holds, summarised (arrays by shape: see closure_arrays);
    with ``held``, a list, dict or set without arrays as a ``_Held``."""
    cells = getattr(fn, "__closure__", None) or ()
    out = []
    for c in cells:
        try:
            v = c.cell_contents
        except ValueError:  # an empty cell
            out.append("empty")
            continue
        if held and type(v) in (list, dict, set) and not any(
                is_array(x) for x in (v.values() if type(v) is dict else v)):
            out.append(_Held(v, _summary(v, node_of, 1)))
        else:
            out.append(_summary(v, node_of, 1))
    return tuple(out)


class _Held:
    """An object, the same as another if it is that object (kept alive: a freed one's id is
    the next one's) or, a closure's container (``value`` its summary), holds the same."""

    __slots__ = ("obj", "value")

    def __init__(self, v, value):
        self.obj, self.value = v, value

    def __eq__(self, other):
        return isinstance(other, _Held) and (self.obj is other.obj or (
            self.value is not None and self.value == other.value))

    def __hash__(self):
        return id(self.obj) if self.value is None else 0


def _host_summary(fn, node_of):
    """``_summary`` of a function run through ``host`` (its closure's containers held)."""
    if callable(fn) and hasattr(fn, "__code__"):
        return ("code", fn.__code__, _closure(fn, node_of, held=True))
    return _summary(fn, node_of)


def closure_arrays(fn, tensors: bool = False):
    """The arrays a function's closure holds (directly, or in a tuple or list); with
    ``tensors``, also the data of the Tensors it holds so."""
    out = []
    for c in getattr(fn, "__closure__", None) or ():
        try:
            v = c.cell_contents
        except ValueError:
            continue
        for x in v if isinstance(v, (tuple, list)) else (v,):
            if tensors and isinstance(x, Tensor):
                x = x.data
            if is_array(x):
                out.append(x)
    return out


class Tracer:
    """Installed as the thread's tracer (labkit.autograd.trace) while one call runs."""

    def __init__(self, arg_arrays, arg_tensors, fn_name: str, rngs=()):
        self.t = Trace(arg_arrays)
        self.t.fn_name = fn_name
        self.t.arg_tensors = arg_tensors
        self.fn_name = fn_name
        self.node_of: dict[int, int] = {}  # id(Function) -> its node index
        self.before: dict = {}  # (id(obj), attr) -> (obj, its value before the step set it)
        self.arg_grads = [(x, x.grad) for x in arg_tensors.values()]  # at the call's start
        # NOTE: Python's and NumPy's generators the step's code reaches (compile/guards.py):
        # each may change state only inside a host computation, which a replay runs again
        self.rngs = [(r, label, rng_state(r)) for r, label in rngs]
        #: the code of the functions run through ``host``: a replay runs them again
        self.host_codes: set = set()
        self.host_objects: dict = {}  # id -> an object called as a host function

    def _drawn(self, refresh=False):
        """Refuse a draw from one of ``rngs`` since the last look (outside a host call)."""
        for i, (r, label, state) in enumerate(self.rngs):
            now = rng_state(r)
            if refresh:
                self.rngs[i] = (r, label, now)
            elif now != state:
                refuse_draw(label, self.fn_name)

    # ---- what the hooks call ------------------------------------------------------------
    def made_here(self, tensor) -> None:  # NOTE: Trace.made_here
        self.t.made_here(tensor)

    def unmark(self, fn, xs):  # NOTE: Function.apply, before the op runs
        return unmark_op(self.t, fn, xs)
    def record(self, fn, before, inputs, outs):
        t = self.t
        ins = [t.slot_of(x.data, x) for x in inputs]
        attr_in, consts, sig = [], [], []
        for name, v in before.items():
            if is_array(v):
                s = t.ids.get(id(v))
                if s is None and t.arg_views:
                    s = same_as_arg(t, v)
                if s is not None:
                    attr_in.append((name, None, s))
                    sig.append((name, "slot"))
                else:
                    t.check_raw(v)
                    consts.append((name, None, v))
                    sig.append((name, ("array", tuple(v.shape), str(v.dtype))))
            elif isinstance(v, (tuple, list)) and any(is_array(x) for x in v):
                parts = []
                for i, x in enumerate(v):
                    if is_array(x) and id(x) in t.ids:
                        attr_in.append((name, i, t.ids[id(x)]))
                        parts.append("slot")
                    elif is_array(x):
                        t.check_raw(x)
                        consts.append((name, i, x))
                        parts.append(("array", tuple(x.shape), str(x.dtype)))
                    else:
                        parts.append(_summary(x, self.node_of))
                sig.append((name, tuple(parts)))
            else:
                sig.append((name, _summary(v, self.node_of)))
        out_slots = [t.produce(o.data) for o in outs]
        attr_out = []
        for name, v in fn.__dict__.items():
            old = before.get(name)
            if is_array(v) and v is not old:
                attr_out.append((name, None, t.produce(v)))
            elif isinstance(v, (tuple, list)) and v is not old:
                for i, x in enumerate(v):
                    if is_array(x) and id(x) not in t.ids:
                        attr_out.append((name, i, t.produce(x)))
        self.node_of[id(fn)] = len(t.nodes)
        t.nodes.append(Node("op", fn, ins, out_slots, fn.name, where(),
                            (type(fn), tuple(sig)), attr_in, attr_out, False, consts,
                            len(t.nodes), fn.n_out != 1))

    def host(self, fn, arrays, effect, name, mutates=()):
        t = self.t
        self.host_codes.update(host_codes_of(fn, self.host_objects))
        t.mutated.update(id(a) for a in unmark(t, mutates))
        arrays = unmark(t, arrays)  # NOTE: fn runs on the arguments, not their marked views
        ins = [t.slot_of(a) for a in arrays]
        for a in closure_arrays(fn, tensors=True):
            s = t.ids.get(id(a))
            kind = None if s is None else getattr(t.sources.get(s), "kind", "made")
            if kind in ("made", "arg"):
                # NOTE: a replay would call fn with the traced call's array (stale)
                raise CompileError(
                    f"lk.compile: the function {name} that {self.fn_name} runs through "
                    "lk.compile.host holds in its closure an array (or a Tensor) that the "
                    f"step {'computed' if kind == 'made' else 'was given'}; a replay would "
                    "give it the traced call's. Pass it as an argument: "
                    "lk.compile.host(fn, *arrays)")
        consts = [("closure", i, a) for i, a in enumerate(closure_arrays(fn))
                  if id(a) not in t.ids]
        for _, _, a in consts:
            t.check_raw(a)
        if self.rngs:
            self._drawn()
        r = fn(*arrays)
        if self.rngs:
            self._drawn(refresh=True)
        if r is None:
            outs = []
        elif isinstance(r, tuple):
            outs = [t.produce(np.asarray(x) if isinstance(x, np.generic) else x) for x in r]
        else:
            if isinstance(r, np.generic):
                r = np.asarray(r)
            outs = [t.produce(r)]
        node = Node("host", fn, ins, outs, name, where(),
                    ("host", name, _host_summary(fn, self.node_of), effect, len(outs)),
                    effect=effect, consts=consts, idx=len(t.nodes), multi=isinstance(r, tuple))
        # NOTE: an array changed in place is a new value from here on (a new slot holding the
        # same array): ops reading it after the change are not merged with those before
        for a in mutates:
            old = t.ids.get(id(a))
            if old is not None:
                new = t.produce(a)
                node.versions.append((old, new))
        t.nodes.append(node)
        return r

    def depends(self, obj, attr, value=None):  # NOTE: value: a copy to compare with
        if value is None:
            # NOTE: set by the step before it read it (m.eval(); m(x); m.train()): the guard
            # is the value the call started with, which the step's own code turns into the
            # one read (guarded as read, the step never replayed)
            value = self.before.get((id(obj), attr), (None, getattr(obj, attr)))[1]
        self.t.depends.append((obj, attr, value))

    def changing(self, obj, attr):
        """``obj.attr`` is about to be set by the step (a brick's mode): keep the value it had
        first, for ``depends``."""
        self.before.setdefault((id(obj), attr), (obj, getattr(obj, attr)))

    def refuse_read(self, what):
        raise CompileError(
            f"lk.compile: {self.fn_name} reads {what} at {where()} while it is traced. A "
            "compiled step runs without Python in between, so it cannot follow a number or a "
            "branch taken from a tensor's values. Return the tensor from the step and read it "
            "after the call (loss = step(x, y); loss.item()), or compile a smaller function")

    # ---- the end of the call --------------------------------------------------------------
    def finish(self, result):
        t = self.t
        if t.refused is not None:
            raise CompileError(t.refused)
        if self.rngs:
            self._drawn()
        t.out_tree = self._outputs(result)
        for s, total in t.sums.items():
            arr = t.values[s]
            if s in t.sources and id(arr) not in t.mutated and checksum(arr) != total:
                users = [n for n in t.nodes if s in n.ins]
                at = f" (read by {users[0].name} at {users[0].where})" if users else ""
                raise CompileError(
                    f"lk.compile: {self.fn_name} changed an array of shape "
                    f"{tuple(arr.shape)} in place outside labkit ops{at} (p.data -= ..., "
                    "x[...] = ...); a replay would not repeat that change. Update parameters "
                    "with an optimizer (lk.optimizers.SGD(lr).setup(params)), or wrap raw "
                    "array code in lk.compile.host(fn, *arrays, effect=True, mutates=(...))")
        refuse_changed_made(t, self.fn_name)
        read = {id(x) for src in t.sources.values() if src.kind == "ext" for x in src.tensors}
        before = list(t.live.values()) + [(x, g, None) for x, g in self.arg_grads]
        for tensor, grad0, _ in before:
            if grad0 is not None and id(grad0) in read:
                raise CompileError(
                    f"lk.compile: {self.fn_name} reads the .grad a tensor of shape "
                    f"{tensor.shape} had before the call (backward adds to it: gradients "
                    "accumulated over calls), which a replay would not read again. Call "
                    "opt.zero_grad() (or set .grad = None) inside the step before backward, "
                    "and accumulate the batches of one update inside one call")
        record_writes(t, self.fn_name)
        return t

    def _outputs(self, r):
        t = self.t
        if isinstance(r, Tensor):
            return ("tensor", t.slot_of(r.data, None))
        if isinstance(r, tuple) and hasattr(type(r), "_fields"):  # a namedtuple: its type
            return (("namedtuple", type(r)), tuple(self._outputs(x) for x in r))
        if isinstance(r, (tuple, list)):
            return (type(r).__name__, tuple(self._outputs(x) for x in r))
        if isinstance(r, dict):
            return ("dict", tuple((k, self._outputs(v)) for k, v in r.items()))
        if r is None or isinstance(r, (bool, str, numbers.Number)):
            return ("value", r)
        if is_array(r):
            return ("array", t.slot_of(r, None))
        raise CompileError(
            f"lk.compile: {self.fn_name} returned a {type(r).__name__}; a compiled step returns "
            "tensors, arrays, numbers, None, and tuples, lists or dicts of them")


# ---- comparing two traced calls -------------------------------------------------------------


def _same_value(a, b) -> bool:
    if a is b:
        return True
    if type(a) is not type(b) or tuple(a.shape) != tuple(b.shape) or a.dtype != b.dtype:
        return False
    ha = a if isinstance(a, np.ndarray) else a.get()
    hb = b if isinstance(b, np.ndarray) else b.get()
    return bool(np.array_equal(ha, hb, equal_nan=True))


def _tree_diff(a, b, where):
    """Where two results (``Tracer._outputs``) first differ: ``": result[1]['lr'] was 0.1
    then 0.05"``, or "" when that cannot be told."""
    if a[0] != b[0]:
        return f": {where} was {a[0]} then {b[0]}" if isinstance(a[0], str) else ""
    kind, x, y = a[0], a[1], b[1]
    if kind == "value":
        return f": {where} was {x!r:.60} then {y!r:.60}"
    if kind in ("tensor", "array"):
        return f": {where} was another value of the step"
    if kind == "dict":
        ka, kb = [k for k, _ in x], [k for k, _ in y]
        if ka != kb:
            return f": {where} had the keys {ka!r:.80} then {kb!r:.80}"
        parts = [(f"{where}[{k!r}]", p, q) for (k, p), (_, q) in zip(x, y)]
    else:
        if len(x) != len(y):
            return f": {where} had {len(x)} items then {len(y)}"
        parts = [(f"{where}[{i}]", p, q) for i, (p, q) in enumerate(zip(x, y))]
    return next((_tree_diff(p, q, w) for w, p, q in parts if p != q), "")


def compare(a: Trace, b: Trace, fn_name: str) -> None:
    """Raise CompileError naming the first difference between two traced calls; classify the
    outside values of ``b`` (live tensor, live array or constant) on the way."""

    def refuse(msg):
        raise CompileError(
            f"lk.compile: {fn_name} did not do the same thing in two calls with arguments of "
            f"the same shapes: {msg}. A compiled step must be the same computation at every "
            "call: pass values that change as arguments (they are checked at each call), and "
            "wrap raw array code in lk.compile.host(fn, *arrays)")

    if len(a.nodes) != len(b.nodes):
        for k, (x, y) in enumerate(zip(a.nodes, b.nodes)):
            if x.sig != y.sig:
                refuse(f"op {k} was {x.name} ({x.where}) then {y.name} ({y.where})")
        longer = a if len(a.nodes) > len(b.nodes) else b
        extra = longer.nodes[min(len(a.nodes), len(b.nodes))]
        refuse(f"the first call ran {len(a.nodes)} ops, the second {len(b.nodes)}; the first "
               f"op only one of them ran is {extra.name} at {extra.where}")
    for k, (x, y) in enumerate(zip(a.nodes, b.nodes)):
        if x.sig != y.sig:
            if x.name != y.name:
                refuse(f"op {k} was {x.name} ({x.where}) then {y.name} ({y.where})")
            diff = [f"{p[0]}: {p[1]!r} then {q[1]!r}" for p, q in zip(x.sig[1], y.sig[1])
                    if p != q] if x.kind == "op" else []
            if x.kind == "host":
                diff = ["what its code holds changed: a generator, a number or an array made "
                        "inside the step?"]
            refuse(f"op {k} ({x.name}, {y.where}) was made with other constants"
                   + (f" ({'; '.join(diff)})" if diff else ""))
        if (x.ins != y.ins or x.attr_in != y.attr_in or len(x.outs) != len(y.outs)
                or x.versions != y.versions):
            refuse(f"op {k} ({y.name}, {y.where}) read other values")
        for (n, _, ca), (_, _, cb) in zip(x.consts, y.consts):
            if not _same_value(ca, cb):
                refuse(f"op {k} ({y.name}, {y.where}) was made with an array {n!r} whose "
                       "values changed (computed from the data outside labkit ops?)")
    for s, sb in b.sources.items():
        sa = a.sources.get(s)
        if sa is None or sa.kind != sb.kind or (sb.kind == "arg" and sa.arg != sb.arg):
            refuse(f"value {s} came from elsewhere")
        if sb.kind != "ext":
            continue
        both = next((x for x in sb.tensors if any(x is y for y in sa.tensors)), None)
        if both is not None:
            sb.kind, sb.tensor = "live", both
        elif sb.value is sa.value:
            sb.kind = "live_array"
        elif _same_value(sa.value, sb.value):
            sb.kind = "const"
        else:
            user = next((n for n in b.nodes if s in n.ins), None)
            at = f" (read by {user.name} at {user.where})" if user else ""
            refuse(f"an array of shape {tuple(sb.value.shape)} made outside labkit ops changed "
                   f"its values{at}")
    if a.out_tree != b.out_tree:
        refuse("it returned something else" + _tree_diff(a.out_tree, b.out_tree, "result"))
    wa = [(t if k == "arg_grad" else id(t), k, s) for t, k, s in a.writes]
    wb = [(t if k == "arg_grad" else id(t), k, s) for t, k, s in b.writes]
    if wa != wb:
        refuse("it updated other tensors")
