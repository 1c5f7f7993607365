"""The compile pass that folds ``relu(linear(...))`` and ``relu(conv2d(...))`` into one node
(on OpenCL one GEMM launch, the bias and relu its epilogue): the compiled step trains bit for
bit like the eager one, and the fold is skipped where something else reads the
pre-activation."""

import numpy as np
import pytest

import labkit as lk
import labkit.bricks as B
import labkit.functions as F


def _setup(dev, seed=0):
    rng = np.random.default_rng(seed)
    P0 = [rng.standard_normal((6, 1, 3, 3)).astype(np.float32) * 0.3,
          np.full(6, 0.01, np.float32),
          rng.standard_normal((12, 6 * 5 * 5)).astype(np.float32) * 0.05,
          np.zeros(12, np.float32),
          rng.standard_normal((10, 12)).astype(np.float32) * 0.3,
          np.zeros(10, np.float32)]
    ps = [lk.tensor(p, device=dev, requires_grad=True) for p in P0]
    opt = lk.optimizers.SGD(lr=0.1).setup({f"p{i}": p for i, p in enumerate(ps)})
    x = lk.tensor(rng.standard_normal((8, 1, 10, 10)).astype(np.float32), device=dev)
    y = lk.tensor(rng.integers(0, 10, 8), device=dev)
    return ps, opt, x, y


def _make_step(ps, opt, extra):
    def step(x, y):
        z1 = F.conv2d(x, ps[0], ps[1], pad=1)
        h = F.max_pool2d(F.relu(z1), 2)
        z2 = F.linear(F.flatten(h), ps[2], ps[3])
        loss = F.softmax_cross_entropy(F.linear(F.relu(z2), ps[4], ps[5]), y)
        if extra == "reads_z":  # another op reads the pre-activation: not folded
            loss = loss + 1e-3 * (z2 * z2).sum()
        opt.zero_grad()
        loss.backward()
        opt.update()
        return (loss, z1) if extra == "returns_z" else loss
    return step


@pytest.mark.parametrize("extra,folded", [(None, 2), ("reads_z", 1), ("returns_z", 1)])
def test_folded_step_trains_bit_for_bit_like_eager(dev, extra, folded):
    runs = []
    for compiled in (False, True):
        ps, opt, x, y = _setup(dev)
        step = _make_step(ps, opt, extra)
        f = lk.compile(step) if compiled else step
        outs = [f(x, y) for _ in range(4)]
        losses = [(o[0] if isinstance(o, tuple) else o).numpy() for o in outs]
        zs = [o[1].numpy() for o in outs] if extra == "returns_z" else []
        runs.append((losses, zs, [p.numpy() for p in ps], f))
    (l0, z0, p0, _), (l1, z1, p1, f) = runs
    for a, b in zip(l0 + z0 + p0, l1 + z1 + p1):
        assert np.array_equal(a.view(np.uint32), b.view(np.uint32))
    prog = f.programs()[0]
    assert prog.epilogues == folded
    assert f"relu folded into {folded} linear or conv2d" in f.explain()
    names = [s[1] for s in prog.after]
    assert ("conv2d_relu" in names) == (extra is None or extra == "reads_z")
    assert ("linear_relu" in names) == (extra in (None, "returns_z"))


def test_no_fold_without_fusion(dev):
    ps, opt, x, y = _setup(dev)
    f = lk.compile(_make_step(ps, opt, None), fuse=False)
    for _ in range(3):
        f(x, y)
    assert f.programs()[0].epilogues == 0
    assert "epilogue" not in f.explain()


def test_the_folded_node_keeps_its_brick_for_graphview():
    model = B.MLP([4, 8, 3], seed=0)
    opt = lk.optimizers.SGD(lr=0.1).setup(model)
    x = lk.tensor(np.ones((2, 4), np.float32))

    @lk.compile
    def step(x):
        loss = model(x).sum()
        opt.zero_grad()
        loss.backward()
        opt.update()
        return loss

    for _ in range(3):
        step(x)
    prog = step.programs()[0]
    assert prog.epilogues == 1
    fused = [s for s in prog.after if s[1] == "linear_relu"]
    assert len(fused) == 1 and fused[0][2] is not None


