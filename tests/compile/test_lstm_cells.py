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
    assert prog.cells == 6 and prog.cell_grads >= 3
    assert sum(n.name == "matmul+lstm" for n in prog.nodes) == 6
    assert sum(n.name == "lstm_grad+matmul" for n in prog.nodes) == prog.cell_grads
    assert "lstm: 6 LSTM step(s) computed in their product's kernel" in step.explain()
    assert f"lstm: {prog.cell_grads} LSTM step gradient(s)" in step.explain()
    monkeypatch.setattr(lstm_cells, "ENABLED", False)
    step0, outs0, ps0 = _train()
    assert step0.programs()[0].cells == step0.programs()[0].cell_grads == 0
    assert len(step0.programs()[0].nodes) == (len(prog.nodes) + 6 + prog.cell_grads
                                              - 1)  # NOTE: and no regrouping
    for (loss, hs), (loss0, hs0) in zip(outs, outs0):
        assert loss == loss0
        np.testing.assert_array_equal(hs, hs0)
    for a, b in zip(ps, ps0):
        np.testing.assert_array_equal(a, b)


def test_where_the_kernel_does_not_fit_nothing_is_fused(monkeypatch):
    """Vectors of the product other than the cell's (a blocking another machine's tuner may
    choose): the two launches, as before."""
    monkeypatch.setenv("LABKIT_GEMM_CONFIG", "8,4,8")
    step, outs, _ = _train(steps=2)
    assert step.programs()[0].cells == step.programs()[0].cell_grads == 0
    assert all(np.isfinite(loss) for loss, _ in outs)
