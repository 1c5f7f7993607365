import json

import numpy as np
import pytest

import labkit as lk
import labkit.bricks as B
import labkit.functions as F


def to64(brick):
    for p in brick.params().values():
        p.data = p.data.astype(np.float64)
    return brick


def grad_check(brick, x, dev, rng, eps=1e-6):
    """Gradients of sum(brick(x) * gy) w.r.t. x and every parameter vs central differences."""
    xt = lk.tensor(x, device=dev, requires_grad=True)
    y = brick(xt)
    gy = lk.tensor(rng.standard_normal(y.shape), device=dev)
    params = list(brick.params().values())
    got = lk.grad([F.sum(y * gy)], [xt] + params, allow_unused=True)

    def f():
        with lk.no_grad():
            return float(F.sum(brick(lk.tensor(xv[0], device=dev)) * gy).item())

    xv = [x.copy()]
    targets = [("x", xv, 0)] + [(n, p, None) for n, p in brick.params().items()]
    for (name, holder, _), g in zip(targets, got):
        arr = holder[0] if name == "x" else holder.numpy().copy()
        num = np.zeros_like(arr)
        for j in range(arr.size):
            for sgn in (1, -1):
                a = arr.copy()
                a.flat[j] += sgn * eps
                if name == "x":
                    xv[0] = a
                else:
                    holder.data = lk.asarray(a, device=dev)
                num.flat[j] += sgn * f() / (2 * eps)
            if name == "x":
                xv[0] = arr
            else:
                holder.data = lk.asarray(arr, device=dev)
        np.testing.assert_allclose(np.zeros_like(arr) if g is None else g.numpy(), num,
                                   rtol=1e-5, atol=1e-6, err_msg=f"gradient of {name} on {dev}")


def test_linear_and_mlp_match_numpy(dev, rng):
    mlp = B.MLP([None, 5, 3]).to(dev)
    x = rng.standard_normal((4, 6)).astype(np.float32)
    y = mlp(lk.tensor(x, device=dev))
    p = {k: v.numpy() for k, v in mlp.params().items()}
    h = np.maximum(x @ p["/mlp/linear_0.W"].T + p["/mlp/linear_0.b"], 0)
    want = h @ p["/mlp/linear_1.W"].T + p["/mlp/linear_1.b"]
    np.testing.assert_allclose(y.numpy(), want, rtol=1e-5, atol=1e-6)
    assert sorted(mlp.params()) == ["/mlp/linear_0.W", "/mlp/linear_0.b", "/mlp/linear_1.W",
                                    "/mlp/linear_1.b"]
    assert mlp.params()["/mlp/linear_0.W"].shape == (5, 6)  # resolved on the first call


@pytest.mark.parametrize("make,shape", [
    (lambda: B.Linear(4, 3), (2, 4)),
    (lambda: B.MLP([3, 4, 2], activation=F.tanh), (2, 3)),
    (lambda: B.Conv2D(2, 3, 3, pad=1), (1, 2, 4, 4)),
    (lambda: B.ConvTranspose2D(2, 2, 2, stride=2), (1, 2, 2, 2)),
    (lambda: B.LayerNorm(4), (3, 4)),
    (lambda: B.Sequence(B.Conv2D(1, 2, 2), B.Tanh(), B.Flatten(), B.Linear(None, 2)),
     (2, 1, 3, 3)),
    (lambda: B.LSTM(3, 2), (2, 3, 3)),
    (lambda: B.GRU(3, 2), (2, 3, 3)),
], ids=["linear", "mlp", "conv2d", "conv_transpose2d", "layernorm", "sequence", "lstm", "gru"])
def test_brick_gradients(make, shape, dev, rng):
    brick = make().to(dev)
    x = rng.standard_normal(shape)
    brick(lk.tensor(x.astype(np.float32), device=dev))  # build lazily-sized parameters
    grad_check(to64(brick), x, dev, rng)


def test_lstm_and_gru_hold_state_past_the_mask(dev, rng):
    x = rng.standard_normal((2, 5, 3)).astype(np.float32)
    mask = np.array([[1, 1, 1, 1, 1], [1, 1, 0, 0, 0]], np.float32)
    for brick in (B.LSTM(3, 4), B.GRU(3, 4)):
        brick.to(dev)
        h = brick(lk.tensor(x, device=dev), mask=mask).numpy()
        assert h.shape == (2, 5, 4)
        np.testing.assert_array_equal(h[1, 2:], np.broadcast_to(h[1, 1], (3, 4)))
        assert not np.allclose(h[0, 2], h[0, 1])
        # the padded row's valid steps equal running the short sequence alone
        short = brick(lk.tensor(x[1:2, :2], device=dev)).numpy()
        np.testing.assert_allclose(h[1, :2], short[0], rtol=1e-5, atol=1e-6)


