"""An LSTM step's product and cell in one launch, and its gradient and the product of its
gates' gradient with U in one launch (backend/opencl/lstm_gemm.py): bit for bit the two
launches each, as eager ops run them; refused where it could not be."""

import numpy as np
import pytest

from labkit.backend import opencl as cp
from labkit.backend.opencl import gemm, lstm, lstm_gemm

# NOTE: the blocking whose vectors are the cell's (float32: 16 units a work-item, float64: 8);
# the tuner of another machine may choose another, where the kernel is not used
BLOCKING = {np.float32: "8,2,16", np.float64: "4,2,8"}


def _case(rng, M, K, H, dtype, scale=1.0):
    h = cp.asarray((rng.standard_normal((M, K)) * scale).astype(dtype))
    u = cp.asarray((rng.standard_normal((4 * H, K)) * 0.3 * scale).astype(dtype))
    pre = cp.asarray((rng.standard_normal((M, 3, 4 * H)) * scale).astype(dtype))
    wide = cp.asarray(rng.standard_normal((M, H + 5)).astype(dtype))
    return h, u.T, pre[:, 1], wide[:, 2:H + 2]  # NOTE: U.T a view, x_t and c strided rows


def _same(a, b):
    a, b = a.get(), b.get()
    assert a.dtype == b.dtype and a.shape == b.shape
    np.testing.assert_array_equal(a.view(f"u{a.itemsize}"), b.view(f"u{b.itemsize}"))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("M,K,H,scale", [(32, 128, 128, 1.0), (16, 64, 64, 1.0),
                                         (12, 48, 32, 8.0), (6, 128, 128, 30.0),
                                         (3, 100, 64, 1.0)])
def test_one_launch_is_the_product_and_the_cell_bit_for_bit(dtype, M, K, H, scale, rng,
                                                           monkeypatch):
    """Any blocking of the product sums each element over K in order and the cell is
    lk_lstm's statements over vectors of its width: the same bits, for gates from small to
    saturated (scale 30: tanh and sigmoid at their ends) and rows that are strided views."""
    if dtype == np.float64 and not cp.runtime(0).info.fp64:
        pytest.skip("this OpenCL device has no float64")
    if not cp.runtime(0).info.is_cpu:
        pytest.skip("the kernel is for CPU devices (lk_lstm's vectors of units)")
    monkeypatch.setenv("LABKIT_GEMM_CONFIG", BLOCKING[dtype])
    h, ut, xw, c0 = _case(rng, M, K, H, dtype, scale)
    regrouped = lstm_gemm.interleave(ut.copy(), lstm.vector_width(h.rt, h.dtype, H))
    planned = lstm_gemm.plan(h, regrouped, xw, c0)
    assert planned is not None
    x, c, out = lstm_gemm.forward(h, regrouped, xw, c0, planned)
    x0 = gemm.matmul_add(h, ut, xw)
    c_0, out0 = lstm.forward(c0, x0)
    _same(x, x0)
    _same(c, c_0)
    _same(out, out0)


def test_where_the_kernel_does_not_fit_the_plan_says_so(rng, monkeypatch):
    monkeypatch.setenv("LABKIT_GEMM_CONFIG", BLOCKING[np.float32])
    h, ut, xw, c0 = _case(rng, 32, 128, 128, np.float32)
    ok = lstm_gemm.interleave(ut.copy(), 16)
    if not cp.runtime(0).info.is_cpu:
        assert lstm_gemm.plan(h, ok, xw, c0) is None
        return
    assert lstm_gemm.plan(h, ok, xw, c0) is not None
    assert lstm_gemm.plan(h, ok, xw[:, ::-1], c0) is None  # NOTE: x_t's columns reversed
    assert lstm_gemm.plan(h, ok[:, :-4].copy(), xw[:, :-4], c0) is None  # NOTE: not 4H wide
    assert lstm_gemm.plan(h[:2, :8], ok[:8], xw[:2], c0[:2]) is None  # NOTE: a small product
    monkeypatch.setenv("LABKIT_GEMM_CONFIG", "8,4,8")  # NOTE: vectors not the cell's width
    assert lstm_gemm.plan(h, ok, xw, c0) is None
    h2, ut2, xw2, c2 = _case(rng, 32, 128, 24, np.float32)  # NOTE: H not a multiple of 16
    monkeypatch.setenv("LABKIT_GEMM_CONFIG", BLOCKING[np.float32])
    assert lstm_gemm.plan(h2, ut2.copy(), xw2, c2) is None


