"""The compile passes that merge, move or copy values (CSE, matmul_add, contiguous weights)
never cross an in-place change: an optimizer update of a parameter, read before it through a
view (a slice of it), or after it. And a copied weight never changes which GEMM kernel a
product runs (each sums in its own order). Each compiled step is bit for bit its eager run
(reassociate=False). Found by a review."""

import numpy as np
import pytest

import labkit as lk
import labkit.functions as F


def _run(make, ncalls=3, **options):
    outs = []
    for compiled in (False, True):
        step, params = make()
        f = lk.compile(step, reassociate=False, **options) if compiled else step
        got = []
        for _ in range(ncalls):
            o = f()
            got += [t.numpy().copy() for t in (o if isinstance(o, tuple) else (o,))]
        outs.append((got + [p.numpy().copy() for p in params], f))
    (a, _), (b, f) = outs
    for u, v in zip(a, b):
        assert np.isfinite(u).all()
        np.testing.assert_array_equal(u, v)
    return f.programs()[0]


@pytest.mark.parametrize("cse,fuse", [(True, True), (False, True), (True, False)])
def test_products_of_a_view_read_after_its_parameter_is_updated(dev, cse, fuse):
    H = 24
    rng = np.random.default_rng(0)
    P0 = (rng.standard_normal((H, H + 4)) * 0.2).astype(np.float32)
    xs = rng.standard_normal((5, 6, H)).astype(np.float32)

    def make():
        P = lk.tensor(P0, device=dev, requires_grad=True)
        opt = lk.optimizers.SGD(lr=0.5).setup({"P": P})
        x = lk.tensor(xs, device=dev)

        def step():
            UT = F.transpose(F.getitem(P, (slice(None), slice(0, H))))
            outs = [F.matmul(F.getitem(x, (slice(None), k)), UT) for k in range(5)]
            loss = (outs[0] * outs[1] + outs[2] * outs[3] - outs[4]).sum() * 0.01
            opt.zero_grad()
            loss.backward()
            opt.update()  # NOTE: P, and the view U of it, change here
            h = F.getitem(x, (slice(None), 1)).detach()
            return loss, F.matmul(h, UT), F.matmul(h + 1, UT)
        return step, [P]

    prog = _run(make, cse=cse, fuse=fuse)
    assert prog.copied == 0


def test_a_product_before_an_update_added_after_it(dev):
    rng = np.random.default_rng(0)
    W0, x0, x1 = (rng.standard_normal(s).astype(np.float32) for s in ((8, 8), (4, 8), (4, 8)))
    c0 = rng.standard_normal(8).astype(np.float32)

    def make():
        W = lk.tensor(W0, device=dev, requires_grad=True)
        opt = lk.optimizers.SGD(lr=0.5).setup({"W": W})
        x, x2, c = (lk.tensor(a, device=dev) for a in (x0, x1, c0))

        def step():
            p = F.matmul(x, W)  # read only by the addition, after the update
            loss = (F.matmul(x2, W) ** 2).sum()
            opt.zero_grad()
            loss.backward()
            opt.update()
            return loss, p + c
        return step, [W]

    assert _run(make).added == 0


@pytest.mark.parametrize("rows,width", [(1, 80), (4, 1100), (16, 48)])
def test_a_copied_weight_keeps_each_products_kernel(dev, rows, width):
    """Rows of 1 (dot products or GEMV) and a long K (dot products over slices) sum in
    another order than the blocked GEMM: the weight is copied only where every product takes
    the blocked GEMM with either layout."""
    rng = np.random.default_rng(1)
    U0 = (rng.standard_normal((width, width)) * (0.5 / np.sqrt(width))).astype(np.float32)
    xs = rng.standard_normal((rows, 6, width)).astype(np.float32)

    def make():
        U = lk.tensor(U0, device=dev, requires_grad=True)
        x = lk.tensor(xs, device=dev)

        def step():
            UT = F.transpose(U)
            h = F.tanh(F.getitem(x, (slice(None), 0)))
            for k in range(1, 6):
                h = F.tanh(F.getitem(x, (slice(None), k)) + F.matmul(h, UT))
            return (h * h).sum()
        return step, [U]

    prog = _run(make)
    assert prog.copied == (1 if dev != "cpu" and rows > 1 else 0)
