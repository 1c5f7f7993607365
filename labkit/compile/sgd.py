"""Plain SGD fused into the products that make the weights' gradients.

An MLP step at batch 1 on PoCL spends most of its time streaming weights: the gradient of a
(512, 784) weight is an outer product written to memory (1.6 MB), which the optimizer's
kernel then reads back with the weight to write the weight again. Here the product's kernel
also takes the weight, ``w -= lr * g``, in its epilogue (kernels_cl/epilogue.cl): the
gradient is still written (it is the step's ``.grad``), the weight is read and written once,
and a launch goes. The update is the optimizer kernel's arithmetic (two roundings), so a
compiled step stays bit for bit the eager one (tested), and so does a resume.

The update moves from the optimizer's step to the product, earlier in the step. That is done
only where nothing could tell: between the product and the update there are only nodes that
change nothing and cannot fail at a replay (fused kernels, ops whose launches are captured,
views), none reading the weight (or an array sharing its memory); the weight shares memory with
no other parameter and with neither operand. At each replay the product looks again: whether
an array the replay read from outside (an argument, a parameter tied since) is the weight's,
and whether the optimizer is still plain SGD with the fused kernel on this parameter (a rule
added, ``opt.fused = False``, an ``lr`` that is not a Python number, optimizer state), every
parameter's rate looked up in the optimizer's order (one that raises updates nothing early:
the optimizer's step raises it where the eager step does). Where not, or where the product
takes another path than the blocked kernels, it computes the gradient alone and leaves the
update to the optimizer's step, which skips the parameters whose update was done.

On the CPU the same place takes a weight's gradient at batch 1, an outer product ``a @ b`` of
two vectors (:class:`_OuterUpdate`, with ``reassociate=True``, the default): the update is one
BLAS rank-1 update of the weight (``ger``), a pass over it where the product wrote 1.6 MB for
a 512 x 784 weight and the optimizer read that back with the weight; the gradient is made from
copies of ``a`` and ``b`` only when something reads the weight's ``.grad`` (it is then the
eager step's, bit for bit). The update rounds ``lr * b`` first, so the weights differ from the
eager step's in the last bits (``reassociate=False`` keeps the eager update). The compiled
MLP step at batch 1 went from 0.70-0.85 ms to 0.58-0.62 (PyTorch's: 0.75-0.79, same runs).
"""

from __future__ import annotations

import threading

from ..autograd.tensor import Tensor
from . import passes
from .hooks import DATA as _DATA
from .trace import Node


