"""A compiled step: the traced nodes after the passes, replayed over a list of slot values.

A replay reads the step's arguments and the live tensors (parameters) into their slots, runs
each node (an op's ``forward`` on arrays, a host computation, or a fused kernel), then writes
back what the step updated (parameters' ``.data`` and ``.grad``) and returns fresh Tensors of
its results: nothing of a replay is a Tensor until the end, and no graph is recorded.
"""

from __future__ import annotations

import functools

import numpy as np

from ..autograd import engine as _engine
from ..autograd.tensor import Tensor
from ..backend.opencl.context import deferred_checks, resolve_checks
from ..errors import CompileError
from . import passes
from .guards import first_failure
from .hooks import SetData, SetGrad
from .states import live_states, states_failure
from .trace import Trace


class Program:
    def __init__(self, trace: Trace, *, fuse: bool = True, cse: bool = True,
                 stabilize: bool = True, reassociate: bool = True):
        t = trace
        self.trace_nodes = len(t.nodes)
        #: ops replayed as captured launches (compile/capture.py): how many, the calls that
        #: ran as before after all, the recordings refused and the last reason
        self.capture = {"captured": 0, "fallbacks": 0, "refused": 0, "why": None}
        consts: dict = {}
        alias: dict = {}
        for s, src in t.sources.items():
            if src.kind == "const":  # NOTE: a copy (see passes.fold); a live array is itself
                consts[s] = src.value.copy()
            elif src.kind == "live_array":
                consts[s] = src.value
        nodes = list(t.nodes)
        # what the graph views need, without the arrays: each slot's shape and dtype, where
        # the outside ones come from, and the traced ops (kind, name, brick, slots)
        self.meta = {s: (tuple(v.shape), v.dtype) for s, v in t.values.items()}
        self.origin = {s: (src.kind, src.tensor, src.arg) for s, src in t.sources.items()}
        self.before = [_sketch(n) for n in nodes]
        nodes = passes.fold(nodes, t.sources, t.values, consts)
        if cse:
            # NOTE: arrays the caller gets (results, .data, .grad) and arrays changed in place
            # stay distinct, as the eager step's are
            apart = {s for _, _, s in t.writes if s is not None} | {
                n.ins[0] for n in nodes if isinstance(n.fn, (SetData, SetGrad)) and n.ins}
            apart |= {old for n in nodes for old, _ in n.versions}
            apart |= set(_tree_slots(t.out_tree))
            nodes = passes.merge(nodes, alias, apart)
        self.rewrites: list = []
        if stabilize:
            nodes, self.rewrites = passes.stabilize(nodes, alias, t.values)
        self.pieces = 0
        if cse:
            leaving = {passes.resolve(alias, s) for s in _tree_slots(t.out_tree)}
            leaving.update(passes.resolve(alias, s) for _, _, s in t.writes if s is not None)
            nodes, self.pieces = passes.one_piece(nodes, alias, t.values, leaving)

        def res(s):
            return passes.resolve(alias, s)

        self.out_tree = _alias_tree(t.out_tree, res)
        self.writes = [(tensor, kind, None if s is None else res(s))
                       for tensor, kind, s in t.writes]
        needed = set(_tree_slots(self.out_tree))
        needed.update(s for _, _, s in self.writes if s is not None)

        def new_slot():  # NOTE: a slot for a value a pass adds
            t.n_slots += 1
            return t.n_slots - 1

        self.gathered = self.rows = 0
        if reassociate:
            from .gather import gather_products
            from .transposed import transposed_products

            nodes, self.gathered = gather_products(nodes, alias, t.values, needed, new_slot)
            nodes, self.rows = transposed_products(nodes, t.values, needed, new_slot)
        nodes = passes.prune(nodes, needed)
        self.fused = self.epilogues = self.added = self.masked = self.copied = self.sgd = 0
        self.deferred = self.stacked = 0
        self.cells = self.cell_grads = self.cell_loops = 0
        if fuse:
            nodes, self.epilogues = passes.fold_relu(nodes, needed)
            nodes, self.added = passes.fold_add(nodes, needed, t.values)
            nodes, self.masked = passes.fold_relu_grad(nodes, needed, t.values)
            nodes, self.copied = passes.contiguous_weights(nodes, needed, t.values, new_slot)
            from .lstm_cells import lstm_cells

            nodes, self.cells, self.cell_grads, self.cell_loops = lstm_cells(
                nodes, t.values, new_slot)
            from . import fusion

            nodes, self.fused = fusion.fuse(nodes, t, needed | _read_by_hosts(nodes), consts)
            from .sgd import sgd_products

            nodes, self.sgd = sgd_products(nodes, t.values, t.sources, self.capture,
                                           results=_not_one_grad(self),
                                           outer=reassociate, written=needed)
            self.deferred = sum(getattr(n.fn, "kept", None) is not None for n in nodes)
            from .stacked import stacks_in_place

            nodes, self.stacked = stacks_in_place(
                nodes, t.values, _viewed(nodes, t.values, needed | _read_by_hosts(nodes)))
        nodes = _checks_early(nodes)
        self.nodes = nodes
        self.after = [_sketch(n) for n in nodes]
        self.n_slots = t.n_slots
        self.init = [None] * t.n_slots
        for s, v in consts.items():
            self.init[s] = v
        self.args = [(s, src.arg) for s, src in t.sources.items() if src.kind == "arg"]
        self.live = [(s, src.tensor) for s, src in t.sources.items() if src.kind == "live"]
        self.live_shapes = live_states(t)
        #: each such tensor's gradient hooks when traced (a hook added since: traced again)
        self.live_hooks = [(tensor, tensor._hooks, _final_hooks_of(tensor))
                           for _, tensor in self.live]
        self.depends = list(t.depends)
        self.pyguards = list(getattr(t, "pyguards", ()))  # compile/guards.py
        self.arg_alias = list(t.arg_alias)
        #: tensors (an argument: its index) whose .grad was None when traced, and must be
        self.grad_none = list(getattr(t, "grad_none", ()))
        self.lowered = 0
        self.replay, self.source = _generate(self, nodes, t, needed | _read_by_hosts(nodes))

    # ---- replay ---------------------------------------------------------------------------
    def guard_failure(self, leaves=(), tensors=None):
        """Why this program does not fit the current state, the arguments' arrays ``leaves``
        and their tensors ``tensors`` (by index; None when it does)."""
        changed = first_failure(self.pyguards) or depends_failure(self.depends)
        if changed is not None:
            return changed
        for x in self.grad_none:
            x = (tensors or {}).get(x) if isinstance(x, int) else x
            if x is not None and x.grad is not None:
                return (f"the .grad of a tensor of shape {x.shape} was None when the step was "
                        "traced and is set now (backward would add to it)")
        for k, tensor in self.arg_alias:
            if k < len(leaves) and leaves[k] is not tensor.data:
                return (f"argument array {k} was the data of a tensor of shape "
                        f"{tuple(tensor.shape)} the step also reads (a parameter) when traced, "
                        "and is another array now")
        changed = states_failure(self.live_shapes)
        if changed is not None:
            return changed
        for tensor, hooks, final in self.live_hooks:
            if tensor._hooks is not hooks or _final_hooks_of(tensor) != final:
                return (f"a gradient hook of a tensor of shape {tensor.shape} the step reads "
                        "was added or removed since it was traced (register_hook, "
                        "register_grad_ready_hook)")
        return None

    def run(self, leaves, arg_tensors=None):
        # NOTE: device index checks are read back without waiting and looked at before each
        # state change and before the results are written (labkit.functions._check.indices)
        with deferred_checks():
            return self.replay(leaves, arg_tensors)


