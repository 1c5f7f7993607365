"""Passes over a traced step: constant folding, common-subexpression merge, dead-code removal.

Each pass takes and returns the node list; slots that a pass makes constant are added to
``consts`` (slot -> array), and ``alias`` (slot -> slot) records merged values. The passes keep
every node that changes state (an optimizer's update, running statistics, a generator's draw)
and every op another op refers to (a backward op that reads what its forward op saved).
"""

from __future__ import annotations

import numpy as np


def refs(node) -> set:
    """Indices of the ops ``node`` was made with (a backward op holding its forward op)."""
    out: set = set()

    def walk(v):
        if isinstance(v, tuple):
            if len(v) == 2 and v[0] == "op" and isinstance(v[1], int):
                out.add(v[1])
            else:
                for x in v:
                    walk(x)

    if node.kind == "op":
        walk(node.sig[1])
    return out


def resolve(alias, s):
    """The slot that value ``s`` lives in after the passes: aliases chain (a duplicate
    merged into a value that a later rewrite made an alias in turn)."""
    while s in alias:
        s = alias[s]
    return s


def _rename(n, alias):
    """Point what ``n`` reads at the slots that merged values now live in."""
    n.ins = [resolve(alias, s) for s in n.ins]
    n.attr_in = [(a, i, resolve(alias, s)) for a, i, s in n.attr_in]
    n.versions = [(resolve(alias, a), b) for a, b in n.versions]


def fold(nodes, sources, values, consts):
    """Ops whose inputs are all constants become constants (their traced values). Arrays
    read live (changed in place between calls) are not constants."""
    const = {s for s, src in sources.items() if src.kind == "const"}
    referenced = set()
    for n in nodes:
        referenced |= refs(n)
    # NOTE: a value a later node changes in place (a tensor's .data the optimizer updates):
    # its traced value is the changed one, so it is computed at each replay
    changed = {old for n in nodes for old, _ in n.versions}
    kept = []
    for n in nodes:
        if (n.kind == "op" and not n.effect and not n.attr_in and n.idx not in referenced
                and not refs(n) and all(s in const for s in n.ins)
                and not any(s in changed for s in n.outs)):
            for s in n.outs + [s for _, _, s in n.attr_out]:
                # NOTE: a copy: the traced call returns the same array (as a result, as a
                # .grad) to the caller, who may change it in place
                consts[s] = values[s].copy()
                const.add(s)
            continue
        kept.append(n)
    return kept


def merge(nodes, alias, apart=frozenset()):
    """Ops of the same type, made with the same constants, on the same inputs, compute the
    same values: the later ones are dropped and their outputs read the first one's. Ops making
    a slot in ``apart`` (a result, a tensor's new ``.data`` or ``.grad``, an array changed in
    place later) are kept as they are: merged, two tensors set from two equal results would
    share one array (an update of one changed both)."""
    referenced = set()
    for n in nodes:
        referenced |= refs(n)
    seen: dict = {}
    kept = []
    for n in nodes:
        if alias:
            _rename(n, alias)
        if n.versions:  # NOTE: an in-place change: nothing before it merges with after
            seen.clear()
        if (n.kind != "op" or n.effect or n.attr_out or n.consts
                or n.idx in referenced or refs(n) or any(o in apart for o in n.outs)):
            kept.append(n)
            continue
        try:
            key = (n.sig, tuple(n.ins), tuple(n.attr_in))
            hash(key)
        except TypeError:
            kept.append(n)
            continue
        first = seen.get(key)
        if first is None:
            seen[key] = n
            kept.append(n)
        else:
            for a, b in zip(n.outs, first.outs):
                alias[a] = b
    return kept


def _merge_barriers(nodes):
    """Positions of the nodes that change an array in place: no op is merged, moved or
    copied across one (a view of a changed array, a slice of an updated parameter, is not
    a new slot after the change, so slots alone do not show what changed)."""
    return [i for i, n in enumerate(nodes) if n.versions]


