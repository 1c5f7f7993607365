"""More ways a compiled step could replay a stale value, found by probing it as an adversary:
the same array passed twice, NumPy arguments uploaded to a device, objects replaced on a
brick, arguments that change at every call, results used outside the step, and lk.scan with
random numbers inside its step. Each is guarded, bounded or refused with a clear error."""

import gc
import tracemalloc

import numpy as np
import pytest

import labkit as lk
import labkit.bricks as B
import labkit.functions as F
from labkit import compile as C


def t(values, dev, rg=False):
    return lk.tensor(np.asarray(values, np.float32), device=dev, requires_grad=rg)


def test_the_same_array_passed_twice_then_two_arrays_retraces(dev):
    f = lk.compile(lambda a, b: a * 2 + b)
    x, y = t([1, 2, 3], dev), t([10, 20, 30], dev)
    f(x, x)
    f(x, x)
    np.testing.assert_array_equal(f(x, y).numpy(), [12, 24, 36])
    assert f.stats["retraces"] == 1
    assert "arguments 0 and 1 the same array" in f.stats["reasons"][0]
    np.testing.assert_array_equal(f(x, x).numpy(), [3, 6, 9])  # the first program again
    g = lk.compile(lambda a, b: lk.tensor(a, device=dev) - lk.tensor(b, device=dev))
    xn, yn = np.ones(3, np.float32), np.full(3, 5, np.float32)
    g(xn, xn)
    g(xn, xn)
    np.testing.assert_array_equal(g(xn, yn).numpy(), [-4, -4, -4])


def test_numpy_masks_and_scalars_uploaded_to_the_device_are_read_at_every_call(dev):
    x = t([1, 2, 3, 4], dev)
    f = lk.compile(lambda m: F.sum(F.where(m, x, x * 0.0)))
    masks = [[1, 1, 0, 0], [1, 1, 0, 0], [0, 0, 1, 1], [1, 0, 1, 0]]
    assert [float(f(np.array(m, bool)).item()) for m in masks] == [3, 3, 7, 4]
    g = lk.compile(lambda s: F.sum(x * s))
    assert [float(g(np.array(v, np.float32)).item()) for v in (2, 2, 5, 7)] == [20, 20, 50, 70]
    labels = [np.array([0, 1]), np.array([0, 1]), np.array([2, 2])]
    logits = t([[1, 2, 3], [3, 2, 1]], dev)
    h = lk.compile(lambda y: F.softmax_cross_entropy(logits, y))
    got = [float(h(y).item()) for y in labels]
    want = [float(F.softmax_cross_entropy(logits, y).item()) for y in labels]
    np.testing.assert_allclose(got, want, rtol=1e-6)


def test_objects_replaced_on_a_brick_after_compiling_retrace(dev):
    lin = B.Linear(3, 2, seed=0).to(dev)
    f = lk.compile(lambda x: lin(x))
    x = t(np.ones((1, 3)), dev)
    for _ in range(3):
        f(x)
    lin.W = B.Parameter(lk.tensor(np.full((2, 3), 3.0, np.float32), device=dev).data)
    np.testing.assert_array_equal(f(x).numpy(), lin(x).numpy())
    assert "was replaced" in f.stats["reasons"][-1]
    d = B.Dropout(0.5).to(dev)
    g = lk.compile(lambda x: d(x))
    x = t(np.ones(64), dev)
    for _ in range(3):
        g(x)
    d.generator = lk.Generator(123, dev)
    got = g(x).numpy()
    d.generator = lk.Generator(123, dev)
    np.testing.assert_array_equal(got, d(x).numpy())
    bn = B.BatchNorm(3).to(dev)
    bn.eval()
    h = lk.compile(lambda x: bn(x))
    x = t(np.ones((2, 3)), dev)
    for _ in range(3):
        h(x)
    bn.running_mean = bn.running_mean * 0 + 0.5
    np.testing.assert_allclose(h(x).numpy(), bn(x).numpy(), rtol=1e-6)


def test_a_changing_argument_keeps_a_bounded_number_of_traces():
    w = t(np.ones((64, 64)), "cpu", rg=True)

    @lk.compile
    def step(x, i):
        return F.sum(F.matmul(x, w) * (i % 3))

    x = t(np.ones((32, 64)), "cpu")
    step(x, 0)
    gc.collect()
    tracemalloc.start()
    try:
        with pytest.warns(C.CompileWarning):
            for i in range(1, 60):
                step(x, i)
        after_20 = None
        for i in range(60, 200):
            step(x, i)
            if i == 80:
                gc.collect()
                after_20 = tracemalloc.get_traced_memory()[0]
        gc.collect()
        end = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    assert len(step._first) <= C.MAX_PENDING and len(step._keep) <= C.MAX_PENDING + len(
        step._plans)
    assert end - after_20 < 2_000_000  # a trace keeps ~300 KB here: not one per call
    # a NaN argument equals itself as a key (it replays), and -0.0 is not 0.0
    g = lk.compile(lambda x, s: x * s)
    for _ in range(3):
        g(x, float("nan"))
    assert g.stats["replays"] == 1
    g(x, 0.0)
    g(x, 0.0)
    assert np.signbit(g(x, -0.0).numpy()).all()


