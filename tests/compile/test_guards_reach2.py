"""What a compiled step reads further away: the __call__ of an object the step calls (a loss
object), a config object read by a helper that a brick's forward calls (past the walk's old
depth), a functools.partial whose keywords change in place. Each was replayed with the traced
value (silently stale training); each is traced again now, and every call is the eager
step's, bit for bit."""

from __future__ import annotations

import functools
import types

import numpy as np
import pytest

import labkit as lk
import labkit.bricks as B
import labkit.functions as F

CFG = types.SimpleNamespace(temp=1.0)


class TempLoss:
    """A loss object of the user's (not a brick) whose __call__ reads its own setting."""

    def __init__(self, tau):
        self.tau = tau

    def __call__(self, logits, y):
        return F.softmax_cross_entropy(logits / self.tau, y)


def scaled_logits(h):
    return h / CFG.temp


class Net(B.Brick):
    def __init__(self):
        super().__init__()
        self.mlp = B.MLP([8, 16, 3])

    def forward(self, x):
        return scaled_logits(self.mlp(x))


def scaled_loss(logits, y, s):
    return F.softmax_cross_entropy(logits, y) * s


def _make(dev, how):
    lk.bricks.set_seed(0)
    model = Net() if how == "helper of forward" else B.MLP([8, 16, 3])
    model.to(dev)
    opt = lk.optimizers.SGD(lr=0.1).setup(model)
    crit = TempLoss(1.0)
    part = functools.partial(scaled_loss, s=2.0)
    if how == "loss object":
        def step(x, y):
            opt.zero_grad()
            loss = crit(model(lk.tensor(x, device=dev)), y)
            loss.backward()
            opt.update()
            return loss
    elif how == "partial":
        def step(x, y):
            opt.zero_grad()
            loss = part(model(lk.tensor(x, device=dev)), y)
            loss.backward()
            opt.update()
            return loss
    else:
        def step(x, y):
            opt.zero_grad()
            loss = F.softmax_cross_entropy(model(lk.tensor(x, device=dev)), y)
            loss.backward()
            opt.update()
            return loss

    def change():
        crit.tau, CFG.temp = 4.0, 4.0
        part.keywords["s"] = 5.0
    return model, step, change


@pytest.mark.parametrize("how", ["loss object", "helper of forward", "partial"])
def test_a_setting_read_further_away_is_checked(dev, how):
    rng = np.random.default_rng(0)
    X = [rng.standard_normal((16, 8)).astype(np.float32) for _ in range(6)]
    Y = [rng.integers(0, 3, 16) for _ in range(6)]
    runs = []
    for compiled in (False, True):
        CFG.temp = 1.0
        model, step, change = _make(dev, how)
        f = lk.compile(step) if compiled else step
        losses = []
        for i in range(6):
            if i == 3:  # after the program is built
                change()
            losses.append(float(f(X[i], Y[i]).item()))
        runs.append((losses, model, f))
    (want, eager, _), (got, model, f) = runs
    assert got == want
    for k, p in eager.params().items():
        assert np.array_equal(p.numpy(), model.params()[k].numpy()), k
    assert f.stats["retraces"] == 1 and f.stats["replays"] >= 2, f.stats
