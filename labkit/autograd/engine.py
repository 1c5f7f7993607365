"""The backward pass: iterative, in reverse creation order (a valid topological order, since a
node is always created after the nodes that made its inputs), accumulating gradients of tensors
used many times, freeing the graph unless ``retain_graph``."""

from __future__ import annotations

import heapq
import weakref

from ..backend import zeros
from . import trace as _trace
from .function import set_grad_enabled
from .tensor import Tensor

#: id(leaf) -> (weak reference to the leaf, [fn(leaf)]): hooks called once per backward, when the
#: leaf's ``.grad`` is final (every contribution accumulated). Data-parallel training (lk.dist)
#: starts a bucket's all-reduce from them while the rest of backward runs.
_final_hooks: dict = {}


class HookHandle:
    """What ``Tensor.register_grad_ready_hook`` returns: ``remove()`` unregisters the hook."""

    def __init__(self, key, fn):
        self._key, self._fn = key, fn

    def remove(self) -> None:
        entry = _final_hooks.get(self._key)
        if entry is not None and self._fn in entry[1]:
            entry[1].remove(self._fn)
            if not entry[1]:
                del _final_hooks[self._key]


def add_final_hook(t, fn) -> HookHandle:
    key = id(t)
    entry = _final_hooks.get(key)
    if entry is None or entry[0]() is not t:
        entry = _final_hooks[key] = (weakref.ref(t, lambda _, k=key: _final_hooks.pop(k, None)),
                                     [])
    entry[1].append(fn)
    return HookHandle(key, fn)


def _fire_final(t, hooks) -> None:
    """Call the grad-ready hooks ``hooks`` of leaf ``t``. Inside a step lk.compile traces, a
    hook that does not say it may be traced (``lk_traced = True``: lk.dist's, which leaves
    the reduction to the step's synchronize) is refused: a replay runs no Python, and would
    skip it (a hook halving .grad, a log)."""
    for h in tuple(hooks):
        if _trace.tracer() is not None and not getattr(h, "lk_traced", False):
            from ..errors import CompileError

            raise CompileError(
                f"lk.compile: a grad-ready hook ({getattr(h, '__qualname__', h)!r}, "
                f"register_grad_ready_hook) of a tensor of shape {t.shape} runs in the step; "
                "a replay runs no Python and would not call it. Remove it while the step is "
                "compiled (its handle's remove()), or do its work in the step after backward "
                "(with labkit ops, or in lk.compile.host(fn, *arrays, effect=True))")
        h(t)


def _count_final(roots) -> dict:
    """For each hooked leaf reachable from ``roots``: how many recorded uses of it backward will
    visit (its ``.grad`` is final once they are all done)."""
    counts: dict = {}
    seen = set()
    stack = [t.creator for t in roots if t.creator is not None]
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        for x in node.inputs:
            if not x.requires_grad:
                continue
            if x.creator is None:
                if id(x) in _final_hooks:
                    counts[id(x)] = counts.get(id(x), 0) + 1
            else:
                stack.append(x.creator)
    for t in roots:
        if t.creator is None and t.requires_grad and id(t) in _final_hooks:
            counts[id(t)] = counts.get(id(t), 0) + 1
    return counts


#: the name of the zeros backward passes for an output no gradient reached (a node that can
#: tell, such as lk.scan's, treats it as no gradient)
NO_GRADIENT = "<no gradient>"


def _zeros_like_out(node, i, like):
    shape, dtype = node.out_meta[i]
    return Tensor(zeros(shape, dtype, like.data), name=NO_GRADIENT)


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
    # NOTE: counted only while a grad-ready hook exists (lk.dist); otherwise no extra pass
    uses = _count_final(roots) if _final_hooks and targets is None else None
    reached: dict = {}  # id(hooked leaf) -> the leaf, once it got a gradient in this backward

    def used(t):
        """One recorded use of the hooked leaf ``t`` is done: fire its hooks at the last."""
        k = id(t)
        left = uses[k] - 1
        uses[k] = left
        if left == 0 and reached.pop(k, None) is not None:
            _fire_final(t, _final_hooks[k][1])

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
                # NOTE: under lk.compile's trace the sum is an op the replay runs again
                t.grad = g if t.grad is None else (t.grad + g if create_graph or tracing
                                                   else Tensor(t.grad.data + g.data))
                if uses is not None and id(t) in uses:
                    reached[id(t)] = t
            else:
                for k in want_leaf.get(id(t), ()):
                    found[k] = add(found[k], g)
            return
        slots = pending.get(node)
        if slots is None:
            slots = pending[node] = [None] * len(node.out_meta)
            # NOTE: keyed by -seq (the newest node first): tuples compare in C, not by a
            # Python __lt__ per comparison
            heapq.heappush(heap, (-node.seq, node))
        slots[t.index] = add(slots[t.index], g)

    tracing = _trace.tracer() is not None
    old = set_grad_enabled(create_graph)
    try:
        for t, g in zip(roots, grads):
            push(t, g)
            if uses and t.creator is None and id(t) in uses:
                used(t)
        while heap:
            node = heapq.heappop(heap)[1]
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
            if len(gys) == 1:  # NOTE: most nodes: no search for a gradient, no zeros
                gy = gys[0]
            elif all(g is None for g in gys):
                gy = None
            else:
                like = next(g for g in gys if g is not None)
                gy = tuple(g if g is not None else _zeros_like_out(node, i, like)
                           for i, g in enumerate(gys))
            if gy is None:
                if uses:
                    for x in node.inputs:
                        if x.creator is None and id(x) in uses:
                            used(x)
                continue
            inputs = node.inputs
            gxs = node.backward(inputs, gy)
            if not isinstance(gxs, tuple):
                gxs = (gxs,)
            if not retain_graph and not tracing:  # a compiled replay runs these ops again
                node.free()
            for x, gx in zip(inputs, gxs):
                if gx is not None and x.requires_grad:
                    if gx.data.shape != x.data.shape:
                        raise RuntimeError(
                            f"{node.name}: backward gave a gradient of shape {gx.data.shape} "
                            f"for an input of shape {x.data.shape} (a bug in {node.name})")
                    push(x, gx)
                if uses and x.creator is None and id(x) in uses:
                    used(x)
        if uses:
            # uses that backward never visited (a branch no gradient flowed into): the leaves
            # that got a gradient anyway are final now, in the order they were counted
            for k in list(reached):
                t = reached.pop(k)
                _fire_final(t, _final_hooks[k][1])
    finally:
        set_grad_enabled(old)
    if targets is not None:
        return found
    return None
