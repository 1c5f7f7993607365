"""A compiled step whose data arrives as arrays (regression targets, a mask, a constant per
batch) new at every call: it replays, with that call's values, as the eager step computes.
An op wrapped such an argument in a Tensor of its own, which the trace took for a tensor that
lives on (a parameter whose data was passed in): every call was traced again, for nothing."""

from __future__ import annotations

import numpy as np
import pytest

import labkit as lk
import labkit.functions as F

CASES = {
    "mse target": lambda y, a: F.mean_squared_error(y, a),
    "mse target first": lambda y, a: F.mean_squared_error(a, y),
    "add": lambda y, a: (y + a).sum(),
    "mul": lambda y, a: (y * a).sum(),
    "maximum": lambda y, a: F.maximum(y, a).sum(),
    "sigmoid_cross_entropy": lambda y, a: F.sigmoid_cross_entropy(y, a),  # soft targets
}


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("raw", [True, False], ids=["array", "tensor"])
def test_an_array_operand_new_at_each_call_replays(dev, case, raw):
    rng = np.random.default_rng(0)
    if raw and dev.kind == "cl" and case != "sigmoid_cross_entropy":
        # NOTE: a NumPy operand beside an OpenCL tensor is refused (no hidden copy per op),
        # compiled or not, with the fix in the message
        y = lk.tensor(np.ones((8, 3), np.float32), device=dev)
        for f in (CASES[case], lk.compile(CASES[case])):
            with pytest.raises(lk.errors.DeviceMismatchError, match="lk.tensor"):
                f(y, np.ones((8, 3), np.float32))
        return
    batches = [(rng.standard_normal((8, 4)).astype(np.float32),
                rng.standard_normal((8, 3)).astype(np.float32)) for _ in range(5)]

    def run(compiled):
        w = lk.tensor(np.full((4, 3), 0.1, np.float32), device=dev, requires_grad=True)
        opt = lk.optimizers.SGD(0.1).setup({"w": w})

        def step(x, a):
            loss = CASES[case](x @ w, a)
            opt.zero_grad()
            loss.backward()
            opt.update()
            return loss

        f = lk.compile(step) if compiled else step
        out = [float(f(lk.tensor(x, device=dev), a if raw else lk.tensor(a, device=dev)).item())
               for x, a in batches]
        return out, w.numpy(), getattr(f, "stats", None)

    (le, we, _), (lc, wc, st) = run(False), run(True)
    assert (st["traces"], st["replays"], st["retraces"]) == (2, 3, 0), st
    np.testing.assert_allclose(lc, le, rtol=1e-6)
    np.testing.assert_allclose(wc, we, rtol=1e-6, atol=1e-7)


def test_a_parameters_data_passed_in_is_still_that_parameter_at_each_call(dev):
    """What the trace's aliasing rule is for: an argument that is the data of a tensor the
    step also reads must be its data again, or the step is traced anew."""
    w = lk.tensor(np.ones((3, 3), np.float32), device=dev, requires_grad=True)
    f = lk.compile(lambda a: (w * a).sum())
    for _ in range(3):
        f(w.data)
    assert f.stats["replays"] == 1
    f(w.data.copy())
    assert f.stats["retraces"] == 1
