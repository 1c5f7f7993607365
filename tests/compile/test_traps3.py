"""Traps found by an adversarial review of lk.compile: a compiled step either gives the eager
step's result or refuses with a clear error, never a stale or cut one."""

import numpy as np
import pytest

import labkit as lk
import labkit.functions as F
from labkit.errors import CompileError


def _host(a):
    return a if isinstance(a, np.ndarray) else a.get()


def test_an_argument_changed_in_place_by_raw_code_is_refused(dev):
    """x -= x.mean(0) on the NumPy batch inside the step: a replay would not repeat it (it
    replayed the traced batch's arithmetic on the raw batch: 1314 against eager's 55)."""
    W = lk.tensor(np.ones((3, 6), np.float32), device=dev)

    def f(x):
        x -= x.mean(axis=0)
        return (F.linear(lk.tensor(x, device=dev), W) ** 2).sum()

    c = lk.compile(f)
    x = np.random.default_rng(0).standard_normal((4, 6)).astype(np.float32) + 3
    with pytest.raises(CompileError, match=r"changed an array of shape \(4, 6\) in place"):
        c(x)


def test_a_tensor_argument_changed_in_place_through_data_is_refused(dev):
    def f(w, x):
        w.data -= 0.01 * w.data
        return (F.linear(x, w) ** 2).sum()

    w = lk.tensor(np.ones((3, 6), np.float32), device=dev)
    x = lk.tensor(np.ones((2, 6), np.float32), device=dev)
    with pytest.raises(CompileError, match="in place outside labkit ops"):
        lk.compile(f)(w, x)


@pytest.mark.parametrize("how", ["getitem", "host"])
def test_a_result_whose_shape_follows_values_is_never_cut_or_broadcast(dev, how):
    """x[mask] with a mask argument, or a host function returning h[h > 0]: while the count
    is the traced one the replay is right; another count is an error naming the op, where
    the replay broadcast a 1-element selection (cpu) or cut a 4-element one (cl)."""
    W = lk.tensor(np.ones(4, np.float32), device=dev, requires_grad=True)

    def positives(a):
        h = _host(a)
        r = h[h > 0]
        return r if isinstance(a, np.ndarray) else lk.backend.asarray(r, device=dev)

    def f(x, mask):
        if how == "getitem":
            sel = x[mask]
        else:
            sel = lk.Tensor(lk.compile.host(positives, (x * mask).data))
        return ((sel * W[:1]) * 2.0 + 1.0).sum()

    def as_mask(m):  # NOTE: a boolean array to index with, or 0/1 values to multiply by
        m = np.array(m, bool)
        return m if how == "getitem" else lk.tensor(m.astype(np.float32), device=dev)

    c = lk.compile(f)
    x = lk.tensor(np.array([1, 2, 3, 4], np.float32), device=dev)
    for m in ([1, 1, 1, 0], [0, 1, 1, 1], [1, 0, 1, 1]):  # NOTE: three selected each time
        assert float(_host(c(x, as_mask(m)).data)) == float(_host(f(x, as_mask(m)).data))
    assert c.stats["replays"] >= 1
    for m in ([1, 0, 0, 0], [1, 1, 1, 1]):
        with pytest.raises(CompileError, match=r"gave a result of shape \((1|4),\) where the "
                                               r"traced call's was \(3,\)"):
            c(x, as_mask(m))


def _sgd_step(dev):
    rng = np.random.default_rng(0)
    W = lk.tensor(rng.standard_normal((3, 6)).astype(np.float32), device=dev,
                  requires_grad=True)
    opt = lk.optimizers.SGD(0.1).setup({"W": W})

    def step(x, y):
        opt.zero_grad()
        loss = F.softmax_cross_entropy(F.linear(x, W), y)
        loss.backward()
        opt.update()
        return loss

    x = lk.tensor(rng.standard_normal((4, 6)).astype(np.float32), device=dev)
    return W, step, x, rng.integers(0, 3, 4)



