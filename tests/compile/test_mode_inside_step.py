"""A step that sets the model's mode itself (train on a batch, then evaluate another in eval
mode, then back to train) never replayed: the mode was guarded as the step read it (eval),
and each call starts in train. The guard is now the mode the call starts with; each replay
equals the eager step (outputs, parameters, running statistics, the mode it leaves)."""

import numpy as np
import pytest

import labkit as lk
import labkit.bricks as B
import labkit.functions as F
import labkit.optimizers as O


def _twins(dev):
    def make():
        B.set_seed(0)
        return B.Sequence(B.Linear(6, 8), B.BatchNorm(8), B.ReLU(), B.Dropout(0.3, seed=3),
                          B.Linear(8, 3)).to(dev)
    return make(), make()


def _same(a, b):
    return all(np.array_equal(np.asarray(x), np.asarray(y)) for x, y in
               zip(a.state_dict().values(), b.state_dict().values()))


@pytest.mark.parametrize("restore", [True, False])
def test_a_step_that_switches_the_mode_itself_replays_as_the_eager_one(dev, restore):
    ma, mb = _twins(dev)
    oa, ob = O.Adam(lr=1e-2).setup(ma), O.Adam(lr=1e-2).setup(mb)

    def mk(model, opt):
        def step(x, t, xv):
            model.train()
            opt.zero_grad()
            loss = F.softmax_cross_entropy(model(x), t)
            loss.backward()
            opt.update()
            model.eval()
            val = model(xv)
            if restore:
                model.train()
            return loss, val
        return step

    eager, compiled = mk(ma, oa), lk.compile(mk(mb, ob))
    rng = np.random.default_rng(0)
    for _ in range(8):
        x = rng.standard_normal((8, 6)).astype(np.float32)
        xv = rng.standard_normal((5, 6)).astype(np.float32)
        t = rng.integers(0, 3, 8)
        outs = [f(lk.tensor(x, device=dev), t, lk.tensor(xv, device=dev))
                for f in (eager, compiled)]
        for a, b in zip(*outs):
            assert np.array_equal(a.numpy(), b.numpy())
        assert _same(ma, mb) and ma.training == mb.training == restore
    # NOTE: left in eval, the second call starts in another mode than the first: traced again
    assert compiled.stats["replays"] == (6 if restore else 5)


def test_the_mode_a_call_starts_in_is_still_guarded(dev):
    m = B.Sequence(B.Linear(3, 4), B.Dropout(0.5, seed=1)).to(dev)

    @lk.compile
    def half(x):
        m.eval()
        y = m(x)          # NOTE: eval, whatever the mode at the start
        m.train()
        return y, m(x)    # NOTE: train: dropout

    x = lk.tensor(np.ones((64, 3), np.float32), device=dev)
    for _ in range(4):
        y, z = half(x)
    assert half.stats["replays"] == 2
    m.eval()  # NOTE: a call that starts in eval ends in train (the step's own code): traced
    half(x)
    assert half.stats["retraces"] == 1 and m.training
    assert "training" in str(half.stats["reasons"][-1])
