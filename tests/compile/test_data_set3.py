"""A second review of what replays do to tensors' ``.data`` and ``.grad`` (/tmp/adv24): each
case ran otherwise than the eager step (silently, or with an unhelpful error). Compiled runs
are compared with the same code run eagerly from the same start, on both devices."""

import numpy as np

import labkit as lk
import labkit.bricks as B
import labkit.functions as F

from .setdata_helpers import calls_with_a_bad_label
from .setdata_helpers import host as _host
from .setdata_helpers import same as _same

X = np.array([1.0, 2.0, -1.0, 4.0], np.float32)
W0 = np.array([1.0, -2.0, 3.0], np.float32)


def test_a_callers_array_that_a_host_function_updates_stays_the_callers(dev):
    """An EMA of the gradient in the caller's NumPy array (``mutates=(ema,)``): replays
    updated a copy, and the caller's array froze."""
    def run(compiled):
        W = lk.tensor(W0.copy(), device=dev, requires_grad=True)
        opt = lk.optimizers.SGD(lr=0.1).setup({"W": W})
        ema = np.zeros(3, np.float32)

        def track(a, g):
            a *= 0.5
            a += 0.5 * _host(g)

        def step(x):
            opt.zero_grad()
            loss = F.sum(W * W * x)
            loss.backward()
            lk.compile.host(track, ema, W.grad.data, effect=True, mutates=(ema,))
            opt.update()
            return loss
        f = lk.compile(step) if compiled else step
        x = lk.tensor(np.array([1.0, 2.0, 3.0], np.float32), device=dev)
        out = []
        for _ in range(6):
            f(x)
            out.append(ema.tolist())
        return out

    _same(run)


def test_a_host_function_swapping_in_averaged_weights(dev):
    """A validation loss on averaged weights swapped in and out by host functions through the
    model: the ops between read the weights the call began with."""
    def run(compiled):
        lk.bricks.set_seed(0)
        m = B.Linear(4, 3).to(dev)
        lk.bricks.set_seed(1)
        avg = B.Linear(4, 3).to(dev)
        opt = lk.optimizers.SGD(lr=0.1).setup(m)
        held = {"m": m, "avg": avg}

        def swap():
            for p, q in zip(held["m"].params().values(), held["avg"].params().values()):
                p.data, q.data = q.data, p.data

        def step(x, y):
            opt.zero_grad()
            loss = F.softmax_cross_entropy(m(x), y)
            loss.backward()
            opt.update()
            lk.compile.host(swap, effect=True)
            val = F.softmax_cross_entropy(m(x), y)
            lk.compile.host(swap, effect=True)
            return loss, val
        f = lk.compile(step) if compiled else step
        rng = np.random.default_rng(0)
        out = []
        for _ in range(5):
            x = lk.tensor(rng.standard_normal((5, 4)).astype(np.float32), device=dev)
            loss, val = f(x, lk.tensor(rng.integers(0, 3, 5), device=dev))
            out.append((float(loss.item()), float(val.item())))
        return out, m.W.numpy().tolist(), avg.W.numpy().tolist()

    _same(run)


def test_a_gradient_set_to_an_argument_then_read_by_a_host_update(dev):
    def run(compiled):
        W = lk.tensor(W0.copy(), device=dev, requires_grad=True)
        held = {"W": W}

        def update():
            held["W"].data = held["W"].data - 1.0 * held["W"].grad.data

        def step(g):
            W.grad = g
            lk.compile.host(update, effect=True)
            return F.sum(W * 1.0)
        f = lk.compile(step) if compiled else step
        out = []
        for i in range(5):
            f(lk.tensor(np.array([i, 0.1, -i], np.float32), device=dev))
            out.append(W.numpy().tolist())
        return out

    _same(run)


def test_gradients_cleared_by_hand_read_by_a_host_function(dev):
    """``p.grad = None`` (not zero_grad): the host function saw the previous call's."""
    def run(compiled):
        lk.bricks.set_seed(0)
        m = B.Sequence(B.Linear(4, 3), B.Linear(3, 2)).to(dev)
        opt = lk.optimizers.SGD(lr=0.1).setup(m)
        held, seen = {"m": m}, []

        def look():
            seen.append(sum(p.grad is None for p in held["m"].params().values()))

        def step(x):
            for p in m.params().values():
                p.grad = None
            lk.compile.host(look, effect=True)
            loss = F.sum(m(x))
            loss.backward()
            opt.update()
            return loss
        f = lk.compile(step) if compiled else step
        for _ in range(5):
            f(lk.tensor(np.ones((2, 4), np.float32), device=dev))
        return seen

    _same(run)


