"""An LSTM time step's product and cell as one launch, and its gradient and the product of
its gates' gradient with ``U`` as one launch (OpenCL programs).

A compiled LSTM step runs, at every time step, ``x = h @ U + x_t`` (a product with the
addition in its epilogue, passes.fold_add) and then the cell ``c, h = lstm(c_prev, x)``; and
backward the cell's gradient and then ``gx @ U`` (with the output's gradient added, where the
loss reads every step): two launches each, with a gap of about 18 us of PoCL's work per
command between them, 32 times a step each way. Here each pair is one node whose kernel does
both (backend/opencl/lstm_gemm.py). Forward it reads ``U`` with its columns regrouped so that
a work-item holds all four gates of its units: that copy is made once per replay, after
``U``'s contiguous copy (passes.contiguous_weights). The gate pre-activations and the gates'
gradient are still written (the gradient and the weights' products read them). Bit for bit
the two launches (tested), so a compiled step stays the eager one. Where the arrays of a
replay do not fit the kernel, the node runs the two as before.
"""

from __future__ import annotations

from .trace import Node

#: False: programs built from then on run the product and the cell as two launches
ENABLED = True
#: False: programs built from then on run an LSTM's time steps as a launch each (else, on a
#: CPU device, as one: backend/opencl/lstm_loop.py)
LOOPS = True


