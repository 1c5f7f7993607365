"""A user's own Function runs at every replay even where nothing uses its result: a guard
that raises on the values it gets (a non-finite loss) must stop a compiled step as it stops
the eager one; dead-code removal dropped it, and the compiled step went on silently."""

import numpy as np
import pytest

import labkit as lk
import labkit.functions as F
from labkit.autograd.function import Function


class Finite(Function):
    name = "finite"

    def forward(self, a):
        if not np.isfinite(a.get() if hasattr(a, "get") else a).all():
            raise FloatingPointError("non-finite loss: step skipped")
        return a * 1.0

    def backward(self, inputs, gy):
        return (gy,)


@pytest.mark.parametrize("compiled", [False, True])
def test_an_unused_guard_still_stops_the_step(dev, compiled):
    rng = np.random.default_rng(0)
    w = lk.tensor(rng.standard_normal((4, 3)).astype(np.float32), device=dev,
                  requires_grad=True)
    opt = lk.optimizers.SGD(lr=0.1).setup({"w": w})

    def step(x):
        loss = (F.linear(x, w) ** 2).mean()
        Finite().apply((loss,))  # its result unused: a check only
        opt.zero_grad()
        loss.backward()
        opt.update()
        return loss
    f = lk.compile(step) if compiled else step
    good = lk.tensor(rng.standard_normal((2, 3)).astype(np.float32), device=dev)
    for _ in range(4):
        f(good)
    before = w.numpy().copy()
    bad = lk.tensor(np.full((2, 3), np.nan, np.float32), device=dev)
    with pytest.raises(FloatingPointError, match="non-finite loss"):
        f(bad)
    assert np.array_equal(w.numpy(), before)
    if compiled:
        assert f.stats["replays"] >= 2 and any(n.name == "finite"
                                              for n in f.programs()[0].nodes)
