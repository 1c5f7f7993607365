"""Second review of recent changes: lk.compile's stabilize and gather_products passes, the LSTM
node that keeps its gates for LSTMGrad, the cl softmax cross-entropy and LSTM step kernels, and
cl logsumexp's rows kernel for a few short rows.

The first tests are the faults it found (each fixed since; the test names the way it failed);
the others cover what the existing tests did not (patterns the passes must not match, odd
shapes, special values)."""

import numpy as np
import pytest

import labkit as lk
import labkit.functions as F
import labkit.optimizers as O
from labkit.compile import scan
from labkit.errors import IndexingError


def T(a, dev, rg=False):
    return lk.tensor(np.asarray(a), device=dev, requires_grad=rg)


def _np(t):
    return t.numpy() if isinstance(t, lk.Tensor) else np.asarray(t)


def _compare(fn, make, dev, rtol=1e-5, atol=1e-6, calls=3, **options):
    """fn eagerly and compiled (3 calls: 2 traced, then replays) on fresh arguments: same
    dtypes and shapes, values within float32 rounding; returns the compiled step."""
    want = fn(*make())
    c = lk.compile(fn, **options)
    for _ in range(calls):
        got = c(*make())
    want = want if isinstance(want, tuple) else (want,)
    got = got if isinstance(got, tuple) else (got,)
    assert c.stats["replays"] >= 1
    for k, (w, g) in enumerate(zip(want, got)):
        w, g = _np(w), _np(g)
        assert g.dtype == w.dtype and g.shape == w.shape, (k, g.dtype, w.dtype, g.shape, w.shape)
        np.testing.assert_allclose(g, w, rtol=rtol, atol=atol, equal_nan=True, err_msg=str(k))
    return c


# ---- faults -----------------------------------------------------------------------------------


@pytest.mark.parametrize("reduce", ["mean", "sum"])
def test_cl_xent_kernel_ignore_label_that_is_a_class(reduce):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((9, 5)).astype(np.float32)
    t = rng.integers(0, 5, 9)
    t[:3] = 0
    want = F.softmax_cross_entropy(T(x, "cpu"), t, reduce=reduce, ignore_label=0).numpy()
    got = F.softmax_cross_entropy(T(x, "cl"), t, reduce=reduce, ignore_label=0).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-5)


def test_gathered_products_read_an_operand_before_its_in_place_update(dev):
    def run(compiled):
        p = T(np.arange(6, dtype=np.float32).reshape(2, 3), dev, rg=True)
        opt = O.SGD(0.1).setup({"p": p})

        def step(b1, a2, b2, a3, b3):
            opt.zero_grad()
            t1 = p.T @ b1                 # p read before the update
            (p * p).sum().backward()
            opt.update()                  # p changed in place
            return t1 + a2.T @ b2 + a3.T @ b3

        f = lk.compile(step) if compiled else step
        shapes = [(2, 4), (3, 3), (3, 4), (1, 3), (1, 4)]
        return [f(*[T(np.ones(s, np.float32), dev) for s in shapes]).numpy() for _ in range(4)]

    for k, (a, b) in enumerate(zip(run(False), run(True))):
        np.testing.assert_allclose(b, a, rtol=1e-5, err_msg=f"call {k + 1}")


def test_log_exp_of_a_parameter_updated_later_in_the_step(dev):
    def run(compiled):
        p = T(np.array([1.0, 2.0, 3.0], np.float32), dev, rg=True)
        opt = O.SGD(0.5).setup({"p": p})

        def step(x):
            opt.zero_grad()
            y = F.log(F.exp(p))
            (y * x).sum().backward()
            opt.update()
            return y

        f = lk.compile(step) if compiled else step
        return [f(T(np.ones(3, np.float32), dev)).numpy().copy() for _ in range(4)]

    for k, (a, b) in enumerate(zip(run(False), run(True))):
        np.testing.assert_allclose(b, a, rtol=1e-5, err_msg=f"call {k + 1}")


