"""An LSTM time step's product and cell, and its gradient and the product of its gates'
gradient with U, each as one launch in a compiled OpenCL step (compile/lstm_cells.py): the
same bits as the two launches each, step after step of training."""

import numpy as np
import pytest

import labkit as lk
import labkit.bricks as B
import labkit.functions as F
from labkit.backend import opencl as cp
from labkit.compile import lstm_cells


def _train(T=6, steps=5, H=32):
    lk.bricks.set_seed(11)
    net = B.LSTM(8, H).to("cl")
    opt = lk.optimizers.SGD(lr=0.1).setup(net)
    rng = np.random.default_rng(12)
    xs = [lk.tensor(rng.standard_normal((16, T, 8)).astype(np.float32), device="cl")
          for _ in range(steps)]
    y = lk.tensor(rng.standard_normal((16, H)).astype(np.float32), device="cl")

    @lk.compile
    def step(x, y):
        hs = net(x)
        loss = F.mean_squared_error(hs[:, -1], y) + (hs * hs).mean() * 0.01
        opt.zero_grad()
        loss.backward()
        opt.update()
        return loss, hs
    outs = [step(x, y) for x in xs]
    return step, [(loss.item(), hs.numpy()) for loss, hs in outs], \
        [p.numpy() for p in net.params().values()]


@pytest.mark.skipif(not cp.runtime(0).info.is_cpu,
                    reason="the kernel is for CPU OpenCL devices (lk_lstm's vectors of units)")
def test_one_launch_a_time_step_trains_bit_for_bit_as_two(monkeypatch):
    monkeypatch.setenv("LABKIT_GEMM_CONFIG", "8,2,16")  # NOTE: vectors of the cell's width
    step, outs, ps = _train()
    prog = step.programs()[0]
    assert prog.cells == 6 and prog.cell_grads >= 3 and prog.cell_loops == 2
    assert sum(n.name == "lstm loop" for n in prog.nodes) == 1  # NOTE: the 6 steps, one launch
    grads = [n for n in prog.nodes if n.name == "lstm loop grad"]  # NOTE: and their gradients
    assert len(grads) == 1 and len(grads[0].fn.steps) >= 3
    assert sum(n.name == "lstm_grad+matmul" for n in prog.nodes) + len(
        grads[0].fn.steps) == prog.cell_grads
    assert "lstm: 6 LSTM step(s) computed in their product's kernel" in step.explain()
    assert f"lstm: {prog.cell_grads} LSTM step gradient(s)" in step.explain()
    assert "lstm: 2 LSTM time loop(s) computed in one launch" in step.explain()
    monkeypatch.setattr(lstm_cells, "LOOPS", False)
    step1, outs1, ps1 = _train()
    prog1 = step1.programs()[0]
    assert prog1.cell_loops == 0 and sum(n.name == "matmul+lstm" for n in prog1.nodes) == 6
    monkeypatch.setattr(lstm_cells, "ENABLED", False)
    step0, outs0, ps0 = _train()
    assert step0.programs()[0].cells == step0.programs()[0].cell_grads == 0
    assert len(step0.programs()[0].nodes) == (len(prog1.nodes) + 6 + prog1.cell_grads
                                              - 1)  # NOTE: and no regrouping
    for (loss, hs), (loss1, hs1), (loss0, hs0) in zip(outs, outs1, outs0):
        assert loss == loss1 == loss0
        np.testing.assert_array_equal(hs, hs0)
        np.testing.assert_array_equal(hs1, hs0)
    for a, b, c in zip(ps, ps1, ps0):
        np.testing.assert_array_equal(a, c)
        np.testing.assert_array_equal(b, c)


def test_where_the_kernel_does_not_fit_nothing_is_fused(monkeypatch):
    """Vectors of the product other than the cell's (a blocking another machine's tuner may
    choose): the two launches, as before."""
    monkeypatch.setenv("LABKIT_GEMM_CONFIG", "8,4,8")
    step, outs, _ = _train(steps=2)
    assert step.programs()[0].cells == step.programs()[0].cell_grads == 0
    assert all(np.isfinite(loss) for loss, _ in outs)


def _both(make, calls):
    """``make()`` -> step; the compiled step with the LSTM kernels and without, and eager, on
    the same calls: their results, per call."""
    outs = []
    for fused in (True, False, None):
        lstm_cells.ENABLED = fused is not False
        try:
            step = make()
            f = lk.compile(step) if fused is not None else step
            outs.append([[o.numpy() for o in f(*args)] for args in calls])
        finally:
            lstm_cells.ENABLED = True
        if fused:
            prog = f.programs()[0]
    return prog, outs