def _final_hooks_of(tensor) -> tuple:
    """The grad-ready hooks of ``tensor`` (autograd/engine.py), as a tuple."""
    entry = _engine._final_hooks.get(id(tensor))
    return tuple(entry[1]) if entry is not None and entry[0]() is tensor else ()


def depends_failure(depends):
    """The first (object, attribute, value) a trace depended on that changed, described; or
    None when none did."""
    for obj, attr, value in depends:
        now = getattr(obj, attr, None)
        if now != value:
            if attr == "layer_tuple":  # NOTE: labkit.bricks.layers.Sequence
                return (f"{type(obj).__name__} {getattr(obj, 'path', '')}: its layers changed "
                        "(one added, removed or replaced) since it was traced")
            if attr == "_version":  # NOTE: labkit.bricks.base.Brick._version
                return (f"{type(obj).__name__} {getattr(obj, 'path', '')}: a parameter, buffer "
                        "or other object it holds was replaced or moved since it was traced")
            return f"{type(obj).__name__}.{attr} was {value!r} when traced, is {now!r}"
    return None


# ---- code generation ------------------------------------------------------------------------

#: cpu ops replayed as one NumPy ufunc call into a buffer kept between replays: type -> (ufunc,
#: constant attribute or None). The op's forward is the same call without ``out=``.
_UFUNCS = {}


