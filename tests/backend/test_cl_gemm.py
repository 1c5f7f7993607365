import json

import numpy as np
import pytest

import labkit as lk
from labkit.backend import opencl as cp

from .helpers import check

SHAPES = [(1, 1, 1), (7, 13, 5), (64, 64, 64), (33, 100, 65), (128, 256, 96),
          (256, 130, 250), (8, 32, 32), (65, 257, 129), (32, 784, 512),
          (1, 512, 784), (1, 96, 48),  # x @ W.T (32, 784, 512); batch 1: gemv and dot paths
          (32, 128, 512), (512, 128, 32)]  # an LSTM step's h @ U.T: a small B transposed


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


# ---- tuning: only OpenCL failures skip a candidate; failed tunings are never cached --------------
@pytest.fixture
def fresh(monkeypatch, tmp_path):
    """A runtime that has tuned nothing, a cache dir of its own, and no forced blocking."""
    from labkit.backend.opencl.context import Runtime, probe

    monkeypatch.setenv("LABKIT_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("LABKIT_GEMM_CONFIG", raising=False)
    return Runtime(*probe()[0]), tmp_path / "kernels" / "gemm-tuning.json"


def _fake_matmul(fail, monkeypatch):
    """A stand-in for the timed product: raises ``fail(cfg)`` when that is not None, else
    takes exactly 2 ms of a fake clock. (On the real clock an empty call's timings are all
    noise, and a choice from noisy timings is, rightly, not stored: the tests of storing
    failed so on a busy CI machine.)"""
    from labkit.backend.opencl import gemm

    clock = [0.0]
    monkeypatch.setattr(gemm.time, "perf_counter", lambda: clock[0])

    def matmul2(a, b, cfg=None):
        err = fail(cfg)
        if err is not None:
            raise err
        clock[0] += 0.002
    return matmul2


def test_a_programming_error_while_tuning_propagates_and_stores_nothing(fresh, monkeypatch):
    from labkit.backend.opencl import gemm

    rt, path = fresh
    monkeypatch.setattr(gemm, "_matmul2", _fake_matmul(lambda cfg: TypeError("a bug"), monkeypatch))
    with pytest.raises(TypeError, match="a bug"):
        gemm.config(rt, "float")
    assert not path.exists() and not rt.tuned


def test_opencl_failures_skip_candidates_and_an_all_failed_tuning_is_not_cached(fresh,
                                                                                monkeypatch):
    import pyopencl as cl

    from labkit.backend.opencl import gemm

    rt, path = fresh
    monkeypatch.setattr(gemm, "_matmul2", _fake_matmul(
        lambda cfg: cl.RuntimeError("CL_OUT_OF_RESOURCES"), monkeypatch))
    with pytest.warns(RuntimeWarning, match="no GEMM blocking could run.*without caching"):
        assert gemm.config(rt, "float") == gemm.DEFAULT["float"]
    assert not path.exists()  # the next process tunes again
    # the candidates that fail are skipped, the others timed, and the choice is stored
    ok = gemm.CANDIDATES["float"][1]
    monkeypatch.setattr(gemm, "_matmul2", _fake_matmul(
        lambda cfg: None if cfg == ok else lk.KernelBuildError(
            "too many registers", device="cl:0", log="", source_name="gemm.cl"), monkeypatch))
    rt.tuned.clear()
    assert gemm.config(rt, "float") == ok
    (entry,) = json.loads(path.read_text()).values()
    assert entry["config"] == list(ok) and list(entry["ms"]) == [",".join(map(str, ok))]


def test_the_tuning_file_is_written_atomically_and_keeps_other_devices(fresh, monkeypatch):
    from labkit.backend.opencl import gemm

    rt, path = fresh
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"other|device|float": {"config": [4, 2, 16], "ms": {}}}))
    # a file in the way of a fixed temporary name (another process writing) does not matter
    (path.parent / "gemm-tuning.tmp").mkdir()
    writes = []
    real = gemm.atomic_write
    monkeypatch.setattr(gemm, "atomic_write", lambda p, data: writes.append(p) or real(p, data))
    monkeypatch.setattr(gemm, "_matmul2", _fake_matmul(lambda cfg: None, monkeypatch))
    cfg = gemm.config(rt, "float")
    assert writes == [path]
    stored = json.loads(path.read_text())
    assert stored["other|device|float"]["config"] == [4, 2, 16]
    key = gemm.tuning_key(rt, "float", 1024)
    assert tuple(stored[key]["config"]) == cfg
    assert not [p for p in path.parent.iterdir() if p.name.startswith(".labkit-tmp-")]
    # a damaged entry is tuned again, not trusted
    stored[key]["config"] = [8, 2]
    path.write_text(json.dumps(stored))
    rt.tuned.clear()
    tunings = []
    monkeypatch.setattr(gemm, "tune", lambda rt, ct, n: tunings.append((ct, n)) or (
        (4, 1, 16), {"4,1,16": 1.0}))
    assert gemm.config(rt, "float") == (4, 1, 16) and tunings == [("float", 1024)]
    assert json.loads(path.read_text())[key]["config"] == [4, 1, 16]