def test_equal_results_one_changed_in_place_stay_apart(dev):
    """``A.grad = x * 2; B.grad = x * 2``, A's halved in place by a host function: the merge
    pass made them one array, and B's was halved too."""
    def halve(g):
        g *= 0.5

    def run(compiled):
        A = lk.tensor(W0.copy(), device=dev, requires_grad=True)
        Bp = lk.tensor(np.full(3, 0.5, np.float32), device=dev, requires_grad=True)
        opt = lk.optimizers.SGD(lr=0.1).setup({"A": A, "B": Bp})

        def step(x):
            A.grad = x * 2.0
            Bp.grad = x * 2.0
            lk.compile.host(halve, A.grad.data, effect=True, mutates=(A.grad.data,))
            opt.update()
            a, b = x * 3.0, x * 3.0
            lk.compile.host(halve, a.data, effect=True, mutates=(a.data,))
            return a, b
        f = lk.compile(step) if compiled else step
        x = lk.tensor(np.array([1.0, 2.0, 3.0], np.float32), device=dev)
        out = []
        for _ in range(4):
            a, b = f(x)
            out.append((a.numpy().tolist(), b.numpy().tolist(), A.numpy().tolist(),
                        Bp.numpy().tolist()))
        return out

    _same(run)


def test_an_argument_set_and_set_back_in_finally_when_a_replay_raises(dev):
    def run(compiled):
        P = lk.tensor(np.array([0.5, -2.0, 3.0, 0.25], np.float32), device=dev)
        x = lk.tensor(X, device=dev)

        def step(P, y):
            old = P.data
            P.data = (P * 2.0).data
            try:
                return F.softmax_cross_entropy(F.reshape(P * x, (1, 4)), y)
            finally:
                P.data = old
        f = lk.compile(step) if compiled else step
        return calls_with_a_bad_label(f, dev, P, (3, 4), 6, P)

    _same(run)


def test_a_set_back_outside_finally_is_not_run_when_a_replay_raises(dev):
    """The eager step raises before its ``P.data = old``, and keeps the doubled weights."""
    def run(compiled):
        P = lk.tensor(np.array([0.5, -2.0, 3.0, 0.25], np.float32), device=dev,
                      requires_grad=True)
        opt = lk.optimizers.SGD(lr=0.1).setup({"P": P})
        x = lk.tensor(X, device=dev)

        def step(y):
            opt.zero_grad()
            old = P.data
            P.data = (P * 2.0).data
            loss = F.softmax_cross_entropy(F.reshape(P * x, (1, 4)), y)
            loss.backward()
            P.data = old
            opt.update()
            return loss
        f = lk.compile(step) if compiled else step
        return calls_with_a_bad_label(f, dev, P, (3,), 5)

    _same(run)


def test_a_host_function_halving_a_gradient_through_the_model(dev):
    """What the refusal of ``p.grad.data *= 0.5`` recommends, with the gradient reached
    through a holder: replays failed with an UnboundLocalError."""
    def run(compiled):
        W = lk.tensor(W0.copy(), device=dev, requires_grad=True)
        opt = lk.optimizers.SGD(lr=0.1).setup({"W": W})
        held = {"W": W}

        def halve():
            held["W"].grad.data *= 0.5

        def step(x):
            opt.zero_grad()
            loss = F.sum(W * W * x)
            loss.backward()
            lk.compile.host(halve, effect=True, mutates=[W.grad.data])
            opt.update()
            return loss
        f = lk.compile(step) if compiled else step
        x = lk.tensor(np.array([1.0, 2.0, 3.0], np.float32), device=dev)
        return [float(f(x).item()) for _ in range(5)], W.numpy().tolist()

    _same(run)


