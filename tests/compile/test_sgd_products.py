"""The compile pass that moves a weight's plain SGD update into the product kernel that makes
its gradient (compile/sgd.py, OpenCL): the compiled step trains bit for bit like the eager
one, with learning rates changed between calls, and falls back where it cannot be sure (a
weight read after its gradient, an optimizer that is no longer plain SGD); a bad label stops
the step before any weight is updated."""

import numpy as np
import pytest

import labkit as lk
import labkit.functions as F


def _setup(dev, batch, seed=0, optimizer=None):
    rng = np.random.default_rng(seed)
    # NOTE: the first weight's gradient at batch 8 takes the blocked kernel and the plain one
    # (its last 8 columns); the others, and every product at batch 1, the plain one
    P0 = [rng.standard_normal((64, 200)).astype(np.float32) * 0.1, np.zeros(64, np.float32),
          rng.standard_normal((32, 64)).astype(np.float32) * 0.1, np.zeros(32, np.float32),
          rng.standard_normal((10, 32)).astype(np.float32) * 0.1, np.zeros(10, np.float32)]
    ps = [lk.tensor(p, device=dev, requires_grad=True) for p in P0]
    opt = (optimizer or lk.optimizers.SGD(lr=0.1)).setup(
        {f"p{i}": p for i, p in enumerate(ps)})
    x = lk.tensor(rng.standard_normal((batch, 200)).astype(np.float32), device=dev)
    y = lk.tensor(rng.integers(0, 10, batch), device=dev)
    return ps, opt, x, y


def _make_step(ps, opt, reads_w=False, returns_h=False, matmul=False):
    """The MLP's training step; ``reads_w``: it also returns the first weight's squared norm,
    read after its gradient and before the update; ``returns_h``: it also returns the last
    hidden activation; ``matmul``: its layers written ``x @ W.T + b``, not F.linear."""
    def layer(h, k):
        return h @ ps[k].T + ps[k + 1] if matmul else F.linear(h, ps[k], ps[k + 1])

    def step(x, y):
        h = F.relu(layer(x, 0))
        h = F.relu(layer(h, 2))
        loss = F.softmax_cross_entropy(layer(h, 4), y)
        opt.zero_grad()
        loss.backward()
        if reads_w:  # the first weight read after its gradient, before the update
            norm = (ps[0] * ps[0]).sum()
        opt.update()
        return (loss, norm) if reads_w else (loss, h) if returns_h else loss
    return step


def _bits(a):
    return np.asarray(a).view(np.uint32)


def _run(dev, compiled, batch=1, reads_w=False, change=None, optimizer=None, steps=6,
         reassociate=True, matmul=False):
    ps, opt, x, y = _setup(dev, batch, optimizer=optimizer)
    step = _make_step(ps, opt, reads_w, matmul=matmul)
    f = lk.compile(step, reassociate=reassociate) if compiled else step
    outs = []
    for k in range(steps):
        if change is not None:
            change(opt, k)
        o = f(x, y)
        outs += [t.numpy() for t in (o if isinstance(o, tuple) else (o,))]
        outs += [p.grad.numpy() for p in ps]
    outs += [p.numpy() for p in ps]
    return outs, opt, f


def _same(a, b):
    assert len(a) == len(b)
    for u, v in zip(a, b):
        assert np.array_equal(_bits(u), _bits(v))


def _lr_steps(opt, k):
    opt.lr = [0.1, 0.1, 0.05, 0.3, 0.3, 0.01][k]


@pytest.mark.parametrize("batch", [1, 8])
def test_fused_updates_train_bit_for_bit_like_eager(dev, batch):
    eager, opt0, _ = _run(dev, False, batch, change=_lr_steps)
    # NOTE: on the CPU at batch 1 the first weight's update is a rank-1 update that rounds
    # otherwise (tests/compile/test_outer_sgd.py); reassociate=False keeps the eager way
    cpu1 = dev == "cpu" and batch == 1
    comp, opt1, f = _run(dev, True, batch, change=_lr_steps, reassociate=not cpu1)
    _same(eager, comp)
    assert opt1.t == opt0.t == 6 and opt1.counts == opt0.counts == [6] * 6
    fused = f.programs()[0].sgd
    if dev == "cl":  # the three weights; the biases stay with the optimizer's kernels
        assert fused == 3
        assert "plain SGD update of 3 weight(s)" in f.explain()
    else:
        assert fused == 0