def test_results_of_the_second_call_carry_no_graph_and_backward_says_why(dev):
    w = t([1.0, 2.0], dev, rg=True)
    f = lk.compile(lambda x: F.sum(x * w))
    x = t([3.0, 4.0], dev)
    f(x).backward()  # the first call ran eagerly: its graph works
    np.testing.assert_array_equal(w.grad.numpy(), [3, 4])
    for _ in range(3):
        y = f(x)
        assert y.creator is None
        with pytest.raises(RuntimeError, match="lk.compile step, which carries no graph"):
            y.backward()


@pytest.mark.parametrize("remat", [False, True])
@pytest.mark.parametrize("given", [False, True])
def test_scan_with_dropout_draws_as_the_loop_written_out(remat, given, dev):
    rng = np.random.default_rng(0)
    Wn = rng.standard_normal((5, 3)).astype(np.float32) * 0.5
    Un = rng.standard_normal((5, 5)).astype(np.float32) * 0.3
    xn = rng.standard_normal((2, 4, 3)).astype(np.float32)

    def run(kind, order=1):
        W, U, g = t(Wn, dev, rg=True), t(Un, dev, rg=True), lk.Generator(3, dev)

        def step(h, x_t):
            h = F.tanh(F.dropout(F.linear(x_t, W) + F.matmul(h, F.transpose(U)), 0.5,
                                 generator=g))
            return h, h

        x, h = t(xn, dev), t(np.zeros((2, 5)), dev)
        if kind == "loop":
            hs = []
            for k in range(4):
                h, y = step(h, F.getitem(x, (slice(None), k)))
                hs.append(y)
            hs = F.stack(hs, 1)
        else:
            h, hs = lk.scan(step, x, h, axis=1, remat=remat, params=[W, U] if given else None)
        loss = F.sum(hs * hs) + F.sum(h)
        if order == 2:  # double backprop: the loop recomputed as a whole
            (gw,) = lk.grad(loss, [W], create_graph=True)
            F.sum(gw * gw).backward()
        else:
            loss.backward()
        return loss.numpy(), W.grad.numpy(), U.grad.numpy(), g.state_dict()

    for order in (1, 2):
        want, got = run("loop", order), run("scan", order)
        for a, b in zip(got[:3], want[:3]):
            np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)
        assert got[3] == want[3]


def test_a_brick_that_stores_an_object_in_forward_still_replays(dev):
    class Keeps(B.Brick):
        def forward(self, x):
            self.last = [x]  # an object kept for inspection: Python a replay does not run
            return x * 2.0

    k = Keeps()
    f = lk.compile(lambda x: k(x))
    x = t([1, 2], dev)
    for _ in range(6):
        f(x)
    assert f.stats["traces"] == 2 and f.stats["replays"] == 4, f.stats


def test_a_step_cycling_through_many_signatures_replays():
    f = lk.compile(lambda x: x * 2.0)
    xs = [t(np.ones(n), "cpu") for n in range(1, 13)]  # 12 shapes, round robin
    for _ in range(4):
        for x in xs:
            f(x)
    assert f.stats["traces"] == 24 and f.stats["replays"] == 24, f.stats


def test_a_parameter_replaced_by_none_retraces_and_leaves_the_brick(dev):
    class Opt(B.Brick):
        def __init__(self):
            super().__init__()
            self.add_param("extra", (2,), lk.bricks.initializers.Constant(100.0))

        def forward(self, x):
            return x + self.extra if self.extra is not None else x

    b = Opt().to(dev)
    f = lk.compile(lambda x: b(x))
    x = t([1, 2], dev)
    for _ in range(3):
        f(x)
    b.extra = None
    np.testing.assert_array_equal(f(x).numpy(), [1, 2])
    assert "extra" not in dict(b.params())


def test_scan_rewinds_only_the_generators_its_step_drew_from():
    import threading

    from labkit.backend import random as R

    used, other = lk.Generator(1), lk.Generator(2)
    other.uniform((5,))
    before = other.counter
    with R.recording() as drawn:
        used.uniform((8,))
        t2 = threading.Thread(target=lambda: other.uniform((5,)))  # another thread's draw
        t2.start()
        t2.join()
    assert list(drawn) == [used] and drawn[used] == (1, 0)
    after = other.counter
    R.rewind(drawn)
    assert used.counter == 0 and other.counter == after > before


def test_namedtuple_results_keep_their_type():
    from collections import namedtuple

    P = namedtuple("P", "loss aux")
    f = lk.compile(lambda x: P(x * 2.0, x + 1.0))
    x = t([1, 2], "cpu")
    outs = [f(x) for _ in range(4)]
    assert all(type(o) is P for o in outs)
    np.testing.assert_array_equal(outs[3].aux.numpy(), [2, 3])
