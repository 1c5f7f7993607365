import numpy as np
import pytest

import labkit as lk
import labkit.bricks as B
import labkit.functions as F
from labkit import optimizers as O


def reference(name, hp, p, grads):
    """The textbook (PyTorch) update of each optimizer, in float64 NumPy."""
    p = p.copy()
    m = np.zeros_like(p)
    v = np.zeros_like(p)
    for t, g in enumerate(grads, start=1):
        if name == "SGD":
            p -= hp["lr"] * g
        elif name in ("Momentum", "Nesterov"):
            m = hp["momentum"] * m + g
            step = g + hp["momentum"] * m if name == "Nesterov" else m
            p -= hp["lr"] * step
        elif name == "AdaGrad":
            v += g * g
            p -= hp["lr"] * g / (np.sqrt(v) + 1e-10)
        elif name == "RMSProp":
            v = hp["alpha"] * v + (1 - hp["alpha"]) * g * g
            p -= hp["lr"] * g / (np.sqrt(v) + 1e-8)
        elif name in ("Adam", "AdamW"):
            m = 0.9 * m + 0.1 * g
            v = 0.999 * v + 0.001 * g * g
            step = hp["lr"] * (m / (1 - 0.9 ** t)) / (np.sqrt(v / (1 - 0.999 ** t)) + 1e-8)
            if name == "AdamW":
                step = step + hp["lr"] * hp["weight_decay"] * p
            p -= step
    return p


OPTS = {
    "SGD": {"lr": 0.1},
    "Momentum": {"lr": 0.1, "momentum": 0.9},
    "Nesterov": {"lr": 0.1, "momentum": 0.9},
    "AdaGrad": {"lr": 0.1},
    "RMSProp": {"lr": 0.01, "alpha": 0.9},
    "Adam": {"lr": 0.01},
    "AdamW": {"lr": 0.01, "weight_decay": 0.1},
}


@pytest.mark.parametrize("name", sorted(OPTS))
def test_update_matches_the_formula(name, dev, rng):
    p0 = rng.standard_normal((3, 4))
    grads = [rng.standard_normal((3, 4)) for _ in range(5)]
    p = B.Parameter(lk.asarray(p0.copy(), device=dev), role=lk.roles.WEIGHT)
    opt = getattr(O, name)(**OPTS[name]).setup({"w": p})
    for g in grads:
        p.grad = lk.tensor(g, device=dev)
        opt.update()
    np.testing.assert_allclose(p.numpy(), reference(name, OPTS[name], p0, grads), rtol=1e-12,
                               atol=1e-13)


@pytest.mark.parametrize("name", sorted(OPTS))
def test_converges_on_a_small_problem(name, dev, rng):
    lk.bricks.set_seed(0)
    X = rng.standard_normal((64, 5)).astype(np.float32)
    Y = (X @ rng.standard_normal(5) > 0).astype(np.int64)
    model = B.Linear(5, 2).to(dev)
    hp = dict(OPTS[name])
    if name in ("Adam", "AdamW", "RMSProp"):
        hp["lr"] = 0.05
    opt = getattr(O, name)(**hp).setup(model)
    x = lk.tensor(X, device=dev)
    first = None
    for _ in range(60):
        opt.zero_grad()
        loss = F.softmax_cross_entropy(model(x), Y)
        loss.backward()
        opt.update()
        first = loss.item() if first is None else first
    assert loss.item() < 0.5 * first, (name, first, loss.item())


@pytest.mark.parametrize("name", ["Momentum", "Adam", "RMSProp"])
def test_restore_is_bitwise_exact(name, dev, rng):
    def make():
        lk.bricks.set_seed(1)
        m = B.MLP([4, 6, 3]).to(dev)
        return m, getattr(O, name)(**OPTS[name]).setup(m)

    X = rng.standard_normal((8, 4)).astype(np.float32)
    Y = rng.integers(0, 3, 8)

    def step(m, opt):
        opt.zero_grad()
        F.softmax_cross_entropy(m(lk.tensor(X, device=dev)), Y).backward()
        opt.update()

    m1, o1 = make()
    for _ in range(3):
        step(m1, o1)
    saved_model, saved_opt = m1.state_dict(), o1.state_dict()
    for _ in range(2):
        step(m1, o1)
    m2, o2 = make()
    m2.load_state_dict(saved_model)
    o2.load_state_dict(saved_opt)
    assert o2.t == 3
    for _ in range(2):
        step(m2, o2)
    for k, p in m1.params().items():
        assert p.numpy().tobytes() == m2.params()[k].numpy().tobytes(), k


