"""The ways a traced-and-replayed step can silently give a wrong result (tinygrad's JIT lists
them as its own pitfalls), each refused, guarded, or shown to replay correctly."""

import re
import warnings

import numpy as np
import pytest

import labkit as lk
import labkit.bricks as B
import labkit.functions as F
import labkit.optimizers as O
from labkit.compile import CompileWarning
from labkit.errors import CompileError


def t(values, dev, rg=False):
    return lk.tensor(np.asarray(values, np.float32), device=dev, requires_grad=rg)


def line_of(marker):
    """``test_traps.py:N``, N the line of this file that carries ``marker`` in a comment."""
    with open(__file__) as f:
        n = next(i for i, s in enumerate(f, 1) if s.rstrip().endswith(f"# {marker}"))
    return f"test_traps.py:{n}"


# ---- Python constants and branches ---------------------------------------------------------

SCALE = 2.0


def test_global_constant_changed_between_calls_1_and_2_is_traced_again(dev):
    """A value the step reads, changed between the first and the second call (before any
    program is made): the first trace is stale, and the second call is traced anew, where it
    was refused as a step that "did not do the same thing" (a MainLoop whose extension set
    such a value between epochs stopped on it)."""
    global SCALE

    @lk.compile
    def step(x):
        return x * SCALE  # scaled

    SCALE = 2.0
    try:
        assert step(t([1, 2], dev)).numpy().tolist() == [2, 4]
        SCALE = 3.0
        assert [step(t([1, 2], dev)).numpy().tolist() for _ in range(3)] == [[3, 6]] * 3
    finally:
        SCALE = 2.0
    assert step.stats["replays"] == 1
    assert "the global SCALE (read by step) was 2.0 when traced, is 3.0" in \
        step.stats["reasons"], step.stats["reasons"]


def test_closure_constant_changed_between_calls_1_and_2_is_traced_again(dev):
    scale = [2.0]

    @lk.compile
    def step(x):
        return F.sum(x + scale[0])

    assert float(step(t([1, 2], dev)).item()) == 7.0
    scale[0] = 5.0
    assert [float(step(t([1, 2], dev)).item()) for _ in range(3)] == [13.0] * 3
    assert step.stats["replays"] == 1 and step.stats["retraces"] == 1


def test_constant_inside_a_host_computation_changed_between_calls_is_traced_again(dev):
    ratio = [0.5]
    g = lk.Generator(3, dev)

    @lk.compile
    def step(x):
        return F.dropout(x, ratio[0], generator=g)

    x = t(np.ones(4096), dev)
    step(x)
    ratio[0] = 0.1
    kept = [float((step(x).numpy() != 0).mean()) for _ in range(3)]
    assert all(0.85 < k < 0.95 for k in kept), kept  # NOTE: 0.1 dropped, not 0.5
    assert step.stats["replays"] == 1 and step.stats["retraces"] == 1


def test_a_step_that_changes_what_it_reads_between_calls_1_and_2_is_still_refused(dev):
    """The values as the first call left them are what the second must find: a counter the
    step itself increments does not make the first trace stale, and the step is refused."""
    n = {"calls": 0.0}

    @lk.compile
    def step(x):
        n["calls"] += 1.0
        return x * n["calls"]

    step(t([1, 2], dev))
    with pytest.raises(CompileError):
        step(t([1, 2], dev))


def test_python_number_argument_is_guarded(dev):
    step = lk.compile(lambda x, s: x * s + 1.0)
    x = t([1, 2, 3], dev)
    for s in [2.0, 2.0, 2.0, 3.0, 3.0, 3.0, 2.0]:
        np.testing.assert_array_equal(step(x, s).numpy(), np.array([1, 2, 3], np.float32) * s + 1)
    st = step.stats
    # 2.0 traced twice then replays; 3.0 retraces (traced twice, replays once); 2.0 replays
    assert st["traces"] == 4 and st["replays"] == 3 and st["retraces"] == 1, st
    assert st["reasons"] == ["an argument was the value 2.0, is the value 3.0"]


