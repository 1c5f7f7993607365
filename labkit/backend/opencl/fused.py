"""Fused kernels: several elementwise results of the same contiguous arrays in one launch.

``run`` takes a body of OpenCL statements over loads ``x0, x1, ...`` (one element of each
array) and scalars ``s0, s1, ...``, and stores its results ``y0, y1, ...`` into some of the
same arrays, in place. An optimizer's update of one parameter (its moments and the parameter)
is one such kernel instead of a dozen; ``lk.compile`` fuses chains of elementwise ops with it.

Floating-point contraction is off (``FP_CONTRACT OFF``), so ``a * b + c`` rounds twice, as the
separate kernels it replaces do: a fused result is the same number as the unfused one on the
same device.
"""

from __future__ import annotations

import numpy as np

from .ndarray import CTYPES, IDX_NP, check_writeable, index_ctype, ndarray
from .program import header, kernels

_FRAME = """#pragma OPENCL FP_CONTRACT OFF
__kernel void fused(const IDX n{params})
{{
    const IDX i = (IDX)get_global_id(0);
    if (i >= n) return;
{loads}
{body}
{stores}
}}
"""


def fits(*arrays) -> bool:
    """Whether ``arrays`` can go to one fused kernel: OpenCL arrays of one device, one float
    dtype and one shape, all contiguous."""
    a0 = arrays[0]
    if not isinstance(a0, ndarray) or a0.dtype.kind != "f":
        return False
    for a in arrays:
        if (not isinstance(a, ndarray) or a.rt is not a0.rt or a.dtype != a0.dtype
                or a.shape != a0.shape or not a.is_contiguous):
            return False
    return True


