"""A compiled step whose outside state alternates between calls: a model switched between
train and eval mode at every call, a global flag set in turn. Each state's first trace waits
for that state to come back (a change of state dropped it, and such a step was traced at
every call, never replayed); results stay the eager step's."""

import warnings

import numpy as np

import labkit as lk
import labkit.bricks as B
import labkit.functions as F
import labkit.optimizers as O
from labkit.compile import CompileWarning


def _same(a, b, dev, what):
    if str(dev) == "cpu":
        np.testing.assert_array_equal(a, b, err_msg=what)
    else:
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6, err_msg=what)


def _model(dev):
    B.set_seed(4)
    return B.Sequence(B.Linear(6, 8), B.Dropout(0.5, seed=3), B.Linear(8, 3)).to(dev)


def _losses(dev, compiled, calls=14):
    model = _model(dev)
    opt = O.SGD(lr=0.1).setup(model)

    def step(x, t):
        loss = F.softmax_cross_entropy(model(x), t)
        if model.training:  # NOTE: validation calls the same step in eval mode
            opt.zero_grad()
            loss.backward()
            opt.update()
        return loss

    f = lk.compile(step) if compiled else step
    rng = np.random.default_rng(0)
    x = lk.tensor(rng.standard_normal((5, 6)).astype(np.float32), device=dev)
    t = rng.integers(0, 3, 5)
    out = []
    for i in range(calls):
        model.train() if i % 2 == 0 else model.eval()
        out.append(f(x, t).numpy())
    return np.array(out), model, f


def test_train_and_eval_in_turn_replay_and_match_eager(dev):
    eager, m_eager, _ = _losses(dev, compiled=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error", CompileWarning)  # two retraces, not one per call
        got, m_got, f = _losses(dev, compiled=True)
    _same(got, eager, dev, "losses, train and eval in turn")
    for (k, a), b in zip(m_eager.state_dict().items(), m_got.state_dict().values()):
        _same(np.asarray(b), np.asarray(a), dev, k)
    assert f.stats["traces"] == 4 and f.stats["replays"] == 10, f.stats
    assert len(set(got[1::2].tolist())) > 1  # eval losses follow the training


def test_a_global_flag_set_in_turn_replays_each_value(dev):
    cfg = {"scale": 1.0}
    f = lk.compile(lambda x: x * cfg["scale"])
    x = lk.tensor(np.arange(3, dtype=np.float32), device=dev)
    for i in range(10):
        cfg["scale"] = [1.0, 2.0, 3.0][i % 3]
        np.testing.assert_array_equal(f(x).numpy(), np.arange(3) * cfg["scale"])
    assert f.stats["traces"] == 6 and f.stats["replays"] == 4, f.stats


def test_states_waiting_per_signature_are_bounded():
    from labkit import compile as C
    cfg = {"n": 0}
    f = lk.compile(lambda x: x + cfg["n"])
    x = lk.tensor(np.zeros(2, np.float32))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", CompileWarning)
        for i in range(3 * C.MAX_PROGRAMS):
            cfg["n"] = i  # a value that never comes back: traced at every call
            np.testing.assert_array_equal(f(x).numpy(), [i, i])
    assert f.stats["replays"] == 0
    assert sum(len(w) for w in f._first.values()) == C.MAX_PROGRAMS