def test_embedding_batchnorm_dropout_modes(dev, rng):
    emb = B.Embedding(10, 4).to(dev)
    ids = np.array([[1, 2], [9, 1]])
    np.testing.assert_array_equal(emb(ids).numpy(), emb.W.numpy()[ids])
    bn = B.BatchNorm().to(dev)
    x = lk.tensor(rng.standard_normal((8, 3, 2, 2)).astype(np.float32) * 3 + 2, device=dev)
    y = bn(x).numpy()
    np.testing.assert_allclose(y.mean(axis=(0, 2, 3)), 0, atol=1e-5)
    assert np.asarray(bn.running_mean).any()
    bn.eval()
    assert not bn.training and all(not b.training for b in bn.bricks())
    y2 = bn(x).numpy()
    assert not np.allclose(y, y2)  # inference uses running statistics
    d = B.Dropout(0.5)
    assert d.eval()(x) is x
    assert (d.train()(x).numpy() == 0).mean() > 0.3


def test_state_dict_round_trip_across_devices(rng):
    src = B.Sequence(B.Conv2D(1, 2, 3), B.ReLU(), B.Flatten(), B.Linear(None, 3),
                     B.LayerNorm(3)).to("cl")
    x = rng.standard_normal((2, 1, 5, 5)).astype(np.float32)
    y_cl = src(lk.tensor(x, device="cl")).numpy()
    state = src.state_dict()  # saved on cl
    assert all(isinstance(v, np.ndarray) for v in state.values())
    lk.bricks.set_seed(123)
    dst = B.Sequence(B.Conv2D(1, 2, 3), B.ReLU(), B.Flatten(), B.Linear(2 * 3 * 3, 3),
                     B.LayerNorm(3))  # other seed: different initial values until loaded
    dst.load_state_dict(state)  # loaded on cpu
    np.testing.assert_allclose(dst(lk.tensor(x)).numpy(), y_cl, rtol=1e-5, atol=1e-6)


def test_load_state_dict_errors_list_every_problem():
    m = B.MLP([4, 3, 2])
    state = m.state_dict()
    state.pop("/mlp/linear_1.b")
    state["/mlp/extra.W"] = np.zeros(2)
    state["/mlp/linear_0.W"] = np.zeros((3, 5))
    with pytest.raises(lk.CheckpointError) as e:  # a ValueError, no longer a KeyError
        m.load_state_dict(state)
    msg = str(e.value)
    assert "missing keys: /mlp/linear_1.b" in msg and "unexpected keys: /mlp/extra.W" in msg
    assert "/mlp/linear_0.W: checkpoint (3, 5), model (3, 4)" in msg
    state2 = m.state_dict()
    state2.pop("/mlp/linear_1.b")
    m.load_state_dict(state2, strict=False)  # non-strict: missing keys are fine


def test_repr_prints_the_tree():
    m = B.MLP([784, 256, 10])
    r = repr(m)
    assert "linear_0: Linear [W(256, 784), b(256,)]" in r and "(203,530 params)" in r
    lazy = B.Linear(None, 3)
    assert "resolved on the first call" in repr(lazy)


