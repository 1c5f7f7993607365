"""The backward pass: iterative, in reverse creation order (a valid topological order, since a
node is always created after the nodes that made its inputs), accumulating gradients of tensors
used many times, freeing the graph unless ``retain_graph``."""

from __future__ import annotations

import heapq

from ..backend import zeros
from .function import set_grad_enabled
from .tensor import Tensor


def _zeros_like_out(node, i, like):
    shape, dtype = node.out_meta[i]
    return Tensor(zeros(shape, dtype, like.data))


def run(roots, grads, *, targets=None, retain_graph=False, create_graph=False):
    """Back-propagate ``grads`` from ``roots``.

    Without ``targets``: accumulate into the ``.grad`` of leaf tensors that require grad.
    With ``targets``: return their gradients (None where unreachable), leaving ``.grad`` alone.
    """
    want_leaf = {}
    want_node = {}
    if targets is not None:
        for k, t in enumerate(targets):
            if t.creator is None:
                want_leaf.setdefault(id(t), []).append(k)
            else:
                want_node.setdefault((id(t.creator), t.index), []).append(k)
        found = [None] * len(targets)
    pending: dict = {}
    heap: list = []

    def add(a, b):
        if a is None:
            return b
        return a + b

    def push(t, g):
        node = t.creator
        if node is None:
            if not t.requires_grad:
                return
            if t._hooks:
                for h in t._hooks:
                    r = h(g)
                    if r is not None:
                        g = r
            if targets is None:
                t.grad = g if t.grad is None else (t.grad + g if create_graph
                                                   else Tensor(t.grad.data + g.data))
            else:
                for k in want_leaf.get(id(t), ()):
                    found[k] = add(found[k], g)
            return
        slots = pending.get(node)
        if slots is None:
            slots = pending[node] = [None] * len(node.out_meta)
            heapq.heappush(heap, node)
        slots[t.index] = add(slots[t.index], g)

    old = set_grad_enabled(create_graph)
    try:
        for t, g in zip(roots, grads):
            push(t, g)
        while heap:
            node = heapq.heappop(heap)
            gys = pending.pop(node)
            if node.freed:
                raise RuntimeError(
                    f"backward through {node.name} a second time: its graph was freed by the "
                    "first backward. Pass retain_graph=True to the first backward (or to "
                    "lk.grad) to back-propagate through the same graph again")
            if node.out_hooks:
                for i, hooks in node.out_hooks.items():
                    if gys[i] is not None:
                        for h in hooks:
                            r = h(gys[i])
                            if r is not None:
                                gys[i] = r
            if want_node:
                for i, g in enumerate(gys):
                    for k in want_node.get((id(node), i), ()):
                        found[k] = add(found[k], g)
            if all(g is None for g in gys):
                continue
            like = next(g for g in gys if g is not None)
            gys = tuple(g if g is not None else _zeros_like_out(node, i, like)
                        for i, g in enumerate(gys))
            inputs = node.inputs
            gxs = node.backward(inputs, gys if len(gys) > 1 else gys[0])
            if not isinstance(gxs, tuple):
                gxs = (gxs,)
            if not retain_graph:
                node.free()
            for x, gx in zip(inputs, gxs):
                if gx is not None and x.requires_grad:
                    if gx.data.shape != x.data.shape:
                        raise RuntimeError(
                            f"{node.name}: backward gave a gradient of shape {gx.data.shape} "
                            f"for an input of shape {x.data.shape} (a bug in {node.name})")
                    push(x, gx)
    finally:
        set_grad_enabled(old)
    if targets is not None:
        return found
    return None