def lstm_cells(nodes, values, new_slot) -> tuple[list, int, int]:
    """The nodes with each fit (product + addition, LSTM cell) pair and each fit (cell's
    gradient, product with U) pair as one node (see the module's doc), and how many pairs of
    each were."""
    if not ENABLED:
        return nodes, 0, 0, 0
    from ..backend.opencl import lstm_gemm, ndarray
    from ..functions import connection as conn
    from ..functions import recurrent as rec
    from . import passes

    made_by = {s: i for i, n in enumerate(nodes) for s in n.outs}
    changed = {old for n in nodes for old, _ in n.versions}  # NOTE: changed in place
    referenced = set().union(*(passes.refs(n) for n in nodes))
    grouped: dict = {}  # NOTE: U's slot -> (the regrouped copy's slot, after which node)
    replace: dict = {}  # NOTE: product node index -> the node that replaces it
    after: dict = {}  # NOTE: node index -> the regrouping nodes that follow it
    gone: set = set()
    for k, cell in enumerate(nodes):
        if (cell.kind != "op" or type(cell.fn) is not rec.LSTM or cell.attr_in
                or cell.attr_out or cell.effect or cell.versions or len(cell.ins) != 2
                or len(cell.outs) != 2):
            continue
        cp, x = cell.ins
        i = made_by.get(x)
        prod = nodes[i] if i is not None else None
        if (prod is None or prod.kind != "op" or type(prod.fn) is not conn.MatMulAdd
                or prod.attr_in or prod.attr_out or prod.effect or prod.versions
                or prod.multi or len(prod.ins) != 3 or prod.outs != [x]
                or prod.idx in referenced or i in replace):
            continue
        h, u, xw = prod.ins
        if (any(s in changed for s in (h, u, xw, cp)) or made_by.get(cp, -1) > i
                or not all(type(values.get(s)) is ndarray for s in (h, u, xw, cp, x))):
            continue
        w = lstm_gemm.vector_width(values[u].rt, values[u].dtype, values[u].shape[1] // 4)
        if values[u].shape[1] % (4 * w):
            continue
        ug = grouped.get(u)
        regrouped = values[grouped[u][0]] if ug else lstm_gemm.interleave(values[u], w)
        if lstm_gemm.plan(values[h], regrouped, values[xw], values[cp], values[u]) is None:
            continue
        if ug is None:
            s = new_slot()
            values[s] = regrouped
            ug = grouped[u] = (s, made_by.get(u, -1))
            after.setdefault(ug[1], []).append(
                Node("host", _Regroup(w), [u], [s], "regroup gates", prod.where,
                     ("host", "regroup gates")))
        fn = _ProductCell(prod.fn, cell.fn)
        replace[i] = Node("host", fn, [h, u, ug[0], xw, cp], [x] + list(cell.outs),
                        "matmul+lstm", cell.where, ("host", "matmul+lstm"), multi=True,
                        idx=cell.idx)
        gone.add(k)
    cells = len(gone)
    for k, grad in enumerate(nodes):
        if (grad.kind != "op" or type(grad.fn) is not rec.LSTMGrad or grad.attr_in
                or grad.attr_out or grad.effect or grad.versions or len(grad.ins) != 4
                or len(grad.outs) != 2 or grad.idx in referenced or k in replace):
            continue
        gx = grad.outs[1]
        users = [i for i, n in enumerate(nodes) if i > k and gx in n.ins]
        i = next((i for i in users if nodes[i].kind == "op"
                  and type(nodes[i].fn) in (conn.MatMul, conn.MatMulAdd)
                  and nodes[i].ins[:1] == [gx]), None)
        prod = nodes[i] if i is not None else None
        if (prod is None or i in gone or prod.attr_in or prod.attr_out or prod.effect
                or prod.versions or prod.multi or len(prod.outs) != 1
                or len(prod.ins) != (2 if type(prod.fn) is conn.MatMul else 3)
                or prod.idx in referenced):
            continue
        more = prod.ins[1:]  # NOTE: U, and the addition's operand of a matmul_add
        reads = list(grad.ins) + more
        if (any(s in changed for s in reads)
                or any(made_by.get(s, -1) >= k for s in more)  # NOTE: not its own gcp
                or not all(type(values.get(s)) is ndarray for s in reads)
                or lstm_gemm.plan_grad(*(values[s] for s in reads)) is None):
            continue
        replace[k] = Node("host", _GradProduct(grad.fn, prod.fn), reads,
                          list(grad.outs) + list(prod.outs), "lstm_grad+matmul", grad.where,
                          ("host", "lstm_grad+matmul"), multi=True, idx=grad.idx)
        gone.add(i)
    if not gone:
        return nodes, 0, 0, 0
    loops = _loops(replace, made_by, values, gone) if LOOPS else (0, 0)
    grad_loops = _grad_loops(replace, made_by, values, gone) if LOOPS else (0, 0)
    out = list(after.get(-1, ()))  # NOTE: U from outside: regrouped first
    for i, n in enumerate(nodes):
        if i not in gone:
            out.append(replace.get(i, n))
            out.extend(after.get(i, ()))
    return (out, cells, len(gone) - cells - loops[1] - grad_loops[1],
            loops[0] + grad_loops[0])


def _chains(steps, link, made_by, plan):
    """The chains of two or more of ``steps`` (node index -> node) in which each reads what
    the one before made (``link[0](node)``, the key of what it makes, is its successor's
    ``link[1](successor)``), whose other inputs ``link[2](node)`` are made before the first,
    and which ``plan`` (the chain's nodes) takes."""
    outs = {link[0](n): i for i, n in steps.items()}
    nexts = {}
    for i, n in steps.items():
        j = outs.get(link[1](n))
        if j is not None:
            nexts[j] = i
    taken: set = set()
    for i in sorted(steps):  # NOTE: a chain's first step comes before its others
        if i in taken:
            continue
        chain = [i]
        while chain[-1] in nexts and all(made_by.get(s, -1) < i
                                         for s in link[2](steps[nexts[chain[-1]]])):
            chain.append(nexts[chain[-1]])
        taken.update(chain)
        if len(chain) >= 2 and plan([steps[k] for k in chain]):
            yield chain


def _loops(replace, made_by, values, gone) -> tuple[int, int]:
    """Each chain of two or more (product, cell) nodes that are an LSTM's time steps (each
    reads the ``h`` and ``c`` the one before made, all the same ``U``, their ``x_t`` made
    before the first) as one node at the first's place (backend/opencl/lstm_loop.py). How
    many chains, and how many nodes they took."""
    from ..backend.opencl import lstm_loop

    def plan(chain):
        h0, u, ug, _, c0 = chain[0].ins
        return lstm_loop.plan(values[h0], values[ug], [values[n.ins[3]] for n in chain],
                              values[c0], values[u]) is not None

    cells = {i: n for i, n in replace.items() if type(n.fn) is _ProductCell}
    link = (lambda n: (n.outs[2], n.outs[1], n.ins[1], n.ins[2]),
            lambda n: (n.ins[0], n.ins[4], n.ins[1], n.ins[2]), lambda n: n.ins[3:4])
    chains = made = 0
    for chain in _chains(cells, link, made_by, plan):
        first = cells[chain[0]]
        h0, u, ug, _, c0 = first.ins
        _one(replace, gone, chain, Node(
            "host", _LoopCells([cells[k].fn for k in chain]),
            [h0, u, ug, c0] + [cells[k].ins[3] for k in chain],
            [s for k in chain for s in cells[k].outs], "lstm loop", first.where,
            ("host", "lstm loop"), multi=True, idx=first.idx))
        chains, made = chains + 1, made + len(chain) - 1
    return chains, made


def _one(replace, gone, chain, node):
    """``node`` in place of the chain's first node, the others gone."""
    replace[chain[0]] = node
    for k in chain[1:]:
        del replace[k]
        gone.add(k)


def _grad_loops(replace, made_by, values, gone) -> tuple[int, int]:
    """Each chain of two or more (cell's gradient, product with U) nodes of an LSTM's time
    steps, last first (each reads the ``gc`` and ``gh`` the one before made, all the same
    ``U``, their ``cp``, ``x`` and added array made before the first) as one node at the
    first's place (backend/opencl/lstm_loop.py). How many chains, and how many nodes."""
    from ..backend.opencl import lstm_loop

    # NOTE: the steps of a forward loop: (its node, what, time step) of each of its outputs
    stack_of = {s: (i, k % 3, k // 3) for i, n in replace.items()
                if type(n.fn) is _LoopCells for k, s in enumerate(n.outs)}

    def stacked(slots, what):
        """Whether ``slots`` are one forward loop's outputs ``what``, the last step first."""
        got = [stack_of.get(s) for s in slots]
        return None not in got and all(
            (i, w, t) == (got[0][0], what, got[0][2] - k) for k, (i, w, t) in enumerate(got))

    def plan(chain):
        cp, x, gc, gh, u, *add = (values[s] for s in chain[0].ins)
        adds = [values[n.ins[5]] for n in chain] if add else None
        cps, xs = [n.ins[0] for n in chain], [n.ins[1] for n in chain]
        one = stacked(cps, 1) and stacked(xs, 0)
        return lstm_loop.plan_grad([values[s] for s in cps], [values[s] for s in xs], gc, gh,
                                   u, adds, stacked=one) is not None

    grads = {i: n for i, n in replace.items() if type(n.fn) is _GradProduct}
    link = (lambda n: (n.outs[0], n.outs[2], n.ins[4], len(n.ins)),
            lambda n: (n.ins[2], n.ins[3], n.ins[4], len(n.ins)),
            lambda n: n.ins[:2] + n.ins[5:])
    chains = made = 0
    for chain in _chains(grads, link, made_by, plan):
        first = grads[chain[0]]
        steps = [grads[k] for k in chain]
        add = len(first.ins) == 6
        ins = first.ins[2:5] + [n.ins[0] for n in steps] + [n.ins[1] for n in steps] + (
            [n.ins[5] for n in steps] if add else [])
        _one(replace, gone, chain, Node(
            "host", _LoopGrads([n.fn for n in steps], add), ins,
            [s for n in steps for s in n.outs], "lstm loop grad", first.where,
            ("host", "lstm loop grad"), multi=True, idx=first.idx))
        chains, made = chains + 1, made + len(chain) - 1
    return chains, made


class _GradProduct:
    """``gcp, gx = lstm_grad(cp, x, gc, gh); gx @ u`` (``+ add``, of a matmul_add) in one
    launch, or as the two where the arrays do not fit it."""

    lk_capture = True
    __slots__ = ("grad", "product")

    def __init__(self, grad, product):
        self.grad, self.product = grad, product

    def __call__(self, cp, x, gc, gh, u, *add):
        from ..backend.opencl import lstm_gemm

        planned = lstm_gemm.plan_grad(cp, x, gc, gh, u, *add)
        if planned is None:
            gcp, gx = self.grad.forward(cp, x, gc, gh)
            return gcp, gx, self.product.forward(gx, u, *add)
        return lstm_gemm.grad_product(cp, x, gc, gh, u, planned, *add)


class _Regroup:
    """``U`` with its columns regrouped ``w`` units at a time (lstm_gemm.interleave)."""

    lk_capture = True  # NOTE: reads its input only: its launch is captured
    __slots__ = ("w",)

    def __init__(self, w):
        self.w = w

    def __call__(self, u):
        from ..backend.opencl import lstm_gemm

        return lstm_gemm.interleave(u, self.w)


class _ProductCell:
    """``x = h @ u + xw; c, h = lstm(cp, x)`` in one launch (``ug``: ``u`` regrouped), or as
    the product and the cell where the arrays do not fit it."""

    lk_capture = True
    __slots__ = ("product", "cell")

    def __init__(self, product, cell):
        self.product, self.cell = product, cell

    def __call__(self, h, u, ug, xw, cp):
        from ..backend.opencl import lstm_gemm

        planned = lstm_gemm.plan(h, ug, xw, cp, u)
        if planned is None:
            x = self.product.forward(h, u, xw)
            out = (x,) + tuple(self.cell.forward(cp, x))
        else:
            out = lstm_gemm.forward(h, ug, xw, cp, planned)
        # NOTE: none kept, whichever way it ran: a replay of captured launches does not run
        # this, and a cell's gradient without kept gates computes them again (a set kept by
        # a call that ran the composed cell would be another call's at the next replay)
        self.cell.gates = None
        return out


class _LoopCells:
    """An LSTM's time steps, each ``x = h @ u + xw; c, h = lstm(cp, x)``, in one launch
    (backend/opencl/lstm_loop.py), or step by step (``steps``: their _ProductCell) where the
    arrays do not fit it."""

    __slots__ = ("steps",)

    def __init__(self, steps):
        self.steps = steps

    def __call__(self, h, u, ug, cp, *xws):
        from ..backend.opencl import lstm_loop

        planned = lstm_loop.plan(h, ug, xws, cp, u)
        if planned is None:
            out = []
            for step, xw in zip(self.steps, xws):
                x, cp, h = step(h, u, ug, xw, cp)
                out += (x, cp, h)
            return tuple(out)
        for step in self.steps:  # NOTE: as _ProductCell: no gates kept
            step.cell.gates = None
        return tuple(a for step in lstm_loop.forward(h, ug, xws, cp, planned) for a in step)


class _LoopGrads:
    """An LSTM's time steps' gradients, each ``gcp, gx = lstm_grad(cp, x, gc, gh); gx @ u``
    (``+ add``), in one launch (backend/opencl/lstm_loop.py), or step by step (``steps``:
    their _GradProduct) where the arrays do not fit it."""

    __slots__ = ("steps", "add")

    def __init__(self, steps, add):
        self.steps, self.add = steps, add

    def __call__(self, gc, gh, u, *rest):
        from ..backend.opencl import lstm_loop

        n = len(self.steps)
        cps, xs = rest[:n], rest[n:2 * n]
        adds = rest[2 * n:] if self.add else None
        planned = lstm_loop.plan_grad(cps, xs, gc, gh, u, adds)
        if planned is not None:
            got = lstm_loop.grad(cps, xs, gc, gh, u, planned, adds)
            return tuple(a for step in got for a in step)
        out = []
        for k, step in enumerate(self.steps):
            gc, gx, gh = step(cps[k], xs[k], gc, gh, u, *((adds[k],) if adds else ()))
            out += (gc, gx, gh)
        return tuple(out)
