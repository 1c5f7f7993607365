"""Copies that take their own kernels on an OpenCL device: a transposed matrix copied by
tiles (core.copy: a (128, 512) U.T 95 -> 32 us on PoCL), concatenated pieces as whole vectors
where source and destination are aligned and through vloadN where not (indexing.lk_concat).
Each is bit for bit NumPy's copy, for every dtype family and layout here."""

import numpy as np
import pytest

from labkit.backend import opencl as cp
from labkit.backend.opencl import core


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.int64, np.uint8])
@pytest.mark.parametrize("layout", ["T", "T of a column slice", "T at an offset", "small"])
def test_a_transposed_matrix_is_copied_bit_for_bit(dtype, layout, monkeypatch):
    rng = np.random.default_rng(0)
    m = (rng.standard_normal((70, 50)) * 100).astype(dtype)
    d = cp.asarray(m)
    if layout == "T":
        v, want = d.T, m.T
    elif layout == "T of a column slice":  # NOTE: strides (1, 50): rows of 37 elements
        v, want = d[:, 5:42].T, m[:, 5:42].T
    elif layout == "T at an offset":
        v, want = d[3:, :].T, m[3:, :].T
    else:  # NOTE: under TRANSPOSED_MIN: the elementwise copy
        v, want = d[:6, :7].T, m[:6, :7].T
    seen = []
    real = core.launch
    monkeypatch.setattr(core, "launch", lambda *a, **k: seen.append(a[0]) or real(*a, **k))
    got = cp.copy(v)
    assert got.is_contiguous and got.shape == want.shape
    assert got.get().tobytes() == np.ascontiguousarray(want).tobytes()
    assert ("copy" in seen) == (layout == "small")


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("skip", [0, 1, 16])
def test_concatenated_pieces_aligned_or_not(dtype, skip):
    rng = np.random.default_rng(1)
    parts = [rng.standard_normal((32, 40 + k)).astype(dtype) for k in range(11)]
    devs = []
    for p in parts:  # NOTE: each piece a contiguous view `skip` elements into its buffer
        flat = cp.asarray(np.concatenate([np.zeros(skip, dtype), p.ravel()]))
        devs.append(flat[skip:].reshape(p.shape))
    got = cp.concatenate(devs, axis=1).get()
    assert got.tobytes() == np.concatenate(parts, axis=1).tobytes()
    rows = [rng.standard_normal((3 + k, 48)).astype(dtype) for k in range(10)]
    flat = cp.asarray(np.concatenate([np.zeros(skip, dtype)] + [r.ravel() for r in rows]))
    pos, views = skip, []
    for r in rows:  # NOTE: pieces one after another in one buffer, most of them unaligned
        views.append(flat[pos:pos + r.size].reshape(r.shape))
        pos += r.size
    got = cp.concatenate(views, axis=0)
    assert got.get().tobytes() == np.concatenate(rows, axis=0).tobytes()
