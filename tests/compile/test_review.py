"""Adversarial review of lk.compile (issue 18): each test is a way a compiled step could give
another result than the same step run eagerly. The standard: a compiled step gives the eager
result (bit-identical on cpu and on cl without fusion; within float32 rounding with fusion) or
raises CompileError; never a silently different number.

The first tests are the faults the review found (each fixed since; the test names the way it
failed); the others cover what the existing tests do not (optimizer chains and schedules,
every brick type, fusion of broadcast, 0-d, strided and float64 operands, lk.scan against the
unrolled loop)."""

import sys
import threading

import numpy as np
import pytest

import labkit as lk
import labkit.bricks as B
import labkit.functions as F
import labkit.optimizers as O
import labkit.roles as R
from labkit.compile import scan
from labkit.errors import CompileError


def arr(a, dev, rg=False):
    return lk.tensor(np.asarray(a, np.float32), device=dev, requires_grad=rg)


def close(a, b, dev, fuse=True):
    a = a.numpy() if isinstance(a, lk.Tensor) else np.asarray(a)
    b = b.numpy() if isinstance(b, lk.Tensor) else np.asarray(b)
    if str(dev) == "cpu" or not fuse:
        return np.array_equal(a, b, equal_nan=True)
    return np.allclose(a, b, rtol=1e-5, atol=1e-6, equal_nan=True)


def eager_or_refused(run_eager, run_compiled):
    """The compiled run's values equal the eager run's, or it raised CompileError."""
    want = run_eager()
    try:
        got = run_compiled()
    except CompileError:
        return
    assert len(got) == len(want)
    for k, (a, b) in enumerate(zip(want, got)):
        np.testing.assert_array_equal(b, a, err_msg=f"call {k + 1}")


# ---- faults: silent wrong results ------------------------------------------------------------


def test_constant_gradient_is_not_shared_between_replays(dev):
    rng = np.random.default_rng(0)
    xs = [arr(rng.standard_normal((4, 3)), dev) for _ in range(5)]

    def run(compiled):
        lk.bricks.set_seed(0)
        m = B.Linear(3, 2).to(dev)

        def grads(x):  # forward and backward compiled; the update is the user's own
            for p in m.params().values():
                p.grad = None
            loss = F.mean(m(x))
            loss.backward()
            return loss

        f = lk.compile(grads) if compiled else grads
        out = []
        for x in xs:
            f(x)
            for p in m.params().values():
                p.grad.data *= 0.5  # the user's own gradient scaling, in place
                p.data -= 0.1 * p.grad.data
            out.append(m.b.grad.numpy().copy())
        return out

    for k, (a, b) in enumerate(zip(run(False), run(True))):
        np.testing.assert_array_equal(b, a, err_msg=f"b.grad after call {k + 1}")


def test_raw_slice_of_an_argument_is_not_frozen_when_calls_1_and_2_agree():
    rng = np.random.default_rng(0)
    W = lk.tensor(rng.standard_normal((7, 3)).astype(np.float32))
    ids = [rng.integers(0, 7, (2, 5)) for _ in range(3)]
    batches = [ids[0], ids[0], ids[1], ids[2]]  # the first batch twice

    def step(b):
        return F.sum(F.embed_id(b[:, :-1], W) * 2.0)

    eager_or_refused(lambda: _calls(step, batches), lambda: _calls(lk.compile(step), batches))


def _calls(f, batches):
    return [f(b).numpy() for b in batches]


def test_charlstm_step_with_a_repeated_first_batch():
    from labkit.models import charlstm

    rng = np.random.default_rng(0)
    texts = [{"text": rng.integers(0, 7, (3, 6))} for _ in range(3)]
    texts = [texts[0]] + texts

    def run(compiled, state=None):
        lk.bricks.set_seed(0)
        m = charlstm.CharLSTM(list("abcdefg"), embed=4, hidden=5, dropout=0.0)
        if state is not None:
            m.load_state_dict(state)
        opt = O.SGD(0.1).setup(m)

        def step(b):
            opt.zero_grad()
            loss = charlstm.loss_fn(m, b)
            loss.backward()
            opt.update()
            return loss

        f = lk.compile(step) if compiled else step
        return m, [f(b).numpy() for b in texts]

    lk.bricks.set_seed(0)
    start = charlstm.CharLSTM(list("abcdefg"), embed=4, hidden=5, dropout=0.0).state_dict()
    eager_or_refused(lambda: run(False, start)[1], lambda: run(True, start)[1])