def sgd_products(nodes, values, sources, stats, results=(), outer=False,
                 written=()) -> tuple[list, int]:
    """The nodes with each fit weight gradient's product (a 2-D ``MatMul``) replaced by a
    host step that also updates the weight (see the module's doc); and how many were.
    ``sources``: the trace's (slot -> Source); ``stats``: the program's capture counts;
    ``written``: every slot the step returns or writes (a ``.grad`` included);
    ``results``: the slots the step returns or writes as anything but one ``.grad``;
    ``outer``: also the CPU's outer products (a batch of 1), whose update rounds otherwise
    than the eager step's (``reassociate``)."""
    from ..backend.opencl.ndarray import ndarray
    from ..functions import connection as conn

    made_by = {s: n for n in nodes for s in n.outs}
    slot_of = {id(src.tensor): s for s, src in sources.items() if src.kind == "live"}
    # NOTE: every array a replay reads that it did not make: what may be the weight's memory
    # at a replay though it was not when traced (an argument, a parameter tied since)
    outside = [s for s, src in sources.items() if src.kind in ("arg", "live", "live_array")]
    referenced = set().union(*(passes.refs(n) for n in nodes))  # NOTE: ops others hold
    count = 0
    reach = _reachable(nodes, values, sources, written)
    for u in [n for n in nodes if n.kind == "host"]:
        info = getattr(u.fn, "lk_optimizer", None)
        if info is None or not u.effect:
            continue
        opt, idx = info
        plist = list(opt.params.values())
        roots = [passes.root_id(p.data) for p in plist]
        done: dict = {}
        step: dict = {}  # NOTE: the rates of this replay, looked up by its first product
        rates = _step_rates(opt, idx)  # NOTE: at the trace's step, for every product below
        here = count
        for k, g in enumerate(u.ins):
            i = idx[k]
            w = slot_of.get(id(plist[i]))
            src = made_by.get(g)
            cpu = outer and _outer_fits(values, src, w, g, results, nodes, u)
            if (w is None or src is None or src.kind != "op" or type(src.fn) is not conn.MatMul
                    or src.attr_in or src.attr_out or src.multi or src.versions or src.effect
                    or len(src.ins) != 2 or src.outs != [g] or u.ins.count(g) != 1
                    or src.idx in referenced
                    or not cpu and (type(values.get(w)) is not ndarray
                                    or type(values.get(g)) is not ndarray)
                    or values[w] is not plist[i].data or roots.count(roots[i]) != 1
                    or _rate(opt, rates, i, values[w]) is None):
                continue
            at, end = nodes.index(src), nodes.index(u)
            root = roots[i]
            if any(passes.root_id(values[s]) == root for s in src.ins if s in values):
                continue
            between = nodes[at + 1:end]
            if any(not _harmless(n) or any(s in values and passes.root_id(values[s]) == root
                                           for s in _reads(n)) for n in between):
                continue
            fn = (_OuterUpdate if cpu else _ProductUpdate)(src.fn, opt, idx, i, done, stats,
                                                           step, None if cpu else _kept(
                                                               nodes, values, sources, src, g,
                                                               u, results, reach))
            others = [s for s in outside if s != w]
            nodes[at] = Node("host", fn, list(src.ins) + [w] + others, [g], "matmul+sgd",
                             src.where, ("host", "matmul+sgd"), effect=True, idx=src.idx)
            made_by[g] = nodes[at]
            count += 1
        if count > here:
            u.fn = _UpdateRest(opt, idx, done)
            first = next(n.fn for n in nodes if isinstance(n.fn, _ProductUpdate)
                         and n.fn.step is step)
            first.first = True
    return nodes, count


def _reachable(nodes, values, sources, written) -> set:
    """The roots of the arrays a caller holds or may change after a replay: arguments,
    parameters and constants; what the step returns or writes (another tensor's ``.grad``
    included); what a host function or a Function of the user's made (it may keep it)."""
    made = [s for n in nodes if n.kind == "host" or (
        n.kind == "op" and not type(n.fn).__module__.startswith("labkit.")) for s in n.outs]
    slots = [s for s, srcd in sources.items() if srcd.kind in (
        "arg", "live", "live_array", "const")] + list(written) + made
    return {passes.root_id(values[s]) for s in slots if s in values}


def _kept(nodes, values, sources, src, g, u, results, reach):
    """On OpenCL, for a weight's gradient ``g`` that nothing but the optimizer's step reads
    in the step (not a result, not read by another node): which of the product's operands a
    deferred gradient copies (True: those whose memory the caller can reach, ``reach``) or
    holds as they are (False: arrays labkit's ops made in this replay, new at each), or None
    where the gradient is written as the product is (an operand changed in place in the step;
    one to copy that is not contiguous from its start, whose copy could take another GEMM
    path)."""
    if g in results or any(g in n.ins or g in [x for _, _, x in n.attr_in]
                           for n in nodes if n is not u):
        return None
    changed = {passes.root_id(values[s]) for n in nodes for s, _ in n.versions if s in values}
    kept = []
    for s in src.ins:
        v = values.get(s)
        root = passes.root_id(v)
        if v is None or root in changed:
            return None
        copy = root in reach or s in sources
        if copy and not (v.is_contiguous and v.offset == 0):
            return None
        kept.append(copy)
    return tuple(kept)


def _reads(n) -> list:
    """The slots node ``n`` reads: its inputs and attributes; of another such product, its
    operands and weight (not the arrays from outside it only compares with its weight)."""
    if isinstance(n.fn, _ProductUpdate):
        return n.ins[:3]
    return list(n.ins) + [x for _, _, x in n.attr_in]


