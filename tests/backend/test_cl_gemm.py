import numpy as np
import pytest

import labkit as lk
from labkit.backend import opencl as cp

from .helpers import check

SHAPES = [(1, 1, 1), (7, 13, 5), (64, 64, 64), (33, 100, 65), (128, 256, 96),
          (256, 130, 250), (8, 32, 32), (65, 257, 129)]


def ref(a, b):
    return (a.astype(np.float64) @ b.astype(np.float64)).astype(np.result_type(a, b))


@pytest.mark.parametrize("m,k,n", SHAPES, ids=str)
@pytest.mark.parametrize("layout", ["nn", "tn", "nt", "tt"])
def test_matmul_2d_any_layout(m, k, n, layout, rng):
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    da = cp.asarray(a) if layout[0] == "n" else cp.asarray(np.ascontiguousarray(a.T)).T
    db = cp.asarray(b) if layout[1] == "n" else cp.asarray(np.ascontiguousarray(b.T)).T
    check(da @ db, ref(a, b), rtol=1e-4, atol=1e-4 * np.sqrt(k))


def test_matmul_on_offset_and_stepped_views(rng):
    a = rng.standard_normal((70, 90)).astype(np.float32)
    b = rng.standard_normal((90, 80)).astype(np.float32)
    da, db = cp.asarray(a), cp.asarray(b)
    check(da[3:, 5:67] @ db[5:67, 1:], ref(a[3:, 5:67], b[5:67, 1:]), rtol=1e-4, atol=1e-4)
    check(da[::2, ::3] @ db[::3, ::2], ref(a[::2, ::3], b[::3, ::2]), rtol=1e-4, atol=1e-4)


def test_matmul_batched_and_broadcast(rng):
    a = rng.standard_normal((4, 16, 32)).astype(np.float32)
    b = rng.standard_normal((4, 32, 40)).astype(np.float32)
    check(cp.asarray(a) @ cp.asarray(b), ref(a, b), rtol=1e-4, atol=1e-4)
    a = rng.standard_normal((2, 1, 8, 9)).astype(np.float32)
    b = rng.standard_normal((3, 9, 4)).astype(np.float32)
    check(cp.asarray(a) @ cp.asarray(b), ref(a, b), rtol=1e-4, atol=1e-4)
    w = rng.standard_normal((32, 64)).astype(np.float32)  # a weight shared by the batch
    x = rng.standard_normal((5, 70, 32)).astype(np.float32)
    check(cp.asarray(x) @ cp.asarray(w), ref(x, w), rtol=1e-4, atol=1e-4)
    t = cp.asarray(np.ascontiguousarray(x.transpose(0, 2, 1))).transpose(0, 2, 1)
    check(t @ cp.asarray(w), ref(x, w), rtol=1e-4, atol=1e-4)


def test_matmul_vectors_dtypes_and_empty(rng):
    a = rng.standard_normal((5, 6))
    v = rng.standard_normal(6)
    check(cp.asarray(a) @ cp.asarray(v), a @ v, rtol=1e-12)  # float64
    check(cp.asarray(v) @ cp.asarray(a.T), v @ a.T, rtol=1e-12)
    check(cp.asarray(v) @ cp.asarray(v), v @ v, rtol=1e-12)
    i = rng.integers(-3, 3, (4, 5)).astype(np.int32)
    check(cp.asarray(i) @ cp.asarray(i.T), i @ i.T)
    check(cp.asarray(i.astype(np.float32)) @ cp.asarray(i.T), i.astype(np.float32) @ i.T)
    check(cp.zeros((3, 0)) @ cp.zeros((0, 4)), np.zeros((3, 4), np.float32))
    check(cp.zeros((0, 3)) @ cp.zeros((3, 4)), np.zeros((0, 4), np.float32))


def test_large_matmul(rng):
    n = 1024
    a = rng.standard_normal((n, n)).astype(np.float32)
    b = rng.standard_normal((n, n)).astype(np.float32)
    check(cp.asarray(a) @ cp.asarray(b), ref(a, b), rtol=1e-3, atol=2e-3)


def test_every_tuned_blocking_is_correct(rng, monkeypatch):
    from labkit.backend.opencl.gemm import CANDIDATES

    a = rng.standard_normal((100, 77)).astype(np.float32)
    b = rng.standard_normal((77, 120)).astype(np.float32)
    for cfg in CANDIDATES["float"]:
        monkeypatch.setenv("LABKIT_GEMM_CONFIG", ",".join(map(str, cfg)))
        check(cp.asarray(a) @ cp.asarray(b), ref(a, b), rtol=1e-4, atol=1e-4)


def test_matmul_shape_error_names_both_shapes():
    with pytest.raises(lk.ShapeError, match=r"matmul: a has 4 columns but b has 5 rows "
                                            r"\(a.shape=\(3, 4\), b.shape=\(5, 2\)\)"):
        cp.ones((3, 4)) @ cp.ones((5, 2))
    with pytest.raises(lk.ShapeError, match="batch"):
        cp.ones((2, 3, 4)) @ cp.ones((3, 4, 2))
