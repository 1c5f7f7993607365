"""Every elementwise function of the OpenCL namespace against NumPy."""

import numpy as np
import pytest

import labkit as lk
from labkit.backend import opencl as cp
from labkit.backend.opencl import runtime

from .helpers import check, views

SHAPES = [(), (1,), (7,), (3, 5), (2, 3, 4), (0, 3), (17, 1, 33), (1000,)]

# name: (low, high) of the inputs' domain
UNARY = {
    "negative": (-3, 3), "absolute": (-3, 3), "sign": (-3, 3), "square": (-3, 3),
    "reciprocal": (0.5, 3), "exp": (-5, 5), "expm1": (-2, 2), "log": (0.1, 5),
    "log1p": (-0.9, 5), "log2": (0.1, 5), "sqrt": (0, 5), "tanh": (-5, 5), "sin": (-5, 5),
    "cos": (-5, 5), "tan": (-1, 1), "arctan": (-5, 5), "floor": (-5, 5), "ceil": (-5, 5),
    "trunc": (-5, 5), "rint": (-5, 5),
}
BINARY = {
    "add": (-3, 3), "subtract": (-3, 3), "multiply": (-3, 3), "true_divide": (0.5, 3),
    "power": (0.5, 2), "maximum": (-3, 3), "minimum": (-3, 3), "arctan2": (-3, 3),
    "floor_divide": (0.5, 3), "mod": (0.5, 3),
}
COMPARE = ["equal", "not_equal", "less", "less_equal", "greater", "greater_equal",
           "logical_and", "logical_or", "logical_xor"]
BROADCAST = [((3, 4), (4,)), ((2, 1, 5), (3, 1)), ((1,), (6,)), ((0, 3), (1, 3)),
             ((4, 1), (1, 4)), ((), (3,)), ((5, 1, 1, 2), (1, 3, 7, 1)), ((257,), (257,))]


@pytest.mark.parametrize("name", sorted(UNARY))
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_unary(name, shape, rng):
    lo, hi = UNARY[name]
    for _layout, h, d in views(rng, shape, low=lo, high=hi):
        check(getattr(cp, name)(d), getattr(np, name)(h), rtol=2e-6, atol=1e-6)


@pytest.mark.parametrize("name", ["exp", "log1p", "tanh", "sqrt", "negative"])
def test_unary_float64(name, rng):
    h = rng.uniform(0.1, 3, (33, 7))
    check(getattr(cp, name)(cp.asarray(h)), getattr(np, name)(h), rtol=1e-13)


@pytest.mark.parametrize("name", sorted(BINARY))
@pytest.mark.parametrize("shapes", BROADCAST, ids=str)
def test_binary_broadcasting(name, shapes, rng):
    lo, hi = BINARY[name]
    a = rng.uniform(lo, hi, shapes[0]).astype(np.float32)
    b = rng.uniform(lo, hi, shapes[1]).astype(np.float32)
    want = getattr(np, name)(a, b)
    check(getattr(cp, name)(cp.asarray(a), cp.asarray(b)), want, rtol=3e-6, atol=1e-6)
    check(getattr(cp, name)(cp.asarray(b), cp.asarray(a)), getattr(np, name)(b, a), rtol=3e-6,
          atol=1e-6)


@pytest.mark.parametrize("name", sorted(BINARY))
def test_binary_non_contiguous_operands(name, rng):
    lo, hi = BINARY[name]
    (_, h1, d1), (_, h2, d2), (_, h3, d3) = views(rng, (6, 9), low=lo, high=hi)
    check(getattr(cp, name)(d2, d3), getattr(np, name)(h2, h3), rtol=3e-6, atol=1e-6)
    check(getattr(cp, name)(d1, d3[:1]), getattr(np, name)(h1, h3[:1]), rtol=3e-6, atol=1e-6)


@pytest.mark.parametrize("name", COMPARE)
def test_comparisons_and_logic_give_bool(name, rng):
    a = rng.integers(-2, 3, (4, 5)).astype(np.float32)
    b = rng.integers(-2, 3, (5,)).astype(np.float32)
    check(getattr(cp, name)(cp.asarray(a), cp.asarray(b)), getattr(np, name)(a, b))


@pytest.mark.parametrize("op", ["__add__", "__sub__", "__mul__", "__truediv__", "__pow__",
                                "__radd__", "__rsub__", "__rmul__", "__rtruediv__", "__lt__",
                                "__ge__", "__eq__", "__ne__"])
@pytest.mark.parametrize("scalar", [2, 1.5, np.float32(0.5), True])
def test_operators_with_scalars(op, scalar, rng):
    h = rng.uniform(0.5, 2, (3, 4)).astype(np.float32)
    check(getattr(cp.asarray(h), op)(scalar), getattr(h, op)(scalar), rtol=3e-6)


@pytest.mark.parametrize("da,db", [(np.int32, np.float32), (np.int64, np.int32),
                                   (np.bool_, np.int32), (np.float32, np.float64),
                                   (np.bool_, np.bool_), (np.uint8, np.int32),
                                   (np.int32, np.int32)])