def test_a_weight_read_after_its_gradient_is_not_updated_early(dev):
    eager, _, _ = _run(dev, False, 3, reads_w=True)
    comp, _, f = _run(dev, True, 3, reads_w=True)
    _same(eager, comp)  # the norm is of the weight before the update, as in the eager step
    assert f.programs()[0].sgd == (2 if dev == "cl" else 0)


def test_an_optimizer_that_stops_being_plain_fused_sgd_falls_back(dev):
    def change(opt, k):
        _lr_steps(opt, k)
        if k == 3:
            opt.fused = False  # the unfused update: the optimizer's own ops
        if k == 5:
            opt.fused = True
    eager, _, _ = _run(dev, False, 2, change=change)
    comp, opt, _ = _run(dev, True, 2, change=change)
    _same(eager, comp)
    assert opt.counts == [6] * 6


def test_momentum_is_not_fused(dev):
    eager, _, _ = _run(dev, False, 2, optimizer=lk.optimizers.Momentum(lr=0.1, momentum=0.9))
    comp, _, f = _run(dev, True, 2, optimizer=lk.optimizers.Momentum(lr=0.1, momentum=0.9))
    _same(eager, comp)
    assert f.programs()[0].sgd == 0


def test_a_bad_label_stops_the_step_before_any_weight_moves(dev):
    ps, opt, x, y = _setup(dev, 4)
    f = lk.compile(_make_step(ps, opt))
    for _ in range(3):
        f(x, y)
    before = [p.numpy().copy() for p in ps]
    t, counts = opt.t, list(opt.counts)
    bad = lk.tensor(np.array([1, 2, 10, 3]), device=dev)
    with pytest.raises(IndexError, match="10"):
        f(x, bad)
    for p, b in zip(ps, before):
        assert np.array_equal(p.numpy(), b)
    assert opt.t == t and opt.counts == counts
    f(x, y)  # and the next good call trains as before
    assert opt.t == t + 1


def _tiny(dev, n_hidden=2):
    rng = np.random.default_rng(0)
    ps = [lk.tensor((rng.standard_normal((32, 24)) * 0.2).astype(np.float32), device=dev,
                    requires_grad=True)]
    ps += [lk.tensor((rng.standard_normal((32, 32)) * 0.2).astype(np.float32), device=dev,
                     requires_grad=True) for _ in range(n_hidden)]
    ps.append(lk.tensor((rng.standard_normal((10, 32)) * 0.2).astype(np.float32), device=dev,
                        requires_grad=True))
    x = lk.tensor(rng.standard_normal((6, 24)).astype(np.float32), device=dev)
    y = lk.tensor(rng.integers(0, 10, 6), device=dev)
    return ps, x, y


def _forward(ps, x, y):
    h = x
    for p in ps[:-1]:
        h = F.relu(F.linear(h, p))
    return F.softmax_cross_entropy(F.linear(h, ps[-1]), y)


def test_an_argument_that_is_the_weight_at_a_replay_sees_it_before_the_update(dev):
    """Traced with another array, called with the weight's own: read between backward and
    the update, it must be the weight before the update, as in the eager step."""
    def run(compiled):
        ps, x, y = _tiny(dev)
        opt = lk.optimizers.SGD(lr=0.1).setup({f"p{i}": p for i, p in enumerate(ps)})

        def step(x, y, z):
            loss = _forward(ps, x, y)
            opt.zero_grad()
            loss.backward()
            s = (z * z).sum()
            opt.update()
            return s
        f = lk.compile(step) if compiled else step
        other = lk.tensor(np.ones((32, 24), np.float32), device=dev)
        outs = [f(x, y, other).numpy() for _ in range(3)]
        outs.append(f(x, y, lk.Tensor(ps[0].data)).numpy())
        return outs + [p.numpy() for p in ps]
    _same(run(False), run(True))