def test_no_fold_when_the_relu_output_is_changed_in_place(dev):
    """After a fold the gradient's mask is read from the relu's output: a step that changes
    that output in place (a host call) keeps the relu as its own node."""
    rng = np.random.default_rng(0)
    x = lk.tensor(rng.standard_normal((5, 3)).astype(np.float32), device=dev)

    def run(compiled):
        W = lk.tensor(np.random.default_rng(1).standard_normal((4, 3)).astype(np.float32),
                      device=dev, requires_grad=True)

        def negate(a):
            a *= -1

        def step(x):
            h = F.relu(F.linear(x, W))
            lk.compile.host(negate, h.data, effect=True, mutates=(h.data,))
            loss = (h * h).sum()
            W.grad = None
            loss.backward()
            return loss, W.grad
        f = lk.compile(step) if compiled else step
        for _ in range(3):
            loss, g = f(x)
        return loss.numpy(), g.numpy(), f
    l0, g0, _ = run(False)
    l1, g1, f = run(True)
    assert f.programs()[0].epilogues == 0
    np.testing.assert_array_equal(l0, l1)
    np.testing.assert_array_equal(g0, g1)


# ---- c + a @ b: the addition in the product's epilogue (OpenCL) ----------------------------

@pytest.mark.parametrize("extra", [None, "reads_product", "returns_product"])
def test_an_addition_of_a_product_folds_and_trains_bit_for_bit_like_eager(dev, extra):
    """A recurrent step's ``x_t + h @ U.T`` (a strided slice of x), a broadcast bias on
    either side, and the backward's additions of products: on an OpenCL device one GEMM
    each, bit for bit the eager step; not folded where something else reads the product."""
    rng = np.random.default_rng(1)
    U0 = rng.standard_normal((16, 16)).astype(np.float32) * 0.3
    c0 = rng.standard_normal(16).astype(np.float32)
    xs = rng.standard_normal((4, 3, 16)).astype(np.float32)
    runs = []
    for compiled in (False, True):
        U, c = (lk.tensor(v, device=dev, requires_grad=True) for v in (U0, c0))
        opt = lk.optimizers.SGD(lr=0.05).setup({"U": U, "c": c})

        def step(x, U=U, c=c, opt=opt):
            h = F.tanh(F.getitem(x, (slice(None), 0)))
            p = None
            for k in range(1, 3):
                p = F.matmul(h, F.transpose(U))
                h = F.tanh(F.getitem(x, (slice(None), k)) + p)
            z = c + F.matmul(h, U)  # the broadcast operand first
            loss = (z * z).sum()
            if extra == "reads_product":
                loss = loss + (p * p).sum()
            opt.zero_grad()
            loss.backward()
            opt.update()
            return (loss, p) if extra == "returns_product" else loss

        # NOTE: reassociate=False: on the CPU U's gradient (of U.T) would be computed into
        # rows (compile/transposed.py), which BLAS may round in the last bit
        f = lk.compile(step, reassociate=False) if compiled else step
        x = lk.tensor(xs, device=dev)
        outs = [f(x) for _ in range(4)]
        got = [o[0].numpy() for o in outs] + [o[1].numpy() for o in outs] if extra == \
            "returns_product" else [o.numpy() for o in outs]
        runs.append((got + [U.numpy(), c.numpy()], f))
    (a, _), (b, f) = runs
    for u, v in zip(a, b):
        assert np.array_equal(u.view(np.uint32), v.view(np.uint32))
    prog = f.programs()[0]
    if dev == "cpu":
        assert prog.added == 0  # NOTE: NumPy's add into a kept buffer is as fast
        return
    assert prog.added == (4 if extra is None else 3)
    assert "an addition folded into" in f.explain()
    names = [n.name for n in prog.nodes]
    assert "matmul_add" in names


# ---- a transposed weight read by many products: copied once (OpenCL) ----------------------

