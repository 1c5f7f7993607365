"""Products computed in the layout their reader wants (compile/transposed.py): the gradient
of a weight used as ``U.T`` comes out in rows, on the CPU and on OpenCL, equal to eager to
float32 rounding, and an update by it reads rows (on OpenCL: in the product's kernel)."""

import numpy as np
import pytest

import labkit as lk
import labkit.functions as F


def _step(U, n_terms, extra):
    def step(xs):
        loss = 0
        for x in xs[:n_terms]:
            loss = loss + F.tanh(F.matmul(x, F.transpose(U))).sum()
        if extra:  # NOTE: the product's transpose is read by something else too
            loss = loss + F.transpose(F.matmul(xs[0], F.transpose(U))).sum()
        U.grad = None
        loss.backward()
        return loss, U.grad
    return step


def _rows(t):
    d = t.data
    return d.flags.c_contiguous if isinstance(d, np.ndarray) else d.is_contiguous


@pytest.mark.parametrize("n_terms, extra", [(1, False), (2, False), (5, False), (2, True)])
def test_a_weight_used_transposed_gets_its_gradient_in_rows(n_terms, extra, dev):
    rng = np.random.default_rng(0)
    U = lk.tensor(rng.standard_normal((24, 16)).astype(np.float32), requires_grad=True,
                  device=dev)
    step = _step(U, n_terms, extra)
    compiled = lk.compile(step)
    for _ in range(4):
        xs = [lk.tensor(rng.standard_normal((8, 16)).astype(np.float32), device=dev)
              for _ in range(5)]
        got, want = compiled(xs), step(xs)
        for g, w in zip(got, want):
            np.testing.assert_allclose(g.numpy(), w.numpy(), rtol=1e-5, atol=1e-5)
    assert not _rows(want[1])  # NOTE: eager: the transpose of h^T g
    assert _rows(got[1])
    # NOTE: each F.transpose(U) gives its own gradient's transpose: one rewrite each
    assert f"rows: {n_terms + extra} transposed" in compiled.explain(), compiled.explain()


def test_without_reassociate_nothing_moves(dev):
    rng = np.random.default_rng(1)
    U = lk.tensor(rng.standard_normal((24, 16)).astype(np.float32), requires_grad=True,
                  device=dev)
    step = _step(U, 2, False)
    compiled = lk.compile(step, reassociate=False)
    for _ in range(3):
        xs = [lk.tensor(rng.standard_normal((8, 16)).astype(np.float32), device=dev)
              for _ in range(5)]
        got, want = compiled(xs), step(xs)
        for g, w in zip(got, want):
            np.testing.assert_array_equal(g.numpy(), w.numpy())
    assert "rows:" not in compiled.explain()
    assert not _rows(got[1])


def test_a_product_read_twice_is_left_alone():
    """The product itself is a result too: its rows are not its transpose's."""
    rng = np.random.default_rng(2)
    a = rng.standard_normal((6, 4)).astype(np.float32)
    b = rng.standard_normal((4, 5)).astype(np.float32)

    def f(x, y):
        p = F.matmul(x, y)
        return p, F.transpose(p) * 2
    compiled = lk.compile(f)
    for _ in range(3):
        p, q = compiled(lk.tensor(a), lk.tensor(b))
    np.testing.assert_array_equal(q.numpy(), (a @ b).T * 2)
    np.testing.assert_array_equal(p.numpy(), a @ b)
    assert "rows:" not in compiled.explain()


def test_a_sum_of_products_is_summed_in_rows():
    rng = np.random.default_rng(3)
    a, c = (rng.standard_normal((6, 4)).astype(np.float32) for _ in range(2))
    b, d = (rng.standard_normal((4, 5)).astype(np.float32) for _ in range(2))

    def f(w, x, y, z):
        return F.transpose(F.matmul(w, x) + F.matmul(y, z)) * 1.0
    compiled = lk.compile(f)
    for _ in range(3):
        got = compiled(*map(lk.tensor, (a, b, c, d)))
    np.testing.assert_allclose(got.numpy(), (a @ b + c @ d).T, rtol=1e-6, atol=1e-6)
    assert "rows: 1 transposed" in compiled.explain(), compiled.explain()
    prog = compiled.programs()[0]
    kinds = [n.name for n in prog.nodes]
    assert kinds.count("transpose") == 4 and kinds.count("matmul") == 2, kinds
