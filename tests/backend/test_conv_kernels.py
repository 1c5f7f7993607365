"""im2col and col2im as OpenCL kernels (labkit/backend/opencl/conv.py) against NumPy
references: every geometry (strides, dilations, rectangular windows), both column layouts,
columns read through any strides, and col2im's sums in the same order as adding the window
slices one by one (bit for bit)."""

import numpy as np
import pytest

from labkit.backend import opencl as cp
from labkit.backend.opencl import conv

GEOMETRIES = [  # (N, C, H, W) padded input, window, stride, dilation
    ((2, 3, 7, 9), (3, 3), (1, 1), (1, 1)),
    ((1, 2, 8, 8), (2, 2), (2, 2), (1, 1)),
    ((2, 1, 9, 11), (3, 2), (2, 3), (2, 1)),
    ((3, 4, 5, 5), (1, 1), (1, 1), (1, 1)),
]


def _out(n, k, s, d):
    return (n - d * (k - 1) - 1) // s + 1


def _ref_im2col(x, k, s, d, cfirst):
    n, c, h, w = x.shape
    oh, ow = _out(h, k[0], s[0], d[0]), _out(w, k[1], s[1], d[1])
    col = np.empty((n, c, k[0], k[1], oh, ow), x.dtype)
    for i in range(k[0]):
        for j in range(k[1]):
            col[:, :, i, j] = x[:, :, i * d[0]: i * d[0] + s[0] * (oh - 1) + 1: s[0],
                                j * d[1]: j * d[1] + s[1] * (ow - 1) + 1: s[1]]
    return col.transpose(1, 2, 3, 0, 4, 5).copy() if cfirst else col


def _ref_col2im(col, k, s, d, shape, cfirst):
    if cfirst:
        col = col.transpose(3, 0, 1, 2, 4, 5)
    oh, ow = col.shape[4:]
    out = np.zeros(shape, col.dtype)
    for i in range(k[0]):
        for j in range(k[1]):
            out[:, :, i * d[0]: i * d[0] + s[0] * (oh - 1) + 1: s[0],
                j * d[1]: j * d[1] + s[1] * (ow - 1) + 1: s[1]] += col[:, :, i, j]
    return out


@pytest.mark.parametrize("shape,k,s,d", GEOMETRIES)
@pytest.mark.parametrize("cfirst", [False, True])
def test_im2col_and_col2im_match_numpy_bit_for_bit(shape, k, s, d, cfirst, rng):
    x = rng.standard_normal(shape).astype(np.float32)
    oh, ow = _out(shape[2], k[0], s[0], d[0]), _out(shape[3], k[1], s[1], d[1])
    col = conv.im2col(cp.asarray(x), k, s, d, (oh, ow), cfirst)
    want = _ref_im2col(x, k, s, d, cfirst)
    np.testing.assert_array_equal(col.get(), want)
    g = rng.standard_normal(want.shape).astype(np.float32)
    back = conv.col2im(cp.asarray(g), k, s, d, shape, cfirst)
    np.testing.assert_array_equal(back.get(), _ref_col2im(g, k, s, d, shape, cfirst))


def test_col2im_reads_columns_through_their_strides(rng):
    shape, k, s, d = GEOMETRIES[2]
    oh, ow = _out(shape[2], k[0], s[0], d[0]), _out(shape[3], k[1], s[1], d[1])
    full = rng.standard_normal((oh, ow, shape[0], shape[1], k[0], k[1], 2)).astype(np.float32)
    h = full[..., 1].transpose(2, 3, 4, 5, 0, 1)  # (N, C, kh, kw, OH, OW), no unit stride
    dev = cp.asarray(full)[..., 1].transpose(2, 3, 4, 5, 0, 1)
    assert not dev.is_contiguous
    got = conv.col2im(dev, k, s, d, shape, cfirst=False)
    np.testing.assert_array_equal(got.get(), _ref_col2im(np.ascontiguousarray(h), k, s, d,
                                                          shape, False))


def test_im2col_of_a_view_and_of_float64(rng):
    from labkit.backend.opencl import runtime

    if not runtime(0).info.fp64:
        pytest.skip("this OpenCL device has no float64")
    x = rng.standard_normal((2, 3, 6, 6))
    d = cp.asarray(x)[:, :, ::-1]  # a reversed view: copied to contiguous first
    np.testing.assert_array_equal(conv.im2col(d, (3, 3), (1, 1), (1, 1), (4, 4), True).get(),
                                  _ref_im2col(x[:, :, ::-1], (3, 3), (1, 1), (1, 1), True))


PADDED = [  # (N, C, H, W) before padding, window, stride, dilation, padding
    ((2, 3, 7, 9), (3, 3), (1, 1), (1, 1), (1, 1)),
    ((2, 1, 9, 11), (3, 2), (2, 3), (2, 1), (2, 1)),
    ((1, 2, 5, 6), (5, 5), (1, 2), (1, 1), (2, 0)),
    ((2, 2, 4, 2), (3, 3), (1, 1), (1, 2), (1, 3)),  # windows wholly in the padding
    ((3, 2, 6, 13), (3, 3), (1, 1), (1, 1), (1, 1)),  # a row longer than a vector
]