def test_dtype_promotion_follows_numpy(da, db, rng):
    a = rng.integers(1, 5, (3, 4)).astype(da)
    b = rng.integers(1, 5, (4,)).astype(db)
    for name in ("add", "multiply", "maximum", "true_divide"):
        check(getattr(cp, name)(cp.asarray(a), cp.asarray(b)), getattr(np, name)(a, b))
    # Python scalars are weak (NEP 50): int32 array + 1 stays int32, + 1.5 becomes float64
    check(cp.asarray(a) + 1, a + 1)
    check(cp.asarray(a) * 1.5, a * 1.5)


def test_integer_division_power_and_bits_follow_numpy():
    a = np.array([-7, -3, 0, 3, 7, 9], np.int64)
    b = np.array([2, -2, 3, -4, 5, 3], np.int64)
    da, db = cp.asarray(a), cp.asarray(b)
    check(da // db, a // b)
    check(da % db, a % b)
    check(da ** abs(db), a ** np.abs(b))
    check(da & db, a & b)
    check(da | db, a | b)
    check(~da, ~a)
    check(-da, -a)
    check(abs(da), np.abs(a))


def test_nan_propagation_like_numpy():
    a = np.array([1.0, np.nan, 3.0, np.nan], np.float32)
    b = np.array([np.nan, 2.0, 1.0, np.nan], np.float32)
    for name in ("maximum", "minimum", "add"):
        check(getattr(cp, name)(cp.asarray(a), cp.asarray(b)), getattr(np, name)(a, b))
    check(cp.isnan(cp.asarray(a)), np.isnan(a))
    with np.errstate(divide="ignore", invalid="ignore"):
        inf = a / np.float32(0)  # inf and nan on purpose
    check(cp.isfinite(cp.asarray(inf)), np.isfinite(inf))
    check(cp.sign(cp.asarray(a)), np.sign(a))
    check(cp.clip(cp.asarray(a), 1.5, 2.5), np.clip(a, 1.5, 2.5))


def test_where_and_clip(rng):
    a = rng.standard_normal((4, 5)).astype(np.float32)
    b = rng.standard_normal((5,)).astype(np.float32)
    cond = a > 0
    check(cp.where(cp.asarray(cond), cp.asarray(a), cp.asarray(b)), np.where(cond, a, b))
    check(cp.where(cp.asarray(cond), cp.asarray(a), 0.0), np.where(cond, a, 0.0))
    check(cp.clip(cp.asarray(a), -0.5, 0.5), np.clip(a, -0.5, 0.5))
    check(cp.asarray(a).clip(None, 0.1), a.clip(None, 0.1))


@pytest.mark.parametrize("src,dst", [(np.float32, np.int32), (np.float32, np.bool_),
                                     (np.bool_, np.float32), (np.int64, np.float32),
                                     (np.float64, np.float32), (np.int32, np.int64)])
def test_astype(src, dst, rng):
    h = (rng.uniform(-3, 3, (5, 7)) * (rng.uniform(size=(5, 7)) > 0.3)).astype(src)
    check(cp.asarray(h).astype(dst), h.astype(dst))
    check(cp.asarray(h).T.astype(dst), h.T.astype(dst))


def test_large_arrays(rng):
    n = 1001 * 1499  # odd: not a multiple of any work-group size
    a = rng.standard_normal(n).astype(np.float32)
    b = rng.standard_normal(n).astype(np.float32)
    da, db = cp.asarray(a), cp.asarray(b)
    check(da * db + 1, a * b + 1)
    check(cp.exp(da[::3]), np.exp(a[::3]), rtol=2e-6)
    check(da.reshape(1001, -1).T + db[:1001], a.reshape(1001, -1).T + b[:1001])


def test_creation_functions():
    check(cp.zeros((2, 3)), np.zeros((2, 3), np.float32))
    check(cp.ones(4, dtype=np.int32), np.ones(4, np.int32))
    check(cp.full((2, 2), 7.5), np.full((2, 2), 7.5))
    check(cp.arange(10), np.arange(10))
    check(cp.arange(0.5, 3, 0.25, dtype=np.float32), np.arange(0.5, 3, 0.25, dtype=np.float32))
    check(cp.eye(3), np.eye(3, dtype=np.float32))
    check(cp.linspace(0, 1, 5), np.linspace(0, 1, 5, dtype=np.float32))
    e = cp.empty((0, 4))
    assert e.shape == (0, 4) and e.get().shape == (0, 4)
    check(cp.zeros_like(cp.ones((2, 2), dtype=np.int64)), np.zeros((2, 2), np.int64))
    with pytest.raises(lk.ShapeError, match="negative"):
        cp.empty((-1, 2))


def test_in_place_operators_write_into_views(rng):
    h = rng.standard_normal((4, 6)).astype(np.float32)
    d = cp.asarray(h)
    v = d[:, ::2]
    v += 1
    h[:, ::2] += 1
    check(d, h)
    d *= 2
    check(d, h * 2)


def test_shapes_that_do_not_broadcast_name_the_op():
    with pytest.raises(lk.ShapeError, match=r"add: shapes \(3, 4\) and \(5,\) do not broadcast"):
        cp.ones((3, 4)) + cp.ones(5)


def test_mixing_devices_names_op_devices_and_fix():
    with pytest.raises(lk.DeviceMismatchError, match=r"multiply: got a NumPy array .*asarray"):
        cp.ones(3) * np.ones(3)
    from labkit.backend.opencl.context import Runtime, probe

    info, d = probe()[0]
    other = Runtime(info, d)  # a second context: arrays in it are not interchangeable
    a = cp.ones(3)
    b = cp.ones(3, device=other)
    with pytest.raises(lk.DeviceMismatchError, match=r"add: arrays are on different devices.*\.to"):
        a + b


def test_unsupported_dtype_is_named():
    with pytest.raises(lk.DTypeError, match="bitwise_and: needs integer"):
        cp.ones(3) & cp.ones(3)
    with pytest.raises(TypeError, match="list or tuple"):
        cp.ones(3) + [1, 2, 3]


@pytest.mark.filterwarnings("error:Kernel .* has been retrieved more than once")
def test_ops_from_several_threads_at_once(rng):
    # a training thread and the notebook's thread share the cached kernels; a runtime of
    # its own starts with empty caches, so the threads also race to build the same kernels
    # (each must be built once: a second retrieval is turned into an error above)
    import threading

    from labkit.backend.opencl.context import Runtime, probe

    rt = Runtime(*probe()[0])
    arrays = [rng.standard_normal((64, 33)).astype(np.float32) for _ in range(3)]
    errors = []

    def work(h):
        try:
            d = cp.asarray(h, device=rt)
            for _ in range(200):
                r = ((d * 2 + 1) @ d.T).sum(axis=1)
            np.testing.assert_allclose(r.get(), ((h * 2 + 1) @ h.T).sum(axis=1), rtol=1e-4)
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(h,)) for h in arrays]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors


def test_tanh_saturates_to_exactly_one(cp):
    """PoCL's own tanh gives +-0.99999994 past |x| ~ 9 in float32; labkit's gives +-1 there, as
    NumPy does (and tanh's gradient 1 - y*y is then exactly 0)."""
    for dt, edge in ((np.float32, 10.0), (np.float64, 19.1)):
        x = np.array([-np.inf, -40, -edge - 0.01, -5, -0.5, 0, 0.5, 5, edge + 0.01, 40, np.inf,
                      np.nan], dt)
        want = np.tanh(x)
        got = cp.tanh(cp.asarray(x)).get()
        assert got.dtype == dt
        assert np.array_equal(got[np.abs(x) > edge], want[np.abs(x) > edge])
        assert (np.abs(want[np.abs(x) > edge]) == 1).all()
        assert np.isnan(got[-1])
        np.testing.assert_allclose(got[:-1], want[:-1], rtol=4 * np.finfo(dt).eps, atol=0)
    x = np.linspace(-12, 12, 4001, dtype=np.float32)
    np.testing.assert_allclose(cp.tanh(cp.asarray(x)).get(), np.tanh(x), rtol=3e-7, atol=1e-7)


@pytest.mark.parametrize("shape", [(32, 512), (7, 33), (3, 300), (40, 1000)])
def test_two_dimensional_strided_operands_run_on_a_grid_with_numpys_bits(shape, monkeypatch):
    """Operands that collapse to two strided dimensions (a slice x[:, t] of a 3-D array, a
    transposed view) run on a 2-D launch, a work-item per element, rows along its second
    axis: NumPy's results bit for bit, rows past a work-group's width and broadcast rows
    included."""
    from labkit.backend.opencl import elementwise

    rng = np.random.default_rng(0)
    m, n = shape
    big = rng.standard_normal((m, 3, n)).astype(np.float32)
    b = rng.standard_normal((m, n)).astype(np.float32)
    row = rng.standard_normal(n).astype(np.float32)
    grids = []
    real = elementwise._plan
    monkeypatch.setattr(elementwise, "_plan", lambda *a, **k: (
        lambda p: grids.append(len(p[2]) == 2) or p)(real(*a, **k)))
    d = cp.asarray(big)[:, 1]
    got = cp.add(d, cp.asarray(b)).get()
    assert got.tobytes() == (big[:, 1] + b).tobytes()
    got = cp.multiply(d, cp.asarray(row)).get()
    assert got.tobytes() == (big[:, 1] * row).tobytes()
    if runtime(0).info.is_cpu and n >= elementwise.ROW_MIN and m * n < elementwise.ROW_MIN_SIZE:
        assert grids == [True, True]
    got = cp.greater(cp.asarray(b.T.copy()).T, d).get()  # NOTE: made in b.T's order
    assert got.tobytes() == (b > big[:, 1]).tobytes()