def test_composite_rules_clipping_and_weight_decay_by_role(rng):
    m = B.Linear(3, 2)
    W, b = m.params()["/linear.W"], m.params()["/linear.b"]
    w0, b0 = W.numpy().copy(), b.numpy().copy()
    gW, gb = np.full((2, 3), 3.0, np.float32), np.full(2, 4.0, np.float32)
    W.grad, b.grad = lk.tensor(gW), lk.tensor(gb)
    clip = O.GradientClipping(1.0)
    opt = O.chain(clip, O.WeightDecay(0.5), O.SGD(lr=1.0)).setup(m)
    opt.update()
    norm = np.sqrt((gW ** 2).sum() + (gb ** 2).sum())
    assert clip.last_norm == pytest.approx(norm)
    np.testing.assert_allclose(W.numpy(), w0 - (gW / norm + 0.5 * w0), rtol=1e-6)
    np.testing.assert_allclose(b.numpy(), b0 - gb / norm, rtol=1e-6)  # bias: no decay


def test_parameter_groups_by_role_and_name():
    m = B.MLP([3, 4, 2])
    opt = O.SGD(lr=0.1).setup(m, groups=[{"role": lk.roles.BIAS, "lr": 0.0},
                                         {"name": "/mlp/linear_1.*", "lr": 1.0}])
    before = {k: p.numpy().copy() for k, p in m.params().items()}
    for p in m.params().values():
        p.grad = lk.tensor(np.ones(p.shape, np.float32))
    opt.update()
    after = {k: p.numpy() for k, p in m.params().items()}
    np.testing.assert_allclose(after["/mlp/linear_0.W"], before["/mlp/linear_0.W"] - 0.1)
    np.testing.assert_allclose(after["/mlp/linear_0.b"], before["/mlp/linear_0.b"])
    np.testing.assert_allclose(after["/mlp/linear_1.W"], before["/mlp/linear_1.W"] - 1.0)
    np.testing.assert_allclose(after["/mlp/linear_1.b"], before["/mlp/linear_1.b"] - 1.0)


def test_schedules():
    assert O.StepDecay(1.0, every=10, gamma=0.5)(25) == 0.25
    assert O.Exponential(2.0, 0.5)(3) == 0.25
    c = O.Cosine(1.0, total=100)
    assert c(0) == 1.0 and abs(c(50) - 0.5) < 1e-12 and c(100) == 0.0 and c(200) == 0.0
    w = O.WarmUp(4, O.Cosine(1.0, 100))
    assert w(0) == pytest.approx(0.25) and w(3) == pytest.approx(c(3))
    p = B.Parameter(np.zeros(1), role=lk.roles.WEIGHT)
    opt = O.SGD(lr=O.StepDecay(1.0, every=1, gamma=0.5)).setup({"p": p})
    for _ in range(3):
        p.grad = lk.tensor(np.ones(1))
        opt.update()
    np.testing.assert_allclose(p.numpy(), [-(1 + 0.5 + 0.25)])


def test_max_norm_constraint_on_weights_only():
    m = B.Linear(3, 2)
    W = m.params()["/linear.W"]
    W.data = np.full((2, 3), 10.0, np.float32)
    opt = O.chain(O.SGD(lr=0.0), constraints=[O.MaxNorm(1.0)]).setup(m)
    for p in m.params().values():
        p.grad = lk.tensor(np.zeros(p.shape, np.float32))
    opt.update()
    np.testing.assert_allclose(np.linalg.norm(W.numpy(), axis=1), [1.0, 1.0], rtol=1e-5)


