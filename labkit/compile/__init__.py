"""``lk.compile``: trace a training step once, merge and fuse it, replay it without Python per op.

    step = lk.compile(train_step)          # train_step(x, y) -> loss, with backward and update
    for x, y in batches:
        loss = step(x, y)                  # calls 1 and 2 run eagerly and are traced; then replays

The first call with arguments of a new shape is traced (it runs for real, recording every op);
the second is traced again and compared with the first, so a step that does something else at
each call is refused with the difference instead of replayed wrong; from the third call on, the
compiled program replays. Arguments are checked at every call (shapes, dtypes, devices, the
values of Python numbers, the identity of other objects such as a model): a change traces
again (``step.stats`` counts and explains it; a warning comes after ``warn_after`` retraces).
A replay reads parameters and optimizer state as they are at that call, so a learning rate
changed between calls is used, not retraced.

``trust_input=True`` skips the checks of what the step reads besides its arguments (the
guards: the Python values below, bricks' train/eval mode and replaced parameters, the shapes,
dtypes, devices and requires_grad of the tensors it reads, the ``.grad`` it adds to). The
arguments still select the program (a batch of another shape or dtype traces as without it),
and labels and indices are still checked. A change the skipped checks would have seen is the
caller's to avoid: the replay then runs the traced program on what it finds, so an op raises
its own error (a ShapeError, a broadcast ValueError, a DeviceMismatchError: the process does
not crash, OpenCL launches captured at a replay check their buffers' sizes) or the results
are the traced state's (the train-mode program after ``model.eval()``, a global's old value).

Inside a compiled step:

- labkit ops, bricks, losses and optimizers are replayed; code that computes with raw arrays
  must go through :func:`host` (a dropout mask, an upload: labkit's own do);
- a tensor's value read into Python (``loss.item()``, ``if x.sum() > 0``) is refused: return
  the tensor and read it after the call;
- so is raw NumPy code on a NumPy argument whose result reaches labkit or Python (a mask
  ``ids != 0`` given to ``lk.tensor``, ``if (lengths > 3).any():``): the arguments are marked
  while a call is traced (compile/argmarks.py); ``np.asarray(x)`` and shape reads are the
  argument;
- results are new tensors at each call (never a buffer the next call overwrites), without a
  graph: call ``backward`` inside the step;
- a tensor's ``.data`` the step sets (``w.data = F.clip(w, -c, c).data``) is set by a replay
  where the step set it (compile/hooks.py ``SetData``): what runs after it (an optimizer, a
  host function) sees the new array; a ``.grad`` a host function reads through a model is
  set just before it, other gradients when the call ends;
- Python values the step reads from its globals, its closure, its default arguments, or
  attributes its code names (``cfg.scale``, ``self.alpha``, ``opt.lr``; also in the functions
  and methods of the user's it calls) are checked at each call (compile/guards.py): a number
  by value, an object by identity; a change traces again. A step that changes such a value
  itself (``counter["n"] += 1``) is refused, and so is a Python number or string in its
  results that nothing checked gives (``len(a_list)``): a replay would return it unchanged.
  Reached too: the items of small lists, tuples and dicts (``CFG["c"].scale``, hooks in a
  list), class attributes and classmethods, the forward of the user's bricks (and their list
  settings, by value), attributes read by name (``getattr(c, "scale")``, ``vars(ns)["a"]``),
  descriptors, the items of large lists and dicts at the code's constant keys, the values of
  small NumPy arrays. Not seen (pass such values as arguments): a name computed at run time
  (``getattr(c, f"{k}_lr")``), chains of more than four attributes, the items of lists of
  more than 64 at computed keys, an iterator's state (``next(counter)``);
- a parameter passed as an argument (or its array) is checked by identity: the step may
  read it where it lives too (its brick), so a program traced with it is not replayed for
  another;
- also refused: random numbers from Python's or NumPy's generators drawn outside
  :func:`host` (a replay would reuse them), a function run through :func:`host` holding
  arrays the step computed or was given in its closure (pass them as arguments), a
  tensor's ``.data`` replaced by an array no labkit op made, a ``.grad`` from
  before the call added to (gradients accumulated over calls: call ``zero_grad`` inside the
  step), and a backward
  into an argument computed before the call (pass it detached). A refusal made after the
  call ran says so: its changes (an optimizer's update) were made, as an eager call's are;
- one call runs at a time (a lock): a compiled step may be shared between threads;
- labels and index arrays are checked at every call as an eager call checks them; on OpenCL
  the check's flag is read back without waiting and looked at before the replay's next
  state change, so a bad label raises ``IndexError`` before any update. What changed before
  the check in the step's order is kept, as in an eager call: BatchNorm's running statistics
  of a forward that came before the loss, a dropout generator's counter, or a first
  optimizer's update before a second loss; ``.grad`` keeps what the previous call set
  (gradients are written when a call completes).

The passes (``step.explain()`` lists what they did): constant folding, merging of ops that
compute the same value, removal of what nothing needs, stabilisation (``stabilize=``), a
stack read at one step read from that step (its gradient's zeros not added), a sum of
same-shape matrix products gathered into one product and, on the CPU, a product read
transposed computed into rows (both ``reassociate=``), a relu folded into
the linear layer or convolution before it (its GEMM's epilogue on OpenCL) and on OpenCL
devices elementwise fusion (both ``fuse=``). ``step.graph()`` draws the program in GraphView.
"""