def test_weights_loaded_from_an_argument_replay(dev):
    """``P.data = x.data``: the read after it was taken for an argument aliasing P, and every
    call was traced again."""
    def run(compiled):
        P = lk.tensor(np.zeros(3, np.float32), device=dev)

        def step(x):
            P.data = x.data
            return F.sum(P * 2.0)
        f = lk.compile(step) if compiled else step
        out = []
        for i in range(6):
            x = lk.tensor(np.full(3, float(i), np.float32), device=dev)
            out.append((float(f(x).item()), P.data is x.data))
        return out, getattr(f, "stats", {}).get("replays")

    (e, _), (c, replays) = run(False), run(True)
    assert c == e and replays == 4


def test_del_grad_inside_a_traced_step():
    W = lk.tensor(W0.copy(), requires_grad=True)

    def step(x):
        del W.grad
        W.grad = None
        loss = F.sum(W * x)
        loss.backward()
        return loss

    f = lk.compile(step)
    x = lk.tensor(np.ones(3, np.float32))
    assert [float(f(x).item()) for _ in range(4)] == [2.0] * 4
    assert W.grad.numpy().tolist() == [1.0, 1.0, 1.0]


def test_a_traced_call_leaves_no_tracer_alive():
    """A cycle through the tracer kept each traced call's arrays alive until a full
    collection."""
    import gc

    from labkit.compile.trace import Tracer

    W = lk.tensor(W0.copy(), requires_grad=True)
    opt = lk.optimizers.SGD(lr=0.1).setup({"W": W})

    def step(x):
        opt.zero_grad()
        loss = F.sum(W * x)
        loss.backward()
        lk.compile.host(lambda: None, effect=True)
        opt.update()
        return loss

    f = lk.compile(step)
    gc.collect()
    gc.disable()
    try:
        for _ in range(3):
            f(lk.tensor(np.ones(3, np.float32)))
        assert not [o for o in gc.get_objects() if type(o) is Tracer]
    finally:
        gc.enable()


def test_a_gradient_set_before_the_data_is_written_by_replays():
    K = lk.tensor(np.zeros(3, np.float32))

    def run(compiled):
        K.data, K.grad = np.zeros(3, np.float32), None

        def step(x):
            K.grad = lk.Tensor((x * 2.0).data)
            K.data = (x * 3.0).data
            return x * 1.0
        f = lk.compile(step) if compiled else step
        out = []
        for i in range(5):
            f(lk.tensor(np.full(3, float(i), np.float32)))
            out.append((K.grad.numpy().tolist(), K.numpy().tolist()))
        return out

    _same(run)


def _restore(t, old):
    t.data = old


def test_set_backs_by_a_helper_in_finally_or_an_exit_stack_when_a_replay_raises(dev):
    import contextlib

    def run(compiled, how):
        P = lk.tensor(np.array([0.5, -2.0, 3.0, 0.25], np.float32), device=dev)
        x = lk.tensor(X, device=dev)

        def step(y):
            old = P.data
            if how == "helper":
                P.data = (P * 2.0).data
                try:
                    return F.softmax_cross_entropy(F.reshape(P * x, (1, 4)), y)
                finally:
                    _restore(P, old)
            with contextlib.ExitStack() as stack:
                stack.callback(_restore, P, old)
                P.data = (P * 2.0).data
                return F.softmax_cross_entropy(F.reshape(P * x, (1, 4)), y)
        f = lk.compile(step) if compiled else step
        return calls_with_a_bad_label(f, dev, P, (3,), 6)

    for how in ("helper", "exit stack"):
        assert run(True, how) == run(False, how), how


RUNS: list = []


def _inner():
    RUNS.append(1)


def _outer():
    lk.compile.host(_inner, effect=True)


def test_a_host_call_inside_a_host_function_runs_once_per_call():
    """Recorded apart as well, the inner one ran twice in every replay."""
    RUNS.clear()

    @lk.compile
    def step(x):
        lk.compile.host(_outer, effect=True)
        return x * 2.0

    for i in range(5):
        step(lk.tensor(X))
        assert len(RUNS) == i + 1