def prune(nodes, needed):
    """Drop ops whose results nothing needs (the step's outputs, its updates, state changes).
    A user's own Function (one not defined in labkit) is kept, its result used or not: its
    forward may raise on the values it gets (a guard against a non-finite loss), as the eager
    call does, and a replay without it would go on silently."""
    needed = set(needed)
    keep_ops: set = set()
    live = [False] * len(nodes)
    for k in range(len(nodes) - 1, -1, -1):
        n = nodes[k]
        if (n.effect or n.idx in keep_ops or any(s in needed for s in n.outs)
                or (n.kind == "op" and not type(n.fn).__module__.startswith("labkit."))
                or any(s in needed for _, _, s in n.attr_out)):
            live[k] = True
            needed.update(n.ins)
            needed.update(s for _, _, s in n.attr_in)
            needed.update(old for old, _ in n.versions)  # NOTE: what it changes in place
            keep_ops |= refs(n)
    return [n for n, ok in zip(nodes, live) if ok]


# ---- stabilisation ---------------------------------------------------------------------------


def _stable_log_sigmoid(x):
    """log(sigmoid(x)) = min(x, 0) - log1p(exp(-|x|)): finite for every finite x."""
    xp = np if isinstance(x, np.ndarray) else _cl()
    return xp.minimum(x, 0) - xp.log1p(xp.exp(-xp.abs(x)))


def _cl():
    from ..backend import opencl

    return opencl


def _readers(nodes) -> dict:
    """Slot -> the nodes that read it, once per read: as an input, an attribute, or an array
    they change in place."""
    out: dict = {}
    for n in nodes:
        for s in list(n.ins) + [s for _, _, s in n.attr_in] + [a for a, _ in n.versions]:
            out.setdefault(s, []).append(n)
    return out


def changed_in_place(nodes) -> set:
    """The slots whose arrays a host computation changes in place (``mutates``)."""
    return {a for n in nodes for a, _ in n.versions}


def root_id(a) -> int:
    """The id of the array ``a`` is a view of (itself when it is not a view)."""
    while getattr(a, "base", None) is not None:
        a = a.base
    return id(a)


def sharing(values) -> dict:
    """Root array id -> the slots whose traced values are it or views of it."""
    out: dict = {}
    for s, v in values.items():
        out.setdefault(root_id(v), set()).add(s)
    return out


def stabilize(nodes, alias, values):
    """Rewrite what overflows or underflows in float32 into forms that do not (Theano's
    stabilisation): log(exp(z)) -> z, log(1 + x) -> log1p(x), log(sigmoid(x)) ->
    -softplus(-x), log(softmax(x)) -> log_softmax(x), and in the gradients (g / e) * e -> g
    and softmax_grad(y, g / y) -> g - y * sum(g), which the backward of a rewritten
    log(exp) or log(sigmoid) leaves (0 / 0 where e underflowed). Returns the rewritten
    nodes and the names of the rewrites made. These change rounding: a stabilised program
    agrees with eager to float32 rounding where eager is finite."""
    from ..functions import activation as act
    from ..functions import math as m

    made_by = {}
    for n in nodes:
        for s in n.outs:
            made_by[s] = n
    # NOTE: a result is never made an alias of an array the step changes in place (a returned
    # log(exp(p)) would be the parameter after its update); an alias of an argument or a
    # parameter is copied where it leaves the program (program._generate)
    fixed = changed_in_place(nodes)
    done = []
    kept = []
    for n in nodes:
        if alias:
            _rename(n, alias)
        t = type(n.fn) if n.kind == "op" else None
        src = made_by.get(n.ins[0]) if n.ins else None
        st = type(src.fn) if src is not None and src.kind == "op" else None
        if (t is m.Log and st is m.Exp and _same_meta(values, n.outs[0], src.ins[0])
                and src.ins[0] not in fixed):
            alias[n.outs[0]] = src.ins[0]
            done.append("log(exp(z)) -> z")
            continue
        if (t is m.Log and st is m.AddConstant and isinstance(src.fn.__dict__.get("c"), float)
                and src.fn.c == 1.0 and not src.attr_in
                and _same_meta(values, n.outs[0], src.ins[0])):
            n.fn = m.Log1p()
            n.ins = [src.ins[0]]
            n.name = "log1p"
            done.append("log(1 + x) -> log1p(x)")
        elif t is m.Log and st is act.Softmax:
            n.fn, n.ins, n.name = act.LogSoftmax(src.fn.axis), [src.ins[0]], "log_softmax"
            done.append("log(softmax(x)) -> log_softmax(x)")
        elif (t is act.SoftmaxGrad
              and (g := _numerator(made_by.get(n.ins[1]), n.ins[0], fixed)) is not None
              and _same_meta(values, n.ins[1], g)):
            # NOTE: y * (g / y - sum(g / y * y)) = g - y * sum(g): log(softmax)'s gradient
            n.fn, n.ins, n.name = act.LogSoftmaxGrad(n.fn.axis), [n.ins[0], g], "log_softmax_grad"
            done.append("softmax_grad(y, g / y) -> g - y * sum(g)")
        elif t is m.Log and st is m.Sigmoid:
            n.kind, n.fn, n.ins = "host", _stable_log_sigmoid, [src.ins[0]]
            n.name = "log_sigmoid"
            done.append("log(sigmoid(x)) -> -softplus(-x)")
        elif t is m.Mul and len(n.ins) == 2:
            a, b = n.ins
            for g_slot, e_slot in ((a, b), (b, a)):
                g = _numerator(made_by.get(g_slot), e_slot, fixed)
                if g is not None and _same_meta(values, n.outs[0], g):
                    alias[n.outs[0]] = g
                    done.append("(g / e) * e -> g")
                    break
            else:
                kept.append(n)
            continue
        kept.append(n)
    return kept, done


