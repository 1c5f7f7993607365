"""The GEMM kernels' SGD epilogue (labkit/backend/opencl/gemm.matmul_sgd, which lk.compile
uses for a weight's gradient and its plain SGD update): the product and the updated weight
bit for bit those of the product followed by the optimizer's own update kernel, on each path
that has the epilogue (blocked with edge strips, the swapped product, the plain kernel), in
float32 and float64; None, with nothing changed, where it cannot be used."""

import numpy as np
import pytest

import labkit as lk
from labkit.backend import opencl as cp
from labkit.backend.opencl.gemm import matmul_sgd, path

SHAPES = [  # M, N, K of a weight gradient gz.T @ x (gz: K x M, x: K x N)
    (512, 784, 1),    # an MLP's first weight at batch 1: blocked, a 16-column strip
    (512, 784, 32),   # the same at batch 32
    (64, 200, 8),     # blocked and the plain kernel for the last 8 columns
    (10, 512, 32),    # few rows: the plain kernel
    (784, 10, 5),     # few columns: the swapped product C.T = x.T @ gz
    (3, 5, 2),
]


def _update(dt):
    """The optimizer's kernel for plain SGD, as lk.optimizers.SGD runs it on one parameter."""
    w = lk.tensor(np.zeros(3, dt), device="cl", requires_grad=True)
    opt = lk.optimizers.SGD(lr=0.5).setup({"w": w})

    def run(p, g, lr):
        w.data, w.grad = p, lk.Tensor(g)
        opt.lr = lr
        opt.update()
    return run


@pytest.mark.parametrize("dt", [np.float32, np.float64])
@pytest.mark.parametrize("M,N,K", SHAPES)
def test_product_and_update_bit_for_bit_as_separate_kernels(M, N, K, dt):
    rng = np.random.default_rng(M + N + K)
    gz = rng.standard_normal((K, M)).astype(dt)
    x = rng.standard_normal((K, N)).astype(dt)
    w0 = rng.standard_normal((M, N)).astype(dt)
    a, b = cp.asarray(gz).T, cp.asarray(x)
    w1, w2 = cp.asarray(w0), cp.asarray(w0)
    lr = 0.0123
    g1 = cp.matmul(a, b)
    _update(dt)(w1, g1, lr)
    g2 = matmul_sgd(a, b, w2, lr)
    assert g2 is not None
    assert np.array_equal(g1.get(), g2.get()) and np.array_equal(w1.get(), w2.get())
    ref = w0.astype(np.float64) - (gz.T.astype(np.float64) @ x) * lr
    assert np.abs(w2.get() - ref).max() < (1e-5 if dt is np.float32 else 1e-12)


@pytest.mark.parametrize("dt", [np.float32, np.float64])
@pytest.mark.parametrize("M,N,K", SHAPES)
def test_the_update_alone_writes_no_product(M, N, K, dt, monkeypatch):
    """``store=False``: the weight updated bit for bit as with the product written, and the
    array returned never written (a weight's gradient lk.compile makes again where it is
    read). The array is filled with a mark first: written with the product (the check can
    fail), left as it was without."""
    from labkit.backend.opencl import gemm

    rng = np.random.default_rng(M * N + K)
    gz = rng.standard_normal((K, M)).astype(dt)
    x = rng.standard_normal((K, N)).astype(dt)
    w0 = rng.standard_normal((M, N)).astype(dt)
    a, b = cp.asarray(gz).T, cp.asarray(x)
    w1, w2 = cp.asarray(w0), cp.asarray(w0)
    g1 = matmul_sgd(a, b, w1, 0.0123)
    marks = []

    def marked(rt, shape, dtype, strides, size):
        marks.append(cp.asarray(np.full(shape, 7.5, dtype)))
        return marks[-1]
    monkeypatch.setattr(gemm, "fresh", marked)
    assert matmul_sgd(a, b, w2, 0.0123, store=False) is marks[0]
    assert np.array_equal(w2.get(), w1.get())
    assert (marks[0].get() == 7.5).all()
    assert np.array_equal(matmul_sgd(a, b, cp.asarray(w0), 0.0123).get(), g1.get())


def test_refused_where_the_epilogue_cannot_be_sure():
    rng = np.random.default_rng(0)
    g = cp.asarray(rng.standard_normal((4, 64)).astype(np.float32))
    x = cp.asarray(rng.standard_normal((4, 48)).astype(np.float32))
    w = cp.asarray(np.ones((64, 48), np.float32))
    assert matmul_sgd(g.T, x, cp.asarray(np.ones((48, 64), np.float32)).T, 0.1) is None
    assert matmul_sgd(g.T, x, w.astype(np.float64), 0.1) is None
    assert matmul_sgd(g.T, x, w, np.float64(0.1)) is None  # a rate of another type
    sq = cp.asarray(np.ones((48, 48), np.float32))
    assert matmul_sgd(sq, sq, sq, 0.1) is None  # the weight is an operand
    # a row vector times a transposed matrix takes the dot-product path (no such epilogue)
    row = cp.asarray(np.ones((1, 784), np.float32))
    wt = cp.asarray(np.ones((512, 784), np.float32)).T
    assert path(row.rt, row.dtype, 1, 1, 512, 784, row, wt) == "dot"
    out = cp.asarray(np.ones((1, 512), np.float32))
    assert matmul_sgd(row, wt, out, 0.1) is None
    assert np.array_equal(out.get(), np.ones((1, 512), np.float32))
    assert np.array_equal(w.get(), np.ones((64, 48), np.float32))


@pytest.mark.parametrize("M,N,K", [(512, 784, 32), (64, 200, 8), (512, 784, 1), (10, 50, 1)])
@pytest.mark.parametrize("w_offset", [0, 5, 16])
def test_a_weight_at_any_offset_is_updated_as_the_optimizer_does(M, N, K, w_offset):
    """The blocked kernel and gemm_outer update whole vectors of W where its rows are aligned
    (offset and row stride multiples of the vector width), element by element otherwise:
    the same bits either way. W here is a contiguous view into a larger buffer."""
    rng = np.random.default_rng(M + K + w_offset)
    gz = rng.standard_normal((K, M)).astype(np.float32)
    x = rng.standard_normal((K, N)).astype(np.float32)
    w0 = rng.standard_normal((M, N)).astype(np.float32)
    big = cp.asarray(np.concatenate([np.full(w_offset, 7, np.float32), w0.ravel(),
                                     np.full(3, 7, np.float32)]))
    w2 = big[w_offset:w_offset + M * N].reshape(M, N)
    assert w2.offset == w_offset and w2.is_contiguous
    w1 = cp.asarray(w0)
    a, b = cp.asarray(gz).T, cp.asarray(x)
    lr = 0.0123
    g1 = cp.matmul(a, b)
    _update(np.float32)(w1, g1, lr)
    g2 = matmul_sgd(a, b, w2, lr)
    assert g2 is not None
    assert g1.get().tobytes() == g2.get().tobytes()
    assert w1.get().tobytes() == w2.get().tobytes()
    rest = big.get()
    assert (rest[:w_offset] == 7).all() and (rest[w_offset + M * N:] == 7).all()
