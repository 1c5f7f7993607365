"""A tensor's ``.data`` set inside a compiled step is set by a replay where the step set it
(compile/writes.py ``SetData``), not when the call ends: a host function reading it through a
model after that point saw the old array, a replay that raised later lost it, a tensor
argument's new data was never set (later calls read the traced call's values), and
``WeightNoise`` (raw array code) was refused. Each compared with the eager step."""

import numpy as np
import pytest

import labkit as lk
import labkit.bricks as B
import labkit.functions as F
from labkit.autograd.tensor import Tensor
from labkit.errors import CompileError

from .setdata_helpers import noisy_step

P0 = np.array([0.5, -2.0, 3.0, 0.25], np.float32)
X = np.array([1.0, 2.0, -1.0, 4.0], np.float32)


def _host(d):
    return d if isinstance(d, np.ndarray) else d.get()


def test_a_host_function_reads_the_new_data_through_the_model(dev):
    """An EMA of the weights after weight clipping, taken by a host function through the
    optimizer: it saw the unclipped weights at every replay."""
    def run(compiled):
        P = lk.tensor(P0.copy(), device=dev, requires_grad=True)
        opt = lk.optimizers.SGD(lr=0.1).setup({"P": P})
        held, ema = {"opt": opt}, np.zeros(4, np.float32)

        def track():
            ema[:] = 0.5 * ema + 0.5 * _host(held["opt"].params["P"].data)

        def step(x):
            opt.zero_grad()
            loss = F.sum(P * P * x)
            loss.backward()
            opt.update()
            P.data = F.clip(P, -1.0, 1.0).data
            lk.compile.host(track, effect=True)
            return loss
        f = lk.compile(step) if compiled else step
        x = lk.tensor(X, device=dev)
        out = []
        for _ in range(5):
            f(x)
            out.append(ema.copy())
        return out, P.numpy()

    (e, pe), (c, pc) = run(False), run(True)
    assert all(np.array_equal(a, b) for a, b in zip(e, c)) and np.array_equal(pe, pc)


def test_a_replay_that_raises_after_the_data_was_set_keeps_it(dev):
    """A bad label in a loss after the clipping: the eager call raises with the weights
    clipped; a replay lost the clipping and the calls after drifted."""
    def run(compiled):
        P = lk.tensor(P0.copy(), device=dev, requires_grad=True)
        opt = lk.optimizers.SGD(lr=0.1).setup({"P": P})

        def step(x, y):
            opt.zero_grad()
            loss = F.sum(P * P * x)
            loss.backward()
            opt.update()
            P.data = F.clip(P, -1.0, 1.0).data
            return F.softmax_cross_entropy(F.reshape(P, (1, 4)), y)
        f = lk.compile(step) if compiled else step
        x = lk.tensor(X, device=dev)
        out = []
        for i in range(6):
            y = lk.tensor(np.array([7 if i == 3 else 1]), device=dev)
            try:
                out.append(float(f(x, y).item()))
            except lk.errors.LabkitError as e:
                out.append(type(e).__name__)
            out.append(P.numpy().tolist())
        return out

    e, c = run(False), run(True)
    assert "IndexingError" in e and c == e


def test_data_set_and_set_back_inside_the_step(dev):
    """``old = P.data; P.data = ...; ...; P.data = old``: the gradient at the changed weights,
    the update on the old ones."""
    def run(compiled):
        P = lk.tensor(P0.copy(), device=dev, requires_grad=True)
        opt = lk.optimizers.SGD(lr=0.1).setup({"P": P})

        def step(x):
            opt.zero_grad()
            old = P.data
            P.data = (P * 2.0).data
            loss = F.sum(P * P * x)
            loss.backward()
            P.data = old
            opt.update()
            return loss
        f = lk.compile(step) if compiled else step
        x = lk.tensor(X, device=dev)
        return [float(f(x).item()) for _ in range(5)], P.numpy().tolist()

    assert run(True) == run(False)


