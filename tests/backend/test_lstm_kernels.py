"""The one-launch LSTM step on OpenCL (labkit/backend/opencl/lstm.py): the vector kernels
(H a multiple of the vector width, CPU devices) and the scalar ones, forward and gradient,
against the NumPy path within a few float32 ulps, saturating gates included."""

import numpy as np
import pytest

import labkit as lk
import labkit.functions as F
from labkit.backend.opencl import lstm as cl_lstm
from labkit.backend.opencl import runtime


@pytest.mark.parametrize("h", [16, 64, 12])
def test_step_and_gradient_against_numpy(h, rng):
    n = 5
    c = rng.standard_normal((n, h)).astype(np.float32)
    x = (rng.standard_normal((n, 4 * h)) * 6).astype(np.float32)
    x[0, :4] = [30.0, -30.0, 0.0, -0.0]   # a saturated tanh, zeros of both signs
    x[1, h:h + 2] = [-120.0, 120.0]        # sigmoid at its ends
    gc = rng.standard_normal((n, h)).astype(np.float32)
    gh = rng.standard_normal((n, h)).astype(np.float32)
    w = cl_lstm.vector_width(runtime(0), np.dtype(np.float32), h)  # 1: the scalar kernels
    assert (w > 1) == (h % 16 == 0 and runtime(0).info.is_cpu)
    results = []
    for dev in ("cpu", "cl"):
        tc = lk.tensor(c, device=dev, requires_grad=True)
        tx = lk.tensor(x, device=dev, requires_grad=True)
        cn, hn = F.lstm(tc, tx)
        loss = (cn * lk.tensor(gc, device=dev)).sum() + (hn * lk.tensor(gh, device=dev)).sum()
        loss.backward()
        results.append([cn.numpy(), hn.numpy(), tc.grad.numpy(), tx.grad.numpy()])
    for got, want in zip(results[1], results[0]):
        np.testing.assert_allclose(got, want, rtol=4e-7 * 4, atol=4e-7)
    assert np.abs(results[1][1]).max() <= 1.0
