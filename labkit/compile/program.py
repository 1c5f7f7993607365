"""A compiled step: the traced nodes after the passes, replayed over a list of slot values.

A replay reads the step's arguments and the live tensors (parameters) into their slots, runs
each node (an op's ``forward`` on arrays, a host computation, or a fused kernel), then writes
back what the step updated (parameters' ``.data`` and ``.grad``) and returns fresh Tensors of
its results: nothing of a replay is a Tensor until the end, and no graph is recorded.
"""

from __future__ import annotations

import numpy as np

from ..autograd.tensor import Tensor
from . import passes
from .trace import Trace


class Program:
    def __init__(self, trace: Trace, *, fuse: bool = True, cse: bool = True):
        t = trace
        self.trace_nodes = len(t.nodes)
        consts: dict = {}
        alias: dict = {}
        for s, src in t.sources.items():
            if src.kind in ("const", "live_array"):
                consts[s] = src.value
        nodes = list(t.nodes)
        self.before = list(nodes)
        nodes = passes.fold(nodes, t.sources, t.values, consts)
        if cse:
            nodes = passes.merge(nodes, alias)

        def res(s):
            return alias.get(s, s)

        self.out_tree = _alias_tree(t.out_tree, res)
        self.writes = [(tensor, kind, None if s is None else res(s)) for tensor, kind, s in t.writes]
        needed = set(_tree_slots(self.out_tree))
        needed.update(s for _, _, s in self.writes if s is not None)
        nodes = passes.prune(nodes, needed)
        self.fused = 0
        if fuse:
            from . import fusion

            nodes, self.fused = fusion.fuse(nodes, t, needed | _read_by_hosts(nodes), consts)
        self.nodes = nodes
        self.n_slots = t.n_slots
        self.init = [None] * t.n_slots
        for s, v in consts.items():
            self.init[s] = v
        self.args = [(s, src.arg) for s, src in t.sources.items() if src.kind == "arg"]
        self.live = [(s, src.tensor) for s, src in t.sources.items() if src.kind == "live"]
        self.live_shapes = [(tensor, tensor.data.shape, tensor.data.dtype, tensor.requires_grad)
                            for _, tensor in self.live]
        self.depends = list(t.depends)
        self.prog = [self._step(n, t) for n in nodes]

    @staticmethod
    def _step(n, t):
        if n.kind == "op":
            f = n.fn.forward
        else:
            f = n.fn
        scalar = tuple(isinstance(t.values.get(s), np.ndarray) and t.values[s].ndim == 0
                       for s in n.outs)
        one = len(n.outs) == 1 and not n.multi
        return (f, tuple(n.ins), tuple(n.outs), one, any(scalar), tuple(n.attr_in),
                tuple(n.attr_out), n.fn)

    # ---- replay ---------------------------------------------------------------------------
    def guard_failure(self):
        """Why this program does not fit the current state (None when it does)."""
        for obj, attr, value in self.depends:
            now = getattr(obj, attr, None)
            if now != value:
                return f"{type(obj).__name__}.{attr} was {value!r} when traced, is {now!r}"
        for tensor, shape, dtype, rg in self.live_shapes:
            d = tensor.data
            if d.shape != shape or d.dtype != dtype or tensor.requires_grad != rg:
                return (f"a tensor the step reads changed from {dtype}{shape} to "
                        f"{d.dtype}{d.shape}" + (" or its requires_grad" if d.shape == shape
                                                 else ""))
        return None

    def run(self, leaves, arg_tensors=None):
        v = list(self.init)
        for s, k in self.args:
            v[s] = leaves[k]
        for s, tensor in self.live:
            v[s] = tensor.data
        for f, ins, outs, one, scalar, attr_in, attr_out, obj in self.prog:
            if attr_in:
                for name, i, s in attr_in:
                    if i is None:
                        setattr(obj, name, v[s])
                    else:
                        cur = list(getattr(obj, name))
                        cur[i] = v[s]
                        setattr(obj, name, type(getattr(obj, name))(cur))
            r = f(*[v[s] for s in ins])
            if one:
                v[outs[0]] = np.asarray(r) if scalar else r
            elif outs:
                for s, x in zip(outs, r):
                    v[s] = np.asarray(x) if scalar and isinstance(x, np.generic) else x
            if attr_out:
                for name, i, s in attr_out:
                    x = getattr(obj, name)
                    v[s] = x if i is None else x[i]
        for tensor, kind, s in self.writes:
            if kind == "data":
                tensor.data = v[s]
            elif kind == "grad":
                tensor.grad = None if s is None else Tensor(v[s])
            elif arg_tensors is not None:  # "arg_grad": the argument's gradient
                arg_tensors[tensor].grad = Tensor(v[s])
        return _build(self.out_tree, v)


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


def _build(tree, v):
    kind, body = tree
    if kind == "tensor":
        return Tensor(v[body])
    if kind == "array":
        return v[body]
    if kind == "value":
        return body
    if kind == "dict":
        return {k: _build(x, v) for k, x in body}
    items = [_build(x, v) for x in body]
    return tuple(items) if kind == "tuple" else items


def _read_by_hosts(nodes):
    """Slots host computations read (they need real arrays: never fused away)."""
    out = set()
    for n in nodes:
        if n.kind == "host":
            out.update(n.ins)
        out.update(s for _, _, s in n.attr_in)
    return out