def _numerator(d, e_slot, fixed):
    """The slot of ``g`` when node ``d`` is an op ``g / e`` whose denominator is slot
    ``e_slot`` and ``g`` is not changed in place by the step, else None."""
    from ..functions import math as m

    if (d is not None and d.kind == "op" and type(d.fn) is m.Div and d.ins[1] == e_slot
            and d.ins[0] not in fixed):
        return d.ins[0]
    return None


def _same_meta(values, a, b):
    """Whether slots ``a`` and ``b`` hold arrays of one shape and dtype (an alias keeps
    the result's shape: no rewrite that would broadcast)."""
    va, vb = values.get(a), values.get(b)
    return (va is not None and vb is not None and tuple(va.shape) == tuple(vb.shape)
            and va.dtype == vb.dtype)


# ---- one step of a stack ----------------------------------------------------------------------


def _one_index(key, shape, axis):
    """``k`` when ``key`` selects index ``k`` of ``axis`` and every element of the other
    axes of an array of ``shape`` (``[:, -1]``), else None."""
    key = key if isinstance(key, tuple) else (key,)
    if not axis < len(key) <= len(shape):
        return None
    k = key[axis]
    if (isinstance(k, (bool, np.bool_)) or not isinstance(k, (int, np.integer))
            or not -shape[axis] <= k < shape[axis]):
        return None
    if any(not (isinstance(x, slice) and x == slice(None)) for i, x in enumerate(key)
           if i != axis):
        return None
    return int(k) % shape[axis]


