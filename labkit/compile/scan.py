"""``lk.scan``: a loop over time as one differentiable node (Theano's scan).

    def step(h, x):                       # carry, one time step of each sequence
        h = F.tanh(F.linear(x, W) + F.matmul(h, U))
        return h, h                       # (new carry, output of this step)
    h_last, hs = lk.scan(step, x, h0, axis=1)   # x (N, T, F) -> hs (N, T, H)

Eagerly, the loop is one node: its forward runs ``fn`` step by step, each step's graph on
leaves of its own, and its backward runs back through time, one step's graph at a time
(``remat=True``: only the carries are kept, and each step is recomputed in backward: the
memory of the carries, not of every step's intermediates). Gradients reach the sequences, the
initial carry, and every tensor ``fn`` reads that requires a gradient (parameters: given, or
found by running the first step once).
A gradient of the gradient (``create_graph=True``) recomputes the loop as a whole, so double
backprop works. Inside a compiled step the loop is unrolled into the trace, so its ops are
replayed and fused like any others.
"""

from __future__ import annotations

import threading

from ..autograd import engine
from ..autograd import function as _fn
from ..autograd.function import Function, enable_grad, grad_enabled, no_grad
from ..autograd.tensor import Tensor
from ..autograd.trace import tracer
from ..backend import random as _random
from ..errors import ShapeError
from ..functions import stack, unbind


def _tuple(x, what):
    if isinstance(x, Tensor):
        return (x,), True
    if isinstance(x, (tuple, list)) and all(isinstance(t, Tensor) for t in x):
        return tuple(x), False
    raise TypeError(f"lk.scan: {what} must be a Tensor or a tuple of Tensors, got "
                    f"{type(x).__name__}")


def _split_result(r, n_carry):
    if not isinstance(r, tuple) or len(r) != 2:
        raise TypeError("lk.scan: fn(carry, *xs) must return (new_carry, output), the output a "
                        "Tensor, a tuple of Tensors, or None")
    carry, out = r
    carry, _ = _tuple(carry, "the carry fn returns")
    if len(carry) != n_carry:
        raise ShapeError(f"lk.scan: fn returned a carry of {len(carry)} tensors, the initial "
                         f"carry has {n_carry}")
    if out is None:
        return carry, ()
    out, single = _tuple(out, "the output fn returns")
    _single.value = single
    return carry, out


#: whether fn's last output (in this thread) was one Tensor: scan returns it as given
_single = threading.local()


def scan(fn, sequences, init, axis: int = 0, remat: bool = False, params=None):
    """Run ``carry, y_t = fn(carry, *x_t)`` over the steps of ``sequences`` along ``axis``;
    return ``(final carry, outputs stacked along axis)`` (a Tensor or tuples, as given).

    ``remat=True`` keeps only the carries between forward and backward and recomputes each
    step in backward (memory of T carries instead of T steps' intermediates, for one more
    forward pass of compute). ``params``: the tensors requiring a gradient that ``fn`` reads
    besides its arguments, when the caller knows them (else one step is run to find them)."""
    seqs, one_seq = _tuple(sequences, "sequences")
    carry0, one_carry = _tuple(init, "init")
    steps = seqs[0].shape[axis]
    for s in seqs:
        if s.shape[axis] != steps:
            raise ShapeError(f"lk.scan: the sequences have {steps} and {s.shape[axis]} steps "
                             f"along axis {axis}")
    if steps == 0:
        raise ShapeError("lk.scan: the sequences have no steps")
    if tracer() is not None or not grad_enabled():
        carry, outs = _unrolled(fn, seqs, carry0, axis)
    else:
        params = (_params(fn, seqs, carry0, axis) if params is None else
                  tuple(p for p in params if p.requires_grad))
        node = Scan(fn, len(carry0), len(seqs), axis, steps, seqs, remat)
        res = node.apply(carry0 + seqs + params)
        res = res if isinstance(res, tuple) else (res,)
        carry, outs = res[:len(carry0)], res[len(carry0):]
    c = carry[0] if one_carry else tuple(carry)
    if not outs:
        return c, None
    o = outs[0] if len(outs) == 1 and getattr(_single, "value", True) else tuple(outs)
    return c, o