# ---- size classes: each tuned on its own size, noisy choices kept in memory only --------------
def test_size_classes_pick_the_nearest_tuning_size_in_log_scale():
    from labkit.backend.opencl.gemm import TUNING_SIZES, size_class

    assert TUNING_SIZES == (512, 1024, 2048)
    assert size_class(100, 77, 120) == 512
    assert size_class(700, 700, 700) == 512 and size_class(760, 760, 760) == 1024
    assert size_class(1024, 1024, 1024) == 1024 and size_class(1400, 1400, 1400) == 1024
    assert size_class(1500, 1500, 1500) == 2048 and size_class(8192, 8192, 8192) == 2048
    assert size_class(64, 4096, 4096) == 1024  # the geometric mean side decides


def test_each_size_class_is_tuned_once_and_stored_under_its_own_key(fresh, monkeypatch):
    from labkit.backend.opencl import gemm

    rt, path = fresh
    chosen = {512: (4, 2, 16), 2048: (8, 1, 16)}
    tunings = []
    monkeypatch.setattr(gemm, "tune", lambda rt, ct, n: tunings.append(n) or (
        chosen[n], {",".join(map(str, chosen[n])): 1.0}))
    assert gemm.config(rt, "float", (100, 100, 100)) == (4, 2, 16)
    assert gemm.config(rt, "float", (2000, 2000, 2000)) == (8, 1, 16)
    assert gemm.config(rt, "float", (300, 300, 300)) == (4, 2, 16)  # in memory: not again
    assert tunings == [512, 2048]
    stored = json.loads(path.read_text())
    assert stored[gemm.tuning_key(rt, "float", 512)]["config"] == [4, 2, 16]
    assert stored[gemm.tuning_key(rt, "float", 2048)]["config"] == [8, 1, 16]


def test_a_choice_from_noisy_timings_is_used_but_not_stored(fresh, monkeypatch):
    from labkit.backend.opencl import gemm

    rt, path = fresh
    monkeypatch.setattr(gemm, "tune", lambda rt, ct, n: ((4, 1, 16),
                                                         {"4,1,16": 1.0, "noisy": True}))
    assert gemm.config(rt, "float", (512, 512, 512)) == (4, 1, 16)
    assert not path.exists()  # the next process tunes again


def test_tuning_repeats_each_candidate_and_separates_a_near_tie(fresh, monkeypatch):
    """The timed product is replaced by one whose cost per blocking is known: the winner is
    the cheapest, every candidate is run more than once, and the two nearest are re-timed."""
    from labkit.backend.opencl import gemm

    rt, _ = fresh
    cost = {cfg: 0.002 + 0.0001 * i for i, cfg in enumerate(gemm.CANDIDATES["float"])}
    cost[(6, 2, 16)] = 0.00195  # within 5% of the cheapest other: a near tie
    calls = []
    clock = [0.0]
    monkeypatch.setattr(gemm.time, "perf_counter", lambda: clock[0])

    def matmul2(a, b, cfg=None):
        calls.append(cfg)
        clock[0] += cost[cfg]
    monkeypatch.setattr(gemm, "_matmul2", matmul2)
    cfg, timings = gemm.tune(rt, "float", 512)
    assert cfg == (6, 2, 16) and "noisy" not in timings
    assert all(calls.count(c) >= 4 for c in cost)  # an untimed build run + 3 timed at least
    # the near tie was re-timed: the two best ran more often than the rest
    assert calls.count((6, 2, 16)) > calls.count((4, 2, 16))
    assert calls.count((8, 2, 16)) > calls.count((4, 2, 16))


