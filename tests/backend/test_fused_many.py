"""One launch for an optimizer's plain SGD update of many parameters on an OpenCL device
(backend/opencl/fused.run_many, optimizers/fused.run_batch): the same bits as one kernel per
parameter and as the unfused ops, over more parameters than one launch takes, of two dtypes,
empty ones, and parameters that share a buffer (then one by one, in order)."""

import numpy as np
import pytest

import labkit as lk
from labkit.backend.opencl import fused


def _params(rng, sizes, dtype=np.float32):
    return {f"p{k}": lk.tensor(rng.standard_normal(n).astype(dtype), device="cl",
                               requires_grad=True) for k, n in enumerate(sizes)}


def _train(ps, fused_on, steps=3, lr=0.37):
    opt = lk.optimizers.SGD(lr=lr).setup(ps)
    opt.fused = fused_on
    rng = np.random.default_rng(1)
    for _ in range(steps):
        for p in ps.values():
            p.grad = lk.Tensor(lk.tensor(rng.standard_normal(p.shape).astype(p.numpy().dtype),
                                         device="cl").data)
        opt.update()
    return [p.numpy() for p in ps.values()]


@pytest.mark.parametrize("sizes", [[5, 3, 1000, 7, 0, 2, 513, 64, 1, 9, 300], [4096]])
def test_many_parameters_in_one_launch_give_the_bits_of_one_each(sizes):
    got = _train(_params(np.random.default_rng(0), sizes), True)
    want = _train(_params(np.random.default_rng(0), sizes), False)
    for a, b in zip(got, want):
        assert a.tobytes() == b.tobytes()


def test_two_dtypes_and_shared_buffers():
    rng = np.random.default_rng(0)
    ps = {**_params(rng, [6, 5]), **{f"d{k}": v for k, v in
                                      _params(rng, [4, 3], np.float64).items()}}
    got = _train(ps, True)
    rng = np.random.default_rng(0)
    ps2 = {**_params(rng, [6, 5]), **{f"d{k}": v for k, v in
                                       _params(rng, [4, 3], np.float64).items()}}
    assert [a.tobytes() for a in got] == [b.tobytes() for b in _train(ps2, False)]
    base = lk.tensor(np.arange(10, dtype=np.float32), device="cl")
    a = lk.tensor(np.zeros(5, np.float32), device="cl", requires_grad=True)
    b = lk.tensor(np.zeros(5, np.float32), device="cl", requires_grad=True)
    a.data, b.data = base.data[:5], base.data[5:]  # two views of one buffer
    opt = lk.optimizers.SGD(lr=1.0).setup({"a": a, "b": b})
    a.grad = lk.Tensor(lk.tensor(np.ones(5, np.float32), device="cl").data)
    b.grad = lk.Tensor(lk.tensor(np.full(5, 2, np.float32), device="cl").data)
    opt.update()
    assert np.array_equal(base.numpy(), np.r_[np.arange(5) - 1, np.arange(5, 10) - 2])


def test_run_many_launches_once_for_up_to_many_groups(monkeypatch):
    calls = []
    real = fused.run
    monkeypatch.setattr(fused, "run", lambda *a, **k: (calls.append(1), real(*a, **k)))
    rng = np.random.default_rng(0)
    ps = _params(rng, [3] * (fused.MANY + 1))
    _train(ps, True, steps=2)  # NOTE: the first update writes the kernel's body (one run)
    calls.clear()
    _train(ps, True, steps=1)
    assert calls == [1]  # the ninth parameter alone; the first eight in one launch


def test_a_large_parameter_gets_a_launch_of_its_own_with_the_same_bits(monkeypatch):
    """PoCL makes vectors of run's kernel, not of run_many's (839 against 222 us for an MLP's
    update): a parameter of ALONE elements or more goes to run, the small ones together."""
    sizes = [7, fused.ALONE, 300, fused.ALONE + 5, 2]
    want = _train(_params(np.random.default_rng(0), sizes), False)
    calls = []
    real = fused.run
    monkeypatch.setattr(fused, "run", lambda body, arrays, *a, **k: (
        calls.append(arrays[0].size), real(body, arrays, *a, **k)))
    got = _train(_params(np.random.default_rng(0), sizes), True)
    assert [a.tobytes() for a in got] == [b.tobytes() for b in want]
    assert calls[-2:] == [fused.ALONE, fused.ALONE + 5]  # NOTE: the last step's own launches