def _harmless(n) -> bool:
    """Whether node ``n`` may run between a weight's early update and the optimizer's step:
    it changes nothing and cannot fail at a replay whose inputs fit the trace (else the step
    would raise with the weight updated, where the eager step raises before any update): a
    fused elementwise kernel, an op whose launches are captured, a view, another such
    product."""
    from ..functions import array as fa
    from ..functions import math as m
    from . import capture

    if isinstance(n.fn, _ProductUpdate) or (n.kind == "kernel" and not n.effect):
        return True
    return (n.kind == "op" and not n.effect and not n.versions and not n.attr_out
            and (capture.allowed(n.fn) or type(n.fn) in (
                m.Reshape, m.Transpose, m.BroadcastTo, fa.Contiguous)))


class _ProductUpdate:
    """``a @ b``, and where the optimizer is still plain fused SGD for this parameter,
    ``w -= lr * (a @ b)`` in the same kernel; records in ``done`` whether it updated. The
    launches are captured at the first such call and replayed with that call's learning rate
    (compile/capture.py): the product's host path costs about 60 us, mostly setting kernel
    arguments. ``others``: the arrays the replay read from outside; where one is the weight's
    memory (an argument that is the weight's array, a parameter tied to it since the trace)
    it does not update early."""

    __slots__ = ("op", "opt", "idx", "i", "done", "lr", "fused", "step", "first", "kept")

    def __init__(self, op, opt, idx, i, done, stats, step=None, kept=None):
        self.op, self.opt, self.idx, self.i, self.done, self.lr = op, opt, idx, i, done, None
        #: a gradient nothing in the step reads (``_kept``): the product is not written, its
        #: ``.grad`` is made where it is read, from its operands (copied where ``kept`` says)
        self.kept = kept
        #: ``step``, shared by the products of one optimizer, holds the rates of the replay
        #: under way; the ``first`` of them to run looks them up, the others read them (each
        #: looking up every parameter's rate was quadratic in the parameters)
        self.step, self.first = ({} if step is None else step), step is None
        self.fused = self._launcher(stats)

    def _launcher(self, stats):
        """What runs the fused product: its launches captured at the first call."""
        from ..backend.opencl.ndarray import ndarray
        from . import capture

        if not capture.ENABLED:
            return self._fused
        return capture.capturing(self._fused, None, (), False, ndarray, stats,
                                 rate=lambda: self.lr)

    def __call__(self, a, b, w, *others):
        if self.first:
            self.step["rates"] = _step_rates(self.opt, self.idx)
        lr = None if self._aliased(w, others) else _rate(self.opt, self.step["rates"],
                                                          self.i, w)
        if lr is None:
            self.done[self.i] = False
            return self.op.forward(a, b)
        self.lr = w.dtype.type(lr)
        c = self.fused(a, b, w)
        self.done[self.i] = c is not None
        if c is None:
            return self.op.forward(a, b)
        if self.kept is not None:
            return Deferred(self.op, *(x.copy() if k else x for x, k in zip((a, b), self.kept)))
        return c

    @staticmethod
    def _aliased(w, others):
        """Whether an array the replay read from outside is the weight's memory."""
        data = getattr(w, "data", None)
        return any(getattr(o, "data", None) is data for o in others)

    def _fused(self, a, b, w):
        from ..backend.opencl import gemm

        return gemm.matmul_sgd(a, b, w, self.lr, store=self.kept is None)


def _outer_fits(values, src, w, g, results, nodes, u) -> bool:
    """Whether the product making ``g`` is, on the CPU, a weight's gradient at batch 1 that
    :class:`_OuterUpdate` may take: an outer product as large as ``MatMul`` hands to BLAS,
    read by nothing but the optimizer's step and the weight's ``.grad`` (not a result)."""
    import numpy as np

    from ..backend import blas

    if src is None or w is None or len(src.ins) != 2 or g in results:
        return False
    a, b, c = values.get(src.ins[0]), values.get(src.ins[1]), values.get(w)
    if not all(type(x) is np.ndarray for x in (a, b, c, values.get(g))):
        return False
    if not (a.ndim == b.ndim == 2 and a.shape[1] == 1 and b.shape[0] == 1
            and c.shape == (a.shape[0], b.shape[1]) and c.size >= 4096
            and a.dtype == b.dtype == c.dtype and c.dtype in (np.float32, np.float64)
            and c.flags.c_contiguous and blas.available()):
        return False
    return not any(g in n.ins for n in nodes if n is not u)


