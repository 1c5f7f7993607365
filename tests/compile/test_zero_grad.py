"""A compiled step's ``opt.zero_grad()`` clears, at every replay, the gradient of each
parameter the step leaves without one: a parameter one program does not use kept the
gradient another program (or an eager call) gave it, where the eager step has None."""

import numpy as np

import labkit as lk
import labkit.functions as F


def _run(dev, compiled):
    rng = np.random.default_rng(0)
    ps = [lk.tensor((rng.standard_normal(s) * 0.2).astype(np.float32), device=dev,
                    requires_grad=True) for s in ((16, 8), (4, 16), (4, 16))]
    x = lk.tensor(rng.standard_normal((5, 8)).astype(np.float32), device=dev)
    y = lk.tensor(rng.integers(0, 4, 5), device=dev)
    opt = lk.optimizers.SGD(lr=0.1).setup({f"p{i}": p for i, p in enumerate(ps)})

    def step(x, y, use):
        h = F.relu(F.linear(x, ps[0]))
        z = F.linear(h, ps[1])
        if use:  # the third parameter only in some steps (a branch: one program each way)
            z = z + F.linear(h, ps[2])
        loss = F.softmax_cross_entropy(z, y)
        opt.zero_grad()
        loss.backward()
        opt.update()
        return loss
    f = lk.compile(step) if compiled else step
    seen = []
    for use in (True, True, False, False, True, False, True, False, False, True, False):
        f(x, y, use)
        seen.append([None if p.grad is None else p.grad.numpy() for p in ps])
    return seen, [p.numpy() for p in ps]


def test_a_parameter_a_replay_does_not_use_has_no_gradient(dev):
    (ge, pe), (gc, pc) = _run(dev, False), _run(dev, True)
    for k, (a, b) in enumerate(zip(ge, gc)):
        for u, v in zip(a, b):
            assert (u is None) == (v is None), f"call {k}"
            assert u is None or np.array_equal(u, v)
    for u, v in zip(pe, pc):
        assert np.array_equal(u, v)
