"""A product whose rows are not a multiple of gemm_rb's row blocks takes the rows left over in
a partial last block of the same launch (gemm.TAIL_IN_BLOCK), where it took a second launch
with a program built for them: bit for bit the same result, with the bias, relu and SGD
epilogues, through strides and batches, and one launch fewer."""

import numpy as np
import pytest

from labkit.backend import opencl as cp
from labkit.backend.opencl import gemm


def _launches(monkeypatch):
    """The row blocks of each gemm_rb launch from now on."""
    seen = []
    real = gemm._program

    class Spy:
        def __init__(self, prg):
            self.prg = prg
            self.gemm_gen = prg.gemm_gen

        def gemm_rb(self, q, gs, *a):
            seen.append(gs[1])
            return self.prg.gemm_rb(q, gs, *a)

    monkeypatch.setattr(gemm, "_program", lambda *a, **kw: Spy(real(*a, **kw)))
    return seen


def _run(m, n, k, dt, layout, rng):
    a = rng.standard_normal((m, k)).astype(dt)
    b = rng.standard_normal((k, n)).astype(dt)
    bias = rng.standard_normal(n).astype(dt)
    w = rng.standard_normal((m, n)).astype(dt)
    da = cp.asarray(np.ascontiguousarray(a.T)).T if layout == "tn" else cp.asarray(a)
    db = cp.asarray(np.ascontiguousarray(b.T)).T if layout == "nt" else cp.asarray(b)
    dw = cp.asarray(w)
    out = {"mm": (da @ db).get(),
           "linear": gemm.linear(da, db, cp.asarray(bias), axis=1, relu=True).get()}
    g = gemm.matmul_sgd(da, db, dw, 0.01)
    out["sgd grad"], out["sgd weight"] = g.get(), dw.get()
    bat = rng.standard_normal((3, m, k)).astype(dt)
    out["batched"] = (cp.asarray(bat) @ db).get()
    return out, a, b


@pytest.mark.parametrize("m,n,k", [(514, 96, 40), (130, 1030, 70), (106, 100, 32), (263, 64, 9)])
@pytest.mark.parametrize("layout", ["nn", "nt", "tn"])
@pytest.mark.parametrize("dt", [np.float32, np.float64])
def test_partial_last_block_is_bit_for_bit_the_second_launch(m, n, k, layout, dt, monkeypatch):
    if dt == np.float64 and not cp.runtime(0).info.fp64:
        pytest.skip("this OpenCL device has no float64")
    monkeypatch.setenv("LABKIT_GEMM_CONFIG", "6,2,16" if dt == np.float32 else "6,2,8")
    seen = _launches(monkeypatch)
    one, a, b = _run(m, n, k, dt, layout, np.random.default_rng(7))
    blocks_one = list(seen)
    seen.clear()
    monkeypatch.setattr(gemm, "TAIL_IN_BLOCK", 10**9)  # NOTE: rows left: a launch of their own
    monkeypatch.setattr(gemm, "TAIL_ANYWAY", 0)
    two, _, _ = _run(m, n, k, dt, layout, np.random.default_rng(7))
    blocks_two = list(seen)
    for key in one:
        assert one[key].tobytes() == two[key].tobytes(), key
    want = a.astype(np.float64) @ b
    tol = 1e-4 if dt == np.float32 else 1e-10
    np.testing.assert_allclose(one["mm"], want, rtol=tol, atol=tol * np.sqrt(k))
    # NOTE: 6-row blocks: every product here leaves rows over, and has an odd number of whole
    # blocks (work-groups of one block); in one launch they are a partial block, in two a
    # launch of fewer rows
    assert len(blocks_one) < len(blocks_two), (blocks_one, blocks_two)
    assert sum(blocks_one) == sum(blocks_two), (blocks_one, blocks_two)