@pytest.mark.parametrize("dtype", [np.int8, np.uint8, np.bool_])
def test_log1p_rewrite_of_small_integers_keeps_eagers_dtype(dev, dtype):
    x = np.array([0, 1, 1] if dtype is np.bool_ else [0, 3, 100], dtype)
    _compare(lambda v: F.log(v + 1.0), lambda: (T(x, dev),), dev, rtol=1e-12)


def test_cl_uint8_label_out_of_range_is_refused():
    x = np.random.default_rng(0).standard_normal((4, 5)).astype(np.float32)
    labels = T(np.array([0, 1, 255, 2], np.uint8), "cl")
    with pytest.raises(IndexingError):
        F.softmax_cross_entropy(T(x, "cl"), labels)


@pytest.mark.parametrize("dtype", [np.uint16, np.uint32, np.uint64])
def test_cl_xent_gradient_with_wide_unsigned_labels(dtype):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((6, 4)).astype(np.float32)
    t = rng.integers(0, 4, 6).astype(dtype)
    grads = []
    for d in ("cpu", "cl"):
        xt = T(x, d, rg=True)
        F.softmax_cross_entropy(xt, t).backward()
        grads.append(xt.grad.numpy())
    np.testing.assert_allclose(grads[1], grads[0], rtol=1e-5, atol=1e-7)


# ---- stabilize: what it must not match, and where it is exact ---------------------------------


def _pair(dev, g=(1.0, 3.0), e=(2.0, 0.5), gd=np.float32, ed=np.float32):
    return lambda: (T(np.array(g, gd), dev), T(np.array(e, ed), dev))


def test_g_over_e_times_e_keeps_the_quotient_used_elsewhere(dev):
    c = _compare(lambda g, e: ((g / e) * e, g / e + 1), _pair(dev), dev)
    assert "(g / e) * e -> g" in c.explain()


@pytest.mark.parametrize("case", ["g_smaller", "dtype", "wrong_numerator", "other_factor"])
def test_g_over_e_times_e_not_matched(dev, case):
    fn = {
        "g_smaller": lambda g, e: (g / e) * e,           # g (2,), e (2, 2): result broadcast
        "dtype": lambda g, e: (g / e) * e,               # float64 result of a float32 g
        "wrong_numerator": lambda g, e: (e / g) * e,
        "other_factor": lambda g, e: (g / e) * g,
    }[case]
    make = {"g_smaller": _pair(dev, e=((2.0, 0.5), (1.0, 4.0))),
            "dtype": _pair(dev, ed=np.float64)}.get(case, _pair(dev))
    c = _compare(fn, make, dev)
    assert "(g / e) * e" not in c.explain()


def test_g_over_e_times_e_with_e_broadcast_and_either_order(dev):
    make = _pair(dev, g=((1.0, 3.0), (5.0, 6.0)))
    c = _compare(lambda g, e: (e * (g / e), (g / e) * e), make, dev)
    assert "(g / e) * e -> g (2x)" in c.explain()


def test_log_exp_keeps_exp_used_elsewhere_and_float64(dev):
    for dt in (np.float32, np.float64):
        c = _compare(lambda x: (F.log(F.exp(x)), F.exp(x) * 2),
                     lambda dt=dt: (T(np.array([1e-10, 3.0, -2.0], dt), dev),), dev)
        assert "log(exp(z)) -> z" in c.explain()


@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.float64])
def test_log1p_rewrite_of_wide_integers_and_float64(dev, dtype):
    """Rewritten only where x has the result's dtype (float64 here); integers keep log(x + 1)
    (NumPy and the cl backend type log1p of small integers differently): equal either way."""
    x = np.array([0, 3, 100], dtype)
    c = _compare(lambda v: F.log(v + 1.0), lambda: (T(x, dev),), dev)
    assert ("log(1 + x) -> log1p(x)" in c.explain()) == (dtype == np.float64)


