import sys

import numpy as np
import pytest

import labkit as lk
import labkit.functions as F


def t(a, dev, rg=True, dtype=np.float32):
    return lk.tensor(np.asarray(a, dtype), device=dev, requires_grad=rg)


def test_tensor_api(dev, rng):
    h = rng.standard_normal((4, 6)).astype(np.float32)
    x = lk.tensor(h, device=dev, requires_grad=True)
    w = lk.tensor(rng.standard_normal((6, 3)).astype(np.float32), device=dev)
    assert x.shape == (4, 6) and x.dtype == np.float32 and x.device == dev and x.requires_grad
    y = (x * 2 + 1) @ w
    np.testing.assert_allclose(y.numpy(), (h * 2 + 1) @ w.numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(y[0, 1:3].numpy(), y.numpy()[0, 1:3])
    assert x.T.shape == (6, 4) and x.sum(axis=0).shape == (6,)
    assert x.reshape(4, -1).shape == (4, 6) and x.reshape((2, 12)).shape == (2, 12)
    assert abs(x.mean().item() - h.mean()) < 1e-6
    assert x.detach().requires_grad is False and x.detach().creator is None
    y.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), np.broadcast_to(2 * w.numpy().sum(1), (4, 6)),
                               rtol=1e-5)
    assert x.grad.device == dev
    assert "tensor(" in repr(y) and "grad_fn=matmul" in repr(y)
    assert lk.tensor([1.0, 2.0]).dtype == np.float32  # Python floats default to float32


def test_to_moves_devices_and_gradients_flow_back(rng):
    h = rng.standard_normal(5).astype(np.float32)
    x = lk.tensor(h, requires_grad=True)  # cpu
    y = (x.to("cl") * 3).sum()
    assert y.device == "cl:0"
    y.backward()
    assert x.grad.device == "cpu"
    np.testing.assert_allclose(x.grad.numpy(), np.full(5, 3.0))


def test_gradients_accumulate(dev):
    x = t([1.0, 2.0, 3.0], dev)
    y = (x * x + x).sum()  # x used three times
    y.backward()
    np.testing.assert_allclose(x.grad.numpy(), [3.0, 5.0, 7.0])
    (x * 2).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [5.0, 7.0, 9.0])


def test_graph_is_freed_unless_retained(dev):
    x = t([1.0, 2.0], dev)
    y = (F.exp(x) * 2).sum()
    y.backward()
    with pytest.raises(RuntimeError, match="second time.*retain_graph=True"):
        y.backward()
    z = (F.exp(x) * 2).sum()
    z.backward(retain_graph=True)
    z.backward()
    # 2 e^x from y, then 2 e^x twice from z
    np.testing.assert_allclose(x.grad.numpy(), 6 * np.exp([1.0, 2.0]), rtol=1e-5)


def test_long_chain_has_no_recursion_limit():
    # the engine is iterative: a chain far deeper than Python's recursion limit
    n = 100_000
    assert n > 10 * sys.getrecursionlimit()
    x = lk.tensor(np.array([1.0], np.float64), requires_grad=True)
    y = x
    for _ in range(n):
        y = y * 1.00001
    y.backward()
    np.testing.assert_allclose(x.grad.numpy(), [1.00001 ** n], rtol=1e-9)


def test_hooks_see_and_replace_gradients(dev):
    x = t([1.0, -2.0], dev)
    seen = []
    x.register_hook(lambda g: seen.append(g.numpy().copy()))
    h = x * 3
    h.register_hook(lambda g: g * 10)  # replaces the gradient flowing into h
    h.sum().backward()
    np.testing.assert_allclose(seen[0], [30.0, 30.0])
    np.testing.assert_allclose(x.grad.numpy(), [30.0, 30.0])


def test_no_grad_records_nothing(dev):
    x = t([1.0], dev)
    with lk.no_grad():
        y = x * 2
    assert not y.requires_grad and y.creator is None

    @lk.no_grad()
    def f(a):
        return a + 1

    assert not f(x).requires_grad
    with pytest.raises(RuntimeError, match="does not require grad"):
        y.backward()


