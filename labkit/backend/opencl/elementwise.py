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

from .context import HELD_MAX
from .ndarray import CTYPES, IDX_NP, fresh_fields, index_ctype, ndarray
from .program import header, kernels, source
from .shapes import collapse_dims

#: elements per work-item of the vector kernels on CPU devices, by element size (also those of
#: the chunked reductions and of gemm's dot products): PoCL runs its
#: vector math (exp, log, tanh, ...) on whole SIMD registers, where the scalar built-ins are
#: library calls one element at a time (exp: 17.8 GB/s as float16 against 3.1 as float)
VECTOR_WIDTH = {4: 16, 8: 8}


#: every elementwise kernel rounds each operation of its expression on its own, as NumPy does
#: (a formula such as tanh's polynomial, and lk.compile's fused chains of ops, the same bits
#: in every kernel that computes them)
_NO_CONTRACT = "#pragma OPENCL FP_CONTRACT OFF\n"


def vector_defines(rt, ct: str, itemsize: int) -> dict:
    """``W`` and ``VT`` for a row kernel's vector path (kernels_cl/rowlse.cl) on a CPU
    device, where PoCL inlines vector math and calls the scalar functions; none elsewhere."""
    if not rt.info.is_cpu:
        return {}
    w = VECTOR_WIDTH[itemsize]
    return {"W": w, "VT": f"{ct}{w}"}


#: below this many elements the scalar kernel is used (a vector kernel is one more program)
VECTOR_MIN = 4096

# NOTE: whole vectors through vector pointers where every array's start is a vector's
# alignment apart from its buffer's (vloadN and vstoreN are calls in PoCL's build: a million
# float tanh took 270 us through them, 172 us so; exp 166 and 87 us), else vloadN
_VECTOR_FRAME = """__kernel void ${name}(const IDX n${params})
{
    const IDX i = (IDX)get_global_id(0) * W;
    if (i + W <= n && ${aligned}) {
${pload}
        *(__global VT*)(o + o_o + i) = ${vexpr};
    } else if (i + W <= n) {
${vload}
        vstore${w}(${vexpr}, 0, o + o_o + i);
    } else {
        for (IDX j = i; j < n; ++j) {
${sload}
            o[o_o + j] = (TS)(${expr});
        }
    }
}
"""