def test_log_of_one_minus_x_and_of_two_plus_x(dev):
    make = lambda: (T(np.array([1e-3, 0.5], np.float32), dev),)  # noqa: E731
    c = _compare(lambda x: F.log(1.0 - x), make, dev)
    assert "log(1 + x) -> log1p(x)" in c.explain()
    c = _compare(lambda x: F.log(x + 2.0), make, dev)
    assert "log1p" not in c.explain()


# ---- gather_products: what it must not match --------------------------------------------------


def _ab(dev, rng, dtype=np.float32, rows=(2, 4, 5), m=3, n=6):
    A = [rng.standard_normal((k, m)).astype(dtype) for k in rows]
    Bs = [rng.standard_normal((k, n)).astype(dtype) for k in rows]
    return lambda: tuple(T(a, dev) for a in A + Bs)


def _sum3(a1, a2, a3, b1, b2, b3):
    return a1.T @ b1 + a2.T @ b2 + a3.T @ b3


def _t1(a1, a2, a3, b1, b2, b3):
    t = a1.T @ b1
    return t + a2.T @ b2 + a3.T @ b3, t


def _partial(a1, a2, a3, b1, b2, b3):
    s = a1.T @ b1 + a2.T @ b2
    return s + a3.T @ b3, s


def _mixed(a1, a2, a3, b1, b2, b3):
    return a1.T @ b1 + (a2.T @ b2 + 1.0) + a3.T @ b3


def _sub(a1, a2, a3, b1, b2, b3):
    return (a1.T @ b1 + a2.T @ b2) - a3.T @ b3


def _twice(a1, a2, a3, b1, b2, b3):
    return a1.T @ b1 + a2.T @ b2 + a1.T @ b1


def _column(a1, a2, a3, b1, b2, b3):
    return a1.T @ b1[:, :1] + a2.T @ b2[:, :1] + a3.T @ b3


@pytest.mark.parametrize("fn,gathered", [
    (_sum3, True), (_t1, False), (_partial, False), (_mixed, False), (_sub, False),
    (_twice, False), (_column, False)])
def test_gathered_sums_and_the_chains_left_alone(dev, fn, gathered):
    c = _compare(fn, _ab(dev, np.random.default_rng(0)), dev)
    assert ("gathered" in c.explain()) == gathered, c.explain()


def test_batched_and_other_axes_are_not_gathered(dev):
    rng = np.random.default_rng(1)
    A = [rng.standard_normal((2, k, 3)).astype(np.float32) for k in (2, 4, 5)]
    Bs = [rng.standard_normal((2, k, 6)).astype(np.float32) for k in (2, 4, 5)]

    def fn(a1, a2, a3, b1, b2, b3):
        return sum((F.transpose(a, (0, 2, 1)) @ b for a, b in ((a2, b2), (a3, b3))),
                   F.transpose(a1, (0, 2, 1)) @ b1)

    c = _compare(fn, lambda: tuple(T(a, dev) for a in A + Bs), dev)
    assert "gathered" not in c.explain()


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_gathered_float64_and_strided_operands(dev, dtype):
    c = _compare(_sum3, _ab(dev, np.random.default_rng(2), dtype), dev, rtol=1e-5)
    assert "gathered" in c.explain()

    def views(a1, a2, a3, b1, b2, b3):
        return b1[:, ::2].T @ b1 + b2[:, 1::2].T @ b2 + b3[:, :3].T @ b3

    c = _compare(views, _ab(dev, np.random.default_rng(3), dtype), dev)
    assert "gathered" in c.explain()


def test_without_reassociation_gathering_is_off_and_exact():
    make = _ab("cpu", np.random.default_rng(4))
    c = _compare(_sum3, make, "cpu", rtol=0, atol=0, reassociate=False)
    assert "gathered" not in c.explain()


