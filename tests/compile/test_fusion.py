"""Elementwise fusion (OpenCL only) against eager, on arrays large enough (8192 elements, past
the OpenCL backend's VECTOR_MIN of 4096) for eager kernels to take their vector form.

Why fused results are not always bit-identical on cl: fused kernels keep floating-point
contraction off, so arithmetic rounds exactly as the eager kernels do, but on a CPU OpenCL
device (PoCL) an eager transcendental op of >= 4096 contiguous elements runs PoCL's vector
math (exp, log, log1p, tanh, sigmoid, ... on whole SIMD registers) while a fused kernel calls
the scalar built-in: they differ by an ulp or two. Measured on CI's PoCL: exp, tanh and
sigmoid differ (max relative difference ~1.6e-7); log and log1p happen to agree. Those ops are
allowed float32 tolerance (rtol 1e-5, atol 1e-6) with fusion; everything else, and every op
with fuse=False, must be bit-identical. On cpu nothing is fused (replays run NumPy ufuncs into
kept buffers) and everything is bit-identical."""

import numpy as np
import pytest

import labkit as lk
import labkit.functions as F

N = 8192
VECTOR_MATH = {"exp", "log", "log1p", "tanh", "sigmoid"}  # tolerance with fusion on cl
OPS = {
    "exp": F.exp, "log": F.log, "log1p": F.log1p, "tanh": F.tanh, "sigmoid": F.sigmoid,
    "sqrt": F.sqrt, "relu": F.relu, "rdiv": lambda x: 1.0 / x, "square": lambda x: x * x,
}


@pytest.mark.parametrize("fuse", [False, True], ids=["unfused", "fused"])
@pytest.mark.parametrize("name", list(OPS))
def test_fused_chain_against_eager(name, fuse, dev):
    op = OPS[name]
    w = lk.tensor(np.linspace(0.5, 1.5, N, dtype=np.float32), device=dev, requires_grad=True)

    def step(x):
        w.grad = None
        y = op(x * w + 0.25) * 2.0 - 1.0
        y.sum().backward()
        return y, w.grad

    comp = lk.compile(step, fuse=fuse)
    rng = np.random.default_rng(0)
    for k in range(4):
        a = rng.uniform(0.1, 3.0, N).astype(np.float32)
        got = comp(lk.tensor(a, device=dev))
        want = step(lk.tensor(a, device=dev))
        exact = str(dev) == "cpu" or not fuse or name not in VECTOR_MATH
        for g, e in zip(got, want):
            if exact:
                np.testing.assert_array_equal(g.numpy(), e.numpy(), err_msg=f"call {k + 1}")
            else:
                np.testing.assert_allclose(g.numpy(), e.numpy(), rtol=1e-5, atol=1e-6,
                                           err_msg=f"call {k + 1}")
    fused = sum(p.fused for p in comp.programs())
    if fuse and str(dev) != "cpu":
        assert fused >= 1, comp.explain()
    else:
        assert fused == 0


@pytest.mark.parametrize("K", [128, 512, 1024])
def test_a_fused_result_keeps_the_eager_layout_so_a_product_sums_in_the_same_order(K, dev):
    """A fused region's result lies in memory as the eager one did (here transposed: an op's
    result keeps its operand's order). In C order, ``h @ W.T`` would take the dot products
    over K (its rows contiguous) where eager took the blocked kernel, and sum in another
    order: the replays then differed from eager in the last bits (reassociate=False promises
    none)."""
    rng = np.random.default_rng(0)
    W = lk.tensor(rng.standard_normal((10, K)).astype(np.float32), device=dev)

    def step(x):
        return F.matmul(F.relu(F.transpose(x) * 2.0 + 1.0), F.transpose(W))

    comp = lk.compile(step, reassociate=False)
    for k in range(4):
        x = lk.tensor(rng.standard_normal((K, 32)).astype(np.float32), device=dev)
        np.testing.assert_array_equal(comp(x).numpy(), step(x).numpy(), err_msg=f"call {k + 1}")
    if str(dev) != "cpu":
        assert sum(p.fused for p in comp.programs()) == 1, comp.explain()
