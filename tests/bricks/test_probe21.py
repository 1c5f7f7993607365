"""Optimizers against PyTorch (probe 21): a NumPy number as a hyper-parameter keeps a float32
parameter's state float32 (np.float64(0.9) as a momentum made it float64, and the saved state
no longer loaded); a second setup() starts Adam's bias correction again with the moments."""

import numpy as np
import pytest

import labkit as lk
import labkit.bricks as B
from labkit import optimizers as O


@pytest.mark.parametrize("make", [
    lambda: O.Momentum(lr=0.1, momentum=np.float64(0.9)),
    lambda: O.Adam(lr=0.01, beta1=np.float64(0.9)),
    lambda: O.RMSProp(lr=0.01, alpha=np.float64(0.9)),
    lambda: O.Nesterov(lr=0.1, momentum=np.float64(0.9)),
])
@pytest.mark.parametrize("size", [3, 400])
def test_numpy_hyper_parameters_keep_the_state_in_the_parameters_dtype(dev, make, size):
    def build():
        lk.bricks.set_seed(0)
        m = B.Linear(size, 2).to(dev)
        return m, make().setup(m)
    m, opt = build()
    for _ in range(2):
        for p in m.params().values():
            p.grad = lk.tensor(np.ones(p.shape, np.float32), device=dev)
        opt.update()
    state = opt.state_dict()
    assert all(a.dtype == np.float32 for st in state["state"].values() for a in st.values())
    assert all(p.dtype == np.float32 for p in m.params().values())
    _, again = build()
    again.load_state_dict(state)  # NOTE: it raised: the state was float64


def test_a_second_setup_starts_adams_correction_again():
    a = B.Parameter(np.zeros(3), role=lk.roles.WEIGHT)
    b = B.Parameter(np.zeros(3), role=lk.roles.WEIGHT)
    opt = O.Adam(lr=0.01).setup({"a": a})
    for _ in range(50):
        a.grad = lk.tensor(np.ones(3))
        opt.update()
    opt.setup({"a": a, "b": b})  # NOTE: a layer unfrozen: every moment starts again
    before = a.data.copy(), b.data.copy()
    a.grad = b.grad = lk.tensor(np.ones(3))
    opt.update()
    np.testing.assert_allclose(before[0] - a.data, 0.01, rtol=1e-6)  # NOTE: was 0.0251
    np.testing.assert_allclose(before[1] - b.data, 0.01, rtol=1e-6)
    assert opt.t == 51