def test_device_mixing_is_a_clear_error():
    a = t([1.0, 2.0], "cpu")
    b = t([1.0, 2.0], "cl")
    with pytest.raises(lk.DeviceMismatchError, match=r"add: inputs are on different devices "
                                                     r"\(cl:0 and cpu\).*\.to\("):
        a + b
    with pytest.raises(lk.DeviceMismatchError, match="matmul"):
        F.matmul(a.reshape(1, 2), b.reshape(2, 1))


def test_type_check_messages_name_the_culprit():
    x = lk.tensor(np.zeros((32, 783), np.float32))
    W = lk.tensor(np.zeros((10, 784), np.float32))
    with pytest.raises(lk.ShapeError) as e:
        F.linear(x, W)
    assert str(e.value) == ("linear: x has 783 features but W expects 784; "
                            "x.shape=(32, 783), W.shape=(10, 784)")
    with pytest.raises(lk.ShapeError, match=r"conv2d: x has 3 channels but W expects 4"):
        F.conv2d(lk.tensor(np.zeros((1, 3, 5, 5))), lk.tensor(np.zeros((2, 4, 3, 3))))
    with pytest.raises(lk.ShapeError, match="labels of shape"):
        F.softmax_cross_entropy(lk.tensor(np.zeros((4, 3))), np.zeros(5, np.int64))
    with pytest.raises(TypeError, match="only floating tensors can require grad"):
        lk.tensor(np.zeros(3, np.int32), requires_grad=True)


def test_hvp_matches_the_analytic_hessian(dev, rng):
    n = 5
    A = rng.standard_normal((n, n))
    x0 = rng.standard_normal(n)
    v0 = rng.standard_normal(n)
    At = lk.tensor(A, device=dev)

    def f(x):  # 0.5 x^T A x + sum(exp(x))  ->  H = (A + A^T)/2 + diag(exp(x))
        return F.sum(x * F.matmul(At, x)) * 0.5 + F.sum(F.exp(x))

    (hv,) = lk.autograd.hvp(f, [lk.tensor(x0, device=dev)], [lk.tensor(v0, device=dev)])
    H = (A + A.T) / 2 + np.diag(np.exp(x0))
    np.testing.assert_allclose(hv.numpy(), H @ v0, rtol=1e-10)


def test_jvp_matches_a_directional_difference(dev, rng):
    W = rng.standard_normal((4, 3))
    x0, v0 = rng.standard_normal((2, 4)), rng.standard_normal((2, 4))
    Wt = lk.tensor(W, device=dev)

    def f(x):
        return F.tanh(F.matmul(x, Wt))

    jv = lk.autograd.jvp(f, [lk.tensor(x0, device=dev)], [lk.tensor(v0, device=dev)])
    want = (1 - np.tanh(x0 @ W) ** 2) * (v0 @ W)
    np.testing.assert_allclose(jv.numpy(), want, rtol=1e-10)


@pytest.mark.parametrize("fn,ref_grad", [
    (lambda x: F.log_softmax(x, axis=1)[:, 0].sum(), None),
    (lambda x: F.logsumexp(x, axis=1).sum(), None),
    (lambda x: F.softplus(x).sum(), None),
    (lambda x: F.log_sigmoid(x).sum(), None),
    (lambda x: F.softmax_cross_entropy(x, np.array([0, 1])), None),
    (lambda x: F.sigmoid_cross_entropy(x, np.ones((2, 3))), None),
])
def test_stable_for_logits_of_1000(fn, ref_grad, dev):
    big = np.array([[1000.0, -1000.0, 0.0], [-1000.0, 1000.0, 999.0]], np.float32)
    x = lk.tensor(big, device=dev, requires_grad=True)
    y = fn(x)
    (g,) = lk.grad([y], [x])
    assert np.isfinite(y.numpy()).all() and np.isfinite(g.numpy()).all()
    # the same function in float64 at the same point: the float32 result must agree
    x64 = lk.tensor(big.astype(np.float64), device=dev, requires_grad=True)
    y64 = fn(x64)
    (g64,) = lk.grad([y64], [x64])
    # float32 resolves 1000 to 6e-5 (one ulp), so results agree to a few ulps of that
    np.testing.assert_allclose(y.numpy(), y64.numpy(), rtol=1e-5, atol=2e-4)
    np.testing.assert_allclose(g.numpy(), g64.numpy(), atol=2e-4)