def test_branch_on_tensor_value_is_refused_naming_the_line(dev):
    @lk.compile
    def step(x):
        loss = (x * x).sum()
        if loss.item() > 1:  # branch on item
            loss = loss * 2
        return loss

    with pytest.raises(CompileError) as e:
        step(t([1, 2], dev))
    msg = str(e.value)
    assert line_of("branch on item") in msg, msg
    assert "step reads the values of a tensor" in msg and "loss.item()" in msg


def test_bool_of_a_tensor_is_refused_naming_the_line(dev):
    @lk.compile
    def step(x):
        if x.sum() > 0:  # branch on bool
            return x * 2
        return x

    with pytest.raises(CompileError, match=line_of("branch on bool")):
        step(t([1, 2], dev))


# ---- values computed from the data outside ops ----------------------------------------------

@pytest.mark.parametrize("fn", [lambda x: F.abs(x), lambda x: F.where(x > 0, x, x * 0.5),
                                lambda x: F.maximum(x, 0.0 * x), lambda x: F.max(x)],
                         ids=["abs", "where_gt", "maximum", "max"])
def test_data_dependent_mask_is_not_frozen(fn, dev):
    def step(x):
        fn(x).sum().backward()
        return x.grad

    comp = lk.compile(step)
    # calls 1 and 2 have the same sign pattern (and argmax), call 3 another one
    for v in ([1.0, 2.0], [3.0, 4.0], [-3.0, -1.0], [4.0, -5.0]):
        got = comp(t(v, dev, rg=True))
        want = step(t(v, dev, rg=True))
        np.testing.assert_array_equal(got.numpy(), want.numpy(), err_msg=f"input {v}")


def test_generator_made_inside_the_step(dev):
    """A generator made inside the step is a new object at each eager call (the same mask
    every time); a replay cannot make one, so the step is refused at its second call, naming
    the mask (never replayed with the second call's generator advancing)."""
    def step(x):
        return F.dropout(x, 0.5, generator=lk.Generator(7, dev))

    comp = lk.compile(step)
    x = t(np.ones(32), dev)
    np.testing.assert_array_equal(comp(x).numpy(), step(x).numpy())
    with pytest.raises(CompileError, match=r"op 0 \(dropout\.mask, test_traps\.py:\d+\) was "
                                           r"made with other constants"):
        comp(x)


def test_value_read_after_an_in_place_update(dev):
    def make():
        B.set_seed(0)
        m = B.Linear(3, 2).to(dev)
        opt = O.SGD(lr=0.5).setup(m)

        def step(x):
            opt.zero_grad()
            loss = (m(x) ** 2).sum()
            loss.backward()
            opt.update()
            with lk.no_grad():
                after = (m(x) ** 2).sum()
            return loss, after
        return step

    comp, eager = lk.compile(make()), make()
    x = t(np.full((1, 3), 0.3), dev)
    for k in range(4):
        got, want = comp(x), eager(x)
        for a, b in zip(got, want):
            np.testing.assert_array_equal(a.numpy(), b.numpy(), err_msg=f"call {k + 1}")


def test_value_read_after_an_in_place_update_without_cse(dev):
    B.set_seed(0)
    m = B.Linear(3, 2).to(dev)
    opt = O.SGD(lr=0.5).setup(m)

    @lk.compile(cse=False)
    def step(x):
        opt.zero_grad()
        loss = (m(x) ** 2).sum()
        loss.backward()
        opt.update()
        with lk.no_grad():
            after = (m(x) ** 2).sum()
        return loss, after

    x = t(np.full((1, 3), 0.3), dev)
    prev_after = None
    for _ in range(4):
        loss, after = step(x)
        if prev_after is not None:
            assert loss.item() == prev_after  # this call's loss is the last call's "after"
        prev_after = after.item()


# ---- results and replay buffers ----------------------------------------------------------------

