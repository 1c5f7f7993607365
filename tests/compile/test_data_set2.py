"""A review of replays setting ``.data`` where the step set it (/tmp/adv23): each case ran
silently otherwise than the eager step, or failed unhelpfully. Each compiled run is compared
with the same code run eagerly from the same start, on both devices, past the traced calls."""

import numpy as np
import pytest

import labkit as lk
import labkit.bricks as B
import labkit.functions as F
from labkit.errors import CompileError

from .setdata_helpers import noisy_step
from .setdata_helpers import same as _same

X = np.array([1.0, 2.0, -1.0, 4.0], np.float32)


def test_a_target_network_synced_before_the_step_reads_it(dev):
    """DQN: the target's parameters set from the online ones at the start (neither read nor
    named by the step's code first): replays never set them (target.W stayed at the second
    call's values)."""
    def run(compiled):
        lk.bricks.set_seed(0)
        online, target = B.Linear(4, 3).to(dev), B.Linear(4, 3).to(dev)
        for p in target.params().values():
            p.requires_grad = False
        opt = lk.optimizers.SGD(lr=0.1).setup(online)

        def step(x):
            for pt, po in zip(target.params().values(), online.params().values()):
                pt.data = (po * 0.5).data
            opt.zero_grad()
            loss = F.sum(online(x) * target(x))
            loss.backward()
            opt.update()
            return loss
        f = lk.compile(step) if compiled else step
        x = lk.tensor(np.ones((2, 4), np.float32), device=dev)
        return [(float(f(x).item()), target.W.numpy().tolist()) for _ in range(5)]

    _same(run)


def test_a_compiled_copy_from_one_network_into_another(dev):
    def run(compiled):
        lk.bricks.set_seed(0)
        online, target = B.Linear(4, 3).to(dev), B.Linear(4, 3).to(dev)

        def sync():
            for pt, po in zip(target.params().values(), online.params().values()):
                pt.data = (po * 1.0).data
        f = lk.compile(sync) if compiled else sync
        out = []
        for i in range(5):
            online.W.data = lk.tensor(np.full((3, 4), float(i), np.float32), device=dev).data
            f()
            out.append(float(target.W.numpy()[0, 0]))
        return out

    _same(run)


@pytest.mark.parametrize("fuse", [True, False])
def test_a_parameter_reset_to_a_value_made_in_the_step_before_its_update(dev, fuse):
    """``P.data = (lk.Tensor(ones) * 0.5).data``, then the update: the product was folded into
    a constant that the replay handed to P and the optimizer then changed, so each replay
    started from the last one's weights."""
    def run(compiled):
        P = lk.tensor(np.zeros(4, np.float32), device=dev, requires_grad=True)
        opt = lk.optimizers.SGD(lr=0.1).setup({"P": P})

        def step(x):
            opt.zero_grad()
            ones = lk.backend.asarray(np.ones(4, np.float32), device=dev)  # NOTE: raw
            P.data = (lk.Tensor(ones) * 0.5).data
            loss = F.sum(P * x)
            loss.backward()
            opt.update()
            return loss
        f = lk.compile(step, fuse=fuse) if compiled else step
        x = lk.tensor(X, device=dev)
        return [(float(f(x).item()), P.numpy().tolist()) for _ in range(6)]

    _same(run)


def _set_to_made_then_updated(make):
    """(P, a step setting P to ``make()``'s tensor after reading it, then updating and
    clipping P)."""
    P = lk.tensor(np.zeros(4, np.float32), device=make().device, requires_grad=True)
    opt = lk.optimizers.SGD(lr=0.1).setup({"P": P})

    def step(x):
        opt.zero_grad()
        c = make()
        F.sum(c * x)
        P.data = c.data
        loss = F.sum(P * x)
        loss.backward()
        opt.update()
        P.data = F.clip(P, -10.0, 10.0).data
        return loss
    return P, step


def test_a_parameter_set_to_a_tensor_made_in_the_step_then_updated(dev):
    def run(compiled):
        P, step = _set_to_made_then_updated(
            lambda: lk.tensor(np.full(4, 0.5, np.float32), device=dev))
        f = lk.compile(step) if compiled else step
        x = lk.tensor(X, device=dev)
        return [(float(f(x).item()), P.numpy().tolist()) for _ in range(6)]

    _same(run)


def test_an_array_made_outside_labkit_ops_that_the_update_changes_is_refused():
    """A NumPy array made in the step (a constant of the trace) that the optimizer changes in
    place: its traced value is the changed one, and replays drifted from it (0.8, -1.4, -3.6
    where eager gave 3.0 at every call)."""
    _, step = _set_to_made_then_updated(lambda: lk.Tensor(np.full(4, 0.5, np.float32)))
    f = lk.compile(step)
    x = lk.tensor(X)
    f(x)
    with pytest.raises(CompileError, match=r"made an array of shape \(4,\) outside labkit ops "
                                           r".* optimizer.update at .* then changed in place"):
        f(x)