# ---- LSTM with kept gates ---------------------------------------------------------------------


@pytest.mark.parametrize("n,h", [(1, 1), (3, 1), (1, 5), (7, 3)])
def test_lstm_gradients_against_float64_differences(dev, n, h):
    rng = np.random.default_rng(n * 10 + h)
    c0, x0 = rng.uniform(-2, 2, (n, h)), rng.uniform(-2, 2, (n, 4 * h))
    err = lk.autograd.gradcheck(lambda c, x: F.concat(list(F.lstm(c, x)), axis=1), [c0, x0],
                                device=dev, eps=1e-6, rtol=1e-5, atol=1e-7)
    assert err < 1e-6


def test_lstm_node_backpropagated_twice_and_double_backward(dev):
    rng = np.random.default_rng(5)
    c = T(rng.uniform(-2, 2, (3, 2)), dev, rg=True)
    x = T(rng.uniform(-2, 2, (3, 8)), dev, rg=True)
    cn, hn = F.lstm(c, x)
    loss = (cn * 2).sum() + (hn * hn).sum()
    g1 = lk.grad([loss], [c, x], retain_graph=True)
    g2 = lk.grad([loss], [c, x], retain_graph=True)
    for a, b in zip(g1, g2):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    # the gradient of the gradient: LSTMGrad's backward, against central differences
    u = rng.standard_normal((3, 8))

    def first(xv, create):
        xt = T(xv, dev, rg=True)
        cn, hn = F.lstm(T(c.numpy(), dev), xt)
        (gx,) = lk.grad([(cn * 2).sum() + (hn * hn).sum()], [xt], create_graph=create)
        return xt, (gx * T(u, dev)).sum()

    xt, hval = first(x.numpy(), True)
    (got,) = lk.grad([hval], [xt])
    want = np.zeros((3, 8))
    eps = 1e-6
    for j in range(want.size):
        xp, xm = x.numpy().copy(), x.numpy().copy()
        xp.flat[j] += eps
        xm.flat[j] -= eps
        want.flat[j] = (first(xp, False)[1].item() - first(xm, False)[1].item()) / (2 * eps)
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-5, atol=1e-6)


def _lstm_step(dev, W, T_, strided_cols):
    def step(xs, c0, h0):
        W.grad = None
        c, h = c0, h0
        for t in range(T_):
            z = F.matmul(xs[:, t], W) + F.concat([h, h, h, h], axis=1)
            if strided_cols:  # columns not contiguous: cl takes the kept-gates path too
                z = F.transpose(F.transpose(z, (1, 0)) * 1.0, (1, 0))
            c, h = F.lstm(c, z)
        loss = (h * h).sum() + c.sum()
        loss.backward()
        return loss, W.grad
    return step


@pytest.mark.parametrize("strided_cols", [False, True])
def test_compiled_lstm_replays_use_this_calls_gates(dev, strided_cols):
    rng = np.random.default_rng(6)
    H, N, T_ = 3, 2, 4
    W = T(rng.standard_normal((5, 4 * H)).astype(np.float32), dev, rg=True)
    step = _lstm_step(dev, W, T_, strided_cols)
    exact = str(dev) == "cpu"
    cs = lk.compile(step, reassociate=not exact, fuse=not exact)
    for _ in range(5):
        a = [rng.standard_normal(s).astype(np.float32) for s in [(N, T_, 5), (N, H), (N, H)]]
        want = step(*[T(v, dev) for v in a])
        got = cs(*[T(v, dev) for v in a])
        for w, g in zip(want, got):
            if exact:
                np.testing.assert_array_equal(g.numpy(), w.numpy())
            else:
                np.testing.assert_allclose(g.numpy(), w.numpy(), rtol=1e-5, atol=1e-6)
    assert cs.stats["replays"] == 3


