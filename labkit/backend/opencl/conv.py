"""im2col and col2im as kernels (kernels_cl/conv.cl): the windows of a convolution or a pooling
and their adjoint, one launch each. The functions Im2Col, Col2Im and Conv2d
(labkit/functions/connection.py) call these on OpenCL arrays; composed, im2col was a 6-D
strided copy and col2im one strided add per window offset (nine for a 3x3 window).

Both take the padding: im2col reads zeros outside the input (no padded copy of it) and
col2im returns the unpadded part, the data gradient of a convolution.
"""

from __future__ import annotations

from .ndarray import CTYPES, IDX_NP, index_ctype, ndarray
from .program import header, kernels, source


def _kernel(rt, kname, ct, idx, geometry, cfirst, signature, cnhw=False):
    (kh, kw), (sh, sw), (dh, dw), (ph, pw), (oh, ow), (h, w) = geometry
    key = ("conv", kname, ct, idx, geometry, cfirst, cnhw)

    def make():
        defs = {"T": ct, "IDX": idx, "KH": kh, "KW": kw, "SH": sh, "SW": sw, "DH": dh,
                "DW": dw, "PH": ph, "PW": pw, "OH": oh, "OW": ow, "H": h, "W": w,
                "CFIRST": int(cfirst), "OUT_CNHW": int(cnhw), "ROW_SUMS": int(rt.info.is_cpu)}
        src = header(rt, (ct,), defs, what=kname) + source("conv")
        return getattr(kernels(rt, src, {kname: signature}, name=f"conv.cl:{kname}"), kname)
    return rt.cached(key, make)


def _rows(rt, planes, h):
    """Rows of a plane per work-item: on a CPU device a whole plane (the index arithmetic once
    per plane), unless that leaves fewer than 8 work-items per compute unit; elsewhere one."""
    if not rt.info.is_cpu:
        return 1
    return max(1, min(h, planes * h // (8 * rt.info.compute_units)))


def _launch(rt, kernel, planes, h, *args):
    """A work-item per ``_rows`` rows of each of ``planes`` planes of ``h`` rows."""
    rows = _rows(rt, planes, h)
    total = planes * -(-h // rows)
    ls = min(256, rt.info.max_work_group_size)
    with rt.lock:
        kernel(rt.queue, (-(-total // ls) * ls,), (ls,), total, rows, *args)


def im2col(x, k, s, d, out_hw, cfirst=False, pad=(0, 0)) -> ndarray:
    """Windows of ``x`` (N, C, H, W), read through its strides, zero-padded by ``pad`` on each
    side: (C, kh, kw, N, OH, OW) with ``cfirst``, else (N, C, kh, kw, OH, OW)."""
    n, c, h, w = x.shape
    (kh, kw), (oh, ow) = k, out_hw
    shape = (c, kh, kw, n, oh, ow) if cfirst else (n, c, kh, kw, oh, ow)
    out = ndarray(x.rt, shape, x.dtype)
    if out.size == 0:
        return out
    idx = index_ctype(x, out)
    it = IDX_NP[idx]
    kernel = _kernel(x.rt, "lk_im2col", CTYPES[x.dtype], idx,
                     (tuple(k), tuple(s), tuple(d), tuple(pad), tuple(out_hw), (h, w)), cfirst,
                     [it, it, it, it, None, None, it, it, it, it, it])
    _launch(x.rt, kernel, out.size // (oh * ow), oh, n, c, out.data, x.data, x.offset,
            *x._st)
    return out


def col2im(col, k, s, d, shape, cfirst=False, pad=(0, 0), cnhw=False) -> ndarray:
    """The adjoint of ``im2col``: the windows in ``col`` summed back into ``shape`` (N, C, H,
    W; before padding), each element gathering the windows that cover it in a fixed order.
    With ``cnhw`` the result is laid out (C, N, H, W) in memory (a transposed view)."""
    n, c, h, w = shape
    mem = (c, n, h, w) if cnhw else (n, c, h, w)
    out = ndarray(col.rt, mem, col.dtype)
    if out.size == 0:
        return out.transpose(1, 0, 2, 3) if cnhw else out
    oh, ow = col.shape[4], col.shape[5]
    idx = index_ctype(col, out)
    it = IDX_NP[idx]
    kernel = _kernel(col.rt, "lk_col2im", CTYPES[col.dtype], idx,
                     (tuple(k), tuple(s), tuple(d), tuple(pad), (oh, ow), (h, w)), cfirst,
                     [it, it, it, it, None, None, it] + [it] * 6, cnhw)
    _launch(col.rt, kernel, out.size // (h * w), h, n, c, out.data, col.data, col.offset,
            *col._st)
    return out.transpose(1, 0, 2, 3) if cnhw else out