def one_piece(nodes, alias, values, leaving):
    """A loop's stacked outputs read at one step only (an RNN's last hidden state,
    ``net(x)[:, -1]``): ``stack(h_1, ..., h_T)[:, k]`` is ``h_k``; and its gradient, the
    slice's adjoint (zeros but ``g`` at ``k``) unbound into T pieces, is ``g`` for piece
    ``k`` and zeros for the others, which the backward adds to each step's gradient of h:
    ``u + 0`` is ``u``. The slice, the piece and the sums become aliases; the stack, the
    zeros and T - 1 additions go (prune). Bit for bit eager but for a zero's sign where
    ``u`` is -0.0 (-0.0 + 0.0 is +0.0). Never for a value that leaves the step (``leaving``:
    results and writes; eager gives each its own array), one that something else views (the
    program keeps buffers by the traced views), or memory the step changes in place. Returns
    the nodes and how many were rewritten."""
    from ..functions import array as fa
    from ..functions import math as m

    made_by: dict = {}
    fixed = changed_in_place(nodes)
    shared = sharing(values)
    fixed_roots = {root_id(values[s]) for s in fixed if s in values}
    zeros: set = set()
    kept, count = [], 0

    def alone(s, allowed):
        """Nothing but ``allowed`` views slot ``s``'s memory, which nothing changes."""
        v = values.get(s)
        return (v is not None and shared.get(root_id(v), set()) <= allowed
                and root_id(v) not in fixed_roots)

    def own(s):
        """Slot ``s`` is an array of its own (no view of an argument or a parameter), which
        nothing changes in place."""
        v = values.get(s)
        return v is not None and getattr(v, "base", None) is None and id(v) not in fixed_roots

    def op(s, cls):
        n = made_by.get(s)
        return n if n is not None and n.kind == "op" and type(n.fn) is cls else None

    for n in nodes:
        if alias:
            _rename(n, alias)
        t = type(n.fn) if n.kind == "op" and not n.attr_in else None
        y = n.outs[0] if n.outs else None
        if t is fa.GetItem and (st := op(n.ins[0], fa.Stack)) is not None:
            k = _one_index(n.fn.key, values[n.ins[0]].shape, st.fn.axis)
            if (k is not None and y not in leaving and alone(n.ins[0], {n.ins[0], y})
                    and own(st.ins[k]) and _same_meta(values, y, st.ins[k])):
                alias[y] = st.ins[k]
                count += 1
                continue
        elif t is fa.Unbind and (gi := op(n.ins[0], fa.GetItemGrad)) is not None:
            k = _one_index(gi.fn.key, gi.fn.shape, n.fn.axis)
            g = gi.ins[0]
            if (k is not None and len(n.outs) == gi.fn.shape[n.fn.axis]
                    and n.outs[k] not in leaving and alone(n.ins[0], {n.ins[0], *n.outs})
                    and g in values and root_id(values[g]) not in fixed_roots
                    and _same_meta(values, n.outs[k], g)):
                alias[n.outs[k]] = g
                zeros.update(p for i, p in enumerate(n.outs) if i != k and p not in fixed)
                count += 1
        elif t is m.Add and len(n.ins) == 2 and y not in leaving and alone(y, {y}):
            u = next((a for a, z in (n.ins, n.ins[::-1]) if z in zeros and a in values
                      and root_id(values[a]) not in fixed_roots
                      and _same_meta(values, y, a)), None)
            if u is not None:
                alias[y] = u
                continue
        for s in n.outs:
            made_by[s] = n
        kept.append(n)
    return kept, count


# ---- epilogues -------------------------------------------------------------------------------


def _fold_context(nodes):
    """What the folds that move a product look at: the node making each slot, the nodes
    reading each slot, the slots changed in place, each node's position, and the positions
    of the nodes that change an array in place (nothing moves across one)."""
    return ({s: n for n in nodes for s in n.outs}, _readers(nodes), changed_in_place(nodes),
            {id(n): i for i, n in enumerate(nodes)}, _merge_barriers(nodes))


def fold_relu(nodes, needed):
    """``relu(linear(x, W, b))`` -> ``linear(x, W, b, activation="relu")``, and the same for
    ``conv2d``: one node, on an OpenCL device one GEMM kernel with the bias and relu as its
    epilogue. Only where relu is the pre-activation's one reader, besides the gradient mask
    (``relu_grad``), which is then read from the relu's output instead: ``y > 0`` exactly
    where ``z > 0`` (NaN in both), so the program's results are bit for bit the same.
    Returns the nodes and how many were folded."""
    from ..functions import activation as act
    from ..functions import connection as conn

    made_by = {s: n for n in nodes for s in n.outs}
    readers = _readers(nodes)
    fixed = changed_in_place(nodes)
    gone = set()
    for r in nodes:
        if r.kind != "op" or type(r.fn) is not act.ReLU or r.attr_in:
            continue
        z = r.ins[0]
        src = made_by.get(z)
        if (src is None or src.kind != "op" or type(src.fn) not in (conn.Linear, conn.Conv2d)
                or "relu" in src.fn.__dict__ or src.outs[0] != z or z in needed or z in fixed
                or r.outs[0] in fixed):  # NOTE: the mask is read from y after the fold
            continue
        masks = [n for n in readers.get(z, ()) if n is not r]
        if not all(n.kind == "op" and type(n.fn) is act.ReLUGrad and z not in n.ins
                   and all(a == "x" for a, _, s in n.attr_in if s == z) for n in masks):
            continue
        y = r.outs[0]
        fn = src.fn
        src.fn = conn.Linear(True) if type(fn) is conn.Linear else conn.Conv2d(fn.g, True)
        src.fn.brick = getattr(fn, "brick", None)  # where GraphView draws it
        src.name = src.fn.name
        src.outs = [y]
        src.sig = (type(src.fn), src.sig[1] + (("relu", True),))
        for m in masks:
            m.attr_in = [(a, i, y if s == z else s) for a, i, s in m.attr_in]
        gone.add(id(r))
    return [n for n in nodes if id(n) not in gone], len(gone)


