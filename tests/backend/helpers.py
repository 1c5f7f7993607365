import numpy as np


def check(got, want, rtol=1e-5, atol=1e-6, exact_dtype=True):
    """An OpenCL result against NumPy's: same shape, same dtype, close values, same NaNs."""
    from labkit.backend.opencl import ndarray

    assert isinstance(got, ndarray), f"expected an OpenCL array, got {type(got).__name__}"
    want = np.asarray(want)
    h = got.get()
    assert h.shape == want.shape, f"shape {h.shape} != NumPy's {want.shape}"
    if exact_dtype:
        assert h.dtype == want.dtype, f"dtype {h.dtype} != NumPy's {want.dtype}"
    if want.dtype.kind in "iub":
        np.testing.assert_array_equal(h, want)
    else:
        np.testing.assert_allclose(h, want, rtol=rtol, atol=atol, equal_nan=True)


def views(rng, shape, dtype=np.float32, low=-2.0, high=2.0):
    """(name, host array, device array) for a contiguous, a transposed and a stepped layout."""
    from labkit.backend import opencl as cp

    out = []
    base = rng.uniform(low, high, shape).astype(dtype)
    out.append(("contiguous", base, cp.asarray(base)))
    if len(shape) >= 2:
        t = rng.uniform(low, high, shape[::-1]).astype(dtype)
        out.append(("transposed", t.T, cp.asarray(t).T))
    big = rng.uniform(low, high, tuple(2 * d + 1 for d in shape)).astype(dtype)
    sl = tuple(slice(1, None, 2) for _ in shape)
    out.append(("stepped", big[sl], cp.asarray(big)[sl]))
    return out


def special_rows(rng, shape=(32, 6)):
    """Float32 rows of standard normals whose first five hold what reductions over a row
    must keep: a NaN, all -inf, a +inf, +inf beside -inf, and values too large to exp."""
    x = rng.standard_normal(shape).astype(np.float32)
    x[0, 2] = np.nan
    x[1, :] = -np.inf
    x[2, 3] = np.inf
    x[3, :] = [np.inf, -np.inf] + [0] * (shape[1] - 2)
    x[4, :] = 1e30
    return x