from __future__ import annotations

import itertools
import numbers
import sys
import threading
import types
import warnings

import numpy as np

from ..autograd import trace as _trace
from ..autograd.function import grad_enabled
from ..autograd.tensor import Tensor
from ..autograd.trace import host
from ..backend import opencl
from ..bricks.base import Parameter
from ..errors import CompileError
from .argmarks import mark_args, unmarked
from .guard_values import read_afresh
from .guards import (
    check_unchanged,
    first_failure,
    hook_guards,
    python_guards,
)
from .hooks import Watch, watching
from .hostcode import drop_host_only
from .keys import why_new_key
from .program import Program, depends_failure
from .scan import scan
from .stale import refuse_stale, stale_results
from .states import live_states, states_failure
from .trace import Tracer, compare
from .writes import refuse_changed_consts


class CompileWarning(UserWarning):
    """A compiled step keeps tracing again (its arguments change shape or value)."""


def _flatten(obj, leaves, tensors, key, keep, pyvals=None):
    """The step's arguments as array leaves (what a replay reads) and a key of everything
    else it was traced with (shapes, dtypes, devices, Python values, object identities)."""
    if isinstance(obj, Tensor):
        d = obj.data
        tensors[len(leaves)] = obj
        leaves.append(d)
        key.append(("T", d.shape, d.dtype, _dev(d), obj.requires_grad))
        if isinstance(obj, Parameter):
            # NOTE: a parameter passed in may also be read where it lives (by its brick, by
            # an optimizer): a program traced with it reads that argument there too
            keep.append(obj)
            key.append(("P", getattr(obj, "name", None), id(obj)))
    elif isinstance(obj, (np.ndarray, opencl.ndarray)):
        leaves.append(obj)
        key.append(("A", obj.shape, obj.dtype, _dev(obj)))
    elif isinstance(obj, (tuple, list)):
        key.append((type(obj).__name__, len(obj)))
        for x in obj:
            _flatten(x, leaves, tensors, key, keep, pyvals)
    elif isinstance(obj, dict):
        key.append(("dict", tuple(obj)))
        for x in obj.values():
            _flatten(x, leaves, tensors, key, keep, pyvals)
    elif obj is None or isinstance(obj, (bool, str, numbers.Number, np.generic)):
        if pyvals is not None:
            pyvals.append(obj)
        # NOTE: a float by its repr: NaN equals itself there, and -0.0 is not 0.0
        if isinstance(obj, (float, complex, np.inexact)):
            key.append(("V", type(obj).__name__, repr(obj), "repr"))
        else:
            key.append(("V", type(obj).__name__, obj))
    else:
        keep.append(obj)  # NOTE: kept alive, so that its id is never another object's
        key.append(("O", type(obj).__name__, id(obj)))


def _named_tensors(walk) -> dict:
    """The tensors the step's code names (a global, a closure variable, an attribute, an item
    of a small list or dict), with their ``.grad`` and ``.data`` before the call."""
    out = {}
    for g in walk.guards:
        items = g.items or ()
        for x in (g.keep, *(v for kv in items for v in (kv if isinstance(kv, tuple) else (kv,)))):
            if isinstance(x, Tensor) and id(x) not in out:
                out[id(x)] = (x, x.grad, x.data)
    return out


def _written_unread(t, named) -> None:
    """A named tensor the step never read but whose ``.data`` or ``.grad`` it replaced
    (``keep.data = (w * 2).data``, a buffer for a plot): checked and written back at each
    replay as those of the tensors it read are (compile/writes.py), where a replay left the
    traced call's."""
    for key, (x, grad0, data0) in named.items():
        if key not in t.live and (x.data is not data0 or x.grad is not grad0):
            t.live[key] = (x, grad0, data0)