def _ufuncs():
    if not _UFUNCS:
        from ..functions import activation as a
        from ..functions import math as m

        _UFUNCS.update({
            m.Add: (np.add, None), m.Sub: (np.subtract, None), m.Mul: (np.multiply, None),
            m.Div: (np.true_divide, None), m.Neg: (np.negative, None),
            m.AddConstant: (np.add, "c"), m.MulConstant: (np.multiply, "c"),
            m.DivConstant: (np.true_divide, "c"),
            m.Exp: (np.exp, None), m.Log: (np.log, None), m.Sqrt: (np.sqrt, None),
            m.Log1p: (np.log1p, None), m.Tanh: (np.tanh, None), a.ReLU: (np.maximum, 0),
        })
    return _UFUNCS




def _lowerable(n, values, referenced):
    """(ufunc, constant or None) when the cpu op ``n`` can run as one ufunc into a buffer."""
    if (n.kind != "op" or n.attr_in or n.attr_out or n.multi or n.idx in referenced
            or len(n.outs) != 1):
        return None
    spec = _ufuncs().get(type(n.fn))
    if spec is None:
        return None
    out = values.get(n.outs[0])
    if type(out) is not np.ndarray or out.dtype.kind != "f":
        return None
    for s in n.ins:
        v = values.get(s)
        if type(v) is not np.ndarray or v.dtype != out.dtype:
            return None
    ufunc, attr = spec
    if attr is None or attr == 0:
        return ufunc, attr
    c = n.fn.__dict__.get(attr)
    if isinstance(c, bool) or not isinstance(c, (int, float, np.ndarray)):
        return None
    if isinstance(c, np.ndarray) and c.dtype != out.dtype:
        return None
    return ufunc, c


def _view_ops():
    from ..functions import array as fa
    from ..functions import math as m

    return (fa.GetItem, fa.Split, fa.Unbind, fa.Cast, fa.ToDevice, fa.Contiguous,
            m.Reshape, m.Transpose, m.BroadcastTo, m.SumTo)


def _viewed(nodes, values, exposed) -> set:
    """The slots whose arrays a result may be, or be a view of: the exposed slots and, back
    through every op that can return a view of its input (a reshape, a slice, a
    transpose...), that op's inputs. From the program's own data flow, not only from the
    traced views: after a pass changes a layout, a reshape that copied when traced (of a
    transpose) may return a view when replayed, and what it views must not be a buffer the
    next replay overwrites."""
    views = _view_ops()
    out = set(exposed)
    for n in reversed(nodes):
        if n.kind != "op" or not any(o in out for o in n.outs):
            continue
        if isinstance(n.fn, views) or any(
                o in values and i in values
                and passes.root_id(values[o]) == passes.root_id(values[i])
                for o in n.outs for i in n.ins):
            out.update(n.ins)
    return out


