"""A pass: products made in the layout their reader wants.

``(a @ b).T`` is ``b.T @ a.T``: the same dot products, computed into rows. The weight
gradient of ``h @ U.T`` (an LSTM's recurrent weight, a tied embedding, a layer written
``x @ W.T + b``) arrives as the transpose of a product (or of a sum of products), its
columns contiguous; NumPy's update of a parameter in rows by it is strided (SGD on a (512,
128) weight: 113 us against 11 us), and on OpenCL the product in rows is what takes the
plain SGD update into its kernel (compile/sgd.py): the MLP step of the benchmarks written
``x @ W.T + b`` took 1.9 ms at batch 1 and 2.1 at batch 32, 0.51 and 1.26 now (with
F.linear: 0.49 and 1.21).
"""

from __future__ import annotations

import numpy as np

from .passes import _readers, _same_meta, changed_in_place, refs, root_id, sharing


def transposed_products(nodes, values, needed, new_slot):
    """``transpose(p)`` of a 2-D product ``p = a @ b``, or of a sum of such products each
    read once, becomes the product ``b.T @ a.T`` (the sum of them): the result in rows, not
    a view with contiguous columns. BLAS (or the OpenCL kernel chosen for the other shape)
    may sum a product's terms in another order for the other layout, so this runs with
    ``reassociate``. Returns the nodes and how many were rewritten."""
    from ..backend.opencl.ndarray import ndarray
    from ..functions import connection as fc
    from ..functions import math as m
    from .trace import Node

    made_by = {s: n for n in nodes for s in n.outs}
    readers = _readers(nodes)
    fixed = changed_in_place(nodes)
    shared = sharing(values)
    referenced: set = set()
    for n in nodes:
        referenced |= refs(n)

    def matrix(s):
        v = values.get(s)
        return type(v) in (np.ndarray, ndarray) and v.ndim == 2 and v.dtype.kind == "f"

    def op(s, cls):
        n = made_by.get(s)
        ok = (n is not None and n.kind == "op" and type(n.fn) is cls and not n.attr_in
              and not n.attr_out and n.outs == [s] and n.idx not in referenced)
        return n if ok else None

    def tree(s, top):
        """The products and sums that make slot ``s``, children first (None: not only
        those, or read by something else too)."""
        if not matrix(s) or s in needed or s in fixed or (
                not top and len(readers.get(s, ())) != 1):
            return None
        mm = op(s, fc.MatMul)
        if mm is not None and len(mm.ins) == 2 and all(matrix(x) for x in mm.ins):
            return [mm]
        add = op(s, m.Add)
        if add is None or len(add.ins) != 2 or add.ins[0] == add.ins[1] or not all(
                _same_meta(values, x, s) for x in add.ins):
            return None
        left, right = tree(add.ins[0], False), tree(add.ins[1], False)
        return None if left is None or right is None else left + right + [add]

    plan: dict = {}    # id(node) -> (the node, the slot its rows go to)
    gone: set = set()
    for t in nodes:
        if (t.kind != "op" or type(t.fn) is not m.Transpose or t.attr_in
                or tuple(t.fn.axes or ()) != (1, 0) or len(readers.get(t.ins[0], ())) != 1):
            continue
        found = tree(t.ins[0], True)
        # NOTE: nothing else may view the sum (a slice of its transpose returned): the
        # program keeps its buffers by the traced views, which the rows would not be
        if (found is None or any(id(n) in plan for n in found)
                or shared[root_id(values[t.ins[0]])] - {t.ins[0], t.outs[0]}):
            continue
        for n in found:
            s = t.outs[0] if n.outs[0] == t.ins[0] else new_slot()
            plan[id(n)] = (n, s)
            values[s] = values[n.outs[0]].T.copy()  # NOTE: C order (NumPy and OpenCL)
        gone.add(id(t))

    renamed = {n.outs[0]: s for n, s in plan.values()}
    out = []
    for n in nodes:
        if id(n) in gone:
            continue
        if id(n) in plan:
            if type(n.fn) is fc.MatMul:
                a, b = n.ins
                n.ins = [_flip(b, out, n, made_by, gone, values, new_slot, m, Node),
                         _flip(a, out, n, made_by, gone, values, new_slot, m, Node)]
            else:
                n.ins = [renamed[x] for x in n.ins]
            n.outs = [plan[id(n)][1]]
        out.append(n)
    return out, len(gone)


def _flip(s, out, n, made_by, gone, values, new_slot, m, Node):
    """A slot holding ``s`` transposed: the input of a transpose that made ``s`` (one this
    pass keeps: a removed one's input is not made any more), or a new transpose (a view)
    added to ``out`` before node ``n``."""
    src = made_by.get(s)
    if (src is not None and src.kind == "op" and type(src.fn) is m.Transpose
            and id(src) not in gone
            and not src.attr_in and tuple(src.fn.axes or ()) == (1, 0)):
        return src.ins[0]
    r = new_slot()
    values[r] = values[s].T
    fn = m.Transpose((1, 0))
    fn.brick = getattr(n.fn, "brick", None)
    out.append(Node("op", fn, [s], [r], "transpose", n.where, ("rows", "t"),
                    idx=-10 * n.idx - 8))
    return r
