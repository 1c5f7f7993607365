"""Training steps compiled against the same steps run eagerly from the same state: an MLP with
Adam, SGD + Momentum with a learning rate changed between calls, and a model with Dropout and
BatchNorm (fresh masks at each replay, running statistics updated at each replay).

On cpu compiled and eager runs are bit-identical (a replay runs the same forwards on the same
arrays, and the optimizer's update is the same host code). On cl they are compared within a
tight float32 tolerance (rtol 1e-5, atol 1e-6): fused elementwise kernels may reorder float
operations."""

import numpy as np
import pytest

import labkit as lk
import labkit.bricks as B
import labkit.functions as F
import labkit.optimizers as O
from labkit.functions import noise

STEPS = 6


def assert_same(a, b, dev, what):
    a = a.numpy() if isinstance(a, lk.Tensor) else np.asarray(a)
    b = b.numpy() if isinstance(b, lk.Tensor) else np.asarray(b)
    if str(dev) == "cpu":
        np.testing.assert_array_equal(a, b, err_msg=what)
    else:
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6, err_msg=what)


def assert_same_state(ma, mb, dev):
    sa, sb = ma.state_dict(), mb.state_dict()
    assert sa.keys() == sb.keys()
    for k in sa:
        assert_same(sa[k], sb[k], dev, f"{k} after {STEPS} steps")


def batches(dev, n=STEPS, seed=0):
    rng = np.random.default_rng(seed)
    return [(lk.tensor(rng.standard_normal((8, 6)).astype(np.float32), device=dev),
             rng.integers(0, 3, 8)) for _ in range(n)]


def twins(make, dev):
    """Two models with the same weights and buffers (``seed=`` does not seed children)."""
    a = make().to(dev)
    b = make().to(dev)
    b.load_state_dict(a.state_dict())
    return a, b


def train_step(model, opt):
    def step(x, t):
        opt.zero_grad()
        loss = F.softmax_cross_entropy(model(x), t)
        loss.backward()
        opt.update()
        return loss
    return step


def test_mlp_adam(dev):
    eager_m, comp_m = twins(lambda: B.MLP([6, 8, 3]), dev)
    eager = train_step(eager_m, O.Adam(lr=0.01).setup(eager_m))
    comp = lk.compile(train_step(comp_m, O.Adam(lr=0.01).setup(comp_m)))
    for k, (x, t) in enumerate(batches(dev)):
        assert_same(comp(x, t), eager(x, t), dev, f"loss of step {k + 1}")
    assert comp.stats["replays"] == STEPS - 2 and comp.stats["retraces"] == 0
    assert_same_state(eager_m, comp_m, dev)


def test_learning_rate_change_takes_effect_without_retrace(dev):
    eager_m, comp_m = twins(lambda: B.MLP([6, 8, 3]), dev)
    start = eager_m.state_dict()
    path = f"{eager_m.path}/linear_0.W"
    eager_opt = O.Momentum(lr=0.1, momentum=0.9).setup(eager_m)
    comp_opt = O.Momentum(lr=0.1, momentum=0.9).setup(comp_m)
    eager, comp = train_step(eager_m, eager_opt), lk.compile(train_step(comp_m, comp_opt))
    lrs = [0.1, 0.1, 0.1, 0.02, 0.02, 0.5]  # changed before the 4th call (a replay) and the 6th
    for k, ((x, t), lr) in enumerate(zip(batches(dev), lrs)):
        eager_opt.lr = comp_opt.lr = lr
        assert_same(comp(x, t), eager(x, t), dev, f"loss of step {k + 1} (lr {lr})")
        assert_same_state(eager_m, comp_m, dev)
    assert comp.stats["retraces"] == 0 and comp.stats["replays"] == STEPS - 2, comp.stats
    # the change did something: the same run keeping lr=0.1 ends elsewhere
    kept = B.MLP([6, 8, 3]).to(dev)
    kept.load_state_dict(start)
    keep = train_step(kept, O.Momentum(lr=0.1, momentum=0.9).setup(kept))
    for x, t in batches(dev):
        keep(x, t)
    assert not np.allclose(kept.state_dict()[path], comp_m.state_dict()[path])


def net_with_noise():
    return B.Sequence(B.Linear(6, 8), B.BatchNorm(8), B.ReLU(), B.Dropout(0.3, seed=5),
                      B.Linear(8, 3))