def _generate(prog, nodes, t, exposed):
    """A Python function that runs ``nodes`` once: one line per node, slots as locals."""
    from . import passes

    env = {"Tensor": Tensor, "asarray": np.asarray}
    lines = ["def replay(L, AT):"]
    referenced = set()
    for n in nodes:
        referenced |= passes.refs(n)
    values = t.values
    exposed_roots = {passes.root_id(values[s]) for s in _viewed(nodes, values, exposed)
                     if s in values}
    for s, arg in prog.args:
        lines.append(f"    s{s} = L[{arg}]")
    for j, (s, tensor) in enumerate(prog.live):
        env[f"P{j}"] = tensor
        lines.append(f"    s{s} = P{j}.data")
    # NOTE: a constant a node changes in place or a tensor's .data takes (a parameter reset
    # to a fresh array before its update): a new copy at each replay, as the step made it
    # (not an array read by identity at each call, "live_array": a caller's buffer a host
    # step updates in place stays the caller's)
    changed = {old for n in nodes for old, _ in n.versions} | {
        n.ins[0] for n in nodes if isinstance(n.fn, SetData)}
    changed -= {s for s, src in t.sources.items() if src.kind != "const"}
    for s, v in enumerate(prog.init):
        if v is not None and s in changed:
            env[f"K{s}"] = v
            lines.append(f"    s{s} = K{s}.copy()")
        elif v is not None:
            env[f"s{s}"] = v  # constants: globals of the generated function

    def scalar0(s):
        v = values.get(s)
        return type(v) is np.ndarray and v.ndim == 0

    body = len(lines)
    for k, n in enumerate(nodes):
        args = ", ".join(f"s{x}" for x in n.ins)
        low = _lowerable(n, values, referenced) if n.kind == "op" else None
        if low is not None:
            ufunc, c = low
            o = n.outs[0]
            env[f"U{k}"] = ufunc
            if c is not None:
                env[f"C{k}"] = c
                args += f", C{k}"
            if scalar0(o):
                # NOTE: a ufunc's 0-d result is a NumPy scalar: made an array again, as every
                # other 0-d value (an op taking it as an array failed at the first replay)
                lines.append(f"    s{o} = asarray(U{k}({args}))")
            elif passes.root_id(values[o]) in exposed_roots or values[o].ndim == 0:
                lines.append(f"    s{o} = U{k}({args})")
            else:
                env[f"B{k}"] = np.empty_like(values[o])
                lines.append(f"    s{o} = U{k}({args}, out=B{k})")
            prog.lowered += 1
            continue
        if n.kind == "op":
            env[f"O{k}"] = n.fn
            env[f"F{k}"] = (functools.partial(n.fn.forward_into, *n.into) if n.into else
                            _captured(prog, n, values) or n.fn.forward)
            for name, i, x in n.attr_in:
                if i is None:
                    lines.append(f"    O{k}.{name} = s{x}")
                else:
                    lines.append(f"    _a = list(O{k}.{name}); _a[{i}] = s{x}; "
                                 f"O{k}.{name} = type(O{k}.{name})(_a)")
        else:
            env[f"F{k}"] = _captured(prog, n, values) or n.fn
            if n.effect and not getattr(n.fn, "lk_check", False):
                # NOTE: the device index checks queued so far are looked at before anything
                # changes state (labkit.functions._check.indices)
                lines.append("    RESOLVE()")
        call = f"F{k}({args})"
        if isinstance(n.fn, SetData) and n.fn.arg is not None:
            lines.append(f"    AT[{n.fn.arg}].data = {args}")  # NOTE: this call's argument
        elif isinstance(n.fn, SetGrad) and n.fn.arg is not None:
            lines.append(f"    AT[{n.fn.arg}].grad = " + (f"Tensor({args})" if args else "None"))
        elif not n.outs:
            lines.append(f"    {call}")
        elif len(n.outs) == 1 and not n.multi:
            o = n.outs[0]
            lines.append(f"    s{o} = asarray({call})" if scalar0(o) else f"    s{o} = {call}")
        else:
            lines.append(f"    _r = {call}")
            for i, o in enumerate(n.outs):
                lines.append(f"    s{o} = asarray(_r[{i}])" if scalar0(o) else
                             f"    s{o} = _r[{i}]")
        if _value_shaped(n):
            # NOTE: a result whose shape follows values (x[mask], a host function): the
            # nodes after it are made for the traced shape, and would cut or broadcast another
            env["SHAPED"] = _shape_changed
            env[f"N{k}"] = (n.name, n.where)
            for o in n.outs:
                if hasattr(values.get(o), "shape"):
                    env[f"SH{o}"] = tuple(values[o].shape)
                    lines.append(f"    if getattr(s{o}, 'shape', None) != SH{o}: "
                                 f"SHAPED(N{k}, SH{o}, s{o})")
        for name, i, x in n.attr_out:
            lines.append(f"    s{x} = O{k}.{name}" + ("" if i is None else f"[{i}]"))
        for old, new in n.versions:  # the same array, changed in place by this node
            lines.append(f"    s{new} = s{old}")
    # NOTE: copied where they leave: constants (the next replay returns them again) and
    # arrays from outside (an argument or a parameter a rewrite made a result alias)
    fixed = {s for s, v in enumerate(prog.init) if v is not None}
    fixed |= {s for s, _ in prog.args} | {s for s, _ in prog.live}

    def fresh(s):  # NOTE: a constant written out is copied: the next replay writes it again
        return f"s{s}.copy()" if s in fixed else f"s{s}"

    env["RESOLVE"] = resolve_checks
    lines.append("    RESOLVE()")  # NOTE: before the step's results are written out
    from . import sgd

    env["GRAD"] = sgd.grad_tensor
    deferred = {n.outs[0] for n in nodes if isinstance(n.fn, sgd._ProductUpdate)}

    def grad(s):  # NOTE: a gradient made where it is read (compile/sgd.py: OuterGrad)
        return f"GRAD(s{s})" if s in deferred else f"Tensor({fresh(s)})"

    for j, (tensor, kind, s) in enumerate(prog.writes):
        if kind == "data":
            env[f"W{j}"] = tensor
            lines.append(f"    W{j}.data = {fresh(s)}")
        elif kind == "grad":
            env[f"W{j}"] = tensor
            lines.append(f"    W{j}.grad = " + ("None" if s is None else grad(s)))
        else:
            lines.append(f"    AT[{tensor}].grad = {grad(s)}")
    lines.append(f"    return {_tree_code(prog.out_tree, env, fixed)}")
    restore = _set_back(prog, nodes)
    if restore:
        # NOTE: a tensor the step sets and then sets back to its data (WeightNoise, a
        # try/finally): a replay that raises between the two sets it back, as the eager
        # step's with/finally does
        lines[body:] = ["    try:"] + ["    " + x for x in lines[body:]] + [
            "    except BaseException:"] + [
            f"        {f'AT[{x}]' if isinstance(x, int) else f'R{j}'}.data = s{sl}"
            for j, (sl, x) in enumerate(restore)] + ["        raise"]
        env.update({f"R{j}": x for j, (_, x) in enumerate(restore) if not isinstance(x, int)})
    source = "\n".join(lines) + "\n"
    exec(compile(source, "<lk.compile replay>", "exec"), env)  # noqa: S102 - our own code
    return env["replay"], source