def _dev(a):
    return "cpu" if isinstance(a, np.ndarray) else id(a.rt)


#: what ``explain`` says of each pass that changed a program: (its count, the line)
_PASS_LINES = (
    ("pieces", "one piece: {} slice(s) or gradient(s) of one step of a stack read from "
               "that step"),
    ("gathered", "gathered: {} sum(s) of matrix products into one product each"),
    ("rows", "rows: {} transposed product(s) or sum(s) of products computed into rows"),
    ("epilogues", "epilogue: relu folded into {} linear or conv2d node(s)"),
    ("added", "epilogue: an addition folded into {} matrix product(s)"),
    ("masked", "epilogue: relu's gradient folded into {} matrix product(s)"),
    ("copied", "contiguous: {} transposed weight(s) copied once for the products that read "
               "them"),
    ("cells", "lstm: {} LSTM step(s) computed in their product's kernel"),
    ("cell_grads", "lstm: {} LSTM step gradient(s) computed in the kernel of their product "
                   "with U"),
    ("cell_loops", "lstm: {} LSTM time loop(s) computed in one launch each (a work-item per "
                   "rows of the batch through all their steps)"),
    ("sgd", "sgd: the plain SGD update of {} weight(s) made with their gradient's product "
            "(on OpenCL in its kernel; on the CPU at batch 1 one BLAS rank-1 update of the "
            "weight, the gradient made where it is read)"),
    ("deferred", "sgd: {} of these gradients, read by nothing in the step, not written on "
                 "OpenCL: made where .grad is read, from the product's operands"),
    ("stacked", "stacked: {} piece(s) of a stack written into their place by the op that "
                "makes them (on the CPU; the stack copies the others)"),
)

#: first traces kept waiting for their second call (slimmed: no arrays of the step's), and
#: argument signatures with programs: the least recently used beyond these are dropped (an
#: argument whose value changes at every call, such as a step counter, would otherwise keep a
#: trace per call; a step cycling through more signatures than this traces at every call)
MAX_PENDING = 64
MAX_SIGNATURES = 64
#: programs kept for one signature, each for other values of what its guards check (a
#: brick's train/eval mode, a global the step reads): the most recently made
MAX_PROGRAMS = 8


def _detached(obj):
    """The step's results with every tensor computed by the step cut from its graph (the
    traced graph's functions are the program's, which the next replay runs again)."""
    if isinstance(obj, Tensor):
        return obj if obj.creator is None else Tensor(obj.data)
    if isinstance(obj, tuple) and type(obj) is not tuple and hasattr(obj, "_fields"):
        return type(obj)(*(_detached(x) for x in obj))
    if isinstance(obj, (tuple, list)):
        return type(obj)(_detached(x) for x in obj)
    if isinstance(obj, dict):
        return {k: _detached(v) for k, v in obj.items()}
    return obj


def _refuse_outside(name, k, x, node):
    raise CompileError(
        f"lk.compile: {name} back-propagates into argument array {k}, a tensor of shape "
        f"{x.shape} computed before the call (by {node.name}): a replay runs the step's ops, "
        "not the graph that made it, whose gradients would be lost. Compute it inside the "
        "step, or pass it detached (x.detach()) when no gradient should reach what made it")


def _ran(check, *args):
    """``check(*args)``, a check made after a traced call ran to its end: its refusal says
    that the call's changes (an optimizer's update) were made, as an eager call's are."""
    try:
        return check(*args)
    except CompileError as e:
        e.args = (f"{e.args[0]} (This call ran to its end as an eager call does: what it "
                  "changed, such as an optimizer's update, stays changed; the next call is "
                  "traced again.)",) + e.args[1:]
        raise