def test_a_tensor_argument_s_data_set_by_the_step(dev):
    """A replay never set it: from the third call on, the step read the traced call's
    array (losses 0.28, 0.28 where eager gave 0.34, 0.40)."""
    def run(compiled):
        P = lk.tensor(P0.copy(), device=dev)

        def step(P, x):
            P.data = F.clip(P + x, -1.0, 1.0).data
            return F.sum(P * x)
        f = lk.compile(step) if compiled else step
        x = lk.tensor(np.array([0.1, 0.2, -0.1, 0.4], np.float32), device=dev)
        return [float(f(P, x).item()) for _ in range(5)], P.numpy().tolist()

    e, c = run(False), run(True)
    assert c == e


def test_an_argument_s_data_set_where_the_trace_cannot_see_it_is_refused():
    P = lk.tensor(P0.copy())
    model = B.Sequence()
    model.P = P

    def set_twice(d):
        model.P.data = d * 2

    @lk.compile
    def step(P, x):
        lk.compile.host(set_twice, (P * 1.0).data, effect=True)
        return F.sum(P * x)

    with pytest.raises(CompileError, match=r"replaced the data of its tensor argument 0 "
                                           r"\(now \(4,\)\) in a way a replay cannot repeat"):
        step(P, lk.tensor(X))


def test_weight_noise_compiles_with_fresh_noise_at_each_replay(dev):
    """Refused before (raw array code); now each replay draws anew, the gradient is taken at
    the noisy weights and the exact weights come back, bit for bit the eager step."""
    def run(compiled):
        f, m, _ = noisy_step(dev, 2, 0.1, compiled)
        rng = np.random.default_rng(0)
        x = lk.tensor(rng.standard_normal((8, 4)).astype(np.float32), device=dev)
        y = lk.tensor(rng.integers(0, 2, 8), device=dev)
        losses = [float(f(x, y).item()) for _ in range(5)]
        return losses, [p.numpy() for p in m.params().values()], f

    (le, pe, _), (lc, pc, f) = run(False), run(True)
    assert lc == le and all(np.array_equal(a, b) for a, b in zip(pe, pc))
    assert f.stats["replays"] == 3 and len(set(lc)) == 5


def test_the_data_hook_is_gone_after_a_trace_even_one_that_raised():
    slot = type(Tensor.__dict__["data"])
    assert slot.__name__ == "member_descriptor"

    @lk.compile
    def bad(x):
        return float(F.sum(x).item())

    with pytest.raises(CompileError):
        bad(lk.tensor(X))
    assert type(Tensor.__dict__["data"]) is slot
    step = lk.compile(lambda x: x * 2.0)
    for _ in range(3):
        step(lk.tensor(X))
    assert type(Tensor.__dict__["data"]) is slot


def test_a_host_function_holding_a_dict_of_tensors_replays(dev):
    """The host function's closure summary sorted a dict's items by their text: a tensor's
    repr read its values, and the step was refused as one that reads a tensor's values."""
    P = lk.tensor(P0.copy(), device=dev)
    held, seen = {"P": P}, []

    def look():
        seen.append(_host(held["P"].data).sum())

    @lk.compile
    def step(x):
        lk.compile.host(look, effect=True)
        return x * 2.0

    for i in range(4):
        P.data = lk.tensor(P0 * i, device=dev).data
        step(lk.tensor(X, device=dev))
    assert seen == [np.float32(P0.sum() * i) for i in range(4)] and step.stats["replays"] == 2


def test_the_data_of_a_new_argument_tensor_at_each_call_is_set(dev):
    """A batch tensor normalised in place of its data (``x.data = ...``): a replay set the
    traced call's tensor, not the one passed to it."""
    def run(compiled):
        def step(x):
            x.data = (x - F.mean(x)).data
            return F.sum(x * x)
        f = lk.compile(step) if compiled else step
        xs = [lk.tensor(X * (i + 1), device=dev) for i in range(5)]
        losses = [float(f(x).item()) for x in xs]
        return losses, [x.numpy().tolist() for x in xs]

    assert run(True) == run(False)