def _set_back(prog, nodes) -> list:
    """(slot, tensor or argument index) of each tensor a replay reads at its start whose data
    the step sets, and then sets back to that in a ``finally`` block or an ``__exit__``
    (``SetData.cleanup``): a replay raising in between sets it back, as the eager step's
    unwinding does (a set-back outside those does not run when the eager step raises)."""
    start = {id(tensor): s for s, tensor in prog.live}
    start.update({("argument", k): s for s, k in prog.args})
    written = {id(tensor) for tensor, kind, _ in prog.writes if kind == "data"}
    last = {n.fn.key: n for n in nodes if isinstance(n.fn, SetData)}
    return [(n.ins[0], n.fn.tensor if n.fn.arg is None else n.fn.arg)
            for key, n in last.items()
            if n.fn.cleanup and start.get(key) == n.ins[0] and key not in written]


def _not_one_grad(prog) -> set:
    """The slots a replay returns, or writes as anything but one tensor's ``.grad`` (a
    gradient made where it is read fits only there: compile/sgd.py)."""
    out = set(_tree_slots(prog.out_tree))
    grads = [s for _, kind, s in prog.writes if kind != "data"]
    out |= {s for _, kind, s in prog.writes if kind == "data"}
    return out | {s for s in grads if grads.count(s) > 1}


def _value_shaped(n) -> bool:
    """Whether node ``n``'s results may take another shape at a replay whose inputs have the
    traced shapes: indexing with a boolean mask, and a host function (lk.compile.host) that is
    not one of labkit's own captured ones."""
    if n.kind == "host":
        return bool(n.outs) and not getattr(n.fn, "lk_capture", False)
    from ..functions import array as fa

    if n.kind != "op" or type(n.fn) is not fa.GetItem:
        return False
    key = n.fn.key if isinstance(n.fn.key, tuple) else (n.fn.key,)
    # NOTE: a Python list in the key is a constant of the trace (compared between calls)
    return any(getattr(getattr(x, "dtype", None), "kind", None) == "b" for x in key)


def _shape_changed(node, traced, got):
    name, where = node
    raise CompileError(
        f"lk.compile: {name} at {where} gave a result of shape "
        f"{tuple(getattr(got, 'shape', ()))} where the traced call's was {traced}: its shape "
        "follows values (a boolean mask, x[mask], or a host function), which a replay cannot "
        "follow, and the ops after it were made for the traced shape. Keep the shape fixed "
        "(F.where(mask, x, 0), or x multiplied by the mask), or do this outside the compiled "
        "step. (This call stopped there: what it changed before, it changed.)")