def test_where_classes_keep_their_versions_the_properties_stay(monkeypatch):
    """On Python 3.13+ each change of a class uses one of its type versions (1000): after
    SWAPS traces the properties stay, and both eager and compiled code still agree."""
    from labkit.autograd.tensor import Tensor
    from labkit.compile import hooks

    monkeypatch.setattr(hooks, "KEEP", True)
    monkeypatch.setattr(hooks, "SWAPS", hooks._state["swaps"] + 2)
    try:
        W = lk.tensor(W0.copy(), requires_grad=True)
        opt = lk.optimizers.SGD(lr=0.1).setup({"W": W})

        def step(x):
            opt.zero_grad()
            loss = F.sum(W * W * x)
            loss.backward()
            opt.update()
            W.data = F.clip(W, -1.0, 1.0).data
            return loss
        f = lk.compile(step)
        x = lk.tensor(np.ones(3, np.float32))
        losses = [float(f(x).item()) for _ in range(5)]
        assert isinstance(Tensor.__dict__["data"], property)
        E = lk.tensor(W0.copy(), requires_grad=True)
        eopt = lk.optimizers.SGD(lr=0.1).setup({"W": E})
        expected = []
        for _ in range(5):
            eopt.zero_grad()
            loss = F.sum(E * E * x)
            loss.backward()
            eopt.update()
            E.data = F.clip(E, -1.0, 1.0).data
            expected.append(float(loss.item()))
        assert losses == expected and W.numpy().tolist() == E.numpy().tolist()
    finally:
        hooks._state["stay"] = False
        Tensor.data, Tensor.grad = hooks.DATA, hooks.GRAD


def test_a_host_function_clearing_the_gradients_it_reads(dev):
    """An update that reads ``p.grad`` and then clears it (``opt.update(); opt.zero_grad()``
    in one host function): the gradient set before it was the one it left (None), and every
    replay made no update, silently."""
    def run(compiled):
        W = lk.tensor(W0.copy(), device=dev, requires_grad=True)
        opt = lk.optimizers.SGD(lr=0.1).setup({"W": W})
        held = {"opt": opt}

        def update_and_clear():
            held["opt"].update()
            held["opt"].zero_grad()

        def step(x):
            loss = F.sum(W * W * x)
            loss.backward()
            lk.compile.host(update_and_clear, effect=True, mutates=(W.data,))
            return loss
        f = lk.compile(step) if compiled else step
        x = lk.tensor(np.array([1.0, 2.0, 3.0], np.float32), device=dev)
        return [float(f(x).item()) for _ in range(5)], W.numpy().tolist()

    _same(run)


def test_a_gradient_set_before_the_tensor_is_read():
    W = lk.tensor(W0.copy(), requires_grad=True)

    def run(compiled):
        W.grad = None

        def step(x):
            W.grad = x * 2.0
            return F.sum(W * x)
        f = lk.compile(step) if compiled else step
        out = []
        for i in range(5):
            f(lk.tensor(np.full(3, float(i), np.float32)))
            out.append(W.grad.numpy().tolist())
        return out

    _same(run)


def test_a_tensor_made_in_the_step_and_set_is_not_taken_for_one_outside():
    """``buf = lk.Tensor(zeros)``, read, then ``buf.data = ...``: its set node named a tensor
    of the traced call, and the second call was refused as another computation."""
    def run(compiled):
        def step(x):
            buf = lk.Tensor(np.zeros(3, np.float32))
            y = buf + x
            buf.data = (y * 2.0).data
            return buf * 1.0
        f = lk.compile(step) if compiled else step
        return [f(lk.tensor(np.full(3, float(i), np.float32))).numpy().tolist()
                for i in range(5)]

    _same(run)


def test_a_set_back_after_the_yield_of_a_context_manager_without_finally(dev):
    """A @contextmanager's code after ``yield`` does not run when the block raises (no
    finally): the eager step keeps the doubled weights, and so does a replay."""
    import contextlib

    def run(compiled):
        P = lk.tensor(np.array([0.5, -2.0, 3.0, 0.25], np.float32), device=dev)
        x = lk.tensor(X, device=dev)

        @contextlib.contextmanager
        def doubled(t):
            old = t.data
            t.data = (t * 2.0).data
            yield
            t.data = old

        def step(y):
            with doubled(P):
                return F.softmax_cross_entropy(F.reshape(P * x, (1, 4)), y)
        f = lk.compile(step) if compiled else step
        return calls_with_a_bad_label(f, dev, P, (3,), 5)

    _same(run)