def _mlp(dev):
    lk.bricks.set_seed(0)
    return B.Sequence(B.Linear(4, 8), B.Tanh(), B.Linear(8, 3)).to(dev)


def _norm(model):
    total = 0.0
    for p in model.params().values():
        if p.grad is not None:
            total += float((_host(p.grad.data).astype(np.float64) ** 2).sum())
    return total


def test_host_functions_reading_gradients_through_the_model(dev):
    """A gradient-norm log and a hand-written update, each a host function reading ``p.grad``
    through the model: a replay wrote gradients only when it ended, so both read the previous
    call's (the update trained on stale gradients, silently). A node now sets each gradient
    such a function reads just before it."""
    def run(compiled):
        m = _mlp(dev)
        held, norms, params = {"m": m}, [], list(m.params().values())

        def log_norms():
            norms.append(_norm(held["m"]))

        def update():
            for p in held["m"].params().values():
                p.data -= 0.1 * p.grad.data

        def step(x, y):
            for p in params:
                p.grad = None
            loss = F.softmax_cross_entropy(m(x), y)
            loss.backward()
            lk.compile.host(log_norms, effect=True)
            lk.compile.host(update, effect=True, mutates=[p.data for p in params])
            return loss
        f = lk.compile(step) if compiled else step
        rng = np.random.default_rng(0)
        losses = []
        for _ in range(6):
            x = lk.tensor(rng.standard_normal((5, 4)).astype(np.float32), device=dev)
            losses.append(float(f(x, lk.tensor(rng.integers(0, 3, 5), device=dev)).item()))
        return losses, norms, [p.numpy().tolist() for p in params]

    assert run(True) == run(False)


def test_a_host_function_sees_a_gradient_the_step_cleared(dev):
    """Cleared by zero_grad and read before backward: None, as eagerly (a replay left the
    previous call's until it ended)."""
    def run(compiled):
        m = _mlp(dev)
        opt = lk.optimizers.SGD(lr=0.1).setup(m)
        held, seen = {"m": m}, []

        def look():
            seen.append(sum(p.grad is None for p in held["m"].params().values()))

        def step(x, y):
            opt.zero_grad()
            lk.compile.host(look, effect=True)
            loss = F.softmax_cross_entropy(m(x), y)
            loss.backward()
            opt.update()
            return loss
        f = lk.compile(step) if compiled else step
        x = lk.tensor(np.ones((2, 4), np.float32), device=dev)
        for _ in range(5):
            f(x, lk.tensor(np.array([0, 2]), device=dev))
        return seen

    assert run(True) == run(False) == [4] * 5


def test_a_gradient_norm_after_a_batch_1_update_on_the_cpu():
    """At batch 1 a compiled SGD step makes the weight's gradient lazily (compile/sgd.py
    OuterGrad): a host function reading it sees the eager gradient, not the deferred one."""
    dev = lk.device("cpu")

    def run(compiled):
        lk.bricks.set_seed(0)
        m = B.Sequence(B.Linear(96, 64), B.ReLU(), B.Linear(64, 3)).to(dev)
        opt = lk.optimizers.SGD(lr=0.05).setup(m)
        held, norms = {"m": m}, []

        def step(x, y):
            opt.zero_grad()
            loss = F.softmax_cross_entropy(m(x), y)
            loss.backward()
            opt.update()
            lk.compile.host(lambda: norms.append(_norm(held["m"])), effect=True)
            return loss
        f = lk.compile(step) if compiled else step
        rng = np.random.default_rng(0)
        for _ in range(6):
            x = lk.tensor(rng.standard_normal((1, 96)).astype(np.float32), device=dev)
            f(x, lk.tensor(rng.integers(0, 3, 1), device=dev))
        return norms

    assert run(True) == run(False)