def fold_add(nodes, needed, values):
    """``c + a @ b`` -> ``matmul_add(a, b, c)`` on OpenCL devices, where the 2-D product is
    read by the addition only: one GEMM kernel with ``c`` added in its epilogue instead of a
    product and an elementwise launch (an LSTM step's ``x_t + h @ U.T``, and its backward's
    gradient of h). Addition is commutative, so the results are bit for bit the same.
    Returns the nodes and how many were folded."""
    from ..backend import opencl
    from ..functions import connection as conn
    from ..functions import math as m

    made_by, readers, fixed, pos, barriers = _fold_context(nodes)
    gone = set()
    for add in nodes:
        if add.kind != "op" or type(add.fn) is not m.Add or add.attr_in or len(add.ins) != 2:
            continue
        y = add.outs[0]
        vy = values.get(y)
        if not isinstance(vy, opencl.ndarray) or vy.ndim != 2 or vy.dtype.kind != "f" or (
                y in fixed):
            continue
        for k in (1, 0):  # NOTE: the product on either side
            p, c = add.ins[k], add.ins[1 - k]
            mm = made_by.get(p)
            vp, vc = values.get(p), values.get(c)
            if (mm is None or mm.kind != "op" or type(mm.fn) is not conn.MatMul or mm.attr_in
                    or len(readers.get(p, ())) != 1 or p in needed or p in fixed or id(mm) in gone
                    or not isinstance(vc, opencl.ndarray) or vp is None
                    or vp.shape != vy.shape or vc.dtype != vy.dtype or vp.dtype != vy.dtype
                    or any(values[x].ndim != 2 for x in mm.ins)
                    or any(pos[id(mm)] < b < pos[id(add)] for b in barriers)):
                continue  # NOTE: (the product moves to the addition: not across a change)
            fn = conn.MatMulAdd()
            fn.brick = getattr(add.fn, "brick", None)
            add.fn, add.name = fn, fn.name
            add.ins = [mm.ins[0], mm.ins[1], c]
            add.sig = (type(fn), ())
            gone.add(id(mm))
            break
    return [n for n in nodes if id(n) not in gone], len(gone)


