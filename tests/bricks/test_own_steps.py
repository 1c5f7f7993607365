"""Adam's bias correction counts each parameter's own updates, as PyTorch's does: a parameter
without a gradient at some steps (a layer unfrozen late) starts its correction at 1. Against a
float64 NumPy Adam with a count per parameter, on both devices, through every update path
(the unfused rules, the CPU's pieces, the OpenCL kernel); the counts are saved, restored
bitwise, and checked on load."""

from __future__ import annotations

import numpy as np
import pytest

import labkit as lk
import labkit.optimizers as O
from labkit.errors import CheckpointError


def _ref(grads, lr=0.1, b1=0.9, b2=0.999, eps=1e-8, wd=0.0):
    """float64 Adam(W) over a list of per-step gradients (None: no update that step)."""
    p = m = v = None
    k = 0
    for g in grads:
        if g is None:
            continue
        g = np.asarray(g, np.float64)
        if p is None:
            p, m, v = np.zeros_like(g), np.zeros_like(g), np.zeros_like(g)
        k += 1
        m = m * b1 + g * (1 - b1)
        v = v * b2 + g * g * (1 - b2)
        step = m / (1 - b1 ** k) * lr / (np.sqrt(v / (1 - b2 ** k)) + eps) + p * lr * wd
        p = p - step
    return p


@pytest.mark.parametrize("n", [3, 3 * (1 << 16)], ids=["small", "large"])
@pytest.mark.parametrize("rule", ["Adam", "AdamW"])
def test_a_parameter_updated_late_starts_its_own_bias_correction(dev, n, rule):
    rng = np.random.default_rng(0)
    dt = np.float32
    a = lk.tensor(np.zeros(n, dt), device=dev, requires_grad=True)
    b = lk.tensor(np.zeros(n, dt), device=dev, requires_grad=True)
    opt = getattr(O, rule)(lr=0.1).setup({"a": a, "b": b})
    ga = [rng.standard_normal(n).astype(dt) for _ in range(6)]
    gb = [None, None, None] + [rng.standard_normal(n).astype(dt) for _ in range(3)]
    for x, y in zip(ga, gb):
        a.grad = lk.tensor(x, device=dev)
        b.grad = None if y is None else lk.tensor(y, device=dev)
        opt.update()
    wd = 0.01 if rule == "AdamW" else 0.0
    np.testing.assert_allclose(b.numpy(), _ref(gb, wd=wd), rtol=2e-5, atol=2e-6)
    np.testing.assert_allclose(a.numpy(), _ref(ga, wd=wd), rtol=2e-5, atol=2e-6)
    assert opt.t == 6 and opt.counts == [6, 3]
    assert opt.state_dict()["steps"] == {"b": 3}


def test_the_counts_are_restored_and_the_next_update_is_bitwise_the_same(dev):
    def make():
        a = lk.tensor(np.ones(5, np.float32), device=dev, requires_grad=True)
        b = lk.tensor(np.ones(5, np.float32), device=dev, requires_grad=True)
        return a, b, O.Adam(lr=0.01).setup({"a": a, "b": b})

    a, b, opt = make()
    for k in range(4):
        a.grad = lk.tensor(np.full(5, 0.5, np.float32), device=dev)
        b.grad = None if k < 2 else lk.tensor(np.full(5, -1.0, np.float32), device=dev)
        opt.update()
    saved = opt.state_dict()
    a2, b2, opt2 = make()
    a2.data, b2.data = a.data.copy(), b.data.copy()
    opt2.load_state_dict(saved)
    assert opt2.counts == [4, 2]
    for x, y, o in ((a, b, opt), (a2, b2, opt2)):
        x.grad = lk.tensor(np.full(5, 0.25, np.float32), device=dev)
        y.grad = lk.tensor(np.full(5, 2.0, np.float32), device=dev)
        o.update()
    np.testing.assert_array_equal(b2.numpy(), b.numpy())
    np.testing.assert_array_equal(a2.numpy(), a.numpy())


def test_a_state_without_steps_loads_as_before():
    p = lk.tensor(np.ones(3, np.float32), requires_grad=True)
    opt = O.Adam().setup({"p": p})
    state = {"t": 7, "state": {"p": {"0.m": np.zeros(3, np.float32),
                                     "0.v": np.zeros(3, np.float32)}}}
    opt.load_state_dict(state)
    assert opt.counts == [7] and "steps" not in opt.state_dict()


@pytest.mark.parametrize("steps,message", [
    ([1], "'steps' must be a dict"),
    ({"q": 1}, "does not have: q"),
    ({"p": -1}, r"steps\['p'\] \(its updates\) must be an int in \[0, t\]"),
    ({"p": 8}, r"must be an int in \[0, t\], got 8"),
    ({"p": True}, "got True"),
    ({"p": 1.5}, "got 1.5"),
])
def test_damaged_steps_are_refused_and_nothing_is_loaded(steps, message):
    p = lk.tensor(np.ones(3, np.float32), requires_grad=True)
    opt = O.Adam().setup({"p": p})
    state = {"t": 7, "state": {"p": {"0.m": np.ones(3, np.float32),
                                     "0.v": np.ones(3, np.float32)}}, "steps": steps}
    with pytest.raises(CheckpointError, match=message):
        opt.load_state_dict(state)
    assert opt.t == 0 and opt.counts == [0] and not opt.states[0][0]["m"].any()


def test_gradient_clipping_reads_its_limit_as_every_rule_does():
    """A schedule for max_norm is followed, a group's value read; groups that disagree are
    an error naming the fix (one norm over every gradient takes one limit)."""
    def run(opt_rules, groups=None, steps=2):
        p = lk.tensor(np.zeros(4, np.float32), requires_grad=True)
        q = lk.tensor(np.zeros(4, np.float32), requires_grad=True)
        opt = O.chain(*opt_rules).setup({"p": p, "q": q}, groups=groups)
        for _ in range(steps):
            p.grad = lk.tensor(np.full(4, 3.0, np.float32))
            q.grad = lk.tensor(np.full(4, 4.0, np.float32))
            opt.update()
        return p.numpy(), opt

    sched = O.StepDecay(2.0, every=1, gamma=0.5)   # 2.0 at step 0, 1.0 at step 1
    p, opt = run([O.GradientClipping(sched), O.SGD(1.0)])
    # NOTE: the global norm is 10; clipped to 2 then 1: p = -(3 * 0.2) - (3 * 0.1)
    np.testing.assert_allclose(p, -0.9, rtol=1e-6)
    p, _ = run([O.GradientClipping(5.0), O.SGD(1.0)], groups=[{"name": "*", "max_norm": 1.0}],
               steps=1)
    np.testing.assert_allclose(p, -0.3, rtol=1e-6)
    with pytest.raises(ValueError, match="give one max_norm"):
        run([O.GradientClipping(5.0), O.SGD(1.0)], groups=[{"name": "p", "max_norm": 1.0}])
