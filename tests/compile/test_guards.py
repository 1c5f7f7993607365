"""Python values a compiled step reads (globals, its closure, attributes its code names, default
arguments) are checked at each call: a change after the step compiled traces again instead of
replaying the traced value. And an argument that is a parameter the step also reads elsewhere."""

import types

import numpy as np
import pytest

import labkit as lk
import labkit.bricks as B
import labkit.functions as F
import labkit.optimizers as O
from labkit.errors import CompileError

SCALE = 2.0
CFG = types.SimpleNamespace(scale=2.0, inner=types.SimpleNamespace(k=2.0))
FLAGS = {"double": False}


def _helper(x):
    return x * CFG.inner.k


class _Holder:
    factor = 2.0

    def __init__(self):
        self.alpha = 2.0

    @lk.compile
    def step(self, x):
        return F.sum(x * self.alpha)


def _cases():
    """(name, the step, a change, how to undo it): each step is sum(x * 2) before the change
    and sum(x * 5) after it."""
    scale = [2.0]

    def closure(x):
        return F.sum(x * scale[0])

    def glob(x):
        return F.sum(x * SCALE)

    def default(x, k=2.0):
        return F.sum(x * k)

    def attr(x):
        return F.sum(x * CFG.scale)

    def nested(x):
        return F.sum(_helper(x))

    def cls(x):
        return F.sum(x * _Holder.factor)

    def branch(x):
        return F.sum(x * 5.0) if FLAGS["double"] else F.sum(x * 2.0)

    holder = _Holder()
    g = globals()
    return {
        "closure": (closure, lambda: scale.__setitem__(0, 5.0), None),
        "global": (glob, lambda: g.__setitem__("SCALE", 5.0), lambda: g.__setitem__("SCALE", 2.0)),
        "default": (default, lambda: setattr(default, "__defaults__", (5.0,)), None),
        "attribute": (attr, lambda: setattr(CFG, "scale", 5.0), lambda: setattr(CFG, "scale", 2.0)),
        "helper's global": (nested, lambda: setattr(CFG.inner, "k", 5.0),
                            lambda: setattr(CFG.inner, "k", 2.0)),
        "class attribute": (cls, lambda: setattr(_Holder, "factor", 5.0),
                            lambda: setattr(_Holder, "factor", 2.0)),
        "branch": (branch, lambda: FLAGS.__setitem__("double", True),
                   lambda: FLAGS.__setitem__("double", False)),
        "method's self": (holder.step, lambda: setattr(holder, "alpha", 5.0), None),
    }


@pytest.mark.parametrize("name", list(_cases()))
def test_a_python_value_changed_after_compiling_traces_again(dev, name):
    fn, change, undo = _cases()[name]
    step = fn if hasattr(fn, "stats") or isinstance(fn, types.MethodType) else lk.compile(fn)
    x = lk.tensor(np.ones(3, np.float32), device=dev)
    try:
        assert [float(step(x).item()) for _ in range(3)] == [6.0] * 3
        change()
        assert [float(step(x).item()) for _ in range(3)] == [15.0] * 3
    finally:
        if undo is not None:
            undo()
    stats = step.stats if hasattr(step, "stats") else step.__func__.stats
    assert stats["retraces"] >= 1 and stats["replays"] >= 1
    why = stats["reasons"][-1]
    assert "when traced, is" in why and ("5.0" in why or "True" in why), why


def test_a_step_changing_a_python_value_it_reads_is_refused():
    counter = {"calls": 0}

    @lk.compile
    def step(x):
        counter["calls"] += 1  # a replay would not count
        return F.sum(x)

    x = lk.tensor(np.ones(3, np.float32))
    step(x)
    with pytest.raises(CompileError, match=r"changes counter .*a replay runs no Python"):
        step(x)


