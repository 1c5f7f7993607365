"""Elementwise fusion on OpenCL devices: a chain of elementwise ops, each of whose results only
the next one reads, becomes one generated kernel.

A region grows from an op backwards into the producers of its inputs while a producer is an
elementwise op of the same shape and dtype whose result nothing else reads (not the step's
outputs, not another op, not a host computation). Its inputs that come from outside the region
are the kernel's arrays (broadcast as NumPy would: the generated kernel is labkit's strided
elementwise frame); its constants (the ``c`` of ``x + c``, fixed when traced) are exact
hexadecimal literals of the array's type in the source. Each op is one statement, so nothing
is computed twice, and floating-point contraction is off so each statement rounds as its own
kernel would. OpenCL limits a kernel's arguments (at least 1,024 bytes in all, 8 to 24 bytes
per array here): a region stops growing at ``MAX_INPUTS`` arrays, well within that, or at
``MAX_OPS`` ops.

Fused results equal the unfused ones except where an op's own kernel uses a vector form of a
transcendental function (exp, log, tanh on a CPU device): there they agree to float32
rounding (tests/compile say which).
"""

from __future__ import annotations

import numbers

import numpy as np

from ..backend.opencl import ndarray
from ..backend.opencl.core import TANH_FORM, _permuted, memory_order, new_in_order
from ..backend.opencl.elementwise import launch
from ..backend.opencl.ndarray import CTYPES
from ..functions import activation as _act
from ..functions import math as _m
from .trace import Node

#: the most arrays one fused kernel reads (its constants are literals in its source)
MAX_INPUTS = 16
#: the most ops one fused kernel holds (a longer chain is split: its source stays short)
MAX_OPS = 64

_TANH = TANH_FORM  # NOTE: the scalar kernel's: the same bits
_SIGMOID = "({0} >= 0 ? 1 / (1 + exp(-{0})) : exp({0}) / (1 + exp({0})))"

#: op type -> (statement form over its inputs {0}, {1}, ... and constant {c}, constant attr)
_FORMS = {
    _m.Add: ("{0} + {1}", None),
    _m.Sub: ("{0} - {1}", None),
    _m.Mul: ("{0} * {1}", None),
    _m.Div: ("{0} / {1}", None),
    _m.Neg: ("-{0}", None),
    _m.AddConstant: ("{0} + {c}", "c"),
    _m.MulConstant: ("{0} * {c}", "c"),
    _m.DivConstant: ("{0} / {c}", "c"),
    _m.RDivConstant: ("{c} / {0}", "c"),
    _m.Exp: ("exp({0})", None),
    _m.Log: ("log({0})", None),
    _m.Log1p: ("log1p({0})", None),
    _m.Sqrt: ("sqrt({0})", None),
    _m.Tanh: (_TANH, None),
    _m.Sigmoid: (_SIGMOID, None),
    _act.ReLU: ("LK_FMAX({0}, (T)0)", None),
    _act.ReLUGrad: ("({c} > 0 ? {0} : (T)0)", "x"),
}


class _Region:
    def __init__(self, node):
        self.nodes = [node]
        # NOTE: an upper bound of the arrays it reads (an op's inputs, some made inside)
        self.inputs = len(node.ins) + len(node.attr_in)


def _shape(values, s):
    v = values.get(s)
    return None if v is None else (tuple(v.shape), v.dtype)


def _spec(n, values):
    """(form, constant attribute) when ``n`` can join a fused kernel, else None."""
    if n.kind != "op" or n.effect or n.attr_out or len(n.outs) != 1 or n.multi:
        return None
    form = _FORMS.get(type(n.fn))
    if form is None:
        return None
    out = values.get(n.outs[0])
    if not isinstance(out, ndarray) or out.dtype.kind != "f":
        return None
    for s in n.ins:
        v = values.get(s)
        if not isinstance(v, ndarray) or v.dtype != out.dtype:
            return None
    attr = form[1]
    if attr is not None:
        c = n.fn.__dict__.get(attr)
        bound = any(a == attr for a, _, _ in n.attr_in)
        if bound or isinstance(c, ndarray):
            arr = values.get(next(s for a, _, s in n.attr_in if a == attr)) if bound else c
            if not isinstance(arr, ndarray) or (arr.dtype != out.dtype and attr != "x"):
                return None
        elif not isinstance(c, numbers.Number) or isinstance(c, bool):
            return None
    if n.attr_in and any(a != attr for a, _, _ in n.attr_in):
        return None
    return form