def test_scan_with_remat_matches_kept_graphs_first_and_second_order(dev):
    rng = np.random.default_rng(7)
    H, N, T_ = 2, 3, 4
    W = T(rng.standard_normal((5, 4 * H)), dev, rg=True)

    def body(carry, x):
        c, h = F.lstm(carry[0], F.matmul(x, W) + F.concat([carry[1]] * 4, axis=1))
        return (c, h), h

    xs = T(rng.standard_normal((T_, N, 5)), dev, rg=True)
    init = (T(np.zeros((N, H)), dev), T(np.zeros((N, H)), dev))
    out = {}
    for remat in (False, True):
        (c, _), hs = scan(body, xs, init, axis=0, remat=remat)
        g1 = lk.grad([(hs ** 2).sum() + c.sum()], [W, xs])
        (c, _), hs = scan(body, xs, init, axis=0, remat=remat)
        (gw,) = lk.grad([(hs ** 2).sum()], [W], create_graph=True)
        (g2,) = lk.grad([(gw * gw).sum()], [W])
        out[remat] = [g.numpy() for g in g1] + [g2.numpy()]
    for a, b in zip(out[False], out[True]):
        np.testing.assert_allclose(b, a, rtol=1e-10, atol=1e-12)


# ---- cl kernels against cpu -------------------------------------------------------------------


def _xent_both(x, t, **kw):
    out = []
    for d in ("cpu", "cl"):
        xt = T(x, d, rg=True)
        y = F.softmax_cross_entropy(xt, t, **kw)
        (y.sum() if y.ndim else y).backward()
        out.append((y.numpy(), xt.grad.numpy()))
    (yc, gc), (yl, gl) = out
    assert yl.dtype == yc.dtype and yl.shape == yc.shape
    np.testing.assert_allclose(yl, yc, rtol=1e-5, atol=1e-6, equal_nan=True)
    np.testing.assert_allclose(gl, gc, rtol=1e-5, atol=1e-6, equal_nan=True)


@pytest.mark.parametrize("n,c", [(1, 1), (1, 5), (3, 1), (37, 10), (5000, 7), (2, 4096),
                                 (3, 4097), (300, 3)])
@pytest.mark.parametrize("reduce", ["mean", "sum", "none"])
def test_cl_xent_odd_shapes(n, c, reduce):
    rng = np.random.default_rng(n + c)
    x = (rng.standard_normal((n, c)) * 3).astype(np.float32)
    _xent_both(x, rng.integers(0, c, n), reduce=reduce)


@pytest.mark.parametrize("reduce", ["mean", "sum", "none"])
def test_cl_xent_ignored_rows_all_ignored_and_non_finite(reduce):
    rng = np.random.default_rng(8)
    x = rng.standard_normal((9, 5)).astype(np.float32)
    t = rng.integers(0, 5, 9)
    t[::2] = -1
    _xent_both(x, t, reduce=reduce)
    _xent_both(x, np.full(9, -1), reduce=reduce)
    if reduce == "mean":
        assert F.softmax_cross_entropy(T(x, "cl"), np.full(9, -1)).numpy() == 0
    xs = x.copy()
    xs[0, 1], xs[1, 2], xs[2], xs[3, 0], xs[4] = np.inf, -np.inf, -np.inf, np.nan, np.inf
    with np.errstate(all="ignore"):
        _xent_both(xs, rng.integers(0, 5, 9), reduce=reduce)


@pytest.mark.parametrize("dtype", [np.int8, np.uint8, np.int16, np.int32, np.int64])
def test_cl_xent_label_dtypes_and_float64(dtype):
    rng = np.random.default_rng(9)
    x = rng.standard_normal((9, 5))
    t = rng.integers(0, 5, 9).astype(dtype)
    _xent_both(x.astype(np.float32), t)
    _xent_both(x, t)