def test_parameter_read_after_its_detached_copy_gets_its_grad(dev):
    rng = np.random.default_rng(0)
    p0 = rng.standard_normal((3, 4)).astype(np.float32)
    xs = [arr(rng.standard_normal((3, 4)), dev) for _ in range(5)]

    def run(compiled):
        p = arr(p0, dev, rg=True)
        opt = O.SGD(0.1).setup({"p": p})

        def step(x):
            opt.zero_grad()
            loss = F.sum(x * p.detach()) + F.sum(x * x * p)
            loss.backward()
            opt.update()
            return loss

        f = lk.compile(step) if compiled else step
        out = []
        for x in xs:
            f(x)
            out.append(p.grad.numpy().copy())
        return out

    for k, (a, b) in enumerate(zip(run(False), run(True))):
        np.testing.assert_array_equal(b, a, err_msg=f"p.grad after call {k + 1}")


def test_new_data_of_a_parameter_read_after_its_detached_copy(dev):
    p = arr(np.ones((2, 3)), dev, rg=True)
    x = arr(np.ones((2, 3)), dev)

    def step(x):
        return F.sum(x * p.detach()) + F.sum(x * p)

    f = lk.compile(step)
    for _ in range(3):
        f(x)
    p.data = arr(np.full((2, 3), 5.0), dev).data
    assert f(x).item() == step(x).item()


@pytest.mark.parametrize("change", ["dropout_ratio", "batchnorm_momentum", "mlp_activation"])
def test_brick_attribute_changed_after_compiling(change, dev):
    x = arr(np.arange(6).reshape(2, 3), dev)
    if change == "dropout_ratio":
        brick = B.Dropout(0.5, seed=1).to(dev)
    elif change == "batchnorm_momentum":
        brick = B.BatchNorm(3).to(dev)
    else:
        lk.bricks.set_seed(0)
        brick = B.MLP([3, 4, 2]).to(dev)

    def step(x):
        return F.sum(brick(x)), brick.running_mean if change == "batchnorm_momentum" else None

    f = lk.compile(step)
    for _ in range(3):
        f(x)
    if change == "dropout_ratio":
        brick.ratio = 0.0
    elif change == "batchnorm_momentum":
        brick.momentum = 1.0
    else:
        brick.activation = F.tanh
    try:
        got, rm = f(x)
        got, rm = got.numpy(), None if rm is None else np.array(rm if isinstance(rm, np.ndarray)
                                                                else rm.get())
    except CompileError:
        return
    if change == "batchnorm_momentum":  # momentum 1: the running mean is the batch mean
        np.testing.assert_allclose(rm, [1.5, 2.5, 3.5], rtol=1e-6)
    else:
        assert close(got, step(x)[0], dev), (got, step(x)[0].numpy())