def test_stable_values_at_1000():
    x = lk.tensor(np.array([1000.0, -1000.0], np.float32))
    np.testing.assert_allclose(F.softplus(x).numpy(), [1000.0, 0.0])
    np.testing.assert_allclose(F.log_sigmoid(x).numpy(), [0.0, -1000.0])
    np.testing.assert_allclose(F.logsumexp(x).numpy(), 1000.0)


def test_accuracy(dev):
    y = lk.tensor(np.array([[0.1, 0.9], [0.8, 0.2], [0.3, 0.7]], np.float32), device=dev)
    assert F.accuracy(y, np.array([1, 0, 0])) == pytest.approx(2 / 3)


def test_batch_norm_running_statistics_and_inference(dev, rng):
    x = rng.standard_normal((8, 3, 2, 2)).astype(np.float32) * 2 + 1
    xt = lk.tensor(x, device=dev)
    g, b = lk.tensor(np.ones(3, np.float32), device=dev), lk.tensor(np.zeros(3, np.float32),
                                                                     device=dev)
    xp = xt.xp
    rm = np.zeros(3, np.float32) if xp is np else xp.zeros(3, device=xt.data.rt)
    rv = np.ones(3, np.float32) if xp is np else xp.ones(3, device=xt.data.rt)
    F.batch_normalization(xt, g, b, rm, rv, training=True, momentum=0.5)
    m = x.mean(axis=(0, 2, 3))
    v = x.var(axis=(0, 2, 3), ddof=1)
    np.testing.assert_allclose(np.asarray(rm), 0.5 * m, rtol=1e-5)
    np.testing.assert_allclose(np.asarray(rv), 0.5 + 0.5 * v, rtol=1e-5)
    y = F.batch_normalization(xt, g, b, rm, rv, training=False)
    want = (x - np.asarray(rm).reshape(1, 3, 1, 1)) / np.sqrt(np.asarray(rv).reshape(1, 3, 1, 1)
                                                               + 1e-5)
    np.testing.assert_allclose(y.numpy(), want, rtol=1e-5, atol=1e-5)


def test_dropout_is_reproducible_and_checkpointable(dev):
    x = lk.tensor(np.ones((100, 50), np.float32), device=dev)
    g = lk.Generator(3, dev)
    state = g.state_dict()
    a = F.dropout(x, 0.3, generator=g).numpy()
    g.load_state_dict(state)
    b = F.dropout(x, 0.3, generator=g).numpy()
    assert a.tobytes() == b.tobytes()
    assert abs((a == 0).mean() - 0.3) < 0.02 and set(np.unique(a)) <= {0.0, np.float32(1 / 0.7)}
    assert F.dropout(x, 0.3, training=False) is x
    other = "cpu" if dev == "cl:0" else "cl"
    c = F.dropout(x.to(other), 0.3, generator=lk.Generator(3, other)).numpy()
    assert c.tobytes() == a.tobytes()  # the same mask on every device
    with pytest.raises(ValueError, match="generator is on"):
        F.dropout(x, 0.3, generator=lk.Generator(3, other))


def _train(dev, model, params, xs, ys, steps, lr):
    losses = []
    for _ in range(steps):
        for p in params:
            p.grad = None
        loss = F.softmax_cross_entropy(model(xs), ys)
        loss.backward()
        with lk.no_grad():
            for p in params:
                p.data -= lr * p.grad.data
        losses.append(loss.item())
    return losses


