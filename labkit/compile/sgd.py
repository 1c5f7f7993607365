"""Plain SGD fused into the products that make the weights' gradients (OpenCL programs).

An MLP step at batch 1 on PoCL spends most of its time streaming weights: the gradient of a
(512, 784) weight is an outer product written to memory (1.6 MB), which the optimizer's
kernel then reads back with the weight to write the weight again. Here the product's kernel
also takes the weight, ``w -= lr * g``, in its epilogue (kernels_cl/epilogue.cl): the
gradient is still written (it is the step's ``.grad``), the weight is read and written once,
and a launch goes. The update is the optimizer kernel's arithmetic (two roundings), so a
compiled step stays bit for bit the eager one (tested), and so does a resume.

The update moves from the optimizer's step to the product, earlier in the step. That is done
only where nothing could tell: nothing between the product and the update reads the weight
(or an array sharing its memory), runs on the host or changes state, and the weight shares
memory with no other parameter and with neither operand. At each replay the product looks
again whether the optimizer is still plain SGD with the fused kernel on this parameter (a
rule added, ``opt.fused = False``, an ``lr`` that is not a Python number, a parameter with
optimizer state) and where it is not, or the product takes another path than the blocked
kernels, computes the gradient alone and leaves the update to the optimizer's step, which
skips the parameters whose update was done.
"""

from __future__ import annotations

from . import passes
from .trace import Node


def sgd_products(nodes, values, live) -> tuple[list, int]:
    """The nodes with each fit weight gradient's product (a 2-D ``MatMul``) replaced by a
    host step that also updates the weight (see the module's doc); and how many were."""
    from ..backend.opencl.ndarray import ndarray
    from ..functions import connection as conn

    made_by = {s: n for n in nodes for s in n.outs}
    slot_of = {id(t): s for s, t in live}
    referenced = set().union(*(passes.refs(n) for n in nodes))  # NOTE: ops others hold
    count = 0
    for u in [n for n in nodes if n.kind == "host"]:
        info = getattr(u.fn, "lk_optimizer", None)
        if info is None or not u.effect:
            continue
        opt, idx = info
        plist = list(opt.params.values())
        roots = [passes.root_id(p.data) for p in plist]
        done: dict = {}
        here = count
        for k, g in enumerate(u.ins):
            i = idx[k]
            w = slot_of.get(id(plist[i]))
            src = made_by.get(g)
            if (w is None or src is None or src.kind != "op" or type(src.fn) is not conn.MatMul
                    or src.attr_in or src.attr_out or src.multi or src.versions or src.effect
                    or len(src.ins) != 2 or src.outs != [g] or u.ins.count(g) != 1
                    or src.idx in referenced
                    or type(values.get(w)) is not ndarray or type(values.get(g)) is not ndarray
                    or values[w] is not plist[i].data or roots.count(roots[i]) != 1
                    or _plain_sgd_rate(opt, i, values[w]) is None):
                continue
            at, end = nodes.index(src), nodes.index(u)
            root = roots[i]
            if any(passes.root_id(values[s]) == root for s in src.ins if s in values):
                continue
            between = nodes[at + 1:end]
            if any((n.kind not in ("op", "kernel") or n.effect or n.versions)
                   and not isinstance(n.fn, _ProductUpdate) or any(
                    s in values and passes.root_id(values[s]) == root
                    for s in list(n.ins) + [x for _, _, x in n.attr_in]) for n in between):
                continue
            fn = _ProductUpdate(src.fn, opt, i, done)
            nodes[at] = Node("host", fn, list(src.ins) + [w], [g], "matmul+sgd", src.where,
                             ("host", "matmul+sgd"), effect=True, idx=src.idx)
            made_by[g] = nodes[at]
            count += 1
        if count > here:
            u.fn = _UpdateRest(opt, idx, done)
    return nodes, count


class _ProductUpdate:
    """``a @ b``, and where the optimizer is still plain fused SGD for this parameter,
    ``w -= lr * (a @ b)`` in the same kernel; records in ``done`` whether it updated. The
    launches are captured at the first such call and replayed with that call's learning rate
    (compile/capture.py): the product's host path costs about 60 us, mostly setting kernel
    arguments."""

    __slots__ = ("op", "opt", "i", "done", "run", "tries", "lr", "stats")

    def __init__(self, op, opt, i, done):
        self.op, self.opt, self.i, self.done = op, opt, i, done
        self.run, self.tries, self.lr = None, 0, None
        self.stats = {"captured": 0, "fallbacks": 0, "refused": 0, "why": None}

    def __call__(self, a, b, w):
        lr = _plain_sgd_rate(self.opt, self.i, w)
        if lr is None:
            self.done[self.i] = False
            return self.op.forward(a, b)
        self.lr = w.dtype.type(lr) if w.dtype.kind == "f" else lr
        if self.run is not None:
            c = self.run(a, b, w, rate=self.lr)
        else:
            c = self._record(a, b, w)
        self.done[self.i] = c is not None
        return self.op.forward(a, b) if c is None else c

    def _fused(self, a, b, w):
        from ..backend.opencl import gemm

        return gemm.matmul_sgd(a, b, w, self.lr)

    def _record(self, a, b, w):
        from ..backend.opencl.ndarray import ndarray
        from . import capture

        if (self.tries >= capture.ATTEMPTS or not capture.ENABLED or type(w) is not ndarray
                or not capture._ONE.acquire(blocking=False)):
            return self._fused(a, b, w)
        self.tries += 1
        try:
            with capture._Recording(w.rt) as rec:
                c = self._fused(a, b, w)
        finally:
            capture._ONE.release()
        if c is not None:
            self.run, why = capture._build(rec, [a, b, w], c, False, self._fused, None, (),
                                           ndarray, self.stats, rate=self.lr)
            self.stats["why"] = why
        return c


class _UpdateRest:
    """The optimizer's step of a compiled replay: the parameters a product updated are
    counted, not updated again."""

    __slots__ = ("opt", "idx", "done")

    def __init__(self, opt, idx, done):
        self.opt, self.idx, self.done = opt, idx, done

    def __call__(self, *grads):
        self.opt._apply(self.idx, grads, self.done)


def _plain_sgd_rate(opt, i, w):
    """The learning rate the optimizer's fused SGD kernel would use on parameter ``i`` at this
    step (optimizers/fused.update), or None where it would not run that kernel."""
    from ..optimizers import fused

    rules = opt.rules
    if not (opt.fused and len(rules) == 1 and rules[0].elementwise
            and type(rules[0]).apply in fused.SCALE_ONLY and type(rules[0]).h in fused.PLAIN_H
            and not opt.states[0][i] and list(opt.params.values())[i].data is w):
        return None
    lr = rules[0].h("lr", opt._group(i), opt.t)
    return lr if type(lr) in (int, float) else None