def _vector_plan(rt, name, expr, vec, out, inputs, in_ctypes):
    """The plan of a vector kernel, or None when the call does not qualify: a CPU device, a
    float output of the compute type, every array input of that type, all contiguous and of
    the output's shape (scalars broadcast), and enough elements. Each work-item computes W
    consecutive elements with ``vec`` (an expression over vectors v0, v1, ...; VT is the
    vector type, TS the scalar one); the last one finishes the tail with ``expr``."""
    info = rt.info
    ct = CTYPES[out.dtype]
    if (vec is None or not info.is_cpu or out.size < VECTOR_MIN
            or out.dtype.kind != "f" or any(c != ct for c in in_ctypes)
            or not out.is_contiguous):
        return None
    for x in inputs:
        if isinstance(x, ndarray) and (x.dtype != out.dtype or x.shape != out.shape
                                       or not x.is_contiguous):
            return None
    w = VECTOR_WIDTH[out.dtype.itemsize]
    vt = f"{ct}{w}"
    params, vload, sload, arg_types = [", __global TS* o, const IDX o_o"], [], [], []
    pload, starts = [], ["(size_t)(o + o_o)"]
    idx = index_ctype(out, *inputs)
    arg_types += [IDX_NP[idx], None, IDX_NP[idx]]
    kinds = []
    for n, x in enumerate(inputs):
        if isinstance(x, ndarray):
            params.append(f", __global const TS* a{n}, const IDX a{n}_o")
            vload.append(f"        const VT v{n} = vload{w}(0, a{n} + a{n}_o + i);")
            pload.append(f"        const VT v{n} = *(__global const VT*)(a{n} + a{n}_o + i);")
            starts.append(f"(size_t)(a{n} + a{n}_o)")
            sload.append(f"            const TS v{n} = a{n}[a{n}_o + j];")
            arg_types += [None, IDX_NP[idx]]
            kinds.append("a")
        else:
            params.append(f", const TS s{n}")
            vload.append(f"        const VT v{n} = (VT)(s{n});")
            pload.append(f"        const VT v{n} = (VT)(s{n});")
            sload.append(f"            const TS v{n} = s{n};")
            arg_types.append(_CT_NP[ct])
            kinds.append("s")
    kname = f"ewv_{name}"
    defs = {"IDX": idx, "TS": ct, "VT": vt, "W": w}
    src = header(rt, (ct,), defs, what=name) + source("common") + _NO_CONTRACT + \
        Template(_VECTOR_FRAME).substitute(
            name=kname, params="".join(params), vload="\n".join(vload),
            pload="\n".join(pload), aligned=f"({' | '.join(starts)}) % sizeof(VT) == 0",
            sload="\n".join(sload), w=w, vexpr=vec, expr=expr)
    kernel = getattr(kernels(rt, src, {kname: arg_types}, name=f"elementwise:{kname}"), kname)
    n = out.size
    ls = min(256, info.max_work_group_size)
    groups = -(-n // w)
    gs = -(-groups // ls) * ls
    empty = ((),) * (1 + sum(k == "a" for k in kinds))
    return (kernel, n, (gs,), (ls,), empty, (), tuple(kinds))


def _plan(rt, name, expr, out, inputs, in_ctypes, vec=None, pre=""):
    plan = None if pre else _vector_plan(rt, name, expr, vec, out, inputs, in_ctypes)
    if plan is not None:
        return plan
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
    octype = CTYPES[out.dtype]
    # NOTE: a bool is stored as 0 or 1, as NumPy's cast to bool (x != 0; NaN is true): a
    # bool sum or a float assigned into a bool array must not leave 2, 255 or 0.5 truncated
    value = f"(({expr}) != 0)" if out.dtype == np.bool_ else f"({expr})"
    store = f"{pre}    o[{out_index}] = ({octype}){value};"
    # NOTE: on a CPU device, with a long innermost dimension, a work-item takes ROW_CHUNK
    # consecutive elements along it: the index arithmetic (a division per dimension) once per
    # chunk instead of per element ((4096, 4096) + a row: 6.5 -> 13+ GB/s on PoCL). A GPU keeps
    # a work-item per element, so that neighbouring work-items read neighbouring elements.
    # (from ROW_MIN_SIZE elements: a smaller array in chunks would be a few work-groups, and
    # PoCL runs a work-group on one core)
    rowwise = (cnd >= 2 and cshape[-1] >= ROW_MIN and out.size >= ROW_MIN_SIZE
               and rt.info.is_cpu)
    # NOTE: two dimensions, a work-item per element, rows along the launch's second axis: no
    # division, and PoCL makes vectors of a row's neighbouring items (a (32, 512) slice of a
    # (32, 32, 512) array plus a matrix, an LSTM's x_t + h @ U.T: 50 -> 14 us)
    grid = cnd == 2 and not rowwise and cshape[1] >= ROW_MIN and rt.info.is_cpu
    last = cnd - 1
    if grid:
        unravel.append("    const IDX i1 = r, i0 = (IDX)get_global_id(1);")
    elif rowwise:
        unravel.append("    const IDX ch = r % nch; r /= nch;")
        for j in range(cnd - 2, 0, -1):
            unravel.append(f"    const IDX i{j} = r % d{j}; r /= d{j};")
        unravel.append("    const IDX i0 = r;")
        unravel.append(f"    const IDX end = min(d{last}, (ch + 1) * (IDX){ROW_CHUNK});")
        unravel.append(f"    for (IDX i{last} = ch * (IDX){ROW_CHUNK}; i{last} < end; "
                       f"++i{last}) {{")
        store += "\n    }"
        dim_params += ", const IDX nch"
    else:
        for j in range(cnd - 1, 0, -1):
            unravel.append(f"    const IDX i{j} = r % d{j}; r /= d{j};")
        unravel.append("    const IDX i0 = r;")
    kname = f"ew_{name}"
    ctypes = {octype, *in_ctypes, *(CTYPES[x.dtype] for x in inputs if isinstance(x, ndarray))}
    src = header(rt, ctypes, {"IDX": idx}, what=name) + source("common") + _NO_CONTRACT + Template(
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
    arg_types += types_after_out + [IDX_NP[idx]] * (cnd - 1 + rowwise)

    # NOTE: the argument types follow from the source, so one typed kernel serves every plan
    # with this source (new shapes with the same pattern)
    kernel = getattr(kernels(rt, src, {kname: arg_types}, name=f"elementwise.cl:{kname}"), kname)
    dims = tuple(cshape[1:])
    n = out.size
    if rowwise:
        nch = -(-cshape[-1] // ROW_CHUNK)
        n = out.size // cshape[-1] * nch
        dims += (nch,)
    ls = min(256, rt.info.max_work_group_size)
    if grid:  # NOTE: n bounds a row (the frame's `gid >= n`)
        n, ls = cshape[1], min(ls, cshape[1])
        return (kernel, n, (-(-n // ls) * ls, cshape[0]), (ls, 1), per_operand_strides, dims,
                kinds)
    gs = ((n + ls - 1) // ls) * ls
    return (kernel, n, (gs,), (ls,), per_operand_strides, dims, kinds)


#: elementwise kernels on CPU devices: a work-item per ROW_CHUNK elements of an innermost
#: dimension of ROW_MIN or more (see ``_plan``)
ROW_MIN = 32
ROW_CHUNK = 64
ROW_MIN_SIZE = 1 << 16
_INT_MAX = 2**31 - 1


_CT_NP = {"float": np.float32, "double": np.float64, "char": np.int8, "uchar": np.uint8,
          "short": np.int16, "ushort": np.uint16, "int": np.int32, "uint": np.uint32,
          "long": np.int64, "ulong": np.uint64}


def launch(name: str, expr: str, out: ndarray, inputs, in_ctypes, vec=None,
           pre: str = "") -> ndarray:
    """Run ``out[...] = expr(v0, v1, ...)`` with NumPy broadcasting of ``inputs`` to ``out``.

    ``inputs`` are ndarrays (already on ``out``'s device) or scalars; ``in_ctypes`` gives the
    OpenCL type each is converted to when loaded (the op's compute type). ``vec``, the same
    function written for vectors, lets a contiguous call on a CPU device run as a vector
    kernel (``_vector_plan``). ``pre``: statements run before ``expr`` is stored (the
    temporaries of a fused chain of ops, see labkit.compile.fusion), with floating-point
    contraction off so that each rounds as its own kernel would.
    """
    if out.size == 0:
        return out
    run(plan_of(name, expr, out, inputs, in_ctypes, vec, pre), out, inputs)
    return out


def plan_of(name: str, expr: str, out: ndarray, inputs, in_ctypes, vec=None, pre: str = ""):
    """The plan of ``launch``'s call (its kernel and the arguments that follow from the
    signature), made once per signature and device."""
    rt = out.rt
    # NOTE: the index type follows the buffers' sizes (index_ctype), not only the layout: a
    # small view into a buffer of more than 2**31 elements needs 64-bit offsets
    key = (name, expr, out.dtype, out.shape, out._st, out._nbuf > _INT_MAX,
           tuple((x.dtype, x.shape, x._st, x._nbuf > _INT_MAX) if isinstance(x, ndarray)
                 else None for x in inputs),
           in_ctypes, pre)
    plan = rt.kernels.get(key)
    if plan is None:
        plan = rt.cached(key, lambda: _plan(rt, name, expr, out, inputs, in_ctypes, vec,
                                            pre))
    return plan


def run(plan, out: ndarray, inputs) -> None:
    """Launch ``plan`` (``plan_of``) on ``out`` and ``inputs`` of the signature it was made
    for (their buffers and offsets, and the scalars' values, may differ)."""
    got = _LAUNCHERS.get(id(plan))
    if got is None or got[0] is not plan:
        got = _LAUNCHERS[id(plan)] = (plan, _launcher(plan, out.rt, out.size))
    got[1](out, inputs)


#: a launch function per plan (by id; the plan kept with it, so a reused id is seen)
_LAUNCHERS: dict = {}


def _launcher(plan, rt, size: int):
    """``launch(out, inputs)`` for ``plan`` on ``rt``: one line of Python that passes the
    arguments in the kernel's order (n, out, each array's buffer, offset and strides, each
    scalar, the dims), with the plan's constants bound (a loop that built the list took about
    a microsecond more per launch); then counts a small one for the runtime's batching
    (``tick``; a launch of more than ``HELD_MAX`` elements opens the gate instead)."""
    env, unpack, call = _launch_source(plan, rt, size, "o.data", "o.offset")
    src = f"def launch(o, xs):\n{unpack}{call}"
    exec(compile(src, f"<elementwise launch {plan[0].function_name}>", "exec"), env)  # noqa: S102
    return env["launch"]


def maker(plan, rt, shape: tuple, dtype: np.dtype, st: tuple, size: int):
    """``new(inputs)``: a new C-contiguous array of ``shape`` (``st`` its C strides, ``size``
    its elements) computed by ``plan``, for operands of the signature the plan was made for.
    ``ndarray.fresh`` (the same fields) and ``run`` in one generated function, for repeated
    calls of one signature (core's ``_DECIDED``): the host time of a small op is these calls.
    The buffer comes from ``rt.allocate`` looked up at each call (lk.compile's capture watches
    it there)."""
    env, unpack, call = _launch_source(plan, rt, size, "D", "0")
    env.update(NEW=object.__new__, ND=ndarray, RT=rt, SHAPE=shape, DT=dtype, ST=st,
               SIZE=size, NB=size * dtype.itemsize)
    src = (f"def new(xs):\n{unpack}    o = NEW(ND)\n"
           + fresh_fields("o", "RT", "SHAPE", "DT", "ST", "SIZE")
           + f"    o.data = D = RT.allocate(NB)\n{call}    return o\n")
    exec(compile(src, f"<elementwise new {plan[0].function_name}>", "exec"), env)  # noqa: S102
    return env["new"]


def _launch_source(plan, rt, size: int, data: str, offset: str):
    """The names, the unpacking of ``xs`` and the locked launch of ``_launcher`` and ``maker``:
    the output's buffer and offset are the expressions ``data`` and ``offset``. A launch of
    ``size`` elements is one the runtime may hold back (its ``tick``) only when small
    (``context.HELD_MAX``): a larger one opens the gate as it takes ``rt.lock``, as any other
    kernel does."""
    kernel, n, gs, ls, strides, dims, kinds = plan
    env = {"K": kernel, "Q": rt.queue, "LOCK": rt.launch_lock, "TICK": rt.tick, "G": gs,
           "L": ls, "BOOL": np.bool_}
    args = [data, offset]

    def consts(values):
        for v in values:
            env[f"c{len(env)}"] = v
            args.append(f"c{len(env) - 1}")
    consts([n])
    args.insert(0, args.pop())  # NOTE: n first
    consts(strides[0])
    names = []
    ai = 1
    for i, kind in enumerate(kinds):
        names.append(f"x{i}")
        if kind == "a":
            args += [f"x{i}.data", f"x{i}.offset"]
            consts(strides[ai])
            ai += 1
        else:  # NOTE: pyopencl refuses np.bool_
            args.append(f"(int(x{i}) if type(x{i}) is BOOL else x{i})")
    consts(dims)
    unpack = f"    {', '.join(names)}, = xs\n" if names else ""
    if size > HELD_MAX:
        env["RT"] = rt  # NOTE: rt.lock looked up at each launch: batching may be turned on
        call = f"    with RT.lock:\n        K(Q, G, L, {', '.join(args)})\n"
    else:
        call = f"    with LOCK:\n        K(Q, G, L, {', '.join(args)})\n        TICK()\n"
    return env, unpack, call