def test_results_are_not_overwritten_by_later_calls(dev):
    w = t([0.5, -1.0, 2.0], dev, rg=True)

    @lk.compile
    def step(x):
        w.grad = None
        y = F.tanh(x * w)
        y.sum().backward()
        return y, w.grad, x.grad, {"sum": y.sum()}

    rng = np.random.default_rng(0)
    results, copies = [], []
    for _ in range(5):
        r = step(t(rng.standard_normal(3), dev, rg=True))
        results.append(r)
        copies.append([a.numpy().copy() for a in (r[0], r[1], r[2], r[3]["sum"])])
    assert step.stats["replays"] == 3
    for k, (r, c) in enumerate(zip(results, copies)):
        for a, b in zip((r[0], r[1], r[2], r[3]["sum"]), c):
            np.testing.assert_array_equal(a.numpy(), b, err_msg=f"a result of call {k + 1}")
    assert results[2][0].data is not results[3][0].data


def test_constant_results_are_fresh_at_each_call(dev):
    @lk.compile
    def step(x):
        c = F.exp(lk.tensor([0.0, 0.0, 0.0], device=dev))
        return x * c, c

    x = t([1, 2, 3], dev)
    r = [step(x) for _ in range(3)]
    assert r[2][1].data is not step(x)[1].data
    r[2][1].data[...] = 5  # the caller owns its results
    np.testing.assert_array_equal(step(x)[0].numpy(), [1, 2, 3])


# ---- one compiled step, two models ---------------------------------------------------------

def test_step_taking_the_model_as_argument_retraces_for_another_model(dev):
    def step(model, opt, x, labels):
        opt.zero_grad()
        loss = F.softmax_cross_entropy(model(x), labels)
        loss.backward()
        opt.update()
        return loss

    comp = lk.compile(step)
    B.set_seed(1)
    a, b = B.MLP([4, 5, 3]).to(dev), B.MLP([4, 5, 3]).to(dev)
    b_eager = B.MLP([4, 5, 3]).to(dev)
    b_eager.load_state_dict(b.state_dict())
    opt_a, opt_b = O.SGD(lr=0.1).setup(a), O.SGD(lr=0.1).setup(b)
    opt_be = O.SGD(lr=0.1).setup(b_eager)
    rng = np.random.default_rng(0)
    data = [(t(rng.standard_normal((6, 4)), dev), rng.integers(0, 3, 6)) for _ in range(3)]
    for x, labels in data:
        comp(a, opt_a, x, labels)
    a_after = a.state_dict()
    for x, labels in data:
        loss = comp(b, opt_b, x, labels)
        np.testing.assert_array_equal(loss.numpy(), step(b_eager, opt_be, x, labels).numpy())
    for k, v in a.state_dict().items():  # B's calls did not touch A
        np.testing.assert_array_equal(v, a_after[k], err_msg=k)
    for k, v in b.state_dict().items():  # and updated B as eagerly
        np.testing.assert_array_equal(v, b_eager.state_dict()[k], err_msg=k)
    assert comp.stats["retraces"] == 1 and comp.stats["replays"] == 2, comp.stats
    assert comp.stats["reasons"] == [
        "an argument is another MLP object than the one traced (a program reads the tensors of "
        "the objects it was traced with)"]
    comp(a, opt_a, *data[0])  # back to A: its program replays, on A
    assert comp.stats["replays"] == 3 and comp.stats["retraces"] == 1


# ---- nested compiled functions -------------------------------------------------------------

def test_nested_compiled_function(dev):
    w = t([1.0, -2.0, 0.5], dev, rg=True)

    def inner(x):
        return F.sigmoid(x * w)

    def outer(x):
        w.grad = None
        y = (c_inner(x) * 3.0).sum()
        y.backward()
        return y, w.grad, c_inner(x + 1.0)

    c_inner = lk.compile(inner)
    c_outer = lk.compile(outer)
    rng = np.random.default_rng(0)
    c_inner(t([1, 1, 1], dev))  # the inner one also has its own trace outside
    for k in range(4):
        x = t(rng.standard_normal(3), dev)
        got = c_outer(x)
        w.grad = None
        ye = (inner(x) * 3.0).sum()
        ye.backward()
        want = (ye, w.grad, inner(x + 1.0))
        for a, b in zip(got, want):
            np.testing.assert_array_equal(a.numpy(), b.numpy(), err_msg=f"call {k + 1}")
    assert c_outer.stats["replays"] == 2
    assert c_inner.stats["calls"] == 1  # called inside the outer trace it is traced inline