@pytest.mark.parametrize("when", ["before", "after"])
def test_two_parameters_set_from_equal_results_stay_two_arrays(dev, when):
    """``A.data = (C * 2).data; B.data = (C * 2).data``: the merge pass made the two products
    one array, so A and B shared it (updated twice before; tied for good after)."""
    def run(compiled):
        A = lk.tensor(np.array([1.0, 2.0], np.float32), device=dev, requires_grad=True)
        Bt = lk.tensor(np.array([3.0, 4.0], np.float32), device=dev, requires_grad=True)
        C = lk.tensor(np.array([0.5, 0.5], np.float32), device=dev)
        opt = lk.optimizers.SGD(lr=0.1).setup({"A": A, "B": Bt})

        def reset():
            A.data = (C * 2.0).data
            Bt.data = (C * 2.0).data

        def step(x):
            opt.zero_grad()
            if when == "before":
                reset()
            loss = F.sum(A * x) + F.sum(Bt * x * 3.0)
            loss.backward()
            opt.update()
            if when == "after":
                reset()
            return loss
        f = lk.compile(step) if compiled else step
        x = lk.tensor(np.array([1.0, -1.0], np.float32), device=dev)
        out = [(float(f(x).item()), A.numpy().tolist(), Bt.numpy().tolist()) for _ in range(5)]
        return out, A.data is Bt.data

    _same(run)


def test_a_parameter_set_to_another_s_data_before_it_is_read(dev):
    def run(compiled):
        A = lk.tensor(np.array([0.5, -2.0, 3.0, 0.25], np.float32), device=dev,
                      requires_grad=True)
        Bt = lk.tensor(np.array([0.25, 3.0, -2.0, 0.5], np.float32), device=dev,
                       requires_grad=True)
        opt = lk.optimizers.SGD(lr=0.1).setup({"A": A, "B": Bt})

        def step(x):
            opt.zero_grad()
            A.data = Bt.data
            loss = F.sum(A * x + Bt * Bt)
            loss.backward()
            opt.update()
            return loss
        f = lk.compile(step) if compiled else step
        x = lk.tensor(X, device=dev)
        out = [(float(f(x).item()), A.numpy().tolist()) for _ in range(5)]
        return out, A.data is Bt.data

    _same(run)


def test_weight_noise_set_back_when_a_replay_raises_inside_its_block(dev):
    """A bad label inside ``with noise:``: the eager step's ``__exit__`` puts the exact weights
    back as the error unwinds; a replay stopped between the two sets and left them noisy."""
    def run(compiled):
        f, m, _ = noisy_step(dev, 3, 0.3, compiled)
        x = lk.tensor(np.ones((2, 4), np.float32), device=dev)
        out = []
        for i in range(6):
            y = lk.tensor(np.array([0, 9 if i == 3 else 2]), device=dev)
            try:
                out.append(float(f(x, y).item()))
            except lk.errors.LabkitError as e:
                out.append(type(e).__name__)
            out.append(m.W.numpy().tolist())
        return out

    e, c = run(False), run(True)
    assert "IndexingError" in e and c == e


def test_weight_noise_reads_its_std_at_each_replay(dev):
    """Annealed between calls: replays drew with the traced call's std."""
    def run(compiled):
        f, _, noise = noisy_step(dev, 3, 0.5, compiled)
        x = lk.tensor(np.ones((2, 4), np.float32), device=dev)
        y = lk.tensor(np.array([0, 2]), device=dev)
        out = []
        for i in range(6):
            noise.std = 0.5 if i < 3 else 0.5 - 0.1 * i
            out.append(float(f(x, y).item()))
        return out

    _same(run)


def test_a_buffer_that_grows_at_each_call_is_traced_again(dev):
    """``P.data = F.concat([P, x]).data``: the program's guard held the shape the next call
    starts with, so replays ran with the wrong shapes (a NumPy broadcast error)."""
    def run(compiled):
        P = lk.tensor(np.ones(1, np.float32), device=dev)

        def step(x):
            P.data = F.concat([P, x], axis=0).data
            return F.sum(P * P)
        f = lk.compile(step) if compiled else step
        return [(float(f(lk.tensor(np.ones(1, np.float32) * i, device=dev)).item()),
                 P.shape) for i in range(6)]

    _same(run)


def test_data_set_to_none_is_refused_with_a_message():
    P = lk.tensor(X.copy())

    @lk.compile
    def step(P, x):
        P.data = None
        return x * 2.0

    with pytest.raises(CompileError, match=r"argument 0 \(now None\) in a way a replay cannot"):
        step(P, lk.tensor(X))


def test_graph_labels_a_set_data_node():
    P = lk.tensor(X.copy(), requires_grad=True)
    opt = lk.optimizers.SGD(lr=0.1).setup({"P": P})

    @lk.compile
    def step(x):
        opt.zero_grad()
        loss = F.sum(P * x)
        loss.backward()
        opt.update()
        P.data = F.clip(P, -1.0, 1.0).data
        return loss

    for _ in range(3):
        step(lk.tensor(X))
    assert "set .data" in [n.name for n in step.graph().nodes]