def _mlp_step(dev, lr_schedule, returned):
    B.set_seed(0)
    model = B.MLP([4, 8, 3]).to(dev)
    opt = O.SGD(lr=0.1).setup(model)

    def step(x, y):
        opt.zero_grad()
        loss = F.softmax_cross_entropy(model(lk.tensor(x, device=dev)), y)
        loss.backward()
        opt.update()
        return returned(loss, opt)

    def run(fn):
        rng = np.random.default_rng(1)
        out = []
        for i in range(6):
            r = fn(rng.standard_normal((5, 4)).astype(np.float32), rng.integers(0, 3, 5))
            out.append({k: (v.numpy() if isinstance(v, lk.Tensor) else v) for k, v in r.items()})
            if lr_schedule:
                opt.lr = 0.1 * 0.5 ** (i // 2)
        return out

    return step, run


def test_python_values_returned_follow_what_they_were_read_from(dev):
    def returned(loss, opt):
        return {"loss": loss, "lr": opt.lr, "none": None, "const": 1.5}

    step, run = _mlp_step(dev, True, returned)
    eager = run(step)
    step, run = _mlp_step(dev, True, returned)
    compiled = lk.compile(step)
    got = run(compiled)
    assert [r["lr"] for r in got] == [r["lr"] for r in eager] == [0.1] * 3 + [0.05] * 2 + [0.025]
    for a, b in zip(eager, got):
        assert a["none"] is b["none"] is None and a["const"] == b["const"] == 1.5
        np.testing.assert_array_equal(a["loss"], b["loss"])
    assert compiled.stats["replays"] >= 1


def test_a_returned_python_value_nothing_checks_is_refused():
    seen = [lk.tensor(np.ones(2, np.float32))] * 5

    @lk.compile
    def step(x):
        return F.sum(x), len(seen)  # the list's length: not checked at each call

    with pytest.raises(CompileError, match=r"returns the Python int 5 \(in the result\[1\]\).*"
                                           r"replay would return again"):
        step(lk.tensor(np.ones(3, np.float32)))


def test_a_method_the_step_calls_is_read_for_what_it_reads(dev):
    class Clock:
        def __init__(self):
            self.n = 7

        def tick(self):
            return self.n

    clock = Clock()

    @lk.compile
    def step(x):
        return F.sum(x * float(clock.tick())), clock.tick()

    x = lk.tensor(np.ones(3, np.float32), device=dev)
    assert [step(x)[1] for _ in range(3)] == [7] * 3
    clock.n = 9
    assert [(float(r[0].item()), r[1]) for r in (step(x), step(x), step(x))] == [(27.0, 9)] * 3


def test_a_parameter_passed_in_and_read_by_its_brick_is_not_replayed_for_another(dev):
    B.set_seed(0)
    model = B.Linear(4, 4).to(dev)
    x = np.ones((2, 4), np.float32)
    other = lk.tensor(np.full((4, 4), 0.5, np.float32), device=dev, requires_grad=True)
    raw_other = lk.tensor(np.full((4, 4), 0.5, np.float32), device=dev).data

    def step(w, x):
        return F.sum(model(lk.tensor(x, device=dev))) + F.sum(lk.tensor(w, device=dev) * 2.0)

    want = [float(step(model.W, x).item()), float(step(other, x).item())]
    compiled = lk.compile(step)
    got = [float(compiled(model.W, x).item()) for _ in range(3)]
    got += [float(compiled(other, x).item()) for _ in range(3)]
    assert got == [want[0]] * 3 + [want[1]] * 3
    # the same with the parameter's array passed in
    compiled = lk.compile(step)
    got = [float(compiled(model.W.data, x).item()) for _ in range(3)]
    got += [float(compiled(raw_other, x).item()) for _ in range(3)]
    assert got == [want[0]] * 3 + [want[1]] * 3
    why = compiled.stats["reasons"][-1]
    assert "the data of a tensor of shape (4, 4) the step also reads" in why, why


def test_a_model_replaced_in_a_list_or_dict_the_step_reads_traces_again(dev):
    B.set_seed(0)
    a, b = B.MLP([4, 3]).to(dev), B.MLP([4, 3]).to(dev)
    nets, named = [a], {"net": a}
    x = np.ones((2, 4), np.float32)

    @lk.compile
    def from_list(x):
        return F.sum(nets[0](lk.tensor(x, device=dev)))

    @lk.compile
    def from_dict(x):
        return F.sum(named["net"](lk.tensor(x, device=dev)))

    want = [float(F.sum(n(lk.tensor(x, device=dev))).item()) for n in (a, b)]
    for step, swap in ((from_list, lambda: nets.__setitem__(0, b)),
                       (from_dict, lambda: named.__setitem__("net", b))):
        got = [float(step(x).item()) for _ in range(3)]
        swap()
        got += [float(step(x).item()) for _ in range(3)]
        assert got == [want[0]] * 3 + [want[1]] * 3
        assert "holds other items than when traced" in step.stats["reasons"][-1]


def _accumulating(dev, compiled, arg=False):
    """A step without zero_grad (gradients accumulate over calls); outside it, an update and
    zero_grad after every second call. Each call's loss or the error it raised, and the
    parameters at the end."""
    B.set_seed(0)
    model = B.MLP([4, 8, 3]).to(dev)
    opt = O.SGD(lr=0.1).setup(model)
    w = lk.tensor(np.ones((2, 4), np.float32), device=dev, requires_grad=True)

    def step(x, y, w):
        h = lk.tensor(x, device=dev) * w if arg else lk.tensor(x, device=dev)
        loss = F.softmax_cross_entropy(model(h), y)
        loss.backward()
        return loss

    fn = lk.compile(step) if compiled else step
    rng = np.random.default_rng(0)
    out = []
    for i in range(8):
        x, y = rng.standard_normal((2, 4)).astype(np.float32), rng.integers(0, 3, 2)
        try:
            out.append(float(fn(x, y, w).item()))
        except CompileError as e:
            out.append(str(e))
        if i % 2:
            opt.update()
            opt.zero_grad()
            w.grad = None
    return out, {k: p.numpy() for k, p in model.params().items()}, w.grad


@pytest.mark.parametrize("arg", [False, True], ids=["parameters", "argument"])
def test_gradients_accumulated_over_calls_are_refused_never_lost(dev, arg):
    """A program traced while the .grad were None (backward set them) replayed when they
    were set lost what they held; now such a call traces again, and the trace refuses to
    read a .grad from before the call. The parameters end as the eager run's."""
    eager, pe, _ = _accumulating(dev, False, arg)
    got, pc, _ = _accumulating(dev, True, arg)
    for e, c in zip(eager, got):
        assert c == e or "reads the .grad a tensor of shape" in c, (e, c)
    assert any(isinstance(c, str) for c in got) and got[0] == eager[0]
    for k in pe:
        np.testing.assert_array_equal(pe[k], pc[k], err_msg=k)


def test_an_optimizer_set_up_again_is_not_replayed_with_its_old_parameters(dev):
    B.set_seed(0)
    model = B.MLP([4, 3]).to(dev)
    opt = O.SGD(lr=0.1).setup(model)
    params = dict(model.params())

    @lk.compile
    def step(x, y):
        for p in params.values():
            p.grad = None
        loss = F.softmax_cross_entropy(model(lk.tensor(x, device=dev)), y)
        loss.backward()
        opt.update()
        return loss

    x, y = np.ones((2, 4), np.float32), np.array([0, 1])
    for _ in range(3):
        step(x, y)
    opt.setup({k: v for k, v in params.items() if k.endswith(".b")})  # W is left alone
    w = next(v for k, v in params.items() if k.endswith(".W")).numpy().copy()
    step(x, y)
    assert "(setup() again?)" in step.stats["reasons"][-1]
    np.testing.assert_array_equal(next(v for k, v in params.items() if k.endswith(".W")).numpy(), w)


def test_a_parameter_moved_to_another_device_traces_again():
    """Its data replaced by an array of the same shape and dtype on another device: the
    replay ran NumPy ufuncs on an OpenCL array (a TypeError); it traces again, and the
    eager call says what is wrong."""
    from labkit.errors import DeviceMismatchError

    B.set_seed(0)
    net = B.MLP([4, 3])
    step = lk.compile(lambda x: F.sum(F.relu(net(lk.tensor(x)))))
    x = np.ones((2, 4), np.float32)
    for _ in range(3):
        step(x)
    p = next(iter(net.params().values()))
    p.data = lk.tensor(p.data, device="cl").data
    with pytest.raises(DeviceMismatchError, match="different devices"):
        step(x)
    assert "on another device than when traced" in step.stats["reasons"][-1]


def test_another_keyword_argument_is_explained_and_run_takes_only_its_calls():
    step = lk.compile(lambda x, *, k=1.0: F.sum(lk.tensor(x) * k))
    x = np.ones(2, np.float32)
    step(x), step(x), step(x, k=2.0)
    assert step.stats["reasons"] == [
        "the arguments have another structure: keyword arguments (or dict keys) () when "
        "traced, ('k',) now"]
    batches = iter([np.full(2, i, np.float32) for i in range(5)])
    got = step.run(batches, n_calls=2) + step.run(batches, n_calls=2) + step.run(batches)
    assert [float(r.item()) for r in got] == [0.0, 2.0, 4.0, 6.0, 8.0]  # no batch skipped


def _loop(dev, compiled):
    from labkit import training as T
    from labkit.data import DataStream

    from ..training.helpers import dataset

    B.set_seed(1)
    model = B.Sequence(B.Flatten(), B.Linear(16, 8), B.Tanh(), B.Dropout(0.2),
                       B.Linear(8, 2)).to(dev)
    opt = O.Adam(lr=O.StepDecay(0.01, 8, 0.5)).setup(model)

    def loss_fn(model, batch):
        logits = model(lk.tensor(batch["features"], device=dev))
        return {"loss": F.softmax_cross_entropy(logits, batch["targets"]), "lr": opt.lr,
                "n": len(batch["targets"])}

    loop = T.MainLoop(model, opt, DataStream(dataset(n=20), batch_size=8, shuffle=True, seed=5),
                      loss_fn, extensions=[T.FinishAfter(epochs=8)], compile=compiled)
    loop.recorder.enabled = False
    loop.run()
    return loop


def test_a_loop_returning_its_scheduled_lr_with_a_short_last_batch_trains_like_eager(dev):
    """The short last batch of each epoch traces at epochs 1 and 2, when the schedule's lr
    differed: that first trace is stale (the second was refused: 'returned something else'),
    and the lr returned follows the schedule (it traces again when it changes, and when the
    call's update will change it: 8 updates a decay, so that each rate replays)."""
    eager, comp = _loop(dev, False), _loop(dev, True)
    assert [(r["loss"], r["lr"], r["n"]) for r in eager.log.rows] == [
        (r["loss"], r["lr"], r["n"]) for r in comp.log.rows]
    assert len({r["lr"] for r in comp.log.rows}) == 3 and comp.compiled.stats["replays"] >= 2
    pa, pc = eager.model.state_dict(), comp.model.state_dict()
    for k in pa:
        np.testing.assert_array_equal(pa[k], pc[k], err_msg=k)


def test_a_difference_in_what_two_calls_returned_is_named():
    calls = [0]

    @lk.compile
    def step(x):
        calls[0] += 1
        return {"loss": F.sum(lk.tensor(x)), "seen": (1, calls[0] * 10)}

    x = np.ones(2, np.float32)
    step(x)
    with pytest.raises(CompileError, match=r"returned something else: result\['seen'\]\[1\] was "
                                           r"10 then 20"):
        step(x)


def test_a_list_the_step_appends_to_is_refused_and_one_appended_to_outside_traces_again(dev):
    """A step that appends to a list it reads would not append at a replay (its list would
    hold two items after ten calls): refused, naming the fix; a list appended to between
    calls is read for its items, and the step traces again."""
    seen, history = [], []

    @lk.compile
    def step(x):
        seen.append(x)
        return F.sum(lk.tensor(x, device=dev))

    x = np.ones(3, np.float32)
    step(x)
    with pytest.raises(CompileError, match=r"changes seen .*held 1 items when the call began, "
                                           r"2 when it ended.*lk.compile.host"):
        step(x)

    @lk.compile
    def branch(x):
        y = lk.tensor(x, device=dev)
        return F.sum(y * 2.0) if len(history) > 1 else F.sum(y)

    assert [float(branch(x).item()) for _ in range(4)] == [3.0] * 4
    history += [lk.tensor(x)] * 2  # a list of tensors: by its items
    assert [float(branch(x).item()) for _ in range(3)] == [6.0] * 3
    assert branch.stats["reasons"][-1].startswith("history (in the closure of branch) holds")


def test_python_and_numpy_random_numbers_drawn_outside_host_are_refused(dev):
    import random

    rng = np.random.default_rng(0)
    x = lk.tensor(np.ones(3, np.float32), device=dev)

    def coin(x):  # a branch taken at random: replays always took the traced one
        return F.sum(F.dropout(x, 0.5)) if random.random() < 0.5 else F.sum(x)

    def legacy(x):
        return F.sum(x * float(np.random.rand() < 2.0))

    def drawn(x):
        return F.sum(x + lk.tensor(rng.standard_normal(3).astype(np.float32), device=dev))

    for fn, what in ((coin, "random.random"), (legacy, "numpy.random.rand"),
                     (drawn, r"rng \(in the closure of drawn\)")):
        with pytest.raises(CompileError, match=f"draws random numbers from {what} outside"):
            lk.compile(fn)(x)

    def noise():
        return rng.standard_normal(3).astype(np.float32)

    @lk.compile
    def hosted(x):  # drawn again at each replay
        return F.sum(x + lk.tensor(lk.compile.host(noise), device=dev))

    got = [float(hosted(x).item()) for _ in range(4)]
    assert len(set(got)) == 4 and hosted.stats["replays"] == 2


def test_a_refusal_after_the_call_ran_says_its_update_was_made(dev):
    B.set_seed(0)
    model = B.Linear(4, 2).to(dev)
    opt = O.SGD(lr=0.1).setup(model)
    # NOTE: an iterator the step advances: the second call's branch differs, with nothing
    # changed between the calls that a guard sees (that would trace the call again)
    extra = iter([False, True, False, False, False])

    @lk.compile
    def step(x):
        opt.zero_grad()
        loss = F.sum(model(lk.tensor(x, device=dev)))
        if next(extra):
            loss = loss * 2.0
        loss.backward()
        opt.update()
        return loss

    x = np.ones((3, 4), np.float32)
    step(x)
    before = model.W.numpy().copy()
    with pytest.raises(CompileError, match=r"did not do the same thing.*This call ran to its end "
                                           r"as an eager call does.*traced again"):
        step(x)
    assert not np.array_equal(model.W.numpy(), before)  # its update was made
    assert [float(step(x).item()) for _ in range(3)]  # then: traced, traced, replayed
    assert step.stats["replays"] == 1


def test_backward_into_an_argument_computed_before_the_call_is_refused(dev):
    B.set_seed(0)
    first, head = B.Linear(4, 8).to(dev), B.Linear(8, 3).to(dev)
    x, y = lk.tensor(np.ones((2, 4), np.float32), device=dev), np.array([0, 2])

    @lk.compile
    def step(h, y):
        for p in head.params().values():
            p.grad = None
        loss = F.softmax_cross_entropy(head(h), y)
        loss.backward()
        return loss

    with pytest.raises(CompileError, match=r"back-propagates into argument array 0, a tensor of "
                                           r"shape \(2, 8\) computed before the call \(by tanh\)"):
        step(F.tanh(first(x)), y)
    assert first.W.grad is not None  # the call ran (as eager)
    first.W.grad = None
    for _ in range(3):  # detached: no gradient goes out of the step
        step(F.tanh(first(x)).detach(), y)
    assert first.W.grad is None and step.stats["replays"] == 1
    assert first.W.creator is None and not getattr(F.tanh(first(x)).creator, "out_hooks", None)


def test_numbers_returned_from_constants_and_shapes_whatever_their_type():
    @lk.compile
    def step(x):
        return F.sum(lk.tensor(x)), np.float32(0.5), np.int64(x.shape[0]), float(x.size), None

    x = np.ones((3, 2), np.float32)
    assert [step(x)[1:] for _ in range(3)] == [(0.5, 3, 6.0, None)] * 3


def test_a_slot_is_guarded_and_an_object_that_cannot_be_read_is_left_alone():
    class Slots:
        __slots__ = ("a",)

        def __init__(self):
            self.a = 2.0

    class Opaque:
        def __getattr__(self, name):
            raise RuntimeError(f"no {name}")

        @property
        def b(self):
            raise KeyError("b")

    s, o = Slots(), Opaque()

    @lk.compile
    def step(x):
        assert o is not None and (o.b if False else True)
        return F.sum(lk.tensor(x) * s.a)

    x = np.ones(2, np.float32)
    assert [float(step(x).item()) for _ in range(3)] == [4.0] * 3
    s.a = 3.0
    assert float(step(x).item()) == 6.0 and "Slots.a was 2.0" in step.stats["reasons"][-1]


LOG = []


def test_a_side_effect_run_through_host_happens_at_every_call(dev):
    """The fix the refusals name for a side effect: ``lk.compile.host(fn, ..., effect=True)``
    runs at every replay, so what it changes (a global list, a closure's) is not a guarded
    value of the step's: it is not refused, and it grows as in eager calls."""
    w = lk.tensor(np.ones(3, np.float32), device=dev, requires_grad=True)
    LOG.clear()

    @lk.compile
    def step(x):
        lk.compile.host(lambda a: LOG.append(float(np.asarray(a.get() if hasattr(a, "get")
                                                                else a).sum())),
                        x.data, effect=True)
        return (w * x).sum()

    def make():
        seen = []

        @lk.compile
        def inner(x):
            lk.compile.host(lambda a: seen.append(a.shape), x.data, effect=True)
            return (w * x).sum()
        return inner, seen

    inner, seen = make()
    for i in range(5):
        x = lk.tensor(np.full(3, i, np.float32), device=dev)
        step(x)
        inner(x)
    assert LOG == [0.0, 3.0, 6.0, 9.0, 12.0] and step.stats["replays"] == 3
    assert seen == [(3,)] * 5 and inner.stats["replays"] == 3


#: a global named as an attribute the step below reads (x.T, x.shape): not a global it reads
T = {"calls": []}
shape = [0]


def test_a_global_named_as_an_attribute_the_step_reads_is_not_guarded(dev):
    """``x.T`` names an attribute, not the global ``T``: a module's ``T`` (here a dict of
    timings that grows at every call, as a benchmark's did) changing between calls traced
    the step again at every call, with a CompileWarning. A global the step does read (and
    its nested function) is still guarded."""
    import warnings

    def step(x):
        def inner(y):
            return y * SCALE
        return inner((x.T @ x).sum() * x.shape[0])

    f = lk.compile(step)
    x = lk.tensor(np.ones((3, 2), np.float32), device=dev)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for k in range(6):
            T["calls"].append(k)
            shape[0] = k
            assert f(x).item() == 72.0
    assert f.stats["traces"] == 2 and f.stats["retraces"] == 0, f.stats
    global SCALE
    old, SCALE = SCALE, 3.0
    try:
        assert f(x).item() == 108.0 and f.stats["retraces"] == 1  # NOTE: SCALE, in inner
    finally:
        SCALE = old


@pytest.mark.parametrize("how", ["import", "import_as", "from_import"])
def test_a_module_the_step_imports_is_read_for_what_it_reads(dev, how, monkeypatch):
    """``import cfg`` inside the step (or ``from cfg import SCALE``): the module's attributes
    the step reads are checked at each call, as a module global's are (they were only by
    accident, when the module was a global of the step's module too)."""
    import sys

    mod = types.ModuleType("lk_test_step_cfg")
    mod.SCALE = 2.0
    monkeypatch.setitem(sys.modules, "lk_test_step_cfg", mod)

    def step(x):
        if how == "import":
            import lk_test_step_cfg
            return (x * lk_test_step_cfg.SCALE).sum()
        if how == "import_as":
            import lk_test_step_cfg as c
            return (x * c.SCALE).sum()
        from lk_test_step_cfg import SCALE as s
        return (x * s).sum()

    f = lk.compile(step)
    x = lk.tensor(np.ones(3, np.float32), device=dev)
    for _ in range(3):
        assert f(x).item() == 6.0
    mod.SCALE = 5.0
    assert f(x).item() == 15.0 and f.stats["retraces"] == 1, f.stats


G = 2.0


class _Helpers:
    @staticmethod
    def sm(y):
        return y * G

    @classmethod
    def cm(cls, y):
        return y * G


@pytest.mark.parametrize("how", ["staticmethod", "classmethod"])
def test_a_static_or_class_method_helper_is_read_for_what_it_reads(how):
    """``Cls.sm(x)`` and ``Cls.cm(x)`` reading a global G: the classmethod's function was
    never read (a stale G replayed), the staticmethod was refused as "changed" (its guard
    compared the class's wrapper with the function getattr gives): both trace again."""
    global G

    def step(x):
        return (_Helpers.sm(x) if how == "staticmethod" else _Helpers.cm(x)).sum()

    f = lk.compile(step)
    x = lk.tensor(np.ones(3, np.float32))
    old = G
    try:
        for _ in range(3):
            assert f(x).item() == 6.0
        G = 5.0
        assert f(x).item() == 15.0 and f.stats["retraces"] == 1, f.stats
    finally:
        G = old
