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

from .ndarray import CTYPES, IDX_NP, index_ctype, ndarray
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


#: bytes of kernel arguments a grouped launch may take: OpenCL guarantees 1024
#: (CL_DEVICE_MAX_PARAMETER_SIZE), Theano's fusion hit the limit; a margin for the sizes
ARG_BYTES = 960


def run_many(jobs, *, name: str = "fused"):
    """``run(body, arrays, scalars, writes)`` for each of ``jobs`` (4-tuples), with the jobs
    that share a body, array count, scalars count, writes, dtype and device in one launch per
    group that the argument limit allows: a work-item per element of all of them, each
    computing its own job's body on its own arrays and scalars (the same numbers as ``run``)."""
    groups: dict = {}
    for job in jobs:
        body, arrays, scalars, writes = job
        if arrays[0].size == 0:
            continue
        a0 = arrays[0]
        key = (body, len(arrays), len(scalars), tuple(writes), a0.dtype, a0.rt,
               index_ctype(*arrays))
        groups.setdefault(key, []).append(job)
    for key, members in groups.items():
        body, n_arrays, n_scalars, writes, dt, rt, idx = key
        isz = np.dtype(IDX_NP[idx]).itemsize
        per = n_arrays * (8 + isz) + n_scalars * dt.itemsize + isz
        most = max(1, (ARG_BYTES - isz) // per)
        for k in range(0, len(members), most):
            chunk = members[k:k + most]
            if len(chunk) == 1:
                b, arrays, scalars, w = chunk[0]
                run(b, arrays, scalars, w, name=name)
            else:
                _launch_many(rt, body, n_arrays, n_scalars, writes, dt, idx, chunk, name)


def _launch_many(rt, body, n_arrays, n_scalars, writes, dt, idx, chunk, name):
    ct = CTYPES[dt]
    p = len(chunk)
    key = ("fused_many", body, n_arrays, n_scalars, tuple(writes), ct, idx, p)
    kernel = rt.kernels.get(key)
    if kernel is None:
        kernel = rt.cached(key, lambda: _build_many(rt, body, n_arrays, n_scalars, writes,
                                                    ct, idx, p, name))
    st = dt.type
    ends, total = [], 0
    for _, arrays, _, _ in chunk:
        total += arrays[0].size
        ends.append(total)
    args = [total, *ends[:-1]]
    for _, arrays, scalars, _ in chunk:
        for a in arrays:
            args += (a.data, a.offset)
        args += [st(s) for s in scalars]
    ls = min(256, rt.info.max_work_group_size)
    gs = -(-total // ls) * ls
    with rt.lock:
        kernel(rt.queue, (gs,), (ls,), *args)


def _build_many(rt, body, n_arrays, n_scalars, writes, ct, idx, p, name):
    params = "".join(f", const IDX e{q}" for q in range(1, p))
    blocks = []
    for q in range(p):
        params += "".join(f", __global T* a{q}_{k}, const IDX a{q}_{k}_o"
                          for k in range(n_arrays))
        params += "".join(f", const T s{q}_{k}" for k in range(n_scalars))
        start = f"e{q}" if q else "0"
        lines = [f"const IDX i = g - {start};"]
        lines += [f"const T s{k} = s{q}_{k};" for k in range(n_scalars)]
        lines += [f"const T x{k} = a{q}_{k}[a{q}_{k}_o + i];" for k in range(n_arrays)]
        lines += body.splitlines()
        lines += [f"a{q}_{w}[a{q}_{w}_o + i] = y{j};" for j, w in enumerate(writes)]
        cond = f"if (g < e{q + 1}) " if q < p - 1 else ""
        blocks.append(("else " if q else "") + cond + "{\n" +
                      "\n".join("        " + ln for ln in lines) + "\n    }")
    src = header(rt, (ct,), {"IDX": idx, "T": ct}, what=name) + (
        "#pragma OPENCL FP_CONTRACT OFF\n"
        f"__kernel void fused_many(const IDX n{params})\n{{\n"
        "    const IDX g = (IDX)get_global_id(0);\n    if (g >= n) return;\n    "
        + "\n    ".join(blocks) + "\n}\n")
    types = [IDX_NP[idx]] * p + ([None, IDX_NP[idx]] * n_arrays + [_NP[ct]] * n_scalars) * p
    return kernels(rt, src, {"fused_many": types}, name=f"fused_many:{name}:{p}").fused_many


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