def test_load_state_dict_names_parameters_without_state():
    m = B.Linear(3, 2)
    opt = O.Adam().setup(m)
    state = opt.state_dict()
    state["state"].pop("/linear.b")
    with pytest.raises(lk.CheckpointError, match="no state for /linear.b"):
        O.Adam().setup(m).load_state_dict(state)


def test_lr_reads_and_sets_the_same_rule():
    # chain(Adam, GradientClipping): lr read the last rule (None) but set Adam's
    p = B.Parameter(np.zeros(3, np.float32), role=lk.roles.WEIGHT)
    adam, clip = O.Adam(lr=0.1), O.GradientClipping(1.0)
    opt = O.chain(adam, clip).setup({"p": p})
    assert opt.lr == 0.1
    opt.lr = 0.5
    assert opt.lr == 0.5 and adam.hyper["lr"] == 0.5 and "lr" not in clip.hyper
    # and the step uses it: Adam's first step is lr * sign(g) (bias-corrected moments)
    p.grad = lk.tensor(np.array([1e-3, -1e-3, 2e-3], np.float32))
    opt.update()
    np.testing.assert_allclose(p.numpy(), [-0.5, 0.5, -0.5], rtol=1e-4)
    # a schedule reads as its value at the current step
    opt.lr = O.StepDecay(1.0, every=1, gamma=0.5)
    assert opt.t == 1 and opt.lr == 0.5
    # no rule with a learning rate: reading gives None, setting is an error
    bare = O.chain(O.GradientClipping(1.0)).setup({"p": p})
    assert bare.lr is None
    with pytest.raises(TypeError, match="no rule with a learning rate"):
        bare.lr = 0.1


@pytest.mark.parametrize("rules", [
    lambda: [O.SGD(0.1)], lambda: [O.Momentum(0.1, 0.9)], lambda: [O.Nesterov()],
    lambda: [O.AdaGrad()], lambda: [O.RMSProp()], lambda: [O.Adam(O.Cosine(1e-2, 10))],
    lambda: [O.AdamW()], lambda: [O.WeightDecay(1e-2), O.Momentum()],
    lambda: [O.GradientClipping(1.0), O.SGD()],
    # a schedule giving a NumPy float64 promotes the state: the pieces step aside
    lambda: [O.Momentum(lambda t: np.float64(0.1), np.float64(0.9))],
    # SGD's kept-scratch pieces take a Python number or a float32 scalar; a float64 one
    # (g * lr in float64, then one rounding) takes the general path
    lambda: [O.SGD(np.float64(0.1))], lambda: [O.SGD(np.float32(0.1))], lambda: [O.SGD(1)],
    lambda: [O.SGD(O.StepDecay(0.3, every=1, gamma=0.7))],
], ids=["sgd", "momentum", "nesterov", "adagrad", "rmsprop", "adam", "adamw", "decay",
        "clipping", "float64", "sgd-f64", "sgd-f32", "sgd-int", "sgd-schedule"])