def _unrolled(fn, seqs, carry, axis):
    """The loop as plain ops (traced, or without gradients)."""
    xs = [unbind(s, axis) for s in seqs]
    ys = []
    for t in range(len(xs[0])):
        carry, y = _split_result(fn(carry if len(carry) > 1 else carry[0],
                                    *[x[t] for x in xs]), len(carry))
        ys.append(y)
    outs = tuple(stack([y[k] for y in ys], axis) for k in range(len(ys[0]))) if ys[0] else ()
    return carry, outs


def _params(fn, seqs, carry, axis):
    """The tensors requiring a gradient that ``fn`` reads besides its arguments (one step
    run with a graph, walked back to its leaves)."""
    args = [Tensor(c.data, requires_grad=True) for c in carry]
    xs = [Tensor(unbind(s.detach(), axis)[0].data, requires_grad=True) for s in seqs]
    start = next(_fn._seq)  # NOTE: ops numbered from here were made by this step
    # NOTE: its random draws (dropout) are taken back: the loop makes them
    with _random.recording() as drawn:
        try:
            with enable_grad():
                c, y = _split_result(fn(args if len(args) > 1 else args[0], *xs), len(args))
        finally:
            _random.rewind(drawn)
    mine = {id(t) for t in args + xs}
    found, seen, ids = [], set(), set()
    stack_ = [t.creator for t in c + y if t.creator is not None]
    while stack_:
        node = stack_.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        for x in node.inputs:
            inner = x.creator is not None and x.creator.seq > start
            if inner:
                stack_.append(x.creator)
            elif x.requires_grad and id(x) not in mine and id(x) not in ids:
                ids.add(id(x))
                found.append(x)  # a parameter, or a tensor computed before the loop
    return tuple(found)