def test_rows_not_worth_a_partial_block_keep_their_launch(monkeypatch):
    """32 rows in 6-row blocks: a partial block would compute 36 rows for 32 (1/8 more, over
    TAIL_IN_BLOCK's 1/16), so the 2 rows left take a launch of their own."""
    monkeypatch.setenv("LABKIT_GEMM_CONFIG", "6,2,16")
    seen = _launches(monkeypatch)
    rng = np.random.default_rng(3)
    a = rng.standard_normal((32, 200)).astype(np.float32)
    b = rng.standard_normal((200, 512)).astype(np.float32)
    got = (cp.asarray(a) @ cp.asarray(b)).get()
    np.testing.assert_allclose(got, a.astype(np.float64) @ b, rtol=1e-4, atol=2e-3)
    assert seen == [5, 1], seen


@pytest.mark.parametrize("m", [10, 33, 130])
def test_a_small_product_takes_its_rows_left_in_a_partial_block(m, monkeypatch):
    """Up to TAIL_ANYWAY multiply-adds a partial block takes the rows left whatever it
    wastes (an MLP's (10, 32) @ (32, 512) weight gradient in 8-row blocks: one launch, not
    two), the same bits as a launch of their own."""
    monkeypatch.setenv("LABKIT_GEMM_CONFIG", "8,2,16")
    seen = _launches(monkeypatch)
    rng = np.random.default_rng(m)
    a = rng.standard_normal((32, m)).astype(np.float32)
    b = rng.standard_normal((32, 512)).astype(np.float32)
    da, db = cp.asarray(a), cp.asarray(b)
    one = (da.T @ db).get()
    blocks_one = list(seen)
    small = m * 512 * 32 <= gemm.TAIL_ANYWAY
    seen.clear()
    monkeypatch.setattr(gemm, "TAIL_ANYWAY", 0)
    two = (da.T @ db).get()
    assert one.tobytes() == two.tobytes()
    np.testing.assert_allclose(one, a.T.astype(np.float64) @ b, rtol=1e-4, atol=1e-4)
    assert len(blocks_one) == (1 if small else 2) and len(seen) == 2, (blocks_one, seen)


@pytest.mark.parametrize("cfg", ["6,2,16", "8,2,16", "4,4,8", "8,1,16"])
def test_a_partial_block_writes_no_row_past_its_own(cfg, monkeypatch):
    """C, and W of the SGD epilogue, in larger buffers: the rows after the product's (and
    between its batches) keep their values, whatever the blocking."""
    monkeypatch.setenv("LABKIT_GEMM_CONFIG", cfg)
    rt = cp.runtime(0)
    rng = np.random.default_rng(5)
    rm = int(cfg.split(",")[0])
    m, n, k, nb, gap = 17 * rm + 1, 96, 40, 2, 3  # NOTE: 17 whole blocks (an odd number: one
    # block a work-group, so the row left is a partial block of the same launch) and a row
    a = rng.standard_normal((nb, m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    da, db = cp.asarray(a), cp.asarray(b)
    fill = np.full((nb, m + gap, n), 7.25, np.float32)
    c = cp.asarray(fill)
    seen = _launches(monkeypatch)
    gemm._gemm(rt, np.dtype(np.float32), nb, m, n, k, (da, 0, k, 1, m * k), (db, 0, n, 1, 0),
               (c, 0, n, 1, (m + gap) * n))
    assert seen == [18], seen  # NOTE: one launch, its last block partial
    got = c.get()
    assert (got[:, m:] == 7.25).all(), "a row past the product's was written"
    np.testing.assert_allclose(got[:, :m], a.astype(np.float64) @ b, rtol=1e-4, atol=1e-3)
    w0 = rng.standard_normal((m + gap, n)).astype(np.float32)
    w = cp.asarray(w0)
    g = gemm.matmul_sgd(da[0], db, w[:m], 0.5)
    assert g is not None
    wn = w.get()
    assert wn[m:].tobytes() == w0[m:].tobytes(), "a weight row past the product's was updated"
    step = (np.float32(0.5) * g.get()).astype(np.float32)
    assert wn[:m].tobytes() == (w0[:m] - step).astype(np.float32).tobytes()