def test_a_learnt_state_used_as_both_h_and_c_is_not_read_before_it_is_made(monkeypatch):
    """With one tensor as the first h and c, the last step's gradient is ``gc + gx @ U``, the
    addition's operand the fused node's own output: the pass took it (a replay then failed on
    an unbound slot). It is left as two launches now; the rest fuses, and the results are the
    unfused step's bit for bit and eager's."""
    monkeypatch.setenv("LABKIT_GEMM_CONFIG", "8,2,16")
    rng = np.random.default_rng(3)
    M, H = 32, 64
    u0 = (rng.standard_normal((4 * H, H)) * 0.1).astype(np.float32)
    s0 = rng.standard_normal((M, H)).astype(np.float32)

    def make():
        u = lk.tensor(u0, device="cl", requires_grad=True)
        s = lk.tensor(s0, device="cl", requires_grad=True)

        def step(xw):
            u.grad = s.grad = None
            c, h = s, s
            loss = 0
            for t in range(3):
                c, h = F.lstm(c, xw[:, t] + F.matmul(h, F.transpose(u)))
                loss = loss + F.sum(h * h)
            loss.backward()
            return loss, s.grad, u.grad
        return step
    calls = [(lk.tensor(rng.standard_normal((M, 3, 4 * H)).astype(np.float32), device="cl"),)
             for _ in range(4)]
    prog, (fused, unfused, eager) = _both(make, calls)
    assert any(n.name == "matmul+lstm" for n in prog.nodes)
    for a, b, c in zip(fused, unfused, eager):
        for x, y, z in zip(a, b, c):
            np.testing.assert_array_equal(x, y)
            np.testing.assert_array_equal(x, z)


def test_a_product_the_eager_step_sums_in_slices_is_not_fused(monkeypatch):
    """At batch 2 the step's ``h @ U.T`` (a transposed view) runs as dot products over slices
    of K, where the regrouped U's product would take the blocked kernel: the sums would
    differ in the last bit (they did, by 1.5e-8 in h). The pass checks the path of the
    product as the separate launches read U."""
    monkeypatch.setenv("LABKIT_GEMM_CONFIG", "8,2,16")

    def make():
        lk.bricks.set_seed(11)
        net = B.LSTM(8, 128).to("cl")
        opt = lk.optimizers.SGD(lr=0.1).setup(net)

        def step(x):
            hs = net(x)
            loss = (hs * hs).mean()
            opt.zero_grad()
            loss.backward()
            opt.update()
            return loss, hs
        return step
    rng = np.random.default_rng(12)
    calls = [(lk.tensor(rng.standard_normal((2, 3, 8)).astype(np.float32), device="cl"),)
             for _ in range(3)]
    prog, (fused, unfused, _) = _both(make, calls)
    assert prog.cells == 0
    for a, b in zip(fused, unfused):
        for x, y in zip(a, b):
            np.testing.assert_array_equal(x, y)


def test_steps_whose_input_is_made_inside_the_loop_keep_a_launch_each(monkeypatch):
    """A time loop that projects each step's input as it goes: the steps are not one
    launch (an input would be read before it is made); they are as the eager loop."""
    monkeypatch.setenv("LABKIT_GEMM_CONFIG", "8,2,16")
    rng = np.random.default_rng(5)
    M, H, F_ = 32, 64, 16
    u0 = (rng.standard_normal((4 * H, H)) * 0.1).astype(np.float32)
    w0 = (rng.standard_normal((4 * H, F_)) * 0.1).astype(np.float32)

    def make():
        u = lk.tensor(u0, device="cl", requires_grad=True)
        w = lk.tensor(w0, device="cl", requires_grad=True)

        def step(x):
            u.grad = w.grad = None
            c = h = lk.tensor(np.zeros((M, H), np.float32), device="cl")
            for t in range(4):
                xw = F.matmul(x[:, t], F.transpose(w))
                c, h = F.lstm(c, F.matmul(h, F.transpose(u)) + xw)
            loss = F.sum(h * h)
            loss.backward()
            return loss, h, u.grad, w.grad
        return step
    calls = [(lk.tensor(rng.standard_normal((M, 4, F_)).astype(np.float32), device="cl"),)
             for _ in range(3)]
    prog, (fused, unfused, eager) = _both(make, calls)
    assert prog.cells == 4 and prog.cell_loops == 0
    for a, b, c in zip(fused, unfused, eager):
        for x, y, z in zip(a, b, c):
            np.testing.assert_array_equal(x, y)
            np.testing.assert_array_equal(x, z)
