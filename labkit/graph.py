"""Graph: the recorded computation behind some outputs, walked and queried (Blocks'
ComputationGraph and VariableFilter on a define-by-run tape)."""

from __future__ import annotations

import fnmatch

from . import roles as _roles
from .autograd.tensor import Tensor


class Graph:
    """The variables and function nodes that produced ``outputs``, in topological order.

    Examples
    --------
    >>> import numpy as np, labkit as lk, labkit.bricks as B
    >>> mlp = B.MLP([4, 8, 2])
    >>> loss = mlp(lk.tensor(np.ones((3, 4), np.float32))).sum()
    >>> [p.path for p in lk.Graph(loss).filter(role=lk.roles.WEIGHT)]
    ['/mlp/linear_0.W', '/mlp/linear_1.W']
    """

    def __init__(self, outputs):
        outs = [outputs] if isinstance(outputs, Tensor) else list(outputs)
        self.outputs = outs
        nodes, seen = [], set()
        variables, vseen = [], set()
        stack = [t.creator for t in outs if t.creator is not None]
        while stack:
            n = stack.pop()
            if id(n) in seen:
                continue
            seen.add(id(n))
            if n.freed:
                raise RuntimeError(
                    f"Graph: the graph behind this tensor was freed by backward (at {n.name}); "
                    "build the Graph before calling backward, or pass retain_graph=True")
            nodes.append(n)
            for x in n.inputs:
                if x.creator is not None:
                    stack.append(x.creator)
        nodes.sort(key=lambda n: n.seq)
        for n in nodes:
            for x in n.inputs:
                if id(x) not in vseen:
                    vseen.add(id(x))
                    variables.append(x)
        for t in outs:
            if id(t) not in vseen:
                vseen.add(id(t))
                variables.append(t)
        self.nodes = nodes
        self.variables = variables

    @property
    def parameters(self):
        from .bricks.base import Parameter

        return [v for v in self.variables if isinstance(v, Parameter)]

    @property
    def inputs(self):
        """Leaf variables that are not parameters (the data fed in)."""
        from .bricks.base import Parameter

        return [v for v in self.variables if v.creator is None and not isinstance(v, Parameter)]

    def filter(self, role=None, brick=None, name=None):
        """Variables with ``role`` (subroles included), made by or belonging to bricks under
        the path ``brick`` (e.g. "/decoder"), whose name matches the glob ``name``."""
        out = []
        for v in self.variables:
            if role is not None and not _roles.has_role(v, role):
                continue
            if brick is not None and not _under(_brick_of(v), brick):
                continue
            if name is not None and not fnmatch.fnmatch(_name_of(v) or "", name):
                continue
            out.append(v)
        return out

    def to_dict(self) -> dict:
        """A JSON-able description: variable and function nodes (op, shape, dtype, device,
        brick path, role) and the edges between them."""
        ids = {}
        nodes = []
        for v in self.variables:
            ids[id(v)] = f"v{len(ids)}"
            kind = ("parameter" if getattr(v, "path", None) else
                    "input" if v.creator is None else "variable")
            nodes.append({"id": ids[id(v)], "kind": kind, "name": _name_of(v),
                          "shape": list(v.shape), "dtype": str(v.dtype), "device": str(v.device),
                          "brick": _brick_of(v), "role": repr(v.role) if v.role else None})
        edges = []
        outs_of = {}
        for v in self.variables:
            if v.creator is not None:
                outs_of.setdefault(id(v.creator), []).append(v)
        for k, n in enumerate(self.nodes):
            fid = f"f{k}"
            nodes.append({"id": fid, "kind": "function", "op": n.name, "brick": n.brick,
                          "shapes": [list(s) for s, _ in n.out_meta],
                          "dtype": str(n.out_meta[0][1])})
            for x in n.inputs:
                edges.append([ids[id(x)], fid])
            for o in outs_of.get(id(n), []):
                edges.append([fid, ids[id(o)]])
        return {"nodes": nodes, "edges": edges}

    def summary(self) -> str:
        """A text table of the function nodes, one per line."""
        lines = [f"{'#':>4}  {'op':<22} {'brick':<28} {'output shape':<18} dtype"]
        for k, n in enumerate(self.nodes):
            shape, dt = n.out_meta[0]
            lines.append(f"{k:>4}  {n.name:<22} {(n.brick or '-'):<28} {str(tuple(shape)):<18} "
                         f"{dt}")
        params = self.parameters
        lines.append(f"{len(self.nodes)} ops, {len(params)} parameters "
                     f"({sum(p.size for p in params):,} values)")
        return "\n".join(lines)

    def __repr__(self):
        return f"Graph({len(self.nodes)} ops, {len(self.variables)} variables)"


def _name_of(v):
    return getattr(v, "path", None) or v.name


def _brick_of(v):
    path = getattr(v, "path", None)
    if path:
        return path.rsplit(".", 1)[0]
    return v.creator.brick if v.creator is not None else None


def _under(path, prefix):
    if path is None:
        return False
    prefix = prefix.rstrip("/")
    return path == prefix or path.startswith(prefix + "/")