def fuse(nodes, trace, needed, consts):
    """``nodes`` with each fusable region replaced by one kernel node; and how many."""
    values = trace.values
    if not any(isinstance(values.get(s), ndarray) for n in nodes for s in n.outs):
        return nodes, 0
    uses: dict = {}
    for n in nodes:
        for s in list(n.ins) + [s for _, _, s in n.attr_in]:
            uses[s] = uses.get(s, 0) + 1
        for old, _ in n.versions:  # NOTE: changed in place by a later node: it must exist
            uses[old] = uses.get(old, 0) + 2
    for s in needed:
        uses[s] = uses.get(s, 0) + 2  # NOTE: read outside the ops: never inlined
    region_of: dict = {}   # id(node) -> its region
    producer: dict = {}    # slot -> fusable node making it
    absorbed: set = set()
    for n in nodes:
        if _spec(n, values) is None:
            continue
        r = _Region(n)
        out_shape = _shape(values, n.outs[0])
        for s in list(n.ins) + [s for _, _, s in n.attr_in]:
            p = producer.get(s)
            if (p is not None and uses.get(s, 0) == 1 and id(p) not in absorbed
                    and _shape(values, p.outs[0]) == out_shape):
                pr = region_of[id(p)]
                if (len(r.nodes) + len(pr.nodes) > MAX_OPS
                        or r.inputs + pr.inputs - 1 > MAX_INPUTS):
                    continue
                absorbed.add(id(p))
                r.nodes = pr.nodes + r.nodes
                r.inputs += pr.inputs - 1
        region_of[id(n)] = r
        producer[n.outs[0]] = n
    out, count = [], 0
    for n in nodes:
        if id(n) in absorbed:
            continue
        r = region_of.get(id(n))
        if r is None or len(r.nodes) < 2:
            out.append(n)
            continue
        out.append(_kernel(r, values, consts))
        count += 1
    return out, count


def _kernel(region, values, consts):
    made = {}       # slot -> temporary name
    leaves = []     # slots read from outside
    extra = []      # constant arrays and scalars (values, not slots)
    lines = []

    def operand(s):
        if s in made:
            return made[s]
        if s not in leaves:
            leaves.append(s)
        return ("L", leaves.index(s))

    stmts = []
    for k, n in enumerate(region.nodes):
        form, attr = _FORMS[type(n.fn)]
        args = [operand(s) for s in n.ins]
        c = None
        if attr is not None:
            bound = [s for a, _, s in n.attr_in if a == attr]
            value = n.fn.__dict__.get(attr)
            if bound:
                c = operand(bound[0])
            elif isinstance(value, numbers.Number):
                c = _literal(value, values[n.outs[0]].dtype)
            else:
                extra.append(value)
                c = ("E", len(extra) - 1)
        stmts.append((f"t{k}", form, args, c))
        made[n.outs[0]] = f"t{k}"
    n_leaves = len(leaves)

    def name(x):
        if isinstance(x, str):
            return x
        if x[0] == "C":  # a literal
            return x[1]
        kind, i = x
        return f"v{i}" if kind == "L" else f"v{n_leaves + i}"

    for t, form, args, c in stmts:
        expr = form.format(*[name(a) for a in args], c=name(c) if c is not None else "")
        lines.append(f"    const T {t} = {expr};")
    root = region.nodes[-1]
    out_val = values[root.outs[0]]
    shape, dtype = tuple(out_val.shape), out_val.dtype
    ct = CTYPES[dtype]
    in_ctypes = tuple([ct] * (n_leaves + len(extra)))
    pre = f"#define T {ct}\n" + "\n".join(lines) + "\n#undef T\n"
    expr = f"t{len(stmts) - 1}"
    rt = out_val.rt
    names = "+".join(n.name for n in region.nodes)

    # NOTE: the result laid out in memory as the traced (eager) one was (an op's result keeps
    # its operand's memory order): a product reading it then takes the same kernel, with the
    # same order of sums, as in the eager step (gemm.path looks at its operands' layout)
    perm = memory_order([out_val], shape)

    def run(*arrays):
        xs = list(arrays) + extra
        if perm is None:
            return launch("fused", expr, ndarray(rt, shape, dtype), xs, in_ctypes, pre=pre)
        o = new_in_order(rt, shape, dtype, perm)
        launch("fused", expr, o.transpose(perm), [_permuted(x, shape, perm) for x in xs],
               in_ctypes, pre=pre)
        return o

    run.__name__ = f"fused[{names}]"
    node = Node("kernel", run, list(leaves), [root.outs[0]], f"fused({names})", root.where,
                ("kernel", pre), idx=root.idx)
    node.region = list(region.nodes)
    return node


def _literal(c, dtype):
    """The constant ``c`` as an exact literal of ``dtype`` (NumPy's rounding of a Python number
    to the array's type, written in hexadecimal: no decimal rounding in between)."""
    v = float(dtype.type(c))
    if v != v:
        return ("C", "((T)NAN)")
    if v in (float("inf"), float("-inf")):
        return ("C", "((T)INFINITY)" if v > 0 else "((T)-INFINITY)")
    return ("C", f"((T){v.hex()}{'f' if dtype == np.float32 else ''})")