def test_weights_tied_after_compiling_train_as_in_the_eager_step(dev):
    def run(compiled):
        ps, x, y = _tiny(dev)
        opt = lk.optimizers.SGD(lr=0.1).setup({f"p{i}": p for i, p in enumerate(ps)})

        def step(x, y):
            loss = _forward(ps, x, y)
            opt.zero_grad()
            loss.backward()
            opt.update()
            return loss
        f = lk.compile(step) if compiled else step
        for _ in range(3):
            f(x, y)
        ps[2].data = ps[1].data  # the two hidden layers share one array from now on
        outs = [f(x, y).numpy() for _ in range(2)]
        return outs + [p.grad.numpy() for p in ps] + [p.numpy() for p in ps]
    _same(run(False), run(True))


def test_a_failing_schedule_or_op_leaves_what_the_eager_step_leaves(dev):
    """A learning-rate schedule that raises for the last weight at step 3, or an op between
    backward and the update that raises (a guard against a non-finite loss): the weights the
    eager step had not updated when it raised are not updated either."""
    from .test_user_ops import Finite

    def run(compiled, fail):
        ps, x, y = _tiny(dev)
        lrs = [0.1, 0.1, 0.1]  # NOTE: one step short for the last weight
        groups = [{"name": "p3", "lr": lambda t: lrs[t]}] if fail == "schedule" else None
        opt = lk.optimizers.SGD(lr=0.1).setup({f"p{i}": p for i, p in enumerate(ps)},
                                              groups=groups)

        def step(x, y, k):
            loss = _forward(ps, x, y)
            opt.zero_grad()
            loss.backward()
            if fail == "op":  # NOTE: its result returned: an unused one is dead code
                loss = Finite().apply((loss * k,))
            opt.update()
            return loss
        f = lk.compile(step) if compiled else step
        one = lk.tensor(np.float32(1), device=dev)
        for _ in range(3):
            f(x, y, one)
        bad = lk.tensor(np.float32(np.inf if fail == "op" else 1), device=dev)
        with pytest.raises((IndexError, FloatingPointError)):
            f(x, y, bad)
        return [p.numpy() for p in ps], opt.t, list(opt.counts)
    for fail in ("schedule", "op"):
        (pe, te, ce), (pc, tc, cc) = run(False, fail), run(True, fail)
        _same(pe, pc)
        assert (te, ce) == (tc, cc) == (3, [3] * 4)


def test_the_first_product_of_a_step_looks_up_the_rates_for_the_others(monkeypatch):
    """Each fused product used to look up every parameter's rate (quadratic in the
    parameters); the first to run in a replay looks them up for all: it is the first of them
    in the program's order, whatever the passes after this one moved."""
    from labkit.compile import sgd

    ps, opt, x, y = _setup("cl", 1)
    f = lk.compile(_make_step(ps, opt))
    for k in range(3):
        opt.lr = [0.1, 0.2, 0.3][k]
        f(x, y)
    products = [n.fn for n in f.programs()[0].nodes if isinstance(n.fn, sgd._ProductUpdate)]
    assert len(products) == 3
    assert [p.first for p in products] == [True, False, False]
    assert all(p.step is products[0].step for p in products)
    looked = []
    real = sgd._step_rates
    monkeypatch.setattr(sgd, "_step_rates", lambda *a: looked.append(1) or real(*a))
    f(x, y)
    assert looked == [1]


@pytest.mark.parametrize("batch", [1, 8])
@pytest.mark.parametrize("reassociate", [True, False])
def test_a_matmul_style_mlp_updates_its_weights_in_their_products(batch, reassociate):
    """``x @ W.T + b``: its weight gradients computed in rows (compile/transposed.py, with
    reassociate), so the plain SGD update of every weight runs in its product's kernel, as
    with F.linear (the benchmarks' MLP at batch 1 took 1.9 ms, 0.5 with F.linear; now 0.5
    both). Close to eager; without reassociate nothing moves: bit for bit."""
    want, _, _ = _run("cl", False, batch, matmul=True)
    got, _, f = _run("cl", True, batch, matmul=True, reassociate=reassociate)
    text = f.explain()
    if reassociate:
        assert "rows: 3 transposed" in text and "plain SGD update of 3 weight(s)" in text, text
        for a, b in zip(got, want):
            np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)
    else:
        assert "rows:" not in text
        _same(got, want)