@pytest.mark.parametrize("steps,update_between", [(6, False), (3, False), (6, True)])
def test_a_transposed_weight_read_by_many_products_is_copied_once(dev, steps, update_between):
    """``h @ U.T`` over the steps of a loop: on an OpenCL device U.T is copied to contiguous
    rows once (from 4 readers on), bit for bit the eager step. Not where the weight changes
    in place before the last product (an update between them: the view must see it)."""
    rng = np.random.default_rng(2)
    U0 = rng.standard_normal((24, 24)).astype(np.float32) * 0.2
    xs = rng.standard_normal((5, steps, 24)).astype(np.float32)
    runs = []
    for compiled in (False, True):
        U = lk.tensor(U0, device=dev, requires_grad=True)
        opt = lk.optimizers.SGD(lr=0.05).setup({"U": U})

        def step(x, U=U, opt=opt):
            UT = F.transpose(U)
            h = F.tanh(F.getitem(x, (slice(None), 0)))
            for k in range(1, steps):
                h = F.tanh(F.getitem(x, (slice(None), k)) + F.matmul(h, UT))
            loss = (h * h).sum()
            opt.zero_grad()
            loss.backward()
            opt.update()
            if update_between:  # NOTE: the old view, after U changed in place
                return loss, F.matmul(h.detach(), UT)
            return loss

        # NOTE: reassociate=False: U's gradient summed in the eager order (bit for bit)
        f = lk.compile(step, reassociate=False) if compiled else step
        x = lk.tensor(xs, device=dev)
        outs = [f(x) for _ in range(4)]
        flat = [o for out in outs for o in (out if isinstance(out, tuple) else (out,))]
        runs.append(([o.numpy() for o in flat] + [U.numpy()], f))
    (a, _), (b, f) = runs
    for u, v in zip(a, b):
        assert np.array_equal(u.view(np.uint32), v.view(np.uint32))
    prog = f.programs()[0]
    want = 1 if dev != "cpu" and steps - 1 >= 4 and not update_between else 0
    assert prog.copied == want
    if want:
        assert "copied once" in f.explain()


# ---- relu_grad(a @ b): the mask in the product's epilogue (OpenCL) -------------------------

@pytest.mark.parametrize("extra", [None, "hook", "float64", "matmul"])
def test_relus_gradient_of_a_product_folds_and_trains_bit_for_bit_like_eager(dev, extra):
    """An MLP's input gradients under its relus, ``(gy @ W) * (h > 0)``: on an OpenCL device
    one GEMM each (the mask in the epilogue), bit for bit the eager step over several
    updates (the weights' SGD still fused into their gradients' products), with linear layers
    or plain products; not folded where something else reads the product (a hook on the relu
    output's gradient)."""
    rng = np.random.default_rng(2)
    dt = np.float64 if extra == "float64" else np.float32
    P0 = [rng.standard_normal((24, 12)) * 0.3, rng.standard_normal(24) * 0.1,
          rng.standard_normal((20, 24)) * 0.3, rng.standard_normal(20) * 0.1,
          rng.standard_normal((5, 20)) * 0.3, np.zeros(5)]
    data = [(rng.standard_normal((16, 12)).astype(dt), rng.integers(0, 5, 16))
            for _ in range(5)]
    runs = []
    for compiled in (False, True):
        ps = [lk.tensor(p.astype(dt), device=dev, requires_grad=True) for p in P0]
        opt = lk.optimizers.SGD(lr=0.1).setup({f"p{i}": p for i, p in enumerate(ps)})

        def step(x, y, ps=ps, opt=opt):
            h = x
            for i in range(0, 6, 2):
                if extra == "matmul":
                    h = F.matmul(h, F.transpose(ps[i])) + ps[i + 1]
                else:
                    h = F.linear(h, ps[i], ps[i + 1])
                if i < 4:
                    h = F.relu(h)
                    if extra == "hook" and i == 2:
                        h.register_hook(lambda g: g * 2.0)
            loss = F.softmax_cross_entropy(h, y)
            opt.zero_grad()
            loss.backward()
            opt.update()
            return loss
        # NOTE: reassociate=False: a weight's gradient of W.T computed into rows
        # (compile/transposed.py) may round in the last bit
        f = (lk.compile(step, reassociate=extra != "matmul") if compiled else step)
        losses = [f(lk.tensor(x, device=dev), lk.tensor(y, device=dev)).numpy()
                  for x, y in data]
        runs.append((losses + [p.numpy() for p in ps], f))
    (a, _), (b, f) = runs
    for u, v in zip(a, b):
        np.testing.assert_array_equal(u, v)
    prog = f.programs()[0]
    want = 0 if dev == "cpu" else {"hook": 1}.get(extra, 2)
    assert prog.masked == want
    if dev == "cl" and extra != "matmul":  # NOTE: (the gradient of W.T is not a product)
        assert prog.sgd == 3
    if want:
        assert "relu's gradient folded into" in f.explain()
        assert [n.name for n in prog.nodes].count("matmul_relu_grad") == want
