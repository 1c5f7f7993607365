"""Host-device synchronisations in a training step on ``cl``, counted by the runtime.

Each one makes the host wait for every kernel queued before it, so a training step should need
none: uploads are queued without waiting, constants are made once, and only a value the user
reads (``loss.item()``), ``synchronize()`` or an opt-in check waits.
"""

import numpy as np
import pytest

import labkit as lk
import labkit.functions as F
from labkit.backend import opencl as cp
from labkit.backend.opencl import runtime


def _mlp_step(labels_on_device: bool):
    rng = np.random.default_rng(0)
    sizes = [20, 16, 16, 5]
    params = []
    for i, o in zip(sizes[:-1], sizes[1:]):
        params += [lk.tensor(rng.standard_normal((o, i)).astype(np.float32) * 0.3,
                             device="cl", requires_grad=True),
                   lk.tensor(np.zeros(o, np.float32), device="cl", requires_grad=True)]
    X = rng.standard_normal((8, 20)).astype(np.float32)
    Y = rng.integers(0, 5, 8)
    y_dev = lk.tensor(Y, device="cl").data

    def step():
        x = lk.tensor(X, device="cl")  # a batch uploaded every step, as a loop does
        h = F.relu(F.linear(x, params[0], params[1]))
        h = F.relu(F.linear(h, params[2], params[3]))
        loss = F.softmax_cross_entropy(F.linear(h, params[4], params[5]),
                                       y_dev if labels_on_device else Y)
        for p in params:
            p.grad = None
        loss.backward()
        with lk.no_grad():
            for p in params:
                p.data -= 0.1 * p.grad.data
        return loss
    return step


def _syncs_per_step(step, n=3):
    rt = runtime(0)
    step()  # builds the kernels and makes the constants
    rt.finish()
    before = rt.syncs
    for _ in range(n):
        step()
    return (rt.syncs - before) / n


@pytest.mark.parametrize("labels_on_device", [False, True])
def test_a_training_step_waits_for_the_device_nowhere(monkeypatch, labels_on_device):
    monkeypatch.setenv("LABKIT_CHECK_INDICES", "off")
    assert _syncs_per_step(_mlp_step(labels_on_device)) == 0


def test_labels_given_from_the_host_are_checked_there_without_a_sync(monkeypatch):
    monkeypatch.setenv("LABKIT_CHECK_INDICES", "on")
    assert _syncs_per_step(_mlp_step(labels_on_device=False)) == 0


def test_the_bounds_check_of_labels_on_the_device_is_the_one_documented_sync(monkeypatch):
    monkeypatch.setenv("LABKIT_CHECK_INDICES", "on")
    assert _syncs_per_step(_mlp_step(labels_on_device=True)) == 1


def test_a_compiled_step_checks_device_labels_without_a_sync(monkeypatch):
    """A replay queues the labels' check and reads its flag back without waiting; it looks at
    the flag before the update (tests/compile/test_traps.py: a bad label raises there)."""
    monkeypatch.setenv("LABKIT_CHECK_INDICES", "on")
    rng = np.random.default_rng(0)
    w = lk.tensor(rng.standard_normal((5, 20)).astype(np.float32), device="cl",
                  requires_grad=True)
    opt = lk.optimizers.SGD(lr=0.1).setup({"w": w})
    x = lk.tensor(rng.standard_normal((8, 20)).astype(np.float32), device="cl")
    y = lk.tensor(rng.integers(0, 5, 8), device="cl")

    @lk.compile
    def step(x, y):
        loss = F.softmax_cross_entropy(F.linear(x, w), y)
        opt.zero_grad()
        loss.backward()
        opt.update()
        return loss

    step(x, y)  # NOTE: calls 1 and 2 are traced, checking as an eager call does
    assert _syncs_per_step(lambda: step(x, y), n=4) == 0
    assert step.stats["replays"] == 4
    # NOTE: the check is queued first (compile/program.py: _checks_early), so its flag is
    # back long before the update looks at it, not after the forward and backward
    first = step.programs()[0].nodes[0]
    assert first.kind == "host" and getattr(first.fn, "lk_check", False)


def test_a_compiled_step_checks_ids_and_index_arrays_without_a_sync(monkeypatch):
    """embed_id's ids and the index array of the lookup after it are checked without waiting
    in a replay, and a bad id still raises from the call with embed_id's own message, before
    the update. (The gradient's scatter reads the ids back to sort them: its one sync.)"""
    from labkit.errors import IndexingError

    monkeypatch.setenv("LABKIT_CHECK_INDICES", "on")
    E = lk.tensor(np.ones((6, 3), np.float32), device="cl", requires_grad=True)
    opt = lk.optimizers.SGD(lr=0.1).setup({"E": E})

    @lk.compile
    def step(ids):
        loss = F.embed_id(ids, E).sum()
        opt.zero_grad()
        loss.backward()
        opt.update()
        return loss

    ids = lk.tensor(np.array([0, 5, 5]), device="cl")
    lookup = lk.compile(lambda ids: F.embed_id(ids, E).sum())
    lookup(ids)
    assert _syncs_per_step(lambda: lookup(ids), n=3) == 0
    step(ids)
    assert _syncs_per_step(lambda: step(ids), n=3) == 1  # the scatter's
    before = E.numpy().copy()
    with pytest.raises(IndexingError, match=r"embed_id: ids\[1\] is 7"):
        step(lk.tensor(np.array([0, 7, 1]), device="cl"))
    np.testing.assert_array_equal(E.numpy(), before)


def test_reading_a_value_and_synchronize_are_counted():
    rt = runtime(0)
    a = cp.asarray(np.arange(4, dtype=np.float32))
    before = rt.syncs
    (a * 2).get()
    lk.device("cl").synchronize()
    assert rt.syncs - before == 2


def test_an_upload_takes_a_private_copy_so_the_caller_may_change_its_array_at_once():
    rt = runtime(0)
    host = np.arange(1 << 16, dtype=np.float32)
    ref = host.copy()
    big = cp.asarray(np.ones((512, 512), np.float32))
    for _ in range(4):
        big = big @ big * np.float32(1e-3)  # queued work ahead of the upload
    before = rt.syncs
    dev = cp.asarray(host)
    host[:] = -1  # the upload may not have run yet: it must not see this
    assert rt.syncs == before
    np.testing.assert_array_equal(dev.get(), ref)
    for a in (np.float32(3.5), np.arange(6, dtype=np.int64).reshape(2, 3).T, [1, 2, 3]):
        np.testing.assert_array_equal(cp.asarray(a).get(), np.asarray(a))


def test_many_uploads_in_flight_land_in_order_and_are_released_by_a_finish():
    rt = runtime(0)
    arrays = [cp.asarray(np.full(100, i, np.float32)) for i in range(200)]
    assert [float(a.get()[0]) for a in arrays[::50]] == [0.0, 50.0, 100.0, 150.0]
    rt.finish()
    assert rt._uploads == []


def test_class_indices_are_made_once_per_device_and_size():
    a = cp.class_indices(7, "cl")
    assert cp.class_indices(7, "cl") is a and cp.class_indices(8, "cl") is not a
    np.testing.assert_array_equal(a.get(), np.arange(7))