class Compiled:
    """A step compiled by ``lk.compile``: call it like the function."""

    def __init__(self, fn, *, trust_input=False, fuse=True, cse=True, stabilize=True,
                 reassociate=True, warn_after=4):
        self.fn = fn
        self.__name__ = getattr(fn, "__name__", "step")
        self.__doc__ = getattr(fn, "__doc__", None)
        self.trust_input = trust_input
        self.fuse = fuse
        self.cse = cse
        self.stabilize = stabilize
        self.reassociate = reassociate
        self.warn_after = warn_after
        self._plans: dict = {}      # key -> [Program, ...] (one per set of depends)
        self._first: dict = {}      # key -> first traced calls waiting for their second
        self._keep: dict = {}       # key -> the objects its identity checks refer to
        self._last_key = None
        self._lock = threading.RLock()
        self.stats = {"calls": 0, "traces": 0, "replays": 0, "retraces": 0, "reasons": []}

    def __repr__(self):
        return (f"<compiled {self.__name__}: {self.stats['traces']} traces, "
                f"{self.stats['replays']} replays>")

    def __get__(self, obj, objtype=None):  # a compiled method binds like a method
        return self if obj is None else types.MethodType(self, obj)

    # ---- calls ------------------------------------------------------------------------------
    def __call__(self, *args, **kwargs):
        if _trace.tracer() is not None:
            # NOTE: a compiled step called inside another one's trace is traced inline
            return self.fn(*args, **kwargs)
        # NOTE: one call at a time: a replay's kept buffers and ops' attributes are shared
        with self._lock:
            return self._call(args, kwargs)

    def _call(self, args, kwargs):
        self.stats["calls"] += 1
        leaves, tensors, key, keep, pyvals = [], {}, [], [], []
        _flatten((args, kwargs), leaves, tensors, key, keep, pyvals)
        # NOTE: the same array passed twice is one slot of the trace: which arguments are
        # the same array is part of the signature
        first_of: dict = {}
        key.append(("alias", tuple(first_of.setdefault(id(a), k)
                                   for k, a in enumerate(leaves))))
        # NOTE: a step traced with gradients on is not replayed under lk.no_grad() (a
        # validation pass calling the training step would train; eager, backward raises)
        key.append(("grad", grad_enabled()))
        key = tuple(key)
        plans = self._plans.get(key)
        if plans is not None and len(self._plans) > 1:
            self._plans[key] = self._plans.pop(key)  # NOTE: the most recently used last
        if plans is not None:
            for p in plans:
                if self.trust_input or p.guard_failure(leaves, tensors) is None:
                    self.stats["replays"] += 1
                    return p.run(leaves, tensors)
        # NOTE: a first trace made when a value labkit keeps (opt.lr returned, read at a call
        # long before: a batch of another size at the end of each epoch) was another is stale;
        # it waits on for its state to come back (a step called in train and eval mode in turn
        # traced at every call when a change dropped it)
        first, stale = None, None
        for f in self._first.get(key, ()):
            why = (depends_failure(f.depends) or first_failure(f.pyguards)
                   or states_failure(f.live_meta))
            if why is None:
                first = f
                break
            stale = stale or why
        if plans is not None:
            if first is None:
                self._note_retrace(plans[0].guard_failure(leaves, tensors))
        elif stale is not None:
            self._note_retrace(stale)
        elif first is None and self._last_key is not None:
            self._note_retrace(self._why(key))
        self._last_key = key
        # NOTE: a program traced while a .grad it writes was None (backward set it, adding
        # to nothing) replays only while it is None at the call's start (the step does not
        # clear it itself: gradients accumulated over calls would be lost)
        was_none = [x for x, kind, s in (first.writes if first is not None else ())
                    if kind == "grad" and s is not None and x.grad is None]
        arg_none = {k for k, x in tensors.items() if x.grad is None}
        walk = python_guards(self.fn, keep, [v for v in pyvals if isinstance(v, str)])
        tracer = Tracer(leaves, tensors, self.__name__, walk.rngs)
        named = _named_tensors(walk)
        watched = [(k, x, x.creator, x.creator.out_hooks, []) for k, x in tensors.items()
                   if x.creator is not None and x.requires_grad]
        for _, x, node, hooks, seen in watched:
            # NOTE: a gradient reaching an argument computed before the call: backward goes
            # on into the graph that made it, which a replay does not run
            node.out_hooks = {**(hooks or {})}
            node.out_hooks[x.index] = [*node.out_hooks.get(x.index, ()), seen.append]
        # NOTE: NumPy arguments as marked views: raw NumPy code on them is seen (argmarks.py)
        args, kwargs, unmark = mark_args(tracer.t, self.fn, args, kwargs)
        # NOTE: what the step does to tensors' .data and .grad (compile/hooks.py)
        tracer.watch = Watch(tracer.t, named)
        old = _trace.set_tracer(tracer)
        try:
            try:
                with watching():
                    result = unmarked(tracer.t, self.fn(*args, **kwargs))
            finally:
                unmark()
            _written_unread(tracer.t, named)
            trace = _ran(tracer.finish, result)
        except CompileError:
            # NOTE: that graph's ops read arrays from before the call (an LSTM's state passed
            # back in: U.T of the last call), refused as raw array code: an error that named
            # neither the argument nor the fix
            for k, x, node, _, seen in watched:
                if seen:
                    _refuse_outside(self.__name__, k, x, node)
            raise
        finally:
            _trace.set_tracer(old)
            for _, _, node, hooks, _ in watched:
                node.out_hooks = hooks
        for k, x, node, _, seen in watched:
            if seen:
                _ran(_refuse_outside, self.__name__, k, x, node)
        self.stats["traces"] += 1
        hook_guards(walk, [x for src in trace.sources.values() if src.kind in ("ext", "live")
                           for x in (src.tensors or [src.tensor])
                           if x is not None])
        drop_host_only(walk, tracer.host_codes, tracer.host_objects)
        read_afresh(walk, trace)
        if first is not None:  # NOTE: the difference between two calls says more
            self._unwait(key, first)
            _ran(compare, first, trace, self.__name__)
            _ran(refuse_changed_consts, trace, self.__name__)
            _ran(check_unchanged, walk, self.__name__)
        unchecked = stale_results(trace.out_tree, walk, trace.values.values(), pyvals)
        if unchecked is not None:
            _ran(refuse_stale, unchecked, self.__name__)
        for g in walk.guards:
            g.settle()
        if first is None:
            # NOTE: the user's values as this call left them: one changed before the next
            # call (SCALE = 2.0, an extension setting cfg.temp between epochs) makes this
            # trace stale, and the next call is traced anew where it was refused as a step
            # that "did not do the same thing"; one the step changes itself (a counter it
            # increments) still reaches the comparison, which refuses it
            trace.pyguards = [g for g in walk.guards if not g.user] + [
                a for g in walk.guards if g.user and (a := g.again()) is not None]
            # NOTE: and the tensors it read as they were (frozen between the two traced calls:
            # traced again, where the comparison refused it as a step that differs)
            trace.live_meta = live_states(trace)
            trace.slim()
            waiting = self._first.setdefault(key, [])
            waiting.insert(0, trace)
            del waiting[MAX_PROGRAMS:]  # NOTE: one per state, the latest
            self._keep[key] = keep
            while len(self._first) > MAX_PENDING:
                self._drop(next(iter(self._first)), pending=True)
            return result
        trace.pyguards = walk.guards
        trace.grad_none = was_none + [k for k, kind, _ in trace.writes
                                      if kind == "arg_grad" and k in arg_none]
        prog = Program(trace, fuse=self.fuse, cse=self.cse, stabilize=self.stabilize,
                       reassociate=self.reassociate)
        progs = self._plans.setdefault(key, [])
        progs.insert(0, prog)
        del progs[MAX_PROGRAMS:]  # NOTE: a value that keeps changing: the latest programs
        self._keep[key] = keep
        while len(self._plans) > MAX_SIGNATURES:
            self._drop(next(iter(self._plans)), pending=False)
        for n in trace.nodes:  # NOTE: the traced graph's tensors are not needed by replays
            if n.kind == "op":
                n.fn.inputs = ()
        # NOTE: so the results carry no graph, as a replay's do (theirs is the program's)
        return _detached(result)

    def _unwait(self, key, first):
        """Take ``first`` from the traces of ``key`` waiting for their second call."""
        waiting = self._first[key]
        waiting[:] = [f for f in waiting if f is not first]
        if not waiting:
            self._drop(key, pending=True)

    def _drop(self, key, pending):
        """Forget a pending first trace or a signature's programs (the least recently used)."""
        (self._first if pending else self._plans).pop(key, None)
        if key not in self._first and key not in self._plans:
            self._keep.pop(key, None)

    def _why(self, key):
        return why_new_key(self._last_key, key)

    def _note_retrace(self, reason):
        self.stats["retraces"] += 1
        self.stats["reasons"].append(reason)
        n = self.stats["retraces"]
        if n == self.warn_after:
            warnings.warn(
                f"lk.compile: {self.__name__} was traced again {n} times "
                f"({'; '.join(self.stats['reasons'][-3:])}). Each new shape or Python value "
                "of an argument, and each change of a Python value the step reads, is traced "
                "twice before it replays; pass values that change at every call as tensors, "
                "pad batches to a few shapes, and read values such as opt.lr after the call",
                CompileWarning, stacklevel=3)

    def run(self, batches, n_calls=None):
        """Call the step on each item of ``batches`` (a tuple is the arguments, a dict the
        keyword arguments, anything else the one argument), ``n_calls`` times at most;
        returns the list of results."""
        out = []
        # NOTE: islice: an iterator shared with the caller loses no batch after the last call
        for b in batches if n_calls is None else itertools.islice(batches, max(0, n_calls)):
            if isinstance(b, tuple):
                out.append(self(*b))
            elif isinstance(b, dict):
                out.append(self(**b))
            else:
                out.append(self(b))
        return out

    # ---- looking inside -------------------------------------------------------------------
    def programs(self):
        """The compiled programs (one per argument signature)."""
        return [p for ps in self._plans.values() for p in ps]

    def graph(self, after: bool = True, program: int = 0):
        """The compiled step as an ``lk.Graph`` (``lk.notebook.GraphView(step.graph())``
        draws it): as replayed (``after``, fused kernels as groups ``/compiled/fused k``) or
        as traced (``after=False``). ``program``: which argument signature (the latest first)."""
        from .view import graph

        progs = self.programs()
        if not progs:
            raise CompileError(f"lk.compile: {self.__name__} has no program yet: it compiles "
                               "on its second call with arguments of the same shapes")
        return graph(progs[program], after)

    def explain(self) -> str:
        """How the step was compiled: ops traced and kept, fused kernels, retraces."""
        lines = [f"{self.__name__}: {self.stats['calls']} calls, {self.stats['traces']} "
                 f"traced, {self.stats['replays']} replayed, {self.stats['retraces']} retraces"]
        for p in self.programs():
            lines.append(f"  program: {p.trace_nodes} ops traced -> {len(p.nodes)} nodes "
                         f"({p.fused} fused kernel{'' if p.fused == 1 else 's'})")
            for count, text in _PASS_LINES:
                if getattr(p, count):
                    lines.append("  " + text.format(getattr(p, count)))
            for r in sorted(set(p.rewrites)):
                lines.append(f"  stabilised: {r} ({p.rewrites.count(r)}x)")
            c = p.capture
            if c["captured"] or c["refused"]:
                lines.append(f"  captured launches: {c['captured']} ops ({c['fallbacks']} calls "
                             f"ran as before; {c['refused']} recordings refused"
                             + (f", the last: {c['why']})" if c["why"] else ")"))
        for r in self.stats["reasons"]:
            lines.append(f"  retraced: {r}")
        return "\n".join(lines)