def test_a_training_step_called_under_no_grad_does_not_train(dev):
    """A validation pass that calls the training step by mistake: eager, backward raises; a
    replay of the step traced with gradients on updated the weights."""
    W, step, x, y = _sgd_step(dev)
    c = lk.compile(step)
    for _ in range(3):
        c(x, y)
    before = _host(W.data).copy()
    with lk.no_grad():
        with pytest.raises(RuntimeError, match="does not require grad"):
            step(x, y)
        with pytest.raises(RuntimeError, match="does not require grad"):
            c(x, y)
    assert np.array_equal(_host(W.data), before)
    assert "gradients were on when traced, are off" in c.stats["reasons"][-1]
    c(x, y)  # NOTE: with gradients on again, the step replays
    assert not np.array_equal(_host(W.data), before)


def test_a_gradient_hook_added_after_compiling_or_reading_a_changed_value_is_followed(dev):
    """register_hook after the step was compiled, and a hook reading a value that changes:
    the replay traces again (it had kept the traced hooks: the weights went apart from
    eager's)."""
    W, step, x, y = _sgd_step(dev)
    c = lk.compile(step)
    for _ in range(3):
        c(x, y)
    cfg = {"scale": 0.0}
    W.register_hook(lambda g: g * cfg["scale"])
    before = _host(W.data).copy()
    for _ in range(3):
        c(x, y)
    assert np.array_equal(_host(W.data), before)  # NOTE: a zero gradient: no update
    assert "a gradient hook" in c.stats["reasons"][-1]
    cfg["scale"] = 1.0
    c(x, y)
    assert not np.array_equal(_host(W.data), before)
    assert "cfg (in the closure of <lambda>)" in c.stats["reasons"][-1]


def test_a_grad_ready_hook_in_a_compiled_step_is_refused(dev):
    """A replay runs no Python: a grad-ready hook (halving .grad, a log) would be skipped."""
    W, step, x, y = _sgd_step(dev)
    log = []
    handle = W.register_grad_ready_hook(lambda t: log.append(1))
    c = lk.compile(step)
    with pytest.raises(CompileError, match="grad-ready hook"):
        c(x, y)
    handle.remove()
    for _ in range(3):
        c(x, y)
    assert c.stats["replays"] == 1


class _Cfg:
    pass


@pytest.mark.parametrize("case", ["read_not_called", "cfg_object", "nested", "mixed_global"])
def test_settings_read_through_bricks_and_mixed_containers_are_guarded(dev, case):
    """A brick's attribute the step reads without calling it (net.temp), a user brick's
    forward reading self.cfg.scale or self.opts["scales"][0], and a plain value in a global
    dict that also holds the model: a change traces the step again (the replays had kept
    the traced value)."""
    import labkit.bricks as B

    class Net(B.Brick):
        def __init__(self):
            super().__init__()
            self.lin = B.Linear(6, 3)
            self.temp = 1.0
            self.cfg = _Cfg()
            self.cfg.scale = 1.0
            self.opts = {"scales": [1.0]}

        def forward(self, x):
            h = self.lin(x)
            if case == "cfg_object":
                return h * self.cfg.scale
            if case == "nested":
                return h * self.opts["scales"][0]
            return h

    B.set_seed(0)
    net = Net()
    net(lk.tensor(np.zeros((1, 6), np.float32)))
    net = net.to(dev)
    cfg = {"model": net, "scales": [1.0]}

    def f(x):
        if case == "read_not_called":
            return (net.lin(x) / net.temp).sum()
        if case == "mixed_global":
            return (cfg["model"].lin(x) * cfg["scales"][0]).sum()
        return net(x).sum()

    def change():
        if case == "read_not_called":
            net.temp = 4.0
        elif case == "cfg_object":
            net.cfg.scale = 4.0
        elif case == "nested":
            net.opts["scales"][0] = 4.0
        else:
            cfg["scales"][0] = 4.0

    c = lk.compile(f)
    x = lk.tensor(np.random.default_rng(0).standard_normal((4, 6)).astype(np.float32),
                  device=dev)
    for _ in range(3):
        c(x)
    change()
    want = float(f(x).item())
    got = [float(c(x).item()) for _ in range(3)]
    assert got == [want] * 3, (got, want)
    assert c.stats["retraces"] == 1, c.stats


def test_a_tensor_given_to_host_is_a_clear_error(dev):
    def f(x):
        return lk.Tensor(lk.compile.host(lambda a: a * 2, x))

    with pytest.raises(TypeError, match=r"argument 0 is a Tensor of shape \(2,\); pass its "
                                        r"array \(x.data\)"):
        lk.compile(f)(lk.tensor(np.ones(2, np.float32), device=dev))