def _layouts(x):
    """``x`` on the device as it is, laid out (C, N, H, W) (a convolution's output) and as a
    reversed view: im2col reads each through its strides."""
    yield "nchw", x, cp.asarray(x)
    yield "cnhw", x, cp.asarray(np.ascontiguousarray(x.transpose(1, 0, 2, 3))).transpose(
        1, 0, 2, 3)
    yield "reversed", x[:, :, ::-1], cp.asarray(x)[:, :, ::-1]
    yield "reversed x", x[:, :, :, ::-1], cp.asarray(x)[:, :, :, ::-1]


@pytest.mark.parametrize("shape,k,s,d,p", PADDED)
@pytest.mark.parametrize("cfirst", [False, True])
def test_padding_inside_the_kernels_matches_a_padded_copy_bit_for_bit(shape, k, s, d, p, cfirst,
                                                                      rng):
    x = rng.standard_normal(shape).astype(np.float32)
    x[0, 0, 0, :2] = [np.nan, -0.0]
    n, c, h, w = shape
    hp, wp = h + 2 * p[0], w + 2 * p[1]
    oh, ow = _out(hp, k[0], s[0], d[0]), _out(wp, k[1], s[1], d[1])
    for name, host, dev in _layouts(x):
        padded = np.pad(host, ((0, 0), (0, 0), (p[0], p[0]), (p[1], p[1])))
        got = conv.im2col(dev, k, s, d, (oh, ow), cfirst, pad=p).get()
        want = _ref_im2col(padded, k, s, d, cfirst)
        assert np.array_equal(got.view(np.uint32), want.view(np.uint32)), name
    g = rng.standard_normal(want.shape).astype(np.float32)
    full = _ref_col2im(g, k, s, d, (n, c, hp, wp), cfirst)
    crop = full[:, :, p[0]:p[0] + h, p[1]:p[1] + w]
    for cnhw in (False, True):
        back = conv.col2im(cp.asarray(g), k, s, d, shape, cfirst, pad=p, cnhw=cnhw)
        assert back.shape == shape
        assert (back.transpose(1, 0, 2, 3).is_contiguous if cnhw else back.is_contiguous)
        np.testing.assert_array_equal(back.get(), crop)


def test_col2im_reads_columns_through_negative_strides(rng):
    """A reversed view's offsets run backwards: a row's start in col may be anywhere."""
    shape, k, s, d = GEOMETRIES[0]
    oh, ow = _out(shape[2], k[0], s[0], d[0]), _out(shape[3], k[1], s[1], d[1])
    g = rng.standard_normal((shape[0], shape[1], k[0], k[1], oh, ow)).astype(np.float32)
    dev = cp.asarray(np.ascontiguousarray(g[::-1, :, ::-1]))[::-1, :, ::-1]
    assert any(st < 0 for st in dev._st)
    got = conv.col2im(dev, k, s, d, shape, cfirst=False)
    np.testing.assert_array_equal(got.get(), _ref_col2im(g, k, s, d, shape, False))


@pytest.mark.parametrize("rows", [1, 2, 5])
def test_any_number_of_rows_per_work_item_gives_the_same_bits(rows, rng, monkeypatch):
    """A work-item takes a whole plane on a CPU device with many planes, fewer rows when the
    planes are few, and one row on other devices (conv._rows): the same results each way."""
    x = rng.standard_normal((2, 3, 7, 9)).astype(np.float32)
    k, s, d, p = (3, 3), (1, 1), (1, 1), (1, 1)
    want = conv.im2col(cp.asarray(x), k, s, d, (7, 9), True, pad=p).get()
    g = cp.asarray(rng.standard_normal(want.shape).astype(np.float32))
    back = conv.col2im(g, k, s, d, x.shape, True, pad=p, cnhw=True).get()
    monkeypatch.setattr(conv, "_rows", lambda rt, planes, h: rows)
    assert np.array_equal(conv.im2col(cp.asarray(x), k, s, d, (7, 9), True, pad=p).get(), want)
    assert np.array_equal(conv.col2im(g, k, s, d, x.shape, True, pad=p, cnhw=True).get(), back)


def test_rows_per_work_item_keep_every_compute_unit_busy():
    from types import SimpleNamespace as NS

    cpu, gpu = NS(info=NS(is_cpu=True, compute_units=2)), NS(info=NS(is_cpu=False))
    real = conv._rows
    assert real(cpu, 2048, 14) == 14        # many planes: a plane each
    assert real(cpu, 3, 224) == 42          # three planes: 16 work-items
    assert real(cpu, 1, 5) == 1
    assert real(gpu, 2048, 14) == 1         # a GPU: a row each
