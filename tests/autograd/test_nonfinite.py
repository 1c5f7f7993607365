"""NaN and infinities through every op of the table, on cpu and cl: both devices must give the
same NaN/Inf pattern (and the same finite values) for the forward, for the backward with
non-finite inputs, and for the backward of an upstream gradient holding nan, +inf and -inf.

The semantics are the devices' agreement, and for the masking ops one rule: a gradient that
an op passes through (relu where x > 0, where's chosen branch, clip inside [lo, hi]) is the
upstream value, nan and inf included, and the gradient it blocks is 0 whatever the upstream
value (never 0 * inf = nan). F.max, F.min and the poolings scale the upstream gradient by their
winner mask instead, so a nan upstream value reaches its whole window, on both devices alike."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import labkit as lk
import labkit.functions as F

from .test_functions import CASES

SPECIAL = (np.nan, np.inf, -np.inf)


def poison(a: np.ndarray, shift: int = 0) -> np.ndarray:
    """``a`` with nan, +inf and -inf at three spread positions (fewer for tiny arrays)."""
    a = np.array(a, dtype=np.float64, copy=True)
    n = a.size
    if n == 0:
        return a
    spots = sorted({(shift + k * max(n // 3, 1)) % n for k in range(3)})
    for v, i in zip(SPECIAL, spots):
        a.flat[i] = v
    return a


def pattern_equal(got_cpu, got_cl, what):
    """Same nan, +inf and -inf positions; finite values close (float32 on both)."""
    a, b = np.asarray(got_cpu, np.float64), np.asarray(got_cl, np.float64)
    assert a.shape == b.shape, f"{what}: shapes {a.shape} (cpu) and {b.shape} (cl)"
    for name, test in (("nan", np.isnan), ("+inf", np.isposinf), ("-inf", np.isneginf)):
        ma, mb = test(a), test(b)
        if not np.array_equal(ma, mb):
            raise AssertionError(
                f"{what}: {name} at {np.argwhere(ma).tolist()} on cpu but at "
                f"{np.argwhere(mb).tolist()} on cl\ncpu: {a.ravel()}\ncl:  {b.ravel()}")
    fin = np.isfinite(a)
    np.testing.assert_allclose(a[fin], b[fin], rtol=1e-3, atol=1e-4,
                               err_msg=f"{what}: finite values differ")


def run(case, xs, gy, dev):
    """Forward and the gradients of sum(y * gy) on ``dev`` (float32); NumPy arrays back."""
    ts = [lk.tensor(x.astype(np.float32), device=dev, requires_grad=True) for x in xs]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # NumPy warns on nan/inf; cl does not
        y = case.fn(*ts)
        g = lk.tensor(gy.astype(np.float32), device=dev)
        grads = lk.grad([F.sum(y * g)], ts, allow_unused=True)
        return y.numpy(), [None if v is None else v.numpy() for v in grads]


def compare(case, xs, gy):
    y_cpu, g_cpu = run(case, xs, gy, "cpu")
    y_cl, g_cl = run(case, xs, gy, "cl")
    pattern_equal(y_cpu, y_cl, f"{case.name} forward")
    for k, (a, b) in enumerate(zip(g_cpu, g_cl)):
        assert (a is None) == (b is None), f"{case.name}: gradient {k} unused on one device"
        if a is not None:
            pattern_equal(a, b, f"{case.name} gradient of input {k}")


# Disagreements that come from the OpenCL backend, not from the op (strict: a fix shows up)
BACKEND: dict = {}


def cases(known):
    return [pytest.param(c, id=c.name, marks=pytest.mark.xfail(reason=known[c.name],
                                                                strict=True))
            if c.name in known else pytest.param(c, id=c.name) for c in CASES]


@pytest.mark.parametrize("case", cases(BACKEND))
def test_nonfinite_inputs_agree_across_devices(case, rng):
    xs = [poison(x, k) for k, x in enumerate(case.inputs(rng))]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        shape = np.shape(case.ref(*case.inputs(np.random.default_rng(0))))
    compare(case, xs, rng.standard_normal(shape))


@pytest.mark.parametrize("case", cases({}))
def test_nonfinite_upstream_gradients_agree_across_devices(case, rng):
    xs = case.inputs(rng)
    shape = np.shape(case.ref(*xs))
    compare(case, xs, poison(rng.standard_normal(shape)))


# ---- the masking ops' rule, against an independent reference --------------------------------


@pytest.mark.parametrize("fn,passes", [
    (F.relu, lambda x: x > 0),
    (lambda x: F.clip(x, -0.5, 0.5), lambda x: (x >= -0.5) & (x <= 0.5)),
    (lambda x: F.where(np.array([True, False, True, False, True, False]), x, 0.0),
     lambda x: np.array([True, False, True, False, True, False])),
    (lambda x: F.maximum(x, 0.25), lambda x: x >= 0.25),
], ids=["relu", "clip", "where", "maximum"])
def test_masks_pass_nonfinite_gradients_and_block_them_exactly(fn, passes, dev):
    x = np.array([1.0, -1.0, 0.3, -0.2, 2.0, 0.0], np.float32)
    gy = np.array([np.nan, np.nan, np.inf, -np.inf, -np.inf, np.inf], np.float32)
    t = lk.tensor(x, device=dev, requires_grad=True)
    (g,) = lk.grad([fn(t)], [t], grad_outputs=[lk.tensor(gy, device=dev)])
    want = np.where(passes(x), gy, 0.0)
    np.testing.assert_array_equal(g.numpy(), want)  # nan == nan for assert_array_equal
