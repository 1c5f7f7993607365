"""Every op of the shared checker (tests/autograd/test_functions.py's CASES) run compiled: a
step computing ``y = case.fn(*xs)`` and ``(y * u).sum().backward()``, returning y and the
inputs' gradients, called four times with new input values of the same shapes (calls 1 and
2 are traced, 3 and 4 replay); each replay's results against the eager step on the same
inputs.

Bit-identical on cpu and on cl with ``fuse=False``: a replay runs each op's own ``forward``
on the same arrays in the same order, so nothing may differ. With fusion (``fuse=True``) on
cl, float32 results are allowed rtol 1e-5 / atol 1e-6: a fused kernel calls the scalar exp,
tanh, ... where an eager kernel of >= 4096 elements runs PoCL's vector math (test_fusion.py
measures which ops differ; at these small shapes all are in fact bit-identical). On cpu
nothing is fused and the results stay bit-identical."""

import numpy as np
import pytest

import labkit as lk
from labkit.errors import CompileError

from ..autograd.test_functions import CASES

# Cases that cannot be compiled by design, with the refusal they get: the checker's dropout
# case makes a new Generator(7) inside the step, so eager draws the same mask at every call;
# a replay cannot make a new generator, and the mask's host computation holding another
# generator at each call is refused (not replayed with a stale or advancing one).
UNCOMPILABLE: dict[str, str] = {
    "dropout": r"lk\.compile: step did not do the same thing in two calls.*dropout\.mask",
}


def _params():
    out = []
    for case in CASES:
        for devname in ("cpu", "cl"):
            if case.name in UNCOMPILABLE:
                continue  # NOTE: test_uncompilable_cases_are_refused_clearly
            marks = list(case.marks)
            out.append(pytest.param(case, devname, marks=marks, id=f"{case.name}-{devname}"))
    return out


def _step(case, u):
    def step(*xs):
        y = case.fn(*xs)
        (y * u).sum().backward()
        return y, [x.grad for x in xs]
    return step


def _inputs(case, dev, rng):
    return [lk.tensor(x.astype(np.float32), device=dev, requires_grad=True)
            for x in case.inputs(rng)]


def _run(case, devname, fuse):
    dev = lk.device(devname)
    rng = np.random.default_rng(20240518)
    shape = np.asarray(case.ref(*case.inputs(rng))).shape
    u = lk.tensor(rng.standard_normal(shape).astype(np.float32), device=dev)
    step = _step(case, u)
    compiled = lk.compile(step, fuse=fuse)
    calls = [_inputs(case, dev, rng) for _ in range(4)]
    got = [compiled(*xs) for xs in calls]
    assert compiled.stats["traces"] == 2 and compiled.stats["replays"] == 2, compiled.stats
    for k in (2, 3):
        # the eager step on copies of the same inputs
        xs = [lk.tensor(x.numpy(), device=dev, requires_grad=True) for x in calls[k]]
        yield k, got[k], step(*xs)


def _compare(case, k, got, want, exact):
    (y, gs), (ye, ges) = got, want
    pairs = [("y", y, ye)] + [(f"grad of input {i}", g, ge)
                              for i, (g, ge) in enumerate(zip(gs, ges))]
    for what, a, b in pairs:
        assert (a is None) == (b is None), f"{case.name}, call {k + 1}: {what} is {a}, eager {b}"
        if a is None:
            continue
        assert a.dtype == b.dtype and a.shape == b.shape
        if exact:
            np.testing.assert_array_equal(a.numpy(), b.numpy(),
                                          err_msg=f"{case.name}, call {k + 1}: {what}")
        else:
            np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-5, atol=1e-6,
                                       err_msg=f"{case.name}, call {k + 1}: {what}")


@pytest.mark.parametrize("case, devname", _params())
def test_replay_is_bit_identical_without_fusion(case, devname):
    """fuse=False: a replay is the eager computation, bit for bit, on cpu and cl."""
    for k, got, want in _run(case, devname, fuse=False):
        _compare(case, k, got, want, exact=True)


@pytest.mark.parametrize("case, devname", _params())
def test_replay_with_fusion(case, devname):
    """fuse=True (the default): bit-identical on cpu (fusion is OpenCL only); on cl, float32
    within rtol 1e-5 / atol 1e-6 (a fused kernel may reorder float operations)."""
    for k, got, want in _run(case, devname, fuse=True):
        _compare(case, k, got, want, exact=devname == "cpu")


@pytest.mark.parametrize("name", sorted(UNCOMPILABLE))
@pytest.mark.parametrize("devname", ["cpu", "cl"])
def test_uncompilable_cases_are_refused_clearly(name, devname):
    case = next(c for c in CASES if c.name == name)
    with pytest.raises(CompileError, match=UNCOMPILABLE[name]):
        list(_run(case, devname, fuse=True))