# ---- random numbers --------------------------------------------------------------------------

def test_generator_checkpoint_restores_the_masks_of_replays(dev):
    g = lk.Generator(11, dev)

    @lk.compile
    def step(x):
        return F.dropout(x, 0.5, generator=g)

    x = t(np.ones(40), dev)
    for _ in range(3):
        step(x)
    saved = g.state_dict()
    first = [step(x).numpy() for _ in range(3)]
    assert not np.array_equal(first[0], first[1])
    g.load_state_dict(saved)
    again = [step(x).numpy() for _ in range(3)]
    for a, b in zip(first, again):
        np.testing.assert_array_equal(a, b)
    assert step.stats["traces"] == 2 and step.stats["retraces"] == 0


# ---- a step that is not the same computation at each call --------------------------------------

def test_step_that_runs_more_ops_at_the_second_call_is_refused(dev):
    calls = [0]

    @lk.compile
    def step(x):
        calls[0] += 1
        for _ in range(calls[0]):
            x = x * 2.0
        return x

    step(t([1], dev))
    with pytest.raises(CompileError, match="the first call ran 1 ops, the second 2"):
        step(t([1], dev))


def test_step_that_runs_another_op_at_the_second_call_is_refused(dev):
    calls = [0]

    @lk.compile
    def step(x):
        calls[0] += 1
        return F.exp(x) if calls[0] == 1 else F.sin(x)  # exp or sin

    step(t([1], dev))
    with pytest.raises(CompileError) as e:
        step(t([1], dev))
    assert f"op 0 was exp ({line_of('exp or sin')}) then sin" in str(e.value), str(e.value)


# ---- shapes --------------------------------------------------------------------------------------

def test_shape_change_retraces_and_warns(dev):
    step = lk.compile(lambda x: (x * 2.0).sum(axis=0), warn_after=2)
    with warnings.catch_warnings():
        warnings.simplefilter("error", CompileWarning)
        for n in (2, 2, 2, 3, 3, 3):
            x = np.arange(n * 2, dtype=np.float32).reshape(n, 2)
            np.testing.assert_array_equal(step(t(x, dev)).numpy(), (x * 2).sum(0))
    assert step.stats["retraces"] == 1
    assert step.stats["reasons"] == [
        "an argument was a tensor float32(2, 2), is a tensor float32(3, 2)"]
    with pytest.warns(CompileWarning, match="traced again 2 times"):
        x = np.ones((4, 2), np.float32)
        np.testing.assert_array_equal(step(t(x, dev)).numpy(), (x * 2).sum(0))
    for n in (2, 3):  # the old shapes still replay
        x = np.ones((n, 2), np.float32)
        np.testing.assert_array_equal(step(t(x, dev)).numpy(), (x * 2).sum(0))
    assert step.stats["replays"] == 4


# ---- train and eval ------------------------------------------------------------------------------

def _noisy_net(dev):
    B.set_seed(2)
    return B.Sequence(B.Linear(4, 6), B.BatchNorm(6), B.Dropout(0.5), B.Linear(6, 2)).to(dev)


def test_eval_after_compiling_in_train_mode_does_not_replay_train_trace(dev):
    net = _noisy_net(dev)
    step = lk.compile(lambda x: net(x))
    x = t(np.random.default_rng(0).standard_normal((5, 4)), dev)
    for _ in range(3):
        step(x)
    net.eval()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", CompileWarning)  # see the next test
        for k in range(4):
            np.testing.assert_array_equal(step(x).numpy(), net(x).numpy(), err_msg=f"eval {k}")
    assert step.stats["reasons"][0] == "Sequence.training was True when traced, is False"
    net.train()
    a, b = step(x).numpy(), step(x).numpy()
    assert not np.array_equal(a, b)  # train mode again: dropout again