def fold_relu_grad(nodes, needed, values):
    """``relu_grad(a @ b)`` -> ``matmul_relu_grad(a, b, mask)`` on OpenCL devices, where the
    2-D product is read by relu's gradient only (a linear layer's input gradient under a
    relu, ``gy @ W`` masked): one GEMM kernel with the mask read in its epilogue instead of a
    product and an elementwise launch, bit for bit (kernels_cl/epilogue.cl, ACT 2). The mask,
    an attribute of the gradient op, becomes an input. Returns the nodes and how many were
    folded."""
    from ..backend import opencl
    from ..functions import activation as act
    from ..functions import connection as conn

    made_by, readers, fixed, pos, barriers = _fold_context(nodes)
    gone = set()
    for r in nodes:
        if (r.kind != "op" or type(r.fn) is not act.ReLUGrad or len(r.ins) != 1 or r.consts
                or [(a, i) for a, i, _ in r.attr_in] != [("x", None)]):
            continue
        p, y, mask = r.ins[0], r.outs[0], r.attr_in[0][2]
        mm = made_by.get(p)
        vp, vy, vm = values.get(p), values.get(y), values.get(mask)
        if (mm is None or mm.kind != "op" or type(mm.fn) is not conn.MatMul or mm.attr_in
                or len(readers.get(p, ())) != 1 or p in needed or p in fixed or y in fixed
                or not isinstance(vm, opencl.ndarray)
                or not isinstance(vp, opencl.ndarray) or vp.ndim != 2
                or vp.dtype not in (np.float32, np.float64)
                or vy is None or vy.shape != vp.shape or vm.shape != vp.shape
                or len({vp.dtype, vm.dtype, vy.dtype}) != 1
                or any(values[x].ndim != 2 or values[x].dtype != vp.dtype for x in mm.ins)
                or pos.get(id(made_by.get(mask)), -1) > pos[id(mm)]
                or any(pos[id(mm)] < b < pos[id(r)] for b in barriers)):
            continue  # NOTE: the mask moves to the product (which may come before an update
            # of a weight it reads, compile/sgd.py): not across a change
        fn = conn.MatMulMask()
        fn.brick = getattr(r.fn, "brick", None)
        mm.fn, mm.name = fn, fn.name
        mm.ins, mm.outs = [mm.ins[0], mm.ins[1], mask], [y]
        mm.sig = (type(fn), ())
        gone.add(id(r))
    return [n for n in nodes if id(n) not in gone], len(gone)


def contiguous_weights(nodes, needed, values, new_slot, min_readers=4):
    """On OpenCL devices: a transposed 2-D view (``U.T``: its columns contiguous) that at
    least ``min_readers`` products read as their second operand (a recurrent weight over the
    steps of a loop) is copied to contiguous rows once, by 16 x 16 tiles, after it is made:
    each product then reads rows, where it transposed or gathered the view again (an LSTM
    step's ``h @ U.T``: 83 -> 41 us of device time, 32 times a step). Only for products
    that run the blocked GEMM with either layout (which sums each element over K in order:
    the same bits), and where nothing changes an array in place between the transpose and
    the last of them. Returns the nodes and how many copies were made."""
    from ..backend import opencl
    from ..backend.opencl import gemm
    from ..functions import array as fa
    from ..functions import connection as conn
    from ..functions import math as m
    from .trace import Node

    readers: dict = {}
    for i, n in enumerate(nodes):
        if n.kind == "op" and type(n.fn) in (conn.MatMul, conn.MatMulAdd) and len(n.ins) > 1:
            readers.setdefault(n.ins[1], []).append(i)
    barriers = _merge_barriers(nodes)
    out, count = [], 0
    for k, n in enumerate(nodes):
        out.append(n)
        if n.kind != "op" or type(n.fn) is not m.Transpose or tuple(n.fn.axes or ()) != (1, 0):
            continue
        t = n.outs[0]
        v = values.get(t)
        if (not isinstance(v, opencl.ndarray) or v.ndim != 2 or v._st[0] != 1
                or v.dtype.kind != "f" or t in needed):
            continue
        fn = fa.Contiguous()
        copy = fn.forward(v)

        def same_kernels(i, v=v, copy=copy):
            a = values.get(nodes[i].ins[0])
            if not isinstance(a, opencl.ndarray) or a.ndim != 2:
                return False
            M, K, N = a.shape[0], a.shape[1], v.shape[1]
            return (gemm.path(a.rt, a.dtype, 1, M, N, K, a, v) == "gemm"
                    == gemm.path(a.rt, a.dtype, 1, M, N, K, a, copy))

        users = [i for i in readers.get(t, []) if same_kernels(i)]
        if len(users) < min_readers or any(k < b < max(users) for b in barriers):
            continue
        s = new_slot()
        fn.brick = getattr(n.fn, "brick", None)
        values[s] = copy
        out.append(Node("op", fn, [t], [s], fn.name, n.where, (type(fn), ()),
                        idx=-10 * n.idx - 7))
        for i in users:
            nodes[i].ins = [nodes[i].ins[0], s] + list(nodes[i].ins[2:])
        count += 1
    return out, count
