"""Captured launches (compile/capture.py): from the second replay of an OpenCL step, an op
runs the kernels its first replay launched. The same bits as without capture; every output a
new array; anything that would make the recorded launches wrong runs the op as before."""

import threading

import numpy as np
import pytest

import labkit as lk
import labkit.functions as F
from labkit.backend import opencl as cp
from labkit.compile import capture


@pytest.fixture
def no_capture(monkeypatch):
    def off():
        monkeypatch.setattr(capture, "ENABLED", False)
    return off


def _mlp(rng, acts=("relu", "tanh", "sigmoid")):
    sizes = [12, 16, 16, 16, 4]
    ws = []
    for i, o in zip(sizes[:-1], sizes[1:]):
        ws += [lk.tensor(rng.standard_normal((o, i)).astype(np.float32) * 0.4, device="cl",
                         requires_grad=True),
               lk.tensor(rng.standard_normal(o).astype(np.float32) * 0.1, device="cl",
                         requires_grad=True)]
    opt = lk.optimizers.Momentum(lr=0.05, momentum=0.9).setup(
        {f"p{i}": w for i, w in enumerate(ws)})

    def step(x, y):
        h = x
        for k in range(0, len(ws) - 2, 2):
            h = F.linear(h, ws[k], ws[k + 1])
            h = getattr(F, acts[(k // 2) % len(acts)])(h)
        logits = F.linear(h, ws[-2], ws[-1])
        loss = F.softmax_cross_entropy(logits, y) + (h * h).sum() * 0.001
        opt.zero_grad()
        loss.backward()
        opt.update()
        return loss, logits
    return step, ws


def _train(steps=7):
    rng = np.random.default_rng(3)
    step, ws = _mlp(rng)
    f = lk.compile(step)
    data = [(lk.tensor(rng.standard_normal((5, 12)).astype(np.float32), device="cl"),
             lk.tensor(rng.integers(0, 4, 5), device="cl")) for _ in range(steps)]
    outs = [f(x, y) for x, y in data]
    return f, outs, [w.numpy() for w in ws]


def test_a_captured_training_step_gives_the_same_bits(no_capture):
    f, outs, ws = _train()
    stats = f.programs()[0].capture
    assert stats["captured"] >= 10 and stats["fallbacks"] == 0, stats
    no_capture()
    g, outs0, ws0 = _train()
    assert g.programs()[0].capture["captured"] == 0
    for (loss, logits), (loss0, logits0) in zip(outs, outs0):
        assert loss.item() == loss0.item()
        np.testing.assert_array_equal(logits.numpy(), logits0.numpy())
    for a, b in zip(ws, ws0):
        np.testing.assert_array_equal(a, b)


def test_every_output_is_a_new_array_at_every_replay():
    """A result kept from one replay is not written by the next (the recorded outputs are
    not reused)."""
    f, outs, _ = _train(steps=6)
    kept = [logits.numpy() for _, logits in outs]
    buffers = {id(logits.data.data) for _, logits in outs}
    assert len(buffers) == len(outs)
    for (_, logits), want in zip(outs, kept):
        np.testing.assert_array_equal(logits.numpy(), want)


def _product_step():
    W = lk.tensor(np.linspace(-1, 1, 48).astype(np.float32).reshape(6, 8), device="cl")

    def step(x):
        return F.tanh(F.matmul(x, W)) * 2.0
    return step, W


def test_an_input_laid_out_otherwise_runs_the_op_as_before():
    """Shapes and dtypes are guarded by lk.compile; an offset or strides are not, and the
    recorded launches hold them: such a call runs the op's forward (a fallback)."""
    step, _ = _product_step()
    f = lk.compile(step)
    rng = np.random.default_rng(0)
    for _ in range(4):
        f(lk.tensor(rng.standard_normal((3, 6)).astype(np.float32), device="cl"))
    stats = f.programs()[0].capture
    assert stats["captured"] >= 2 and stats["fallbacks"] == 0
    big = rng.standard_normal((4, 6)).astype(np.float32)
    x = lk.tensor(big, device="cl")[1:]  # NOTE: a view at an offset, of the same shape
    assert x.data.offset != 0
    got = f(x)
    assert stats["fallbacks"] >= 1
    np.testing.assert_array_equal(got.numpy(), step(lk.tensor(big[1:], device="cl")).numpy())
    wide = lk.tensor(rng.standard_normal((6, 3)).astype(np.float32), device="cl")
    got = f(wide.T)  # NOTE: transposed strides
    np.testing.assert_array_equal(got.numpy(),
                                  step(lk.tensor(wide.numpy().T.copy(), device="cl")).numpy())


def _stats():
    return {"captured": 0, "fallbacks": 0, "refused": 0, "why": None}


def test_inputs_that_share_a_buffer_now_and_did_not_then_run_as_before():
    stats = _stats()
    run = capture.capturing(lambda a, b: a @ b + 1.0, None, [], False, cp.ndarray, stats)
    rng = np.random.default_rng(1)

    def arr():
        return cp.asarray(rng.standard_normal((5, 5)).astype(np.float32))
    for _ in range(3):
        run(arr(), arr())
    assert stats["captured"] == 1 and stats["fallbacks"] == 0
    a = arr()
    got = run(a, a)
    assert stats["fallbacks"] == 1
    np.testing.assert_array_equal(got.get(), (a @ a + 1.0).get())


def test_an_op_reading_a_buffer_from_elsewhere_is_not_captured():
    """An array the op did not get as an input nor allocate (a constant it keeps, which may
    be replaced) makes the recording refused, with the reason; the op runs as before."""
    stats = _stats()
    c = cp.asarray(np.arange(4, dtype=np.float32))
    run = capture.capturing(lambda x: x * c + x, None, [], False, cp.ndarray, stats)
    rng = np.random.default_rng(2)
    for _ in range(3):
        x = cp.asarray(rng.standard_normal((3, 4)).astype(np.float32))
        np.testing.assert_array_equal(run(x).get(), (x * c + x).get())
    assert stats["refused"] == 3 and "from outside" in stats["why"], stats
    assert stats["captured"] == 0


def test_an_attribute_input_is_an_input():
    """An op's array set as an attribute by the replay (``attr_in``: relu_grad's mask) is
    re-pointed like an argument."""
    class Masked:
        pass

    op = Masked()
    stats = _stats()
    run = capture.capturing(lambda g: g * op.x, op, [("x", None)], False, cp.ndarray, stats)
    rng = np.random.default_rng(4)
    for _ in range(4):
        g = cp.asarray(rng.standard_normal(7).astype(np.float32))
        op.x = cp.asarray(rng.standard_normal(7).astype(np.float32))
        np.testing.assert_array_equal(run(g).get(), (g * op.x).get())
    assert stats["captured"] == 1 and stats["fallbacks"] == 0


def test_recording_puts_everything_back_and_records_only_its_thread():
    import pyopencl as cl

    call = cl.Kernel.__call__
    rt = cp.ones(3).rt
    a = cp.ones(64)
    others = []
    with capture._Recording(rt) as rec:
        t = threading.Thread(target=lambda: others.append((a * 3.0).get()))
        t.start()
        t.join()
        b = a + 2.0
    assert cl.Kernel.__call__ is call and "allocate" not in vars(rt) and "finish" not in vars(rt)
    assert len(rec.launches) == 1 and id(b.data) in rec.allocated
    assert others and others[0][0] == 3.0 and rec.impure is None


def test_a_first_call_that_waits_is_recorded_again_later():
    """A GEMM tuned at its first size waits for the device: that recording is refused and
    the next call records again."""
    rt = cp.ones(3).rt
    calls = []

    def forward(x):
        calls.append(1)
        if len(calls) == 1:
            rt.finish()
        return x * 2.0

    stats = _stats()
    run = capture.capturing(forward, None, [], False, cp.ndarray, stats)
    x = cp.asarray(np.arange(5, dtype=np.float32))
    for _ in range(4):
        np.testing.assert_array_equal(run(x).get(), np.arange(5) * 2.0)
    assert stats["refused"] == 1 and "wait" in stats["why"] and stats["captured"] == 1
    assert len(calls) == 2  # NOTE: the refused recording and the one kept; then launches only


def _lstm_losses():
    import labkit.bricks as B

    lk.bricks.set_seed(5)
    net = B.LSTM(6, 16).to("cl")
    opt = lk.optimizers.SGD(lr=0.1).setup(net)
    rng = np.random.default_rng(6)
    x = lk.tensor(rng.standard_normal((4, 5, 6)).astype(np.float32), device="cl")
    y = lk.tensor(rng.standard_normal((4, 16)).astype(np.float32), device="cl")

    @lk.compile
    def step(x, y):
        loss = F.mean_squared_error(net(x)[:, -1], y)
        opt.zero_grad()
        loss.backward()
        opt.update()
        return loss
    losses = [step(x, y).item() for _ in range(6)]
    return step, losses, [p.numpy() for p in net.params().values()]


def test_a_captured_lstm_step_gives_the_same_bits(no_capture):
    """The LSTM's gate kernels and their gradients, one per time step, are captured too."""
    step, losses, ps = _lstm_losses()
    assert step.programs()[0].capture["captured"] >= 20
    no_capture()
    _, losses0, ps0 = _lstm_losses()
    assert losses == losses0
    for a, b in zip(ps, ps0):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("devname", ["cpu", "cl"])
def test_a_check_of_labels_changed_in_place_stays_after_the_change(devname):
    """A check moved early (program._checks_early) follows the node that makes its input,
    also where that node changes an array in place (its ``versions``). A review found it
    moved to the start, before the line that names its input (UnboundLocalError)."""
    def clip(a):
        if isinstance(a, np.ndarray):
            np.clip(a, 0, 3, out=a)
        else:
            cp.clip(a, 0, 3, out=a)

    def step(x, y):
        lk.compile.host(clip, y.data, effect=True, mutates=(y.data,))
        return F.softmax_cross_entropy(x, y)

    rng = np.random.default_rng(0)
    x = lk.tensor(rng.standard_normal((5, 4)).astype(np.float32), device=devname)
    f = lk.compile(step)
    want = step(x, lk.tensor(np.array([0, 1, 2, 3, 1]), device=devname)).item()
    for _ in range(5):
        y = lk.tensor(np.array([0, 1, 9, 3, 1]), device=devname)  # NOTE: 9 clipped to 3
        assert f(x, y).item() == step(x, lk.tensor(np.array([0, 1, 3, 3, 1]),
                                                   device=devname)).item()
    assert np.isfinite(want)


@pytest.mark.parametrize("devname", ["cpu", "cl"])
def test_checks_moved_early_keep_their_order(devname):
    """With two bad arguments a compiled step raises the error the eager step raises (the
    first check's): checks moved to the start keep the order they were traced in."""
    from labkit.errors import IndexingError

    rng = np.random.default_rng(0)
    W = lk.tensor(rng.standard_normal((10, 4)).astype(np.float32), device=devname)

    def step(ids, labels):
        return F.softmax_cross_entropy(F.embed_id(ids, W), labels)

    def args(ids, labels):
        return lk.tensor(np.array(ids), device=devname), lk.tensor(np.array(labels),
                                                                   device=devname)
    f = lk.compile(step)
    for _ in range(4):
        f(*args([1, 2, 3], [0, 1, 2]))
    for fn in (step, f):
        with pytest.raises(IndexingError, match=r"embed_id: ids\[2\] is 99"):
            fn(*args([1, 2, 99], [0, 1, 7]))


def test_a_recording_puts_back_a_runtime_hook_it_found():
    """Hooks a user or a profiler set on the runtime (rt.allocate, rt.finish) are what the
    runtime has again after a recording, also when the op raised inside it."""
    rt = cp.ones(3).rt
    seen = []
    hook = lambda n, _a=rt.allocate: seen.append(n) or _a(n)  # noqa: E731
    rt.allocate = hook
    try:
        with capture._Recording(rt):
            cp.ones(8) * 2.0
        assert rt.allocate is hook and "finish" not in vars(rt)
        with pytest.raises(ZeroDivisionError), capture._Recording(rt):
            raise ZeroDivisionError  # NOTE: the op raising inside the recording
        assert rt.allocate is hook
        cp.ones(4)
        assert seen
    finally:
        del rt.allocate


def _pieces_step(n):
    """Concatenates and stacks ``n`` rows it computes (an LSTM's gathered gradients)."""
    def step(x):
        rows = [x[i] * float(i + 1) for i in range(n)]
        return F.concat(rows, axis=0), F.stack(rows, axis=1)
    return step


def test_concat_and_stack_are_captured_with_the_same_bits(no_capture):
    rng = np.random.default_rng(5)
    xs = [lk.tensor(rng.standard_normal((9, 3, 40)).astype(np.float32), device="cl")
          for _ in range(4)]
    f = lk.compile(_pieces_step(9))
    outs = [f(x) for x in xs]
    stats = f.programs()[0].capture
    assert stats["captured"] >= 9 + 2 and stats["fallbacks"] == 0, stats
    no_capture()
    g = lk.compile(_pieces_step(9))
    for (c, s), (c0, s0) in zip(outs, [g(x) for x in xs]):
        np.testing.assert_array_equal(c.numpy(), c0.numpy())
        np.testing.assert_array_equal(s.numpy(), s0.numpy())
    assert g.programs()[0].capture["captured"] == 0


def test_many_inputs_sharing_a_buffer_now_run_as_before():
    """Past six inputs the replay compares which share a buffer as a table, not pair by pair:
    a call whose inputs share one where the recorded call's did not runs as before."""
    stats = _stats()
    run = capture.capturing(lambda *xs: cp.concatenate(xs), None, [], False, cp.ndarray, stats)
    rng = np.random.default_rng(2)

    def arr():
        return cp.asarray(rng.standard_normal((2, 8)).astype(np.float32))
    for _ in range(3):
        run(*[arr() for _ in range(8)])
    assert stats["captured"] == 1 and stats["fallbacks"] == 0
    xs = [arr() for _ in range(8)]
    got = run(*xs)
    assert stats["fallbacks"] == 0
    np.testing.assert_array_equal(got.get(), np.concatenate([x.get() for x in xs]))
    xs[5] = xs[2]
    got = run(*xs)
    assert stats["fallbacks"] == 1
    np.testing.assert_array_equal(got.get(), np.concatenate([x.get() for x in xs]))


def test_a_captured_launch_holds_back_or_opens_the_gate_as_its_op_did(monkeypatch):
    """On a CPU device small elementwise launches are held behind the runtime's gate
    (Runtime.tick) and other launches open it: a captured op keeps its own op's choice (a
    GEMM held back made the compiled LSTM step slower; an add opening the gate wakes the
    device's threads for a few microseconds of work)."""
    rt = cp.runtime(0)
    if not rt.info.is_cpu:
        pytest.skip("a GPU's queue has no gate (Runtime.tick holds launches on a CPU device)")
    monkeypatch.setattr(rt, "batching", True)
    rng = np.random.default_rng(4)

    def arr(shape):
        return cp.asarray(rng.standard_normal(shape).astype(np.float32))
    opened = []
    real = rt._release
    monkeypatch.setattr(rt, "_release", lambda: opened.append(1) or real())
    for fn, shapes, opens in ((lambda a, b: a + b, [(4, 8), (4, 8)], False),
                              (lambda a, b: a @ b, [(32, 64), (64, 64)], True)):
        stats = _stats()
        run = capture.capturing(fn, None, [], False, cp.ndarray, stats)
        run(*[arr(s) for s in shapes])  # NOTE: recorded
        args = [arr(s) for s in shapes]  # NOTE: an upload opens the gate
        opened.clear()
        want = fn(*args)
        eager_opened = bool(opened)
        opened.clear()
        got = run(*args)
        assert stats["captured"] == 1 and stats["fallbacks"] == 0
        assert bool(opened) is opens is eager_opened
        np.testing.assert_array_equal(got.get(), want.get())


def test_the_losss_label_steps_are_captured_and_follow_each_calls_labels():
    """The cross-entropy's gradient (one launch, backend/opencl/xent.py ``grad``) weighs and
    one-hots each call's labels, read as an attribute of its op; a compiled step replays its
    launch with each call's labels. Each call's labels, ignored ones included, give the eager
    step's loss and gradient bit for bit; labels laid out otherwise (a strided view) run the
    op as before."""
    rng = np.random.default_rng(8)
    w0 = rng.standard_normal((6, 5)).astype(np.float32)

    def make():
        w = lk.tensor(w0, device="cl", requires_grad=True)

        def step(x, y):
            w.grad = None
            loss = F.softmax_cross_entropy(F.matmul(x, w), y, ignore_label=-1)
            loss.backward()
            return loss, w.grad
        return step
    f, eager = lk.compile(make()), make()
    calls = []
    for _ in range(6):
        y = rng.integers(0, 5, 7)
        y[rng.random(7) < 0.3] = -1
        calls.append((rng.standard_normal((7, 6)).astype(np.float32), y))
    big = rng.integers(0, 5, 14)
    big[3] = -1
    calls.append((calls[0][0], big))
    for k, (x, y) in enumerate(calls):
        yd = lk.tensor(y, device="cl") if k < 6 else lk.tensor(y, device="cl")[::2]
        got, want = f(lk.tensor(x, device="cl"), yd), eager(lk.tensor(x, device="cl"), yd)
        assert got[0].item() == want[0].item()
        np.testing.assert_array_equal(got[1].numpy(), want[1].numpy())
    prog = f.programs()[0]
    env = prog.replay.__globals__
    steps = [k for k, n in enumerate(prog.nodes) if n.name == "softmax_cross_entropy_grad"]
    assert len(steps) == 1
    assert all("capturing" in env[f"F{k}"].__qualname__ for k in steps)
    assert prog.capture["fallbacks"] >= 1  # NOTE: the strided labels