def test_roles_and_graph_filters(dev, rng):
    class AutoEncoder(B.Brick):
        def __init__(self):
            super().__init__()
            self.encoder = B.MLP([6, 4, 2])
            self.decoder = B.Sequence(B.Linear(2, 6))

        def forward(self, x):
            return self.decoder(self.encoder(x))

    ae = AutoEncoder().to(dev)
    x = lk.tensor(rng.standard_normal((3, 6)).astype(np.float32), device=dev)
    out = ae(x)
    assert out.role is lk.roles.OUTPUT
    loss = F.mean_squared_error(out, x)
    g = lk.Graph(loss)
    weights = [p.path for p in g.filter(role=lk.roles.WEIGHT)]
    assert weights == ["/autoencoder/encoder/linear_0.W", "/autoencoder/encoder/linear_1.W",
                       "/autoencoder/decoder/linear_0.W"]
    assert [p.path for p in g.filter(role=lk.roles.WEIGHT, brick="/autoencoder/decoder")] == [
        "/autoencoder/decoder/linear_0.W"]
    assert len(g.filter(role=lk.roles.BIAS)) == 3
    assert [p.path for p in g.filter(name="*linear_1*")] == [
        "/autoencoder/encoder/linear_1.W", "/autoencoder/encoder/linear_1.b"]
    assert g.inputs == [x]
    # NOTE: the data given to the model is its INPUT, and so is the activation between the
    # MLP's two linear bricks (a function's result); the encoder's output given to the
    # decoder stays an OUTPUT (one role per tensor)
    ins = g.filter(role=lk.roles.INPUT)
    assert len(ins) == 2 and ins[0] is x and ins[1].creator.name == "relu"
    h = F.relu(ae.encoder(x))
    assert h.role is None
    ae.decoder(h)
    assert h.role is lk.roles.INPUT and ae.encoder(x).role is lk.roles.OUTPUT
    # NOTE: behind the decoder's input, the encoder's (x, and the MLP's inner activation)
    ins = {id(v) for v in lk.Graph(ae.decoder(h)).filter(role=lk.roles.INPUT)}
    assert len(ins) == 3 and {id(h), id(x)} <= ins
    conv = B.Conv2D(1, 2, 3)
    assert lk.roles.has_role(conv.W, lk.roles.FILTER) and lk.roles.has_role(conv.W,
                                                                            lk.roles.WEIGHT)
    assert not lk.roles.has_role(conv.b, lk.roles.WEIGHT)
    d = g.to_dict()
    json.dumps(d)
    ops = [n["op"] for n in d["nodes"] if n["kind"] == "function"]
    assert ops.count("linear") == 3 and "relu" in ops
    bricks = {n["brick"] for n in d["nodes"] if n["kind"] == "function"}
    assert "/autoencoder/encoder/linear_0" in bricks
    assert all(len(e) == 2 for e in d["edges"]) and len(d["edges"]) >= len(ops)
    loss.backward()
    with pytest.raises(RuntimeError, match="freed by backward.*retain_graph=True"):
        lk.Graph(loss)
    s = g.summary()
    assert "linear" in s and "/autoencoder/decoder/linear_0" in s and "parameters" in s


def test_initializers_are_seeded_and_identical_on_every_device():
    lk.bricks.set_seed(7)
    a = B.MLP([20, 30, 5])
    lk.bricks.set_seed(7)
    b = B.MLP([20, 30, 5]).to("cl")
    for (ka, pa), (kb, pb) in zip(a.params().items(), b.params().items()):
        assert ka == kb and pa.numpy().tobytes() == pb.numpy().tobytes()
    w0, w1 = a.params()["/mlp/linear_0.W"].numpy(), a.params()["/mlp/linear_1.W"].numpy()
    assert not np.allclose(w0[:5, :5], w1[:5, :5])  # layers get different streams
    rng = lk.Generator(0)
    x = B.GlorotUniform()((400, 600), np.float32, rng)
    bound = np.sqrt(6 / 1000)
    assert x.max() <= bound and x.min() >= -bound and x.std() > bound / 2
    h = B.HeNormal()((300, 500), np.float32, rng)
    assert abs(h.std() - np.sqrt(2 / 500)) < 0.003
    q = B.Orthogonal()((6, 10), np.float64, rng)
    np.testing.assert_allclose(q @ q.T, np.eye(6), atol=1e-12)
    np.testing.assert_array_equal(B.Constant(0.5)((3,), np.float32, rng), np.full(3, 0.5))


def test_regularisation_by_role(dev, rng):
    m = B.MLP([4, 3, 2]).to(dev)
    norms = lk.regularizers.l2_norms(m)
    assert sorted(norms) == ["/mlp/linear_0", "/mlp/linear_1"]
    w = m.params()["/mlp/linear_0.W"].numpy()
    assert np.isclose(norms["/mlp/linear_0"].item(), (w * w).sum(), rtol=1e-5)
    assert norms["/mlp/linear_0"].role is lk.roles.AUXILIARY
    pen = lk.regularizers.l2_penalty(m, 0.1)
    (g,) = lk.grad([pen], [m.params()["/mlp/linear_0.W"]])
    np.testing.assert_allclose(g.numpy(), 0.2 * w, rtol=1e-5)
    before = {k: p.numpy().copy() for k, p in m.params().items()}
    with lk.regularizers.WeightNoise(m, 0.5):
        noisy = m.params()["/mlp/linear_0.W"].numpy()
        assert not np.allclose(noisy, before["/mlp/linear_0.W"])
        np.testing.assert_array_equal(m.params()["/mlp/linear_0.b"].numpy(),
                                      before["/mlp/linear_0.b"])  # biases untouched
    for k, p in m.params().items():
        assert p.numpy().tobytes() == before[k].tobytes()  # exact weights back
