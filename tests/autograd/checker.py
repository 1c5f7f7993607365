"""The shared op checker: one declaration per op (input generator + NumPy reference) gives
forward against the reference, backward against float64 central differences, and double
backward (the gradient of <grad, u> against central differences of the first gradient), on
every device. On a device without fp64 (conftest's "cl-no-fp64") the float64 checks cannot run:
the forward is checked in float32 only, and the float32 gradients and second derivatives
against the float64 ones of the cpu (which the cpu rows check against central differences)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

import labkit as lk


@dataclass
class OpCase:
    name: str
    fn: Callable                      # (*Tensors) -> Tensor
    ref: Callable                     # (*float64 ndarrays) -> ndarray
    shapes: list                      # one shape per input
    low: float = -2.0
    high: float = 2.0
    double: bool = True               # second derivative is not trivially zero
    rtol: float = 1e-4
    atol: float = 1e-5
    gen: Callable | None = None       # rng -> list of float64 inputs (overrides shapes)
    marks: list = field(default_factory=list)

    def __repr__(self):
        return self.name

    def inputs(self, rng):
        if self.gen is not None:
            return [np.asarray(a, np.float64) for a in self.gen(rng)]
        return [rng.uniform(self.low, self.high, s) for s in self.shapes]


def _t(a, dev, dtype, rg=True):
    return lk.tensor(a.astype(dtype), device=dev, requires_grad=rg)


def check_forward(case: OpCase, dev, rng):
    xs = case.inputs(rng)
    want = np.asarray(case.ref(*xs))
    y = case.fn(*[_t(x, dev, np.float32) for x in xs])
    assert y.dtype == np.float32, f"{case.name}: float32 inputs gave {y.dtype} (silent promotion)"
    assert y.device == dev
    np.testing.assert_allclose(y.numpy(), want, rtol=case.rtol * 10, atol=case.atol * 10,
                               err_msg=f"{case.name} forward on {dev}")
    if not dev.supports_float64:
        return  # NOTE: float64 arrays are refused there (tests/backend/test_no_fp64.py)
    y64 = case.fn(*[_t(x, dev, np.float64) for x in xs])
    assert y64.dtype == np.float64
    np.testing.assert_allclose(y64.numpy(), want, rtol=1e-9, atol=1e-10,
                               err_msg=f"{case.name} float64 forward on {dev}")


def _scalar(case, xs_t, gy):
    y = case.fn(*xs_t)
    return lk.functions.sum(y * gy)


def _numeric_grad(f, xs, eps):
    grads = []
    for i, x in enumerate(xs):
        g = np.zeros_like(x)
        for j in range(x.size):
            xp, xm = [a.copy() for a in xs], [a.copy() for a in xs]
            xp[i].flat[j] += eps
            xm[i].flat[j] -= eps
            g.flat[j] = (f(xp) - f(xm)) / (2 * eps)
        grads.append(g)
    return grads


def check_backward(case: OpCase, dev, rng, eps=1e-6):
    if not dev.supports_float64:
        return check_float32_derivatives(case, dev, rng, order=1)
    xs = case.inputs(rng)
    y0 = np.asarray(case.ref(*xs))
    gy = lk.tensor(rng.standard_normal(y0.shape), device=dev)

    def f(vals):
        with lk.no_grad():
            return float(_scalar(case, [_t(v, dev, np.float64, False) for v in vals], gy).item())

    ts = [_t(x, dev, np.float64) for x in xs]
    got = lk.grad([_scalar(case, ts, gy)], ts, allow_unused=True)
    want = _numeric_grad(f, xs, eps)
    for k, (g, w) in enumerate(zip(got, want)):
        g = np.zeros_like(w) if g is None else g.numpy()
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6,
                                   err_msg=f"{case.name}: gradient of input {k} on {dev}")


def check_double_backward(case: OpCase, dev, rng, eps=1e-5):
    if not dev.supports_float64:
        return check_float32_derivatives(case, dev, rng, order=2)
    xs = case.inputs(rng)
    y0 = np.asarray(case.ref(*xs))
    gy = lk.tensor(rng.standard_normal(y0.shape), device=dev)
    us = [lk.tensor(rng.standard_normal(x.shape), device=dev) for x in xs]

    def first(ts, create):
        gs = lk.grad([_scalar(case, ts, gy)], ts, create_graph=create, allow_unused=True)
        h = None
        for g, u in zip(gs, us):
            if g is None:
                continue
            term = lk.functions.sum(g * u)
            h = term if h is None else h + term
        return h

    def f(vals):
        h = first([_t(v, dev, np.float64) for v in vals], False)
        return 0.0 if h is None else float(h.item())

    ts = [_t(x, dev, np.float64) for x in xs]
    h = first(ts, True)
    if h is None or not h.requires_grad:
        got = [None] * len(ts)
    else:
        got = lk.grad([h], ts, allow_unused=True)
    want = _numeric_grad(f, xs, eps)
    for k, (g, w) in enumerate(zip(got, want)):
        g = np.zeros_like(w) if g is None else g.numpy()
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5,
                                   err_msg=f"{case.name}: second derivative, input {k}, {dev}")


def _derivatives(case, xs, gy, us, dev, dtype, order):
    """The gradient of sum(f(xs) * gy) (order 1), or of <that gradient, us> (order 2), with
    respect to each input, in ``dtype`` on ``dev``, as NumPy arrays."""
    ts = [_t(x, dev, dtype) for x in xs]
    gy = lk.tensor(gy.astype(dtype), device=dev)
    gs = lk.grad([_scalar(case, ts, gy)], ts, create_graph=order == 2, allow_unused=True)
    if order == 2:
        terms = [lk.functions.sum(g * lk.tensor(u.astype(dtype), device=dev))
                 for g, u in zip(gs, us) if g is not None]
        h = sum(terms[1:], terms[0]) if terms else None
        gs = [None] * len(ts) if h is None or not h.requires_grad else lk.grad(
            [h], ts, allow_unused=True)
    for g in gs:
        assert g is None or g.dtype == dtype, f"{case.name}: a {g.dtype} gradient on {dev}"
    return [np.zeros(x.shape) if g is None else g.numpy() for g, x in zip(gs, xs)]


def check_float32_derivatives(case: OpCase, dev, rng, order=1):
    """Float32 derivatives on ``dev`` against the cpu's float64 ones at the same (float32)
    points: the check for a device that cannot run float64."""
    xs = [x.astype(np.float32).astype(np.float64) for x in case.inputs(rng)]
    y0 = np.asarray(case.ref(*xs))
    gy = rng.standard_normal(y0.shape).astype(np.float32).astype(np.float64)
    us = [rng.standard_normal(x.shape).astype(np.float32).astype(np.float64) for x in xs]
    got = _derivatives(case, xs, gy, us, dev, np.float32, order)
    want = _derivatives(case, xs, gy, us, lk.device("cpu"), np.float64, order)
    what = "gradient" if order == 1 else "second derivative"
    for k, (g, w) in enumerate(zip(got, want)):
        np.testing.assert_allclose(g, w, rtol=1e-3, atol=1e-4,
                                   err_msg=f"{case.name}: float32 {what}, input {k}, {dev}")