def _checks_early(nodes):
    """Each deferred device check (labels, indices: ``functions._check.indices``) moved to
    just after the nodes that make its inputs (the start, for a step's arguments): its flag is
    then read back while the rest of the step is queued, and the wait before the optimizer's
    update finds it there, instead of waiting for the forward and backward to finish first.
    A check only reads its input: on a device it queues a flag that is looked at where it was
    (before the first state change); on the CPU it raises at once. Checks keep their order
    (the first failing one is the error, as in an eager call) and none moves before a node
    that changes state, so nothing that happened before it in an eager call happens after."""
    out, floor = [], 0
    for n in nodes:
        if n.kind == "host" and getattr(n.fn, "lk_check", False) and not n.outs:
            pos = floor
            for i, m in enumerate(out):
                made = set(m.outs) | {new for _, new in m.versions} | {
                    x for _, _, x in m.attr_out}
                if made & set(n.ins) or m.effect:
                    pos = max(pos, i + 1)
            out.insert(pos, n)
            floor = pos + 1
        else:
            out.append(n)
    return out


def _captured(prog, n, values):
    """The node's forward as launches captured at its first replay (compile/capture.py), for
    the ops of an OpenCL step that can be; None for the others."""
    from ..backend.opencl import ndarray
    from . import capture

    # NOTE: a fused kernel, or a host step that reads only its inputs (``lk_capture``)
    plain = n.kind == "kernel" or (n.kind == "host" and getattr(n.fn, "lk_capture", False))
    if not capture.ENABLED or not n.outs or n.attr_out or n.versions or n.effect or not (
            plain or (n.kind == "op" and capture.allowed(n.fn))):
        return None
    if not all(type(values.get(o)) is ndarray for o in n.outs):
        return None
    forward = n.fn if plain else n.fn.forward
    attr_in = [] if plain else [(name, i) for name, i, _ in n.attr_in]
    return capture.capturing(forward, n.fn, attr_in, n.multi, ndarray, prog.capture)


def _tree_code(tree, env, fixed):
    """The expression that builds a replay's results; a constant result is copied (the next
    replay returns the same constant, which the caller may have changed)."""
    kind, body = tree
    if kind == "tensor":
        return f"Tensor(s{body}.copy())" if body in fixed else f"Tensor(s{body})"
    if kind == "array":
        return f"s{body}.copy()" if body in fixed else f"s{body}"
    if kind == "value":
        name = f"V{len(env)}"
        env[name] = body
        return name
    if kind == "dict":
        name = f"K{len(env)}"
        env[name] = [k for k, _ in body]
        items = ", ".join(f"{name}[{i}]: {_tree_code(x, env, fixed)}"
                          for i, (_, x) in enumerate(body))
        return "{" + items + "}"
    items = [_tree_code(x, env, fixed) for x in body]
    if isinstance(kind, tuple):  # ("namedtuple", its type)
        name = f"N{len(env)}"
        env[name] = kind[1]
        return f"{name}(" + ", ".join(items) + ")"
    if kind == "tuple":
        return "(" + "".join(f"{x}, " for x in items) + ")"
    return "[" + ", ".join(items) + "]"


def _alias_tree(tree, res):
    kind, body = tree
    if kind in ("tensor", "array"):
        return (kind, res(body))
    if kind == "value":
        return tree
    if kind == "dict":
        return (kind, tuple((k, _alias_tree(x, res)) for k, x in body))
    return (kind, tuple(_alias_tree(x, res) for x in body))


def _tree_slots(tree):
    kind, body = tree
    if kind in ("tensor", "array"):
        yield body
    elif kind == "dict":
        for _, x in body:
            yield from _tree_slots(x)
    elif kind != "value":
        for x in body:
            yield from _tree_slots(x)


def _sketch(n):
    """A traced node without its function: (kind, name, brick, ins, outs, parts), ``parts``
    the sketches of the ops a fused kernel holds."""
    brick = getattr(n.fn, "brick", None) if n.kind == "op" else None
    parts = [_sketch(m) for m in getattr(n, "region", ())]
    ins = list(n.ins) + [s for _, _, s in n.attr_in]
    return (n.kind, n.name, brick, ins, list(n.outs), parts)


def _read_by_hosts(nodes):
    """Slots host computations and the user's own Functions read: they need real arrays
    (never fused away), and may keep them (never a buffer the next replay writes again)."""
    out = set()
    for n in nodes:
        if n.kind == "host" or (n.kind == "op"
                                and not type(n.fn).__module__.startswith("labkit.")):
            out.update(n.ins)
        out.update(s for _, _, s in n.attr_in)
    return out