class Scan(Function):
    """One application of lk.scan (see the module)."""

    name = "scan"

    def __init__(self, fn, n_carry, n_seq, axis, steps, seq_in, remat):
        self.fn, self.n_carry, self.n_seq, self.axis, self.steps = (fn, n_carry, n_seq, axis,
                                                                    steps)
        self.seq_in, self.remat = seq_in, remat
        self.n_out = None

    def forward(self, *arrays):
        nc, ns = self.n_carry, self.n_seq
        carry = tuple(Tensor(a) for a in arrays[:nc])
        seqs = [Tensor(a) for a in arrays[nc:nc + ns]]
        with no_grad():
            xs = [unbind(s, self.axis) for s in seqs]
        saved, ys, graphs, rngs = [], [], [], []
        # NOTE: the generators the loop draws from, as they were before it and before each
        # step: a step run again in backward (remat, double backprop) draws the numbers
        # (dropout masks) it drew here
        with _random.recording() as self.rng0:
            for t in range(self.steps):
                saved.append(tuple(c.data for c in carry))
                with _random.recording() as drawn:
                    carry, y = self._step(t, carry, xs, graphs)
                rngs.append(drawn)
                ys.append(y)
        with no_grad():
            outs = tuple(stack([y[k] for y in ys], self.axis).data
                         for k in range(len(ys[0])))
        self.saved, self.graphs, self.rngs = saved, graphs, rngs
        self.n_y = len(outs)
        res = tuple(c.data for c in carry) + outs
        self.n_out = len(res)
        return res if len(res) > 1 else res[0]

    def _step(self, t, carry, xs, graphs):
        nc = self.n_carry
        if not self.remat:  # each step's graph kept, on leaves of its own: backward walks it
            carry = [Tensor(c.data, requires_grad=True) for c in carry]
            xt = [Tensor(x[t].data, requires_grad=s.requires_grad)
                  for x, s in zip(xs, self.seq_in)]
            with enable_grad():
                new, y = _split_result(self.fn(carry if nc > 1 else carry[0], *xt), nc)
            graphs.append((carry, xt, list(new) + list(y)))
            return new, y
        with no_grad():
            return _split_result(self.fn(carry if nc > 1 else carry[0], *[x[t] for x in xs]),
                                 nc)

    def backward(self, inputs, grads):
        nc, ns = self.n_carry, self.n_seq
        grads = grads if isinstance(grads, tuple) else (grads,)
        if grad_enabled():
            return self._backward_whole(inputs, grads)
        g_carry = list(grads[:nc])
        g_ys = [None if g.name is engine.NO_GRADIENT else unbind(g, self.axis)
                for g in grads[nc:]]
        params = inputs[nc + ns:]
        seq_in = inputs[nc:nc + ns]
        xs = [unbind(s.detach(), self.axis) for s in seq_in]
        g_x = [[None] * self.steps for _ in range(ns)]
        g_p = [None] * len(params)
        reached = [True] * nc
        for t in range(self.steps - 1, -1, -1):
            if self.graphs:
                prev, xt, outs = self.graphs[t]
                self.graphs[t] = None  # NOTE: freed as backward goes
            else:  # rematerialised: the step run again from its saved carry
                prev = [Tensor(a, requires_grad=True) for a in self.saved[t]]
                xt = [Tensor(x[t].data, requires_grad=s.requires_grad)
                      for x, s in zip(xs, seq_in)]
                now = _random.rewind(self.rngs[t])
                try:
                    with enable_grad():
                        c, y = _split_result(self.fn(prev if nc > 1 else prev[0], *xt), nc)
                finally:
                    _random.rewind(now)
                outs = list(c) + list(y)
            gouts = g_carry + [None if g is None else g[t] for g in g_ys]
            pairs = [(o, g) for o, g in zip(outs, gouts)
                     if o.requires_grad and g is not None and g.name is not engine.NO_GRADIENT]
            targets = prev + [x for x in xt if x.requires_grad] + list(params)
            if pairs:
                # NOTE: retain_graph: a target made before the loop (U.T) keeps its graph
                found = engine.run([o for o, _ in pairs], [g for _, g in pairs],
                                   targets=targets, retain_graph=True)
            else:
                found = [None] * len(targets)
            # NOTE: an initial carry step 0 does not reach gets None, as unrolled
            reached = [found[i] is not None for i in range(nc)]
            g_carry = [f if f is not None else Tensor(a * 0, name=engine.NO_GRADIENT)
                       for f, a in zip(found[:nc], self.saved[t])]
            k = nc
            for i, x in enumerate(xt):
                if x.requires_grad:
                    g_x[i][t] = found[k]
                    k += 1
            for i in range(len(params)):
                f = found[k + i]
                if f is not None:
                    g_p[i] = f if g_p[i] is None else g_p[i] + f
        gx = []
        for i, s in enumerate(seq_in):
            if not s.requires_grad:
                gx.append(None)
                continue
            parts = [g if g is not None else Tensor(xs[i][t].data * 0)
                     for t, g in enumerate(g_x[i])]
            gx.append(stack(parts, self.axis))
        g_carry = [g if r else None for g, r in zip(g_carry, reached)]
        return tuple(g_carry) + tuple(gx) + tuple(g_p)

    def _backward_whole(self, inputs, grads):
        """Double backprop: the loop recomputed with its graph, differentiated as a whole."""
        nc, ns = self.n_carry, self.n_seq
        now = _random.rewind(self.rng0)  # NOTE: the forward's draws again
        try:
            carry, outs = _unrolled(self.fn, list(inputs[nc:nc + ns]), tuple(inputs[:nc]),
                                    self.axis)
        finally:
            _random.rewind(now)
        res = list(carry) + list(outs)
        pairs = [(o, g) for o, g in zip(res, grads) if o.requires_grad]
        wanted = [x for x in inputs if x.requires_grad]
        found = engine.run([o for o, _ in pairs], [g for _, g in pairs], targets=wanted,
                           retain_graph=True, create_graph=True)
        it = iter(found)
        return tuple(next(it) if x.requires_grad else None for x in inputs)
