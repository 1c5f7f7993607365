"""Broadcasted elementwise kernels generated from an expression, cached by their signature.

A call is planned once per signature (expression, dtypes, shapes, strides): dimensions of size 1
are dropped, adjacent dimensions that every operand walks contiguously are merged, and strides
of 0 and 1 are baked into the source (a broadcast costs nothing, a contiguous walk has no
multiply). Shapes and other strides are kernel arguments, so a new shape with the same pattern
reuses the built program. Later calls with the same signature only pay for the enqueue.
"""

from __future__ import annotations

from string import Template

import numpy as np

from .ndarray import CTYPES, IDX_NP, index_ctype, ndarray
from .program import header, kernels, source
from .shapes import collapse_dims


def _plan(rt, name, expr, out, inputs, in_ctypes):
    shape = out.shape
    nd = len(shape)
    # per operand strides broadcast to the output shape
    ops = [out._st]
    kinds = []
    for x in inputs:
        if isinstance(x, ndarray):
            pad = nd - x.ndim
            st = [0] * pad + [s if d != 1 else 0 for d, s in zip(x.shape, x._st)]
            ops.append(tuple(st))
            kinds.append("a")
        else:
            kinds.append("s")
    cshape, cst = collapse_dims(shape, ops)
    cnd = len(cshape)
    idx = index_ctype(out, *inputs)

    # ---- source ---------------------------------------------------------------------------
    params, stride_args = [], []
    patterns = []

    def operand(tag, ctype, st, const):
        q = "__global const " if const else "__global "
        params.append(f", {q}{ctype}* {tag}, const IDX {tag}_o")
        terms = [f"{tag}_o"]
        pat = []
        for j, s in enumerate(st):
            if s == 0:
                pat.append("0")
            elif s == 1:
                pat.append("1")
                terms.append(f"i{j}")
            else:
                pat.append("s")
                params.append(f", const IDX {tag}_s{j}")
                stride_args.append(s)
                terms.append(f"i{j}*{tag}_s{j}")
        patterns.append("".join(pat))
        return " + ".join(terms)

    out_index = operand("o", CTYPES[out.dtype], cst[0], False)
    loads = []
    ai = 1
    for n, (kind, ct) in enumerate(zip(kinds, in_ctypes)):
        if kind == "a":
            x = inputs[n]
            index = operand(f"a{n}", CTYPES[x.dtype], cst[ai], True)
            ai += 1
            loads.append(f"    const {ct} v{n} = ({ct}){f'a{n}'}[{index}];")
        else:
            params.append(f", const {ct} v{n}")
    dim_params = "".join(f", const IDX d{j}" for j in range(1, cnd))
    unravel = []
    for j in range(cnd - 1, 0, -1):
        unravel.append(f"    const IDX i{j} = r % d{j}; r /= d{j};")
    unravel.append("    const IDX i0 = r;")
    octype = CTYPES[out.dtype]
    store = f"    o[{out_index}] = ({octype})({expr});"
    kname = f"ew_{name}"
    ctypes = {octype, *in_ctypes, *(CTYPES[x.dtype] for x in inputs if isinstance(x, ndarray))}
    src = header(rt, ctypes, {"IDX": idx}, what=name) + source("common") + Template(
        source("elementwise")).substitute(name=kname, params="".join(params) + dim_params,
                                          unravel="\n".join(unravel), load="\n".join(loads),
                                          store=store)
    # ---- argument layout ------------------------------------------------------------------
    # n, (buf, off, strides...) for out and each array input, scalars in their slots, dims.
    arg_types = [IDX_NP[idx]]
    arg_types += [None, IDX_NP[idx]] + [IDX_NP[idx]] * patterns[0].count("s")
    per_operand_strides = []
    pos = 0
    for pat in patterns:
        cnt = pat.count("s")
        per_operand_strides.append(tuple(stride_args[pos:pos + cnt]))
        pos += cnt
    types_after_out = []
    ai = 1
    for kind, ct in zip(kinds, in_ctypes):
        if kind == "a":
            types_after_out += [None, IDX_NP[idx]] + [IDX_NP[idx]] * patterns[ai].count("s")
            ai += 1
        else:
            types_after_out.append(_CT_NP[ct])
    arg_types += types_after_out + [IDX_NP[idx]] * (cnd - 1)

    # NOTE: the argument types follow from the source, so one typed kernel serves every plan
    # with this source (new shapes with the same pattern)
    kernel = getattr(kernels(rt, src, {kname: arg_types}, name=f"elementwise.cl:{kname}"), kname)
    n = out.size
    ls = min(256, rt.info.max_work_group_size)
    gs = ((n + ls - 1) // ls) * ls
    return (kernel, n, gs, ls, per_operand_strides, tuple(cshape[1:]), kinds)


_CT_NP = {"float": np.float32, "double": np.float64, "char": np.int8, "uchar": np.uint8,
          "short": np.int16, "ushort": np.uint16, "int": np.int32, "uint": np.uint32,
          "long": np.int64, "ulong": np.uint64}


def launch(name: str, expr: str, out: ndarray, inputs, in_ctypes) -> ndarray:
    """Run ``out[...] = expr(v0, v1, ...)`` with NumPy broadcasting of ``inputs`` to ``out``.

    ``inputs`` are ndarrays (already on ``out``'s device) or scalars; ``in_ctypes`` gives the
    OpenCL type each is converted to when loaded (the op's compute type).
    """
    if out.size == 0:
        return out
    rt = out.rt
    key = (name, expr, out.dtype, out.shape, out._st,
           tuple((x.dtype, x.shape, x._st) if isinstance(x, ndarray) else None for x in inputs),
           in_ctypes)
    plan = rt.kernels.get(key)
    if plan is None:
        plan = rt.cached(key, lambda: _plan(rt, name, expr, out, inputs, in_ctypes))
    kernel, n, gs, ls, strides, dims, kinds = plan
    args = [n, out.data, out.offset, *strides[0]]
    ai = 1
    for x, kind in zip(inputs, kinds):
        if kind == "a":
            args += (x.data, x.offset, *strides[ai])
            ai += 1
        else:
            args.append(x)
    args += dims
    with rt.lock:
        kernel(rt.queue, (gs,), (ls,), *args)
    return out