# ---- few outputs, long K, both operands contiguous along K: dot products over K slices -------
@pytest.mark.parametrize("m,n,k", [(32, 9, 50176), (64, 10, 3136), (1, 1, 1024), (7, 5, 1031),
                                   (64, 64, 4099)])
def test_dot_products_over_k_slices_match_numpy(m, n, k, rng, monkeypatch):
    from labkit.backend.opencl import gemm

    calls = []
    real = gemm._gemm_dot
    monkeypatch.setattr(gemm, "_gemm_dot", lambda *a: calls.append(a[2:5]) or real(*a))
    a = rng.standard_normal((m, k)).astype(np.float32)
    bt = rng.standard_normal((n, k)).astype(np.float32)
    got = cp.asarray(a) @ cp.asarray(bt).T  # B column-major: a weight gradient's layout
    check(got, ref(a, bt.T), rtol=1e-4, atol=1e-3 * np.sqrt(k))
    on_cpu = cp.asarray(a).rt.info.is_cpu
    assert calls == ([(m, n, k)] if on_cpu else [])


@pytest.mark.parametrize("m,n,k,layout,want", [
    (32, 10, 512, "nt", "dot"),       # a classifier's h @ W.T
    (8, 64, 128, "nt", "dot"),
    (8, 10, 32, "nt", "gen"),         # below the dot products' range: the plain kernel
    (32, 10, 512, "nn", "blocked"),   # C.T = B.T @ A.T, blocked
    (32, 512, 10, "nn", "blocked"),   # a classifier's input gradient gz @ W
    (10, 512, 32, "tn", "blocked"),   # and its weight gradient gz.T @ h
    (32, 64, 16, "nn", "gen"),        # fewer multiply-adds than _FAST_MIN_WORK
])
def test_small_products_take_the_kernel_that_suits_them(m, n, k, layout, want, rng,
                                                        monkeypatch):
    """Products too small for the blocked kernel's fixed cost take the plain one; from
    _FAST_MIN_WORK on the blocked one, and with both operands contiguous along K (from
    _DOT_SMALL_K on) the dot products: the plain kernel took 106 us for the first."""
    from labkit.backend.opencl import gemm

    ran = []  # NOTE: the kernels that really ran: dot products, register blocks, gemm_gen
    real_dot, real_blocked, real_program = gemm._gemm_dot, gemm._blocked, gemm._program
    monkeypatch.setattr(gemm, "_gemm_dot", lambda *a: ran.append("dot") or real_dot(*a))
    monkeypatch.setattr(gemm, "_blocked", lambda *a: ran.append("blocked") or real_blocked(*a))

    class Spy:
        def __init__(self, prg):
            self.prg, self.gemm_rb = prg, getattr(prg, "gemm_rb", None)

        def gemm_gen(self, *a):
            ran.append("gen")
            return self.prg.gemm_gen(*a)

    monkeypatch.setattr(gemm, "_program", lambda *a, **kw: Spy(real_program(*a, **kw)))
    a = rng.standard_normal((k, m) if layout == "tn" else (m, k)).astype(np.float32)
    b = rng.standard_normal((n, k) if layout == "nt" else (k, n)).astype(np.float32)
    da, db = cp.asarray(a), cp.asarray(b)
    da, a = (da.T, a.T) if layout == "tn" else (da, a)
    db, b = (db.T, b.T) if layout == "nt" else (db, b)
    check(da @ db, ref(a, b), rtol=1e-4, atol=1e-4 * np.sqrt(k))
    if da.rt.info.is_cpu:
        assert set(ran) == {want}, ran