def compile(fn=None, *, trust_input=False, fuse=True, cse=True, stabilize=True,
            reassociate=True, warn_after=4):
    """Compile ``fn`` (a training or evaluation step); as a decorator with or without
    arguments. See the module's documentation for what a compiled step may do.

    ``fuse``: elementwise chains as one kernel (OpenCL devices), and a relu folded into the
    linear layer or convolution before it (both devices); ``cse``: merge ops that
    compute the same value; ``stabilize``: rewrite log(exp(z)), log(1 + x), log(sigmoid(x))
    and what their gradients leave into stable forms (not bit-identical to eager where they
    apply); ``reassociate``: a sum of matrix products of the same shapes (a weight's
    gradient over the steps of a loop) as one product of the stacked operands, and on the CPU
    a weight's plain SGD update at batch 1 as one rank-1 update (both equal to float32
    rounding); ``trust_input``: no guards at each call (the module's documentation
    says what is still checked and what a wrong call does); ``warn_after``: retraces before a
    CompileWarning.

    Examples
    --------
    >>> import labkit as lk
    >>> w = lk.tensor([1.0, 2.0], requires_grad=True)
    >>> @lk.compile
    ... def f(x):
    ...     return (x * w).sum()
    >>> [float(f(lk.tensor([1.0, 1.0])).item()) for _ in range(3)]
    [3.0, 3.0, 3.0]
    """
    options = dict(trust_input=trust_input, fuse=fuse, cse=cse, stabilize=stabilize,
                   reassociate=reassociate, warn_after=warn_after)
    if fn is None:
        return lambda f: Compiled(f, **options)
    if not callable(fn):
        raise TypeError(f"lk.compile: expected a function, got {type(fn).__name__}")
    return Compiled(fn, **options)


class _Module(types.ModuleType):
    """``lk.compile`` is this module, and calling it compiles (``lk.compile(fn)``)."""

    def __call__(self, fn=None, **options):
        return compile(fn, **options)


sys.modules[__name__].__class__ = _Module

__all__ = ["CompileError", "CompileWarning", "Compiled", "compile", "host", "scan"]