def run(body: str, arrays, scalars, writes, *, name: str = "fused"):
    """Run ``body`` once per element of ``arrays`` (which must pass :func:`fits`); ``y{j}``
    of the body is stored into ``arrays[writes[j]]``. ``scalars`` are passed as the arrays'
    type. Returns nothing: the results are in the arrays."""
    for j in set(writes):
        check_writeable(arrays[j], name)
    a0 = arrays[0]
    n = a0.size
    if n == 0:
        return
    rt = a0.rt
    ct = CTYPES[a0.dtype]
    idx = index_ctype(*arrays)
    key = ("fused", body, len(arrays), len(scalars), tuple(writes), ct, idx)
    kernel = rt.kernels.get(key)
    if kernel is None:
        kernel = rt.cached(key, lambda: _build(rt, body, len(arrays), len(scalars), writes,
                                               ct, idx, name))
    st = a0.dtype.type
    args = [n]
    for a in arrays:
        args += (a.data, a.offset)
    args += [st(s) for s in scalars]
    ls = min(256, rt.info.max_work_group_size)
    gs = -(-n // ls) * ls
    with rt.lock:
        kernel(rt.queue, (gs,), (ls,), *args)


def _build(rt, body, n_arrays, n_scalars, writes, ct, idx, name):
    params = "".join(f", __global T* a{k}, const IDX a{k}_o" for k in range(n_arrays))
    params += "".join(f", const T s{k}" for k in range(n_scalars))
    loads = "\n".join(f"    const T x{k} = a{k}[a{k}_o + i];" for k in range(n_arrays))
    stores = "\n".join(f"    a{w}[a{w}_o + i] = y{j};" for j, w in enumerate(writes))
    body = "\n".join("    " + line for line in body.splitlines())
    src = header(rt, (ct,), {"IDX": idx, "T": ct}, what=name) + _FRAME.format(
        params=params, loads=loads, body=body, stores=stores)
    types = [IDX_NP[idx]] + [None, IDX_NP[idx]] * n_arrays + [_NP[ct]] * n_scalars
    return kernels(rt, src, {"fused": types}, name=f"fused:{name}").fused


_NP = {"float": np.float32, "double": np.float64}


#: the most parameters one ``run_many`` launch takes (kernel arguments: 5 each)
MANY = 8
#: ``run_many`` gives a group of this many elements or more a launch of its own: PoCL makes
#: vectors of a work-group's items in ``run``'s kernel but not in ``run_many``'s, whose items
#: find their group down a chain of ifs (an MLP's SGD update, 670k elements in 6 groups:
#: 839 us in one launch, 222 us in 6; about 0.9 ns an element against a launch's 10-20 us of
#: host time)
ALONE = 16384


def run_many(body: str, groups, scalars, writes, *, name: str = "fused") -> None:
    """:func:`run` over several groups of arrays at once: ``groups[k]`` (arrays passing
    :func:`fits`, the same number and dtype in every group) with its own ``scalars[k]``, one
    launch for up to ``MANY`` groups (an optimizer's update of a model's parameters: one
    launch instead of one each), and one of its own for a group of ``ALONE`` elements or
    more. Each element gets the same statements as from ``run``, so the same bits."""
    small = []
    for g, s in zip(groups, scalars):
        if g[0].size >= ALONE:
            run(body, g, s, writes, name=name)
        elif g[0].size:
            small.append((g, s))
    groups = small
    for at in range(0, len(groups), MANY):
        part = groups[at:at + MANY]
        if len(part) == 1:
            run(body, part[0][0], part[0][1], writes, name=name)
            continue
        for g, _ in part:
            for j in set(writes):
                check_writeable(g[j], name)
        a0 = part[0][0][0]
        rt, ct = a0.rt, CTYPES[a0.dtype]
        n_arrays, n_scalars = len(part[0][0]), len(part[0][1])
        idx = index_ctype(*(a for g, _ in part for a in g))
        key = ("fused_many", body, len(part), n_arrays, n_scalars, tuple(writes), ct, idx)
        kernel = rt.kernels.get(key)
        if kernel is None:
            made = (rt, body, len(part), n_arrays, n_scalars, writes, ct, idx, name)
            kernel = rt.cached(key, lambda made=made: _build_many(*made))
        st = a0.dtype.type
        args = []
        for g, s in part:
            args.append(g[0].size)
            for a in g:
                args += (a.data, a.offset)
            args += [st(v) for v in s]
        ls = min(256, rt.info.max_work_group_size)
        total = sum(g[0].size for g, _ in part)
        with rt.lock:
            kernel(rt.queue, (-(-total // ls) * ls,), (ls,), *args)


def _build_many(rt, body, n_groups, n_arrays, n_scalars, writes, ct, idx, name):
    params, blocks = [], []
    inner = "\n".join("        " + line for line in body.splitlines())
    for k in range(n_groups):
        params.append(f"const IDX n{k}")
        params += [f"__global T* a{k}_{j}, const IDX a{k}_{j}_o" for j in range(n_arrays)]
        params += [f"const T s{k}_{j}" for j in range(n_scalars)]
        loads = "\n".join(f"        const T x{j} = a{k}_{j}[a{k}_{j}_o + i];"
                          for j in range(n_arrays))
        scal = "\n".join(f"        const T s{j} = s{k}_{j};" for j in range(n_scalars))
        stores = "\n".join(f"        a{k}_{w}[a{k}_{w}_o + i] = y{j};"
                           for j, w in enumerate(writes))
        blocks.append(f"    if (i < n{k}) {{\n{loads}\n{scal}\n{inner}\n{stores}\n"
                      f"        return;\n    }}\n    i -= n{k};")
    src = header(rt, (ct,), {"IDX": idx, "T": ct}, what=name) + (
        "#pragma OPENCL FP_CONTRACT OFF\n__kernel void fused_many(" + ", ".join(params)
        + ")\n{\n    IDX i = (IDX)get_global_id(0);\n" + "\n".join(blocks) + "\n}\n")
    one = [IDX_NP[idx]] + [None, IDX_NP[idx]] * n_arrays + [_NP[ct]] * n_scalars
    return kernels(rt, src, {"fused_many": one * n_groups},
                   name=f"fused_many:{name}").fused_many
