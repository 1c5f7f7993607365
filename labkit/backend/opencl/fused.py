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