def test_small_mlp_learns(dev, rng):
    X = rng.standard_normal((64, 10)).astype(np.float32)
    Y = (X[:, 0] + X[:, 1] > 0).astype(np.int64)
    W1 = t(rng.standard_normal((16, 10)) * 0.3, dev)
    b1 = t(np.zeros(16), dev)
    W2 = t(rng.standard_normal((2, 16)) * 0.3, dev)
    xs = lk.tensor(X, device=dev)

    def model(x):
        return F.linear(F.relu(F.linear(x, W1, b1)), W2)

    losses = _train(dev, model, [W1, b1, W2], xs, Y, 30, 0.5)
    assert losses[-1] < 0.5 * losses[0], losses


def test_small_cnn_learns(dev, rng):
    X = rng.standard_normal((16, 1, 8, 8)).astype(np.float32)
    Y = (X[:, 0, :4].mean(axis=(1, 2)) > X[:, 0, 4:].mean(axis=(1, 2))).astype(np.int64)
    Wc = t(rng.standard_normal((4, 1, 3, 3)) * 0.3, dev)
    Wl = t(rng.standard_normal((2, 4 * 4 * 4)) * 0.1, dev)
    xs = lk.tensor(X, device=dev)

    def model(x):
        h = F.max_pool2d(F.relu(F.conv2d(x, Wc, pad=1)), 2)
        return F.linear(F.flatten(h), Wl)

    losses = _train(dev, model, [Wc, Wl], xs, Y, 25, 0.3)
    assert losses[-1] < 0.6 * losses[0], losses


def test_same_seed_same_bits_run_after_run(dev, rng):
    X = rng.standard_normal((32, 20)).astype(np.float32)
    W0 = rng.standard_normal((5, 20)).astype(np.float32)

    def run():
        W = lk.tensor(W0, device=dev, requires_grad=True)
        g = lk.Generator(1, dev)
        y = F.dropout(F.tanh(F.linear(lk.tensor(X, device=dev), W)), 0.5, generator=g)
        F.sum(y * y).backward()
        return W.grad.numpy().tobytes()

    assert run() == run()


@pytest.mark.parametrize("target", ["cpu", "cl"])
@pytest.mark.parametrize("dtype", [None, np.float32, np.float64, np.int32])
@pytest.mark.parametrize("source", ["numpy32", "numpy64", "int64", "list", "cl_array",
                                    "cpu_tensor", "cl_tensor"])
def test_tensor_honours_dtype_from_every_source_to_every_device(source, dtype, target):
    # lk.tensor(cl_array, dtype=np.float64, device="cpu") used to ignore dtype
    h = np.array([[1.5, -2.0, 3.0]])
    src = {"numpy32": lambda: h.astype(np.float32), "numpy64": lambda: h.copy(),
           "int64": lambda: h.astype(np.int64), "list": lambda: h.tolist(),
           "cl_array": lambda: lk.asarray(h.astype(np.float32), device="cl"),
           "cpu_tensor": lambda: lk.tensor(h.astype(np.float32)),
           "cl_tensor": lambda: lk.tensor(h.astype(np.float32), device="cl")}[source]()
    kept = {"numpy32": np.float32, "numpy64": np.float64, "int64": np.int64,
            "list": np.float32}.get(source, np.float32)  # Python floats become float32
    want = np.dtype(dtype if dtype is not None else kept)
    x = lk.tensor(src, dtype=dtype, device=target)
    assert x.dtype == want and x.device == lk.device(target), (x.dtype, x.device)
    np.testing.assert_array_equal(x.numpy(), h.astype(kept).astype(want))
    # always a new array: writing to it leaves the source alone
    x.data[...] = 0
    back = src.numpy() if isinstance(src, lk.Tensor) else np.asarray(
        src.get() if hasattr(src, "get") else src)
    np.testing.assert_array_equal(back, h.astype(back.dtype))