def test_dropout_and_batchnorm_in_training(dev):
    eager_m, comp_m = twins(net_with_noise, dev)
    comp_m.layers[3].generator.load_state_dict(eager_m.layers[3].generator.state_dict())
    eager = train_step(eager_m, O.Adam(lr=0.01).setup(eager_m))
    comp = lk.compile(train_step(comp_m, O.Adam(lr=0.01).setup(comp_m)))
    for k, (x, t) in enumerate(batches(dev)):
        assert_same(comp(x, t), eager(x, t), dev, f"loss of step {k + 1}")
        # running statistics are buffers: updated in place at each replay, as eagerly
        for name in ("running_mean", "running_var"):
            assert_same(getattr(comp_m.layers[1], name), getattr(eager_m.layers[1], name),
                        dev, f"{name} after step {k + 1}")
    assert comp.stats["replays"] == STEPS - 2
    assert_same_state(eager_m, comp_m, dev)
    assert (comp_m.layers[3].generator.state_dict()
            == eager_m.layers[3].generator.state_dict())


def test_running_statistics_change_at_each_replay(dev):
    bn = B.BatchNorm(4).to(dev)
    step = lk.compile(lambda x: bn(x))
    x = lk.tensor(np.random.default_rng(0).standard_normal((5, 4)).astype(np.float32),
                  device=dev)
    seen = []
    for _ in range(4):
        step(x)
        seen.append(bn.state_dict()[f"{bn.path}.running_mean"].copy())
    assert step.stats["replays"] == 2
    assert not np.array_equal(seen[2], seen[1]) and not np.array_equal(seen[3], seen[2])


def test_default_generator_dropout_matches_eager(dev):
    """F.dropout without a generator draws from noise.default_generator(device): a compiled
    run started from the same generator state draws the same masks as the eager run."""
    w = lk.tensor(np.linspace(-1, 1, 6, dtype=np.float32), device=dev, requires_grad=True)

    def step(x):
        w.grad = None
        y = F.dropout(x * w, 0.5).sum()
        y.backward()
        return y, w.grad

    gen = noise.default_generator(dev)
    start = gen.state_dict()
    xs = [lk.tensor(np.full((4, 6), k + 1.0, np.float32), device=dev) for k in range(5)]
    want = [step(x) for x in xs]
    gen.load_state_dict(start)
    comp = lk.compile(step)
    got = [comp(x) for x in xs]
    assert comp.stats["replays"] == 3
    for k, ((y, g), (ye, ge)) in enumerate(zip(got, want)):
        assert_same(y, ye, dev, f"output of call {k + 1}")
        assert_same(g, ge, dev, f"gradient of call {k + 1}")


def test_each_replay_draws_a_fresh_mask(dev):
    drop = B.Dropout(0.5, seed=3)
    step = lk.compile(lambda x: drop(x))
    x = lk.tensor(np.ones((4, 16), np.float32), device=dev)
    outs = [step(x).numpy() for _ in range(4)]
    assert step.stats["replays"] == 2
    assert not np.array_equal(outs[2], outs[3]), "two replays on one input gave one mask"
    assert not np.array_equal(outs[1], outs[2])
    # and the masks are the generator's next draws, as eagerly
    drop.generator.load_state_dict({"seed": drop.generator.seed, "counter": 0})
    eager = [drop(x).numpy() for _ in range(4)]
    for k in range(4):
        np.testing.assert_array_equal(outs[k], eager[k], err_msg=f"mask of call {k + 1}")


@pytest.mark.parametrize("opt_rule", [lambda: O.Adam(lr=0.01),
                                      lambda: O.Momentum(lr=0.05, momentum=0.9)],
                         ids=["adam", "momentum"])
def test_optimizer_state_is_read_at_each_replay(opt_rule):
    """Loading an optimizer checkpoint between replays is seen by the next replay."""
    eager_m, comp_m = twins(lambda: B.MLP([6, 8, 3]), lk.device("cpu"))
    eager_opt, comp_opt = opt_rule().setup(eager_m), opt_rule().setup(comp_m)
    eager, comp = train_step(eager_m, eager_opt), lk.compile(train_step(comp_m, comp_opt))
    data = batches(lk.device("cpu"))
    for x, t in data[:3]:
        eager(x, t), comp(x, t)
    saved = eager_opt.state_dict(), eager_m.state_dict()
    for x, t in data[3:]:
        eager(x, t)
    comp_opt.load_state_dict(saved[0])
    comp_m.load_state_dict(saved[1])
    eager_m.load_state_dict(saved[1])
    eager_opt.load_state_dict(saved[0])
    for x, t in data[3:]:
        np.testing.assert_array_equal(comp(x, t).numpy(), eager(x, t).numpy())
    assert comp.stats["retraces"] == 0
    assert_same_state(eager_m, comp_m, lk.device("cpu"))