def test_two_threads_replaying_one_compiled_step():
    def predict(x):
        return F.tanh(x * 2.0) + 1.0

    f = lk.compile(predict)
    xs = [lk.tensor(np.full((256, 256), v, np.float32)) for v in (0.1, -0.3)]
    f(xs[0])
    f(xs[0])
    want = [predict(x).numpy() for x in xs]
    wrong = [0]

    def worker(i):
        for _ in range(1500):
            if not np.array_equal(f(xs[i]).numpy(), want[i]):
                wrong[0] += 1

    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        ts = [threading.Thread(target=worker, args=(i,)) for i in range(2)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
    finally:
        sys.setswitchinterval(old)
    assert wrong[0] == 0, f"{wrong[0]} of 3000 replays returned another thread's values"


# ---- faults: refusals and differences that are not compile's --------------------------------


@pytest.mark.parametrize("cell", ["LSTM", "GRU"])
def test_recurrent_brick_with_a_numpy_mask_compiles(cell, dev):
    rng = np.random.default_rng(0)
    lk.bricks.set_seed(0)
    rnn = getattr(B, cell)(3, 4).to(dev)
    batches = [(arr(rng.standard_normal((2, 5, 3)), dev),
                (rng.random((2, 5)) > 0.3).astype(np.float32)) for _ in range(4)]

    def step(x, m):
        return F.sum(rnn(x, m))

    f = lk.compile(step)
    for x, m in batches:
        assert close(f(x, m), step(x, m), dev)
    assert f.stats["replays"] == 2


def test_scan_gradient_of_an_unused_carry_is_none_like_the_unrolled_loop():
    rng = np.random.default_rng(0)
    x = arr(rng.standard_normal((2, 3, 2)), "cpu", rg=True)
    h0 = arr(rng.standard_normal((2, 2)), "cpu", rg=True)
    c0 = arr(rng.standard_normal((2, 2)), "cpu", rg=True)

    def fn(carry, xt):
        h, c = carry
        h2 = F.tanh(xt + h)
        return (h2, c + h2), h2

    _, ys = scan(fn, x, (h0, c0), axis=1)
    F.sum(ys).backward()
    assert h0.grad is not None
    assert c0.grad is None


# ---- behaviour that is right (not covered elsewhere) -----------------------------------------


def _twins(make, dev):
    lk.bricks.set_seed(0)
    a = make().to(dev)
    lk.bricks.set_seed(0)
    b = make().to(dev)
    b.load_state_dict(a.state_dict())
    return a, b


def _train_both(make, make_opt, batches, dev, fuse=True, between=None, loss=None):
    loss = loss or (lambda m, x, t: F.softmax_cross_entropy(m(x), t))
    a, b = _twins(make, dev)
    oa, ob = make_opt(a), make_opt(b)

    def stepper(m, o):
        def step(x, t):
            o.zero_grad()
            out = loss(m, x, t)
            out.backward()
            o.update()
            return out
        return step

    # NOTE: reassociate=False keeps the exact comparison on cpu (gathering a loop's sum of
    # products reassociates it: test_reassociate.py checks that path to float32 rounding)
    ea, cb = stepper(a, oa), lk.compile(stepper(b, ob), fuse=fuse, reassociate=False)
    for k, (x, t) in enumerate(batches):
        if between is not None:
            between(k, oa)
            between(k, ob)
        assert close(cb(x, t), ea(x, t), dev, fuse), f"loss at call {k + 1}"
    sa, sb = a.state_dict(), b.state_dict()
    for key in sa:
        assert close(sb[key], sa[key], dev, fuse), f"{key} after {len(batches)} calls"
    for (name, pa), pb in zip(a.params().items(), b.params().values()):
        assert (pa.grad is None) == (pb.grad is None), name
        if pa.grad is not None:
            assert close(pb.grad, pa.grad, dev, fuse), f"{name}.grad"
    assert cb.stats["replays"] == len(batches) - 2 and cb.stats["retraces"] == 0


def _batches(dev, shape=(6, 5), n=5, seed=0):
    rng = np.random.default_rng(seed)
    return [(lk.tensor(rng.standard_normal(shape).astype(np.float32), device=dev),
             rng.integers(0, 3, shape[0])) for _ in range(n)]


OPTIMIZERS = {
    "clip_adam": lambda m: O.chain(O.GradientClipping(0.3), O.Adam(0.01)).setup(m),
    "decay_nesterov": lambda m: O.chain(O.WeightDecay(0.1), O.Nesterov(0.1)).setup(m),
    "sgd_maxnorm": lambda m: O.chain(O.SGD(1.0), constraints=[O.MaxNorm(0.5)]).setup(m),
    "adamw_groups": lambda m: O.AdamW(0.01).setup(
        m, groups=[{"role": R.BIAS, "weight_decay": 0, "lr": 0.5}]),
    "rmsprop_stepdecay": lambda m: O.RMSProp(O.StepDecay(0.01, 2, 0.5)).setup(m),
    "adagrad_warmup_cosine": lambda m: O.AdaGrad(O.WarmUp(2, O.Cosine(0.1, 4))).setup(m),
}


@pytest.mark.parametrize("name", list(OPTIMIZERS))
def test_optimizer_chains_and_schedules_with_lr_changes(name, dev):
    def lr_changes(k, opt):
        if name in ("clip_adam", "decay_nesterov", "adamw_groups") and k in (3, 4):
            opt.lr = {3: 0.001, 4: 0.3}[k]

    _train_both(lambda: B.MLP([5, 6, 3]), OPTIMIZERS[name], _batches(dev), dev,
                between=lr_changes)


def _pool(x):
    return F.max_pool2d(x, 2)


def _avg(x):
    return F.avg_pool2d(x, 2)


def _last(h):
    return h[:, -1]


BRICKS = {
    "conv_batchnorm_maxpool": (lambda: B.Sequence(
        B.Conv2D(2, 3, 3, pad=1), B.BatchNorm(3), B.ReLU(), _pool, B.Flatten(),
        B.Linear(12, 3)), (4, 2, 4, 4)),
    "strided_conv_avgpool_dropout": (lambda: B.Sequence(
        B.Conv2D(2, 3, 3, stride=2, pad=1), _avg, B.Flatten(), B.Dropout(0.3),
        B.Linear(3, 3)), (4, 2, 4, 4)),
    "conv_transpose": (lambda: B.Sequence(
        B.ConvTranspose2D(2, 2, 4, stride=2, pad=1), B.BatchNorm(2), B.Tanh(), B.Flatten(),
        B.Linear(128, 3)), (4, 2, 4, 4)),
    "residual_block": (lambda: B.Sequence(
        B.BasicBlock(2, 3, stride=2), B.Flatten(), B.Linear(12, 3)), (4, 2, 4, 4)),
    "lstm": (lambda: B.Sequence(B.LSTM(5, 4), _last, B.Linear(4, 3)), (3, 4, 5)),
    "gru": (lambda: B.Sequence(B.GRU(5, 4), _last, B.Linear(4, 3)), (3, 4, 5)),
    "layernorm_gelu_leaky_elu": (lambda: B.Sequence(
        B.LayerNorm(5), B.GELU(), _last, B.Linear(5, 4), lambda h: F.leaky_relu(h, 0.2),
        B.Linear(4, 4), F.elu, B.Linear(4, 3)), (3, 4, 5)),
}


@pytest.mark.parametrize("name", list(BRICKS))
def test_each_brick_type_trains_like_eager(name, dev):
    make, shape = BRICKS[name]
    _train_both(make, lambda m: O.Adam(0.01).setup(m), _batches(dev, shape, n=4), dev)


def test_embedding_lstm_dropout_with_integer_ids(dev):
    rng = np.random.default_rng(1)
    batches = [(rng.integers(0, 7, (3, 4)), rng.integers(0, 3, 3)) for _ in range(4)]
    _train_both(lambda: B.Sequence(B.Embedding(7, 5), B.LSTM(5, 4), B.Dropout(0.2), _last,
                                   B.Linear(4, 3)),
                lambda m: O.Adam(0.01).setup(m), batches, dev)


FUSION = {
    "broadcast_row": (lambda a, b: F.exp(a * b + 1.0) - b, [(3, 4), (4,)]),
    "broadcast_both": (lambda a, b: F.sigmoid(a - b) * (a + b), [(3, 1), (1, 4)]),
    "zero_d": (lambda a, b: F.sqrt(a * a + b) + 1.0, [(3, 4), ()]),
    "transposed": (lambda a, b: F.relu(F.transpose(a) * b) + 1.0, [(4, 3), (3, 4)]),
    "strided_slice": (lambda a, b: F.exp(a[:, ::2] * b) - 1.0, [(3, 8), (3, 4)]),
    "float64": (lambda a, b: F.exp(a * b + 0.1) / (b + 3.0), [(3, 4), (3, 4)]),
    "twenty_inputs": (lambda *xs: F.tanh(_chain(xs)), [(4,)] * 20),
}


def _chain(xs):
    s = xs[0]
    for x in xs[1:]:
        s = s * 0.5 + x
    return s


@pytest.mark.parametrize("fuse", [False, True], ids=["unfused", "fused"])
@pytest.mark.parametrize("name", list(FUSION))
def test_fusion_operands(name, fuse, dev):
    fn, shapes = FUSION[name]
    rng = np.random.default_rng(0)
    dt = np.float64 if name == "float64" else np.float32
    args = [lk.tensor(rng.standard_normal(s).astype(dt), device=dev) for s in shapes]
    f = lk.compile(fn, fuse=fuse)
    for _ in range(4):
        got = f(*args)
    assert got.dtype == dt
    assert close(got, fn(*args), dev, fuse)


def test_scan_gradients_match_the_unrolled_loop():
    """Two carries, two outputs, a sequence that does not require grad, both remat modes,
    and a scan nested in a scan."""
    rng = np.random.default_rng(0)
    W = arr(rng.standard_normal((3, 3)) * 0.5, "cpu", rg=True)
    x = arr(rng.standard_normal((2, 4, 3)), "cpu", rg=True)
    h0 = arr(rng.standard_normal((2, 3)), "cpu", rg=True)
    c0 = arr(rng.standard_normal((2, 3)), "cpu", rg=True)
    ns = arr(rng.standard_normal((2, 4, 3)), "cpu")
    leaves = (W, x, h0, c0)

    def fn(carry, xt, nt):
        h, c = carry
        h2 = F.tanh(F.matmul(xt, W) + h) * nt
        return (h2, c + h2 * h), (h2 * 2.0, c)

    def unrolled():
        carry, ys1, ys2 = (h0, c0), [], []
        for t in range(4):
            carry, (a, b) = fn(carry, x[:, t], ns[:, t])
            ys1.append(a)
            ys2.append(b)
        return carry, (F.stack(ys1, 1), F.stack(ys2, 1))

    def grads(run):
        for v in leaves:
            v.grad = None
        (h, c), (y1, y2) = run()
        (F.sum(h * h) + F.sum(c) * 0.3 + F.sum(y1 * y1) + F.sum(F.sin(y2))).backward()
        return [v.grad.numpy() for v in leaves]

    want = grads(unrolled)
    for remat in (False, True):
        got = grads(lambda r=remat: scan(fn, (x, ns), (h0, c0), axis=1, remat=r))
        for name, a, b in zip("W x h0 c0".split(), want, got):
            np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-6, err_msg=f"{name} {remat}")

    def inner(h, xt):
        return F.tanh(h + xt * 0.5), h

    def outer(h, xt):
        hi, ys = scan(inner, F.reshape(xt, (2, 3, 1)), h[:, :1], axis=1)
        return F.tanh(F.matmul(h, W)) + hi, ys

    def outer_unrolled():
        h, ys = h0, []
        for t in range(4):
            hi, iy = h[:, :1], []
            for k in range(3):
                iy.append(hi)
                hi = F.tanh(hi + F.reshape(x[:, t], (2, 3, 1))[:, k] * 0.5)
            h = F.tanh(F.matmul(h, W)) + hi
            ys.append(F.stack(iy, 1))
        return h, F.stack(ys, 1)

    def nested_grads(run):
        for v in leaves:
            v.grad = None
        h, ys = run()
        (F.sum(h * h) + F.sum(ys)).backward()
        return [v.grad.numpy() for v in (W, x, h0)]

    for a, b in zip(nested_grads(outer_unrolled),
                    nested_grads(lambda: scan(outer, x, h0, axis=1))):
        np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-6)


def test_compiled_scan_with_two_carries_and_a_constant_sequence(dev):
    rng = np.random.default_rng(0)
    W = arr(rng.standard_normal((3, 3)) * 0.5, dev, rg=True)
    ns = arr(rng.standard_normal((2, 4, 3)), dev)
    h0, c0 = arr(np.zeros((2, 3)), dev), arr(np.ones((2, 3)), dev)

    def step(x):
        W.grad = None

        def fn(carry, xt, nt):
            h, c = carry
            h2 = F.tanh(F.matmul(xt, W) + h) * nt
            return (h2, c * h2), (h2, c)

        (h, c), (y1, y2) = scan(fn, (x, ns), (h0, c0), axis=1)
        loss = F.sum(h) + F.sum(y2 * y1)
        loss.backward()
        return loss, W.grad

    f = lk.compile(step, reassociate=False)  # exact on cpu (see _train_both)
    for _ in range(4):
        x = arr(rng.standard_normal((2, 4, 3)), dev)
        (lc, gc), (le, ge) = f(x), step(x)
        assert close(lc, le, dev) and close(gc, ge, dev)