def test_dot_products_read_views_at_offsets_and_float64(rng):
    from labkit.backend.opencl import runtime

    a = rng.standard_normal((5, 3000))
    b = rng.standard_normal((3000, 4))
    da = cp.asarray(np.concatenate([np.zeros((1, 3000)), a]))[1:]  # an offset view
    db = cp.asarray(np.ascontiguousarray(b.T)).T
    if runtime(0).info.fp64:
        check(da @ db, a @ b, rtol=1e-12, atol=1e-10)
    check(da.astype(np.float32) @ db.astype(np.float32),
          (a.astype(np.float32) @ b.astype(np.float32)), rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("m,k,n", [(512, 256, 784), (256, 512, 10), (9, 300, 784),
                                   (100, 128, 33), (5, 640, 48), (300, 80, 17)])
@pytest.mark.parametrize("layout", ["nn", "nt", "tn"])
def test_edges_run_blocked_and_match_numpy(m, k, n, layout, rng, monkeypatch):
    """The rows under the register blocks (fewer than RM) and the columns right of them
    (fewer than a panel) run as blocks too, and a product with fewer columns than a vector
    as its transpose: per-element gemm_gen is left only the columns past the last whole
    vector. Each with a bias and relu, against NumPy."""
    from labkit.backend.opencl import gemm

    monkeypatch.setenv("LABKIT_GEMM_CONFIG", "8,2,16")
    gen = []
    real = gemm._program

    class Spy:
        def __init__(self, prg):
            self.prg = prg
            self.gemm_rb = getattr(prg, "gemm_rb", None)

        def gemm_gen(self, q, gs, *a):
            gen.append(gs)
            return self.prg.gemm_gen(q, gs, *a)

    monkeypatch.setattr(gemm, "_program", lambda *a, **kw: Spy(real(*a, **kw)))
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    da = cp.asarray(np.ascontiguousarray(a.T)).T if layout == "tn" else cp.asarray(a)
    db = cp.asarray(np.ascontiguousarray(b.T)).T if layout == "nt" else cp.asarray(b)
    bias = rng.standard_normal(n).astype(np.float32)
    got = gemm.linear(da, db, cp.asarray(bias), axis=1, relu=True).get()
    want = np.maximum(a.astype(np.float64) @ b + bias, 0)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * np.sqrt(k))
    # NOTE: work-items of gemm_gen (padded to 8 x 4): at most one 8-wide strip, the columns
    # past the last whole vector (before: up to a panel's width, or every element)
    left = sum(gs[0] * gs[1] for gs in gen)
    assert left <= 8 * (-(-max(m, n) // 4) * 4), (gen, left)


@pytest.mark.parametrize("M,N,K", [(1, 512, 784), (32, 10, 512), (4, 9, 2000)])
@pytest.mark.parametrize("skip", [16, 3])
def test_dot_products_aligned_or_not_give_the_same_bits(M, N, K, skip):
    """The dot-product path reads rows through vector pointers where they all start on a
    vector's alignment and through vloadN where not: the same sums in the same order."""
    from labkit.backend.opencl.gemm import path

    rng = np.random.default_rng(M + K)
    a = rng.standard_normal((M, K)).astype(np.float32)
    w = rng.standard_normal((N, K)).astype(np.float32)
    A0, W0 = cp.asarray(a), cp.asarray(w)
    flat = cp.asarray(np.concatenate([np.zeros(skip, np.float32), a.ravel()]))
    A1 = flat[skip:].reshape(M, K)
    assert path(A0.rt, A0.dtype, 1, M, N, K, A1, W0.T) == "dot"
    want = cp.matmul(A0, W0.T).get()
    got = cp.matmul(A1, W0.T).get()
    assert got.tobytes() == want.tobytes()
    np.testing.assert_allclose(got, a @ w.T, rtol=1e-4, atol=1e-4)
