"""What a compiled step reads, reached where the guards did not look: a user's brick's forward
(a global it reads), a Sequence's layers changed in place, a model passed as a default
argument (the defaults' tuple was a new object at each read: never replayed), a parameter
frozen (the message says so). Each against the same steps run eagerly on the same state."""

from __future__ import annotations

import numpy as np
import pytest

import labkit as lk
import labkit.bricks as B
import labkit.functions as F

TEMP = 1.0


class Scaled(B.Brick):
    """A user's brick whose forward reads a module global."""

    def __init__(self, inner):
        super().__init__()
        self.inner = inner

    def forward(self, x):
        return self.inner(x) * TEMP


def _run(dev, compiled, make, change, head=lambda z: z, calls=8):
    """Losses and parameters of ``calls`` steps; ``change(model, i)`` before call i;
    ``head(logits)`` before the loss."""
    global TEMP
    TEMP = 1.0
    rng = np.random.default_rng(0)
    m = make()
    m.to(dev)
    for p in m.params().values():
        p.data = lk.tensor(rng.standard_normal(p.shape).astype(np.float32) * 0.3,
                           device=dev).data
    opt = lk.optimizers.SGD(lr=0.1).setup(m)

    def step(x, y, model=m, o=opt):  # NOTE: objects as default arguments
        o.zero_grad()
        loss = F.softmax_cross_entropy(head(model(x)), y)
        loss.backward()
        o.update()
        return loss

    f = lk.compile(step) if compiled else step
    d = np.random.default_rng(1)
    out = []
    for i in range(calls):
        change(m, i)
        x = lk.tensor(d.standard_normal((4, 5)).astype(np.float32), device=dev)
        out.append(float(f(x, d.integers(0, 3, 4)).item()))
    return out, [p.numpy() for p in m.params().values()], getattr(f, "stats", None)


def _same(dev, make, change, head=lambda z: z):
    (le, pe, _), (lc, pc, st) = (_run(dev, c, make, change, head) for c in (False, True))
    np.testing.assert_allclose(lc, le, rtol=1e-6)
    for a, b in zip(pc, pe):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)
    return st


def _set_temp(m, i):
    global TEMP
    if i == 4:
        TEMP = 3.0


def test_objects_as_default_arguments_replay(dev):
    st = _same(dev, lambda: B.Sequence(B.Linear(5, 8), B.ReLU(), B.Linear(8, 3)),
               lambda m, i: None)
    assert (st["traces"], st["replays"]) == (2, 6), st


def test_a_global_read_by_a_users_brick_is_guarded_nested_or_not(dev):
    for make in (lambda: Scaled(B.Linear(5, 3)),
                 lambda: B.Sequence(B.Linear(5, 5), Scaled(B.Linear(5, 3)))):
        st = _same(dev, make, _set_temp)
        assert st["retraces"] == 1 and "the global TEMP (read by forward)" in st["reasons"][0]


def test_a_sequences_layers_changed_in_place_retrace(dev):
    def make():
        return B.Sequence(B.Linear(5, 8), B.ReLU(), B.Linear(8, 3))

    for change in (lambda m, i: m.layers.insert(2, F.tanh) if i == 4 else None,
                   lambda m, i: m.layers.__setitem__(1, F.tanh) if i == 4 else None):
        st = _same(dev, make, change)
        assert st["retraces"] == 1 and "its layers changed" in st["reasons"][0], st


def test_a_frozen_parameter_is_named_as_such(dev):
    def freeze(m, i):
        if i == 4:
            next(iter(m.params().values())).requires_grad = False

    st = _same(dev, lambda: B.Sequence(B.Linear(5, 8), B.ReLU(), B.Linear(8, 3)), freeze)
    assert st["retraces"] == 1 and "requires_grad=False, True when traced" in st["reasons"][0]


class _Cfg:
    scale = 1.0  # NOTE: a class attribute

    @classmethod
    def factor(cls):
        return FACTOR


FACTOR = 1.0


def _scale_by(f):
    return lambda z: z * f()


def _read_cases():
    """(name, state, how the step scales its logits from the state, the change at call 4)."""
    def set_global(v):
        global FACTOR
        FACTOR = v

    yield ("item attribute", {"c": _Cfg()}, lambda s, z: z * s["c"].scale,
           lambda s: setattr(s["c"], "scale", 3.0))
    yield ("class attribute", {"c": _Cfg()}, lambda s, z: z * s["c"].scale,
           lambda s: setattr(_Cfg, "scale", 3.0))
    yield ("classmethod reading a global", {"c": _Cfg()}, lambda s, z: z * s["c"].factor(),
           lambda s: set_global(3.0))
    yield ("function in a list reading a global", {"hooks": [_scale_by(lambda: FACTOR)]},
           lambda s, z: s["hooks"][0](z), lambda s: set_global(3.0))
    yield ("set membership", {"flags": {"cold"}},
           lambda s, z: z * (3.0 if "hot" in s["flags"] else 1.0),
           lambda s: s["flags"].add("hot"))


@pytest.mark.parametrize("case", [c[0] for c in _read_cases()])
def test_values_reached_through_containers_and_classes_are_guarded(dev, case):
    name, state0, body, change = next(c for c in _read_cases() if c[0] == case)
    state = {}

    def make():  # NOTE: each run from the same state (refilled: the head reads this dict)
        global FACTOR
        FACTOR, _Cfg.scale = 1.0, 1.0
        state.clear()
        state.update({k: (v if k != "c" else _Cfg()) if not isinstance(v, set) else set(v)
                      for k, v in state0.items()})
        return B.Linear(5, 3)

    try:
        st = _same(dev, make, lambda m, i: change(state) if i == 4 else None,
                   lambda z: body(state, z))
    finally:
        _Cfg.scale = 1.0
    assert st["retraces"] == 1, st


def test_a_random_generator_in_a_container_is_refused():
    R = {"rng": np.random.default_rng(0)}

    @lk.compile
    def step(x):
        y = lk.tensor(x)
        return F.sum(y * 2.0 if R["rng"].random() < 0.5 else y)

    with pytest.raises(lk.compile.CompileError, match="draws random numbers from an item of R"):
        for _ in range(3):
            step(np.ones(3, np.float32))


class PerOutput(B.Brick):
    """A user's brick with a list setting: scales per output, changed in place."""

    def __init__(self, inner):
        super().__init__()
        self.inner = inner
        self.scales = [1.0]

    def forward(self, x):
        return self.inner(x) * self.scales[0]


def test_a_bricks_list_setting_changed_in_place_retraces(dev):
    def change(m, i):
        if i == 4:
            m.scales[0] = 3.0

    st = _same(dev, lambda: PerOutput(B.Linear(5, 3)), change)
    assert st["retraces"] == 1 and "PerOutput.scales was [1.0]" in st["reasons"][0], st