@pytest.mark.parametrize("layout", ["contiguous", "offset 16", "offset 3", "view"])
@pytest.mark.parametrize("dtype,w", [(np.float32, 16), (np.float32, 4), (np.float64, 8)])
def test_regrouped_columns_hold_each_units_gates_in_turn(rng, layout, dtype, w):
    """A vector a work-item where U is contiguous with rows of whole vectors, the elementwise
    copy of the regrouped view otherwise: each unit's gates in turn, both ways."""
    H = 2 * w
    u = rng.standard_normal((3, 4 * H)).astype(dtype)
    if layout == "view":
        d = cp.asarray(u.T.copy()).T
    else:
        skip = {"contiguous": 0, "offset 16": 16, "offset 3": 3}[layout]
        flat = cp.asarray(np.concatenate([np.zeros(skip, dtype), u.ravel()]))
        d = flat[skip:].reshape(3, 4 * H)
    got = lstm_gemm.interleave(d, w).get()
    want = u.reshape(3, 4, H // w, w).transpose(0, 2, 1, 3).reshape(3, 4 * H)
    assert got.tobytes() == want.tobytes()
    assert got[0, w] == u[0, H] and got[0, 4 * w] == u[0, w]  # NOTE: unit 0's i; unit w's a


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("M,H,scale,add", [(32, 128, 1.0, None), (16, 64, 4.0, (16, 64)),
                                           (8, 128, 1.0, (128,)), (16, 32, 30.0, None),
                                           (5, 128, 1.0, (5, 128))])
def test_one_launch_is_the_cells_gradient_and_its_product_bit_for_bit(dtype, M, H, scale, add,
                                                                      rng, monkeypatch):
    """The cell's gradient is lk_lstm_grad's statements (contraction off inside a product
    kernel that has it on) and each row's product with U is summed over K in order, then
    ``add`` added (a matmul_add's, broadcast or not): the same bits as lk_lstm_grad and then
    matmul (matmul_add), for rows read through strides."""
    if dtype == np.float64 and not cp.runtime(0).info.fp64:
        pytest.skip("this OpenCL device has no float64")
    if not cp.runtime(0).info.is_cpu:
        pytest.skip("the kernel is for CPU devices (lk_lstm's vectors of units)")
    monkeypatch.setenv("LABKIT_GEMM_CONFIG", BLOCKING[dtype])

    def arr(rows, cols, s=1.0):
        wide = rng.standard_normal((rows, cols + 3)) * s
        return cp.asarray(wide.astype(dtype))[:, 1:cols + 1]  # NOTE: strided rows
    c0, x, gc, gh = arr(M, H), arr(M, 4 * H, scale), arr(M, H), arr(M, H)
    u = cp.asarray((rng.standard_normal((4 * H, H)) * 0.1).astype(dtype))
    more = () if add is None else (cp.asarray(rng.standard_normal(add).astype(dtype)),)
    planned = lstm_gemm.plan_grad(c0, x, gc, gh, u, *more)
    assert planned is not None
    gcp, gx, dh = lstm_gemm.grad_product(c0, x, gc, gh, u, planned, *more)
    gcp0, gx0 = lstm.grad(c0, x, gc, gh)
    _same(gcp, gcp0)
    _same(gx, gx0)
    _same(dh, gemm.matmul_add(gx0, u, *more) if more else gemm.matmul(gx0, u))


def test_where_the_gradients_kernel_does_not_fit_the_plan_says_so(rng, monkeypatch):
    monkeypatch.setenv("LABKIT_GEMM_CONFIG", BLOCKING[np.float32])

    def arr(*shape):
        return cp.asarray(rng.standard_normal(shape).astype(np.float32))
    c0, x, gc, gh, u = arr(32, 128), arr(32, 512), arr(32, 128), arr(32, 128), arr(512, 128)
    if not cp.runtime(0).info.is_cpu:
        assert lstm_gemm.plan_grad(c0, x, gc, gh, u) is None
        return
    assert lstm_gemm.plan_grad(c0, x, gc, gh, u) is not None
    assert lstm_gemm.plan_grad(c0, x, gc, gh, arr(128, 512).T) is None  # NOTE: U.T a view
    assert lstm_gemm.plan_grad(c0, x, gc, gh, arr(512, 64)) is None  # NOTE: not (4H, H)
    assert lstm_gemm.plan_grad(c0, x, gc, gh, u, arr(64)) is None  # NOTE: not broadcast
    big = arr(8, 2048), arr(8, 8192), arr(8, 2048), arr(8, 2048)
    assert lstm_gemm.plan_grad(*big, arr(8192, 2048)) is None  # NOTE: H past 16 vectors
    monkeypatch.setenv("LABKIT_GEMM_CONFIG", "8,4,8")
    assert lstm_gemm.plan_grad(c0, x, gc, gh, u) is None