@pytest.mark.parametrize("numpy_blas", [False, True], ids=["numpy", "blas"])
def test_cpu_update_in_pieces_is_bitwise_the_whole_array_update(rules, numpy_blas, rng,
                                                                 monkeypatch):
    """Bit for bit; but SGD's pieces are one BLAS axpy where NumPy's own BLAS can be called
    (backend/blas.py), which rounds ``p - lr * g`` once (fused multiply-add) where the unfused
    update rounds twice: there, within half a unit of ``lr * g`` per step."""
    from labkit.backend import blas
    from labkit.optimizers import fused as _fused

    if numpy_blas and not blas.available():
        pytest.skip("NumPy is not built on its bundled OpenBLAS here (backend/blas.py)")
    monkeypatch.setattr(blas, "ENABLED", numpy_blas)

    # NOTE: sizes around the piece size, one not a multiple of it, a weight and a bias role
    n = _fused.PIECE
    shapes = [(3, n // 2 + 5), (2 * n + 1,), (7,), (n,)]
    p0 = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    grads = [[rng.standard_normal(s).astype(np.float32) for s in shapes] for _ in range(3)]
    runs = []
    for fused in (True, False):
        ps = {f"p{i}": lk.tensor(p.copy(), requires_grad=True) for i, p in enumerate(p0)}
        ps["p0"].role = lk.roles.WEIGHT
        ps["p1"].role = lk.roles.BIAS
        opt = O.chain(*rules()).setup(ps, groups=[{"name": "p3", "lr": 0.5}])
        opt.fused = fused
        for gs in grads:
            for p, g in zip(ps.values(), gs):
                p.grad = lk.tensor(g)
            opt.update()
        runs.append(([p.data for p in ps.values()],
                     [(k, v) for st in opt.states for s in st for k, v in sorted(s.items())]))
    (pa, sa), (pb, sb) = runs
    one_rounding = numpy_blas and len(rules()) == 1 and type(rules()[0]) is O.SGD
    for a, b in zip(pa, pb):
        assert a.dtype == b.dtype
        if one_rounding:  # NOTE: parameters and steps of about 1: an absolute bound
            np.testing.assert_allclose(a, b, rtol=0, atol=len(grads) * 2.0 ** -22)
        else:
            assert np.array_equal(a, b)
    assert [k for k, _ in sa] == [k for k, _ in sb]
    for (_, a), (_, b) in zip(sa, sb):
        assert a.dtype == b.dtype and np.array_equal(a, b)


def test_cpu_sgd_pieces_are_one_blas_axpy(rng, monkeypatch):
    """Where NumPy's BLAS is reachable, a large parameter's SGD step is ``p += (-lr) * g`` in
    one BLAS call, not a multiply and a subtract: each element is the once-rounded value
    (fused multiply-add; computed here exactly, in float64) or, on a CPU without FMA, NumPy's;
    with the BLAS turned off, NumPy's."""
    from labkit.backend import blas
    from labkit.optimizers import fused as _fused

    if not blas.available():
        pytest.skip("NumPy is not built on its bundled OpenBLAS here (backend/blas.py)")
    calls = []
    axpy = blas.axpy
    monkeypatch.setattr(blas, "axpy", lambda *a: calls.append(axpy(*a)) or calls[-1])
    n = 4 * _fused.PIECE + 3
    p0 = rng.standard_normal(n).astype(np.float32)
    g = rng.standard_normal(n).astype(np.float32)
    lr = 0.1
    two = p0 - g * np.float32(lr)
    # NOTE: float32 * float32 is exact in float64; the difference then rounds twice (to
    # float64, to float32), which differs from one rounding in about 1 of 2**29 cases
    one = (p0.astype(np.float64) - g.astype(np.float64) * np.float64(np.float32(lr))
           ).astype(np.float32)
    assert not np.array_equal(one, two)  # NOTE: the data tells the two apart
    p = lk.tensor(p0.copy(), requires_grad=True)
    opt = O.SGD(lr).setup({"p": p})
    p.grad = lk.tensor(g)
    opt.update()
    assert calls == [True]
    assert np.all((p.data == one) | (p.data == two))
    monkeypatch.setattr(blas, "ENABLED", False)
    q = lk.tensor(p0.copy(), requires_grad=True)
    opt = O.SGD(lr).setup({"q": q})
    q.grad = lk.tensor(g)
    opt.update()
    assert calls == [True, False] and np.array_equal(q.data, two)


def test_cpu_update_pieces_only_known_elementwise_rules(rng):
    """A rule that overrides ``apply`` may look at the whole array (here its mean): it is
    given the whole array, never a piece."""
    from labkit.optimizers import fused as _fused

    class Centered(O.SGD):
        def apply(self, ps, steps, states, groups, t):
            return [(g - g.mean()) * self.hyper["lr"] for g in steps]

    n = 3 * _fused.PIECE
    p0 = rng.standard_normal(n).astype(np.float32)
    g = np.linspace(0, 1, n, dtype=np.float32)
    p = lk.tensor(p0.copy(), requires_grad=True)
    opt = Centered(0.1).setup({"p": p})
    p.grad = lk.tensor(g)
    opt.update()
    np.testing.assert_array_equal(p.data, p0 - (g - g.mean()) * np.float32(0.1))


def test_cpu_update_pieces_step_aside_where_they_could_differ(rng):
    """A gradient that is another view of the parameter's memory, two parameters sharing one
    array (decay reads both before either changes), a learning rate per row: the update is
    the whole-array one, bit for bit; a schedule is called once per parameter and update."""
    from labkit.optimizers import fused as _fused

    n = 3 * _fused.PIECE
    calls = []

    def schedule(step):
        calls.append(step)
        return 0.1

    def run(fused, case):
        base = rng_values.copy()
        if case == "reversed_grad":
            p = lk.tensor(base, requires_grad=True)
            p.role = lk.roles.WEIGHT
            ps = {"p": p}
            grads = {"p": p.data[::-1]}
        elif case == "shared":
            a = lk.tensor(base, requires_grad=True)
            b = lk.tensor(base[:0], requires_grad=True)
            b.data = a.data.reshape(-1)  # NOTE: the same memory, another array
            a.role = b.role = lk.roles.WEIGHT
            ps = {"a": a, "b": b}
            grads = {"a": np.ones(n, np.float32), "b": np.full(n, 2, np.float32)}
        else:  # a learning rate per element, as an array
            p = lk.tensor(base, requires_grad=True)
            ps = {"p": p}
            grads = {"p": np.ones(n, np.float32)}
        rules = [O.WeightDecay(0.5), O.SGD(0.1)] if case != "array_lr" else [
            O.SGD(np.linspace(0, 1, n, dtype=np.float32))]
        opt = O.chain(*rules).setup(ps)
        opt.fused = fused
        for name, g in grads.items():
            ps[name].grad = lk.tensor(g) if case != "reversed_grad" else lk.Tensor(g)
        opt.update()
        return [p.data.copy() for p in ps.values()]

    rng_values = rng.standard_normal(n).astype(np.float32)
    for case in ("reversed_grad", "shared", "array_lr"):
        for a, b in zip(run(True, case), run(False, case)):
            np.testing.assert_array_equal(a, b)
    p = lk.tensor(rng_values.copy(), requires_grad=True)
    opt = O.SGD(schedule).setup({"p": p})
    p.grad = lk.tensor(np.ones(n, np.float32))
    opt.update()
    assert calls == [0]


def test_cpu_update_pieces_step_aside_for_a_rule_with_its_own_h(rng):
    """A rule that overrides ``h`` (here: twice the learning rate) is asked once per
    hyper-parameter, in pieces as in the whole-array update (the pieces resolved the values
    and the rule's apply asked its h again: the step was four times lr)."""
    from labkit.optimizers import fused as _fused

    class Doubled(O.SGD):
        def h(self, name, group, step):
            v = super().h(name, group, step)
            return 2 * v if name == "lr" else v

    g = rng.standard_normal(3 * _fused.PIECE).astype(np.float32)
    outs = []
    for fused in (True, False):
        p = lk.tensor(np.zeros_like(g), requires_grad=True)
        opt = O.chain(Doubled(np.float64(0.1))).setup({"p": p})
        opt.fused = fused
        p.grad = lk.tensor(g)
        opt.update()
        outs.append(p.numpy())
    np.testing.assert_array_equal(outs[0], outs[1])
    np.testing.assert_allclose(outs[1], -0.2 * g, rtol=1e-6)


@pytest.mark.parametrize("lr", [lambda t: 0.1 / (t + 1), 3, 0.05, np.float32(0.1),
                                np.float64(0.2)],
                         ids=["schedule", "int", "float", "np-float32", "np-float64"])
def test_cl_sgd_kernel_kept_from_the_first_step_is_the_unfused_update(lr, rng):
    """On an OpenCL device SGD's kernel is written by its symbols once and kept (its rate is
    an argument): each later step, with a rate that changes, is bit for bit the unfused
    update; a rate the kernel cannot take (a NumPy float32) takes the unfused path; a
    schedule is asked once per parameter and step either way."""
    from labkit.optimizers import fused as _fused

    shapes = [(7, 5), (5,), (300,)]
    p0 = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    grads = [[rng.standard_normal(s).astype(np.float32) for s in shapes] for _ in range(4)]
    calls = []
    rate = (lambda t: calls.append(t) or lr(t)) if callable(lr) else lr
    out = []
    for fused in (True, False):
        _fused._SGD_BODY.clear()
        ps = {f"p{i}": lk.tensor(p.copy(), device="cl", requires_grad=True)
              for i, p in enumerate(p0)}
        opt = O.SGD(rate).setup(ps)
        opt.fused = fused
        for gs in grads:
            for p, g in zip(ps.values(), gs):
                p.grad = lk.tensor(g, device="cl")
            opt.update()
        out.append([p.numpy() for p in ps.values()])
        if callable(lr):
            assert calls == [t for t in range(4) for _ in shapes], calls
            calls.clear()
    for a, b in zip(*out):
        assert a.tobytes() == b.tobytes()


@pytest.mark.parametrize("name", ["SGD", "Adam"])
def test_cl_a_transposed_gradient_takes_the_one_kernel_update_bit_for_bit(name, rng,
                                                                            monkeypatch):
    """``x @ W.T``'s weight gradient is a transposed view: the update copies it contiguous
    (a tiled transpose) and runs its one kernel, where it ran elementwise kernels reading the
    view (the MLP's step at batch 1 in the matmul style took 1.9 ms against 0.5 with
    F.linear); the parameters are bit for bit those of the unfused update."""
    from labkit.backend.opencl import fused as cl_fused

    p0 = rng.standard_normal((48, 64)).astype(np.float32)
    gs = [rng.standard_normal((64, 48)).astype(np.float32) for _ in range(3)]
    launched = []
    real = cl_fused.run
    monkeypatch.setattr(cl_fused, "run", lambda *a, **k: launched.append(a[1]) or real(*a, **k))
    real_many = cl_fused.run_many
    monkeypatch.setattr(cl_fused, "run_many",
                        lambda *a, **k: launched.extend(a[1]) or real_many(*a, **k))
    out = []
    for fused in (True, False):
        w = lk.tensor(p0.copy(), device="cl", requires_grad=True)
        opt = getattr(O, name)(0.01).setup({"w": w})
        opt.fused = fused
        for g in gs:
            gt = lk.tensor(g, device="cl").T  # NOTE: a transposed view, as x @ W.T makes
            assert not gt.data.is_contiguous
            w.grad = gt
            opt.update()
            assert bool(launched) == fused, launched  # NOTE: the fused kernel at every step
            launched.clear()
        out.append(w.numpy())
    assert out[0].tobytes() == out[1].tobytes()


@pytest.mark.parametrize("name", ["SGD", "Momentum", "Adam"])
@pytest.mark.parametrize("view", [True, False])
def test_cl_a_gradient_that_is_another_parameters_memory_is_read_before_any_update(
        name, view, rng):
    """b.grad a (transposed) view of a's array: every step is computed before a parameter
    changes, fused as unfused (the fused path copied b's gradient after a's kernel ran)."""
    from labkit.autograd.tensor import Tensor

    a0 = rng.standard_normal((6, 6)).astype(np.float32)
    b0 = rng.standard_normal((6, 6)).astype(np.float32)
    out = []
    for fused in (True, False):
        a = lk.tensor(a0.copy(), device="cl", requires_grad=True)
        b = lk.tensor(b0.copy(), device="cl", requires_grad=True)
        opt = getattr(O, name)(0.1).setup({"a": a, "b": b})
        opt.fused = fused
        for _ in range(2):
            a.grad = lk.tensor(np.ones((6, 6), np.float32), device="cl")
            b.grad = Tensor(a.data.T if view else a.data)
            opt.update()
        out.append((a.numpy(), b.numpy()))
    for x, y in zip(*out):
        assert x.tobytes() == y.tobytes()
