"""A pass: a sum of matrix products over the steps of an unrolled loop as one product."""

from __future__ import annotations

import numpy as np

from .passes import _merge_barriers, _readers, changed_in_place


def gather_products(nodes, alias, values, needed, new_slot):
    """A sum of matrix products that share their shapes, ``a_1^T b_1 + ... + a_n^T b_n`` (a
    weight's gradient accumulated over the steps of an unrolled loop), becomes one product of
    the stacked operands, ``[a_1; ...; a_n]^T [b_1; ...; b_n]``: one large BLAS call or kernel
    instead of n small ones and n - 1 additions (what a hand-written BPTT does). On the CPU,
    where the step already stacks the ``b_i`` (an input projection's gradient: the loop's
    step gradients stacked along its time axis), the product reads that stack, with the
    ``a_i`` stacked the same way, instead of a second copy of them; and a product ``x @ b``
    whose ``x`` is not a transpose (the first step's, from the initial state) joins a sum of
    at least three that are, as ``(x.T)^T b``. The sum is reassociated: equal to float32
    rounding, not bit for bit. Returns the nodes and how many sums were gathered."""
    from ..functions import array as fa
    from ..functions import connection as fc
    from ..functions import math as m

    made_by = {s: n for n in nodes for s in n.outs}
    changed = changed_in_place(nodes)
    uses = {s: len(r) for s, r in _readers(nodes).items()}
    for s in needed:
        uses[s] = uses.get(s, 0) + 2
    pos = {id(n): i for i, n in enumerate(nodes)}
    barriers = _merge_barriers(nodes)

    def op(s, cls):
        n = made_by.get(s)
        return n if n is not None and n.kind == "op" and type(n.fn) is cls else None

    def term(s):
        """(a, b, flip, product) when slot ``s`` is transpose(a) @ b of 2-D arrays (flip
        False) or x @ b with x any 2-D array (a = x, flip True), read only by the sum."""
        mm = op(s, fc.MatMul)
        if mm is None or uses.get(s) != 1 or len(mm.ins) != 2 or mm.attr_in:
            return None
        tr = op(mm.ins[0], m.Transpose)
        if tr is not None and uses.get(mm.ins[0]) == 1 and tuple(tr.fn.axes or ()) == (1, 0):
            a, flip = tr.ins[0], False
        elif type(values.get(mm.ins[0])) is np.ndarray:
            # NOTE: not on OpenCL, where one strided piece (x.T) sends the whole concatenation
            # to a copy per piece (32 launches for an LSTM's hidden states)
            a, flip = mm.ins[0], True
        else:
            return None
        b = mm.ins[1]
        if a in changed or b in changed:  # NOTE: read before a change: cannot be moved
            return None
        va, vb = values.get(a), values.get(b)
        if va is None or vb is None or va.ndim != 2 or vb.ndim != 2:
            return None
        return a, b, flip, mm

    def terms(s, top):
        """The products summed into slot ``s`` (None: not a sum of products)."""
        t = term(s)
        if t is not None:
            return [t]
        add = op(s, m.Add)
        if add is None or (not top and uses.get(s) != 1) or len(add.ins) != 2:
            return None
        left, right = terms(add.ins[0], False), terms(add.ins[1], False)
        if left is None or right is None:
            return None
        return left + right

    # the stacks of 2-D pieces the step makes, by their pieces (a product may read one); on
    # the CPU only: OpenCL concatenates contiguous pieces 8 to a launch, and stacks them by
    # one copy each (the LSTM step: 180 launches, 7.9 ms of device time, against 157, 7.7 ms)
    stacks: dict = {}
    for n in nodes:
        if (n.kind == "op" and type(n.fn) is fa.Stack and not n.attr_in and n.fn.axis in (0, 1)
                and type(values.get(n.outs[0])) is np.ndarray
                and len(set(n.ins)) == len(n.ins) and n.outs[0] not in changed
                and all(getattr(values.get(x), "ndim", 0) == 2 for x in n.ins)):
            stacks.setdefault(frozenset(n.ins), n)

    done: set = set()
    plans: dict = {}    # id(root) -> (terms, the stack read or None)
    for n in reversed(nodes):  # NOTE: the last addition of a chain first
        if n.kind != "op" or type(n.fn) is not m.Add or n.outs[0] in done:
            continue
        found = terms(n.outs[0], True)
        # NOTE: the product reads the operands where the sum ends: never across a node that
        # changes an array in place (a slice of a parameter the optimizer then updates)
        if found is None or sum(not f for _, _, f, _ in found) < 3 or any(
                pos[id(mm)] < x < pos[id(n)] for *_, mm in found for x in barriers):
            continue
        found = [(a, b, f) for a, b, f, _ in found]
        ka = {(values[a].shape[0 if f else 1], values[a].dtype) for a, _, f in found}
        kb = {(values[b].shape[1], values[b].dtype) for _, b, _ in found}
        res = values.get(n.outs[0])
        if len(ka) != 1 or len(kb) != 1 or res is None or res.ndim != 2:
            continue
        st = stacks.get(frozenset(b for _, b, _ in found))
        if st is not None and (len(st.ins) != len(found) or any(
                min(pos[id(n)], pos[id(st)]) < x < max(pos[id(n)], pos[id(st)])
                for x in barriers)):
            st = None  # NOTE: (a stack made later is moved up to the product)
        plans[id(n)] = (found, st)
        _mark_chain(n.outs[0], made_by, m, done)

    moved = {id(st) for _, st in plans.values() if st is not None}
    out: list = []
    emitted: set = set()
    for n in nodes:
        if id(n) in moved and id(n) in emitted:
            continue
        if id(n) not in plans:
            out.append(n)
            emitted.add(id(n))
            continue
        found, st = plans[id(n)]
        if st is not None and id(st) not in emitted:
            out.append(st)
            emitted.add(id(st))
        out.extend(_stacked_product(n, found, st, new_slot, values, fa, fc, m))
    return out, len(plans)