def test_eval_mode_compiles_after_train_mode(dev):
    net = _noisy_net(dev)
    step = lk.compile(lambda x: net(x))
    x = t(np.ones((5, 4)), dev)
    for _ in range(3):
        step(x)
    net.eval()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", CompileWarning)
        for _ in range(6):
            step(x)
    assert step.stats["replays"] >= 1 + 4 and step.stats["retraces"] == 1, step.stats


# ---- trust_input ---------------------------------------------------------------------------------

def test_trust_input_replays_same_shapes(dev):
    """trust_input=True skips the checks at each call (guards on parameters' shapes and on
    Brick.training): a replay is cheaper, and calling with other shapes, another mode or
    other Python values that the step depends on is the caller's responsibility (not tested:
    its result is undefined). With the same shapes it behaves as the checked step."""
    B.set_seed(3)
    net = B.MLP([4, 5, 2]).to(dev)
    step = lk.compile(lambda x: F.relu(net(x)).sum(axis=1), trust_input=True)
    rng = np.random.default_rng(0)
    for _ in range(5):
        x = t(rng.standard_normal((3, 4)), dev)
        np.testing.assert_array_equal(step(x).numpy(), F.relu(net(x)).sum(axis=1).numpy())
    assert step.stats["replays"] == 3 and step.stats["traces"] == 2


def test_op_on_a_live_array_is_not_folded():
    buf = np.ones(3, np.float32)
    step = lk.compile(lambda x: x + lk.Tensor(buf) * 2.0)
    x = lk.tensor(np.zeros(3, np.float32))
    for k in range(4):
        buf[...] = k
        np.testing.assert_array_equal(step(x).numpy(), np.full(3, 2.0 * k), err_msg=f"call {k + 1}")


# ---- indices checked at every replay -------------------------------------------------------


@pytest.mark.parametrize("check", ["on", "off"])
def test_a_replay_checks_labels_and_ids_as_an_eager_call_does(dev, check, monkeypatch):
    """Labels and ids given as tensors were checked only while tracing: a replay with a label
    outside [0, C) computed a wrong loss (and updated the weights from it) without a word.
    Each replay now checks them as an eager call does (device arrays when
    LABKIT_CHECK_INDICES is on), before anything is updated."""
    from labkit.errors import IndexingError

    monkeypatch.setenv("LABKIT_CHECK_INDICES", check)
    rng = np.random.default_rng(0)
    w = lk.tensor(rng.standard_normal((3, 5)).astype(np.float32), device=dev,
                  requires_grad=True)
    opt = O.SGD(lr=0.5).setup({"w": w})

    @lk.compile
    def step(x, labels):
        loss = F.softmax_cross_entropy(F.linear(x, w), labels)
        opt.zero_grad()
        loss.backward()
        opt.update()
        return loss

    x = t(rng.standard_normal((4, 5)), dev)
    for _ in range(3):
        step(x, lk.tensor(np.array([0, 1, 2, 1]), device=dev))
    assert step.stats["replays"] >= 1
    before = w.numpy().copy()
    checked = dev == "cpu" or check == "on"
    for bad, where in (([0, 1, 7, 1], "labels[2] is 7"), ([0, -2, 1, 1], "labels[1] is -2")):
        labels = lk.tensor(np.array(bad), device=dev)
        if checked:
            with pytest.raises(IndexingError, match=re.escape(where)):
                step(x, labels)
            np.testing.assert_array_equal(w.numpy(), before)  # NOTE: no update from it
    assert step.stats["retraces"] == 0

    E = lk.tensor(np.ones((6, 3), np.float32), device=dev, requires_grad=True)
    pick = lk.compile(lambda ids: F.embed_id(ids, E).sum())
    for _ in range(3):
        pick(lk.tensor(np.array([0, 5]), device=dev))
    if checked:
        with pytest.raises(IndexingError, match=r"ids\[1\] is -1"):
            pick(lk.tensor(np.array([0, -1]), device=dev))