def test_cl_xent_non_contiguous_logits_fall_back():
    rng = np.random.default_rng(10)
    x = rng.standard_normal((9, 5)).astype(np.float32)
    t = rng.integers(0, 5, 9)
    xv = F.transpose(T(np.ascontiguousarray(x.T), "cl"), (1, 0))
    assert not xv.data.is_contiguous
    np.testing.assert_allclose(F.softmax_cross_entropy(xv, t).numpy(),
                               F.softmax_cross_entropy(T(x, "cpu"), t).numpy(), rtol=1e-5)


@pytest.mark.parametrize("on_device", [False, True])
def test_cl_xent_out_of_range_label_raises(on_device):
    x = T(np.zeros((4, 5), np.float32), "cl")
    for bad in (5, -2):
        t = np.array([0, 1, bad, 2])
        with pytest.raises(IndexingError):
            F.softmax_cross_entropy(x, T(t, "cl") if on_device else t)


@pytest.mark.parametrize("n,h", [(1, 1), (5, 1), (1, 7), (300, 3)])
def test_cl_lstm_kernels_against_cpu(n, h):
    rng = np.random.default_rng(n + h)
    P = rng.uniform(-3, 3, (n, 3, 4 * h)).astype(np.float32)
    P[0, 1, 0], P[-1, 1, -1] = 30.0, -30.0     # saturated tanh / sigmoid
    c0 = rng.uniform(-2, 2, (n, h)).astype(np.float32)
    res = []
    for d in ("cpu", "cl"):
        p, c = T(P, d, rg=True), T(c0, d, rg=True)
        cn, hn = F.lstm(c, p[:, 1])          # strided rows of a projection
        ((cn * 3).sum() + (hn * hn).sum()).backward()
        res.append([cn.numpy(), hn.numpy(), p.grad.numpy(), c.grad.numpy()])
    for a, b in zip(*res):
        np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-6)


def _lse_ref(x, axis):
    m = np.max(x, axis=axis, keepdims=True)
    m = np.where(np.isfinite(m), m, 0)
    with np.errstate(all="ignore"):
        return np.squeeze(np.log(np.exp(x - m).sum(axis=axis, keepdims=True)) + m, axis=axis)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_cl_logsumexp_few_short_rows_special_values(cp, dtype):
    inf, nan = np.inf, np.nan
    x = np.array([[1, 2, 3], [inf, 1, 2], [-inf, -inf, -inf], [inf, inf, inf], [-inf, 1, 2],
                  [nan, 1, 2], [nan, inf, -inf], [inf, -inf, 0], [1e30, 1e30, -1e30],
                  [-1e30, -1e30, -1e30], [nan, nan, nan], [-inf, nan, -inf], [inf, nan, 1]],
                 dtype)
    for rows in (x, x[:1], x[2:3], x[5:8]):
        np.testing.assert_allclose(cp.logsumexp(cp.asarray(rows), axis=1).get(),
                                   _lse_ref(rows, 1), rtol=1e-6, equal_nan=True)
    x3 = x.reshape(13, 3, 1)[:5]
    np.testing.assert_allclose(cp.logsumexp(cp.asarray(x3), axis=(1, 2)).get(),
                               _lse_ref(x3.reshape(5, 3), 1), rtol=1e-6, equal_nan=True)
    assert cp.logsumexp(cp.asarray(np.zeros((0, 5), dtype)), axis=1).shape == (0,)


def test_raw_code_on_a_slice_of_a_result_laid_out_in_memory_order_is_refused():
    """An OpenCL elementwise result may be a transposed view of a buffer of its own (laid out
    as its operand is in memory); a slice of it is still a value the step made."""
    x = lk.tensor(np.random.default_rng(0).standard_normal((3, 4, 5, 6)).astype(np.float32),
                  device="cl")

    def step(x):
        y = F.relu(F.transpose(x, (1, 0, 2, 3)))
        return F.sum(y) + lk.tensor(y.data[:, :2]).sum()

    with pytest.raises(lk.compile.CompileError, match="made from a value the step made"):
        lk.compile(step)(x)