class _OuterUpdate(_ProductUpdate):
    """On the CPU, a weight's gradient at batch 1 (an outer product ``a @ b``) and plain SGD
    as one BLAS rank-1 update of the weight, ``w -= lr * (a @ b)``: one pass over the weight
    where the product writes the gradient and the optimizer reads it back with the weight.
    The gradient is made where it is read (the weight's ``.grad``, :class:`OuterGrad`), from
    copies of ``a`` and ``b``. The update rounds ``lr`` times one vector first (not bit for
    bit the eager step's; ``reassociate=False`` keeps the eager way)."""

    __slots__ = ()

    def _launcher(self, stats):  # NOTE: BLAS calls: nothing to capture
        return self._fused

    @staticmethod
    def _aliased(w, others):
        # NOTE: a NumPy array's .data is a new memoryview at each read: by the memory's
        # bounds (an argument that is the weight's array, a parameter tied to it since)
        import numpy as np

        return any(isinstance(o, np.ndarray) and np.may_share_memory(o, w) for o in others)

    def _fused(self, a, b, w):
        from ..backend import blas

        if not blas.ger(-float(self.lr), a, b, w):
            return None
        return Deferred(self.op, a.copy(), b.copy())


class Deferred:
    """A gradient ``op.forward(a, b)`` not made yet (:class:`_OuterUpdate`)."""

    __slots__ = ("op", "a", "b")

    def __init__(self, op, a, b):
        self.op, self.a, self.b = op, a, b

    @property
    def shape(self):
        return (self.a.shape[0], self.b.shape[1])


def grad_tensor(v):
    """The ``.grad`` a replay writes: ``Tensor(v)``, or an :class:`OuterGrad` for a
    :class:`Deferred` gradient."""
    return OuterGrad(v) if type(v) is Deferred else Tensor(v)


class OuterGrad(Tensor):
    """A weight's ``.grad`` whose array is made when it is first read (``.data``, and what
    reads it: ``.numpy()``, ``.shape``, an eager backward adding to it), as the eager step
    makes it: most steps never read it."""

    __slots__ = ("_deferred",)

    def __init__(self, deferred):
        Tensor.__init__(self, None)
        self._deferred = deferred

    @property
    def data(self):
        d = _DATA.__get__(self)
        if d is None and self._deferred is not None:
            with _MADE:  # NOTE: two threads reading it at once get one array
                d = _DATA.__get__(self)
                if d is None and self._deferred is not None:
                    p = self._deferred
                    d = p.op.forward(p.a, p.b)
                    _DATA.__set__(self, d)
                    self._deferred = None
        return d

    @data.setter
    def data(self, value):
        _DATA.__set__(self, value)
        self._deferred = None


_MADE = threading.Lock()


class _UpdateRest:
    """The optimizer's step of a compiled replay: the parameters a product updated are
    counted, not updated again."""

    __slots__ = ("opt", "idx", "done")

    def __init__(self, opt, idx, done):
        self.opt, self.idx, self.done = opt, idx, done

    def __call__(self, *grads):
        self.opt._apply(self.idx, grads, self.done)


def _step_rates(opt, idx):
    """``(parameters, {j: rate})`` for the parameters at ``idx`` at this step (the rates the
    optimizer's fused SGD kernel would use: optimizers/fused.update), or None where the
    optimizer would not run that kernel. Every parameter's rate is looked up, in
    the order of the optimizer's step: where one lookup raises (a schedule past its end),
    nothing is updated early, and the step raises as the eager one does, leaving what it
    leaves."""
    from ..optimizers import fused

    rules = opt.rules
    if not (opt.fused and fused.sgd_rule(rules) and rules[0].elementwise):
        return None
    h = rules[0].h
    try:
        return list(opt.params.values()), {j: h("lr", opt._group(j), opt.t) for j in idx}
    except Exception:  # noqa: BLE001 - the optimizer's step raises it again, in its place
        return None


def _rate(opt, rates, i, w):
    """Parameter ``i``'s rate from ``_step_rates``'s ``rates``, or None where the fused SGD
    kernel would not update it (optimizer state, its array no longer ``w``, a rate that is not
    a Python number)."""
    if rates is None:
        return None
    plist, lrs = rates
    if opt.states[0][i] or plist[i].data is not w:
        return None
    lr = lrs[i]
    return lr if type(lr) in (int, float) else None