def _mark_chain(s, made_by, m, done):
    n = made_by.get(s)
    if n is not None and n.kind == "op" and type(n.fn) is m.Add:
        done.add(s)
        for x in n.ins:
            _mark_chain(x, made_by, m, done)


def _stacked_product(root, found, st, new_slot, values, fa, fc, m):
    """The nodes of ``[a_1; ...; a_n]^T [b_1; ...; b_n]`` into the root's slot: the pieces
    concatenated, or, reading the stack ``st`` of the b's, the a's stacked as it is."""
    from .trace import Node

    where = root.where
    made: list = []

    def add(fn, ins, name, tag, s=None):
        s = new_slot() if s is None else s
        # NOTE: the new slots' values, for the passes after this one (shapes, layouts)
        values[s] = fn.forward(*[values[x] for x in ins])
        made.append(Node("op", fn, list(ins), [s], name, where, ("gathered", tag),
                         idx=-1_000_000 - s))  # NOTE: a label of its own
        return s

    # NOTE: x in x @ b is a^T: transposed (a view) to be stacked
    avals = [add(m.Transpose((1, 0)), [a], "transpose", "x") if flip else a
             for a, _, flip in found]
    if st is None:
        sa = add(fa.Concat(0), avals, "concat", "a")
        sb = add(fa.Concat(0), [b for _, b, _ in found], "concat", "b")
    else:  # NOTE: the b's are the stack's pieces, each once
        a_of = dict(zip([b for _, b, _ in found], avals))
        stacked = add(fa.Stack(st.fn.axis), [a_of[b] for b in st.ins], "stack", "a")
        sa = add(m.Reshape((-1, values[stacked].shape[-1])), [stacked], "reshape", "a")
        sb = add(m.Reshape((-1, values[st.outs[0]].shape[-1])), [st.outs[0]], "reshape", "b")
    ta = add(m.Transpose((1, 0)), [sa], "transpose", "t")
    add(fc.MatMul(), [ta, sb], "matmul (gathered)", "matmul", root.outs[0])
    return made
