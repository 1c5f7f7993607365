"""A compiled program as an ``lk.Graph``, for ``GraphView``: the ops as traced (``before``)
or as replayed (``after``: merged, pruned, each fused kernel a group ``/compiled/fused k``
holding its ops). The variables carry shapes and dtypes but not values (a program keeps no
copy of a step's arrays): their value statistics read as NaN."""

from __future__ import annotations

import numpy as np

from ..autograd.tensor import Tensor
from ..graph import Graph
from .program import _tree_slots


class _Op:
    """What Graph and GraphView read of a function node."""

    __slots__ = ("name", "brick", "inputs", "out_meta", "seq", "freed")

    def __init__(self, name, brick, inputs, out_meta, seq):
        self.name, self.brick, self.inputs = name, brick, inputs
        self.out_meta, self.seq, self.freed = out_meta, seq, False


def graph(program, after: bool = True) -> Graph:
    meta, origin = program.meta, program.origin
    made: dict = {}

    def var(s):
        v = made.get(s)
        if v is not None:
            return v
        kind, tensor, arg = origin.get(s, (None, None, None))
        if kind == "live" and tensor is not None:
            v = tensor
        else:
            shape, dtype = meta.get(s, ((), np.dtype(np.float32)))
            fill = np.nan if np.dtype(dtype).kind == "f" else 0
            v = Tensor(np.broadcast_to(np.asarray(fill, dtype), shape))
            folded = kind is None and program.init[s] is not None if s < len(program.init) \
                else False
            v.name = (f"argument {arg}" if kind == "arg" else
                      "constant" if kind in ("const", "live_array") or folded else None)
        made[s] = v
        return v

    ops = []
    seq = 0
    kernels = 0

    def add(sketch, group=None):
        nonlocal seq
        kind, name, brick, ins, outs, parts = sketch
        if parts:
            nonlocal kernels
            kernels += 1
            for p in parts:
                add(p, group=f"/compiled/fused {kernels}")
            return
        inputs = tuple(var(s) for s in ins)
        out_meta = tuple(meta.get(s, ((), np.dtype(np.float32))) for s in outs) or (
            ((), "-"),)
        # NOTE: a host computation is labelled by its last name part ("onehot (host)")
        label = name if kind != "host" else (
            name if name.startswith(("set .", "read .")) else
            f"{name.rsplit('.', 1)[-1]} (host)")
        op = _Op(label, group or brick, inputs, out_meta, seq)
        seq += 1
        ops.append(op)
        for i, s in enumerate(outs):
            if s in made and made[s].creator is None and origin.get(s) is None:
                continue
            v = var(s) if s not in made else made[s]
            if origin.get(s) is None:
                v.creator, v.index = op, i
        return op

    for sk in (program.after if after else program.before):
        add(sk)
    g = Graph.__new__(Graph)
    g.title = "compiled program, as replayed" if after else "compiled step, as traced"
    out_slots = list(_tree_slots(program.out_tree))
    g.outputs = [var(s) for s in out_slots]
    g.nodes = ops
    variables, seen = [], set()
    for op in ops:
        for x in op.inputs:
            if id(x) not in seen:
                seen.add(id(x))
                variables.append(x)
    for v in made.values():
        if id(v) not in seen:
            seen.add(id(v))
            variables.append(v)
    g.variables = variables
    return g

