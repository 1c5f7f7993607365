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

# Cases that cannot be compiled by design: they read a tensor's values into Python inside
# the step (a host read). None of the checker's cases does; a case added here must be
# refused with lk.compile's explanation (test_uncompilable_cases_are_refused_clearly).
UNCOMPILABLE: dict[str, str] = {}

_DATA_CONST = (
    "labkit bug: {op} computes a data-dependent array with raw array code outside any "
    "Function ({where}) and passes it to an op's constructor; the tracer sees a constant. "
    "compare() refuses the step when the array differs between calls 1 and 2 (CompileError "
    "'was made with an array ... whose values changed'), and freezes it silently when it is "
    "equal (wrong replays, see test_traps.py::test_data_dependent_mask_is_not_frozen)")
KNOWN_BUGS = {
    "abs": _DATA_CONST.format(op="abs", where="Abs.backward: MulConstant(sign(x.data))"),
    "softplus": _DATA_CONST.format(op="softplus (through abs)", where="Abs.backward"),
    "log_sigmoid": _DATA_CONST.format(op="log_sigmoid (through abs)", where="Abs.backward"),
    "sigmoid_cross_entropy": _DATA_CONST.format(op="sigmoid_cross_entropy (through abs)",
                                                where="Abs.backward"),
    "maximum": _DATA_CONST.format(op="maximum", where="where(a.data >= b.data, a, b)"),
    "minimum": _DATA_CONST.format(op="minimum", where="where(a.data <= b.data, a, b)"),
    "max": _DATA_CONST.format(op="max", where="_Extreme.backward: MulConstant(x.data == y)"),
    "min_all": _DATA_CONST.format(op="min", where="_Extreme.backward: MulConstant(x.data == y)")
    + "; here the argmin is the same in calls 1 and 2, so call 3's gradient is silently wrong",
    "leaky_relu": _DATA_CONST.format(op="leaky_relu", where="MulConstant((d > 0) ...)"),
    "elu": _DATA_CONST.format(op="elu", where="where(x.data > 0, ...)"),
    "max_pool2d": _DATA_CONST.format(op="max_pool2d", where="WindowMax.backward: "
                                     "MulConstant(self.mask.astype(...))"),
    "max_pool2d_tiled": _DATA_CONST.format(op="max_pool2d (tiled)", where="TiledMax.backward: "
                                           "TileScatter(winners, ...) on cpu, WindowMax on cl"),
    "dropout": "labkit bug: the case makes its Generator(7) inside the step, so eager draws "
               "the same mask at every call; a replay re-runs the host mask closure of the "
               "second trace, whose generator object is kept and advances at each replay "
               "(host nodes are compared by code only, not by what their closures hold): "
               "call 3's mask differs from eager's, silently",
}
CPU_ONLY_BUGS = {
    "conv2d": "labkit bug: on cpu Conv2d is made with a fresh _Geometry object at each call; "
              "_Geometry has no __eq__, so trace.compare's _summary gives ('object', id) and "
              "refuses every step with a groups=1 convolution ('made with other constants "
              "(g: ...)')",
    "conv2d_stride_dilation": "labkit bug: as conv2d (a fresh _Geometry per call on cpu, "
                              "compared by identity)",
}


def _params():
    out = []
    for case in CASES:
        for devname in ("cpu", "cl"):
            marks = list(case.marks)
            reason = KNOWN_BUGS.get(case.name) or (
                CPU_ONLY_BUGS.get(case.name) if devname == "cpu" else None)
            if reason:
                marks.append(pytest.mark.xfail(strict=True, reason=reason))
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


@pytest.mark.parametrize("name", sorted(UNCOMPILABLE) or [pytest.param(
    None, marks=pytest.mark.skip(reason="no checker case is uncompilable by design"))])
def test_uncompilable_cases_are_refused_clearly(name):
    case = next(c for c in CASES if c.name == name)
    with pytest.raises(CompileError, match=r"lk\.compile: step reads .* at \w+\.py:\d+"):
        list(_run(case, "cpu", fuse=True))
