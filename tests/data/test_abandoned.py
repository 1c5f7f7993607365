"""A read abandoned mid-epoch (a ``break``, a stop, ``run(max_iterations=k)``) and read again
continues with the next item, exactly as if nothing happened; so does a state taken after it
and loaded into a fresh pipeline. At every cut point, for every pipeline of the resume tests and
the buffering stages (Unpack, Bucket) on their own, abandoned once or twice in one epoch."""

import pytest

from .helpers import PIPELINES
from .test_contradictions import bucketed, unpacked
from .test_resume import consume, run_to, same

MAKERS = {**{name: (lambda make=make: make(workers=0)) for name, make in PIPELINES.items()},
          "unpack": unpacked, "bucket": bucketed}
_REF = {}


def reference(name):
    if name not in _REF:
        s = MAKERS[name]()
        _REF[name] = run_to(s, 2)
        s.close()
    return _REF[name]


def same_items(got, want):
    assert len(got) == len(want)
    assert all(same(a, b) for a, b in zip(got, want))


@pytest.mark.parametrize("name", sorted(MAKERS))
def test_a_read_abandoned_anywhere_continues_where_it_stopped(name):
    ref = reference(name)
    for k in range(1, len(ref)):
        s = MAKERS[name]()
        consume(s, k)
        state = s.state_dict()
        same_items(run_to(s, 2), ref[k:])
        s.close()
        fresh = MAKERS[name]()
        fresh.load_state_dict(state)
        same_items(run_to(fresh, 2), ref[k:])
        fresh.close()


@pytest.mark.parametrize("name", ["unpack", "bucket", "examples", "text"])
def test_two_abandoned_reads_in_a_row_and_a_state_between(name):
    ref = reference(name)
    for k in range(1, len(ref) - 2):
        s = MAKERS[name]()
        consume(s, k)
        consume(s, 1)  # NOTE: abandoned again after one more item
        state = s.state_dict()
        again = MAKERS[name]()
        again.load_state_dict(state)
        consume(again, 1)  # NOTE: and once more after a load
        same_items(run_to(again, 2), ref[k + 2:])
        same_items(run_to(s, 2), ref[k + 1:])
        s.close()
        again.close()


def _loop(tmp_path=None):
    """A loop whose batches are cut across the upstream's: Batch(8) of Unpack of batches of
    5, so a stop between iterations is mostly inside an Unpack buffer."""
    import labkit as lk
    import labkit.bricks as B
    import labkit.functions as F
    from labkit import training as T
    from labkit.data import Batch, DataStream, Unpack

    from ..training.helpers import dataset

    lk.bricks.set_seed(1)
    model = B.Sequence(B.Flatten(), B.Linear(16, 8), B.Tanh(), B.Linear(8, 2))
    opt = lk.optimizers.Adam(lr=0.01).setup(model)
    s = Batch(Unpack(DataStream(dataset(), batch_size=5, shuffle=True, seed=5)), 8)

    def loss_fn(model, batch):
        return {"loss": F.softmax_cross_entropy(model(lk.tensor(batch["features"])),
                                                batch["targets"])}

    return T.MainLoop(model, opt, s, loss_fn, extensions=[T.FinishAfter(epochs=2)])


@pytest.mark.parametrize("k", [1, 5, 11, 12, 13])
def test_a_loop_stopped_and_run_again_trains_as_one_run(k):
    """``run(max_iterations=k)`` then ``run()``: the same weights, stream and optimizer state,
    bit for bit, as one uninterrupted run (and the same as a run resumed from the state taken
    at the stop)."""
    from ..training.helpers import same_state

    straight = _loop()
    straight.run()
    stopped = _loop()
    stopped.run(max_iterations=k)
    state = stopped.state_dict()
    stopped.run()
    resumed = _loop()
    resumed.load_state_dict(state)
    resumed.run()
    want = straight.state_dict()
    assert want["status"]["iteration"] == 24  # NOTE: 96 examples, batches of 8, 2 epochs
    for got in (stopped.state_dict(), resumed.state_dict()):
        assert same_state(got["model"], want["model"])
        assert same_state(got["optimizer"], want["optimizer"])
        assert same_state(got["stream"], want["stream"])


@pytest.mark.parametrize("name", ["examples", "text"])
def test_abandoned_reads_with_worker_processes(name):
    """The same with the upstream read in two worker processes (items read ahead are put back
    when a read is abandoned)."""
    ref = reference(name)
    s = PIPELINES[name](workers=2)
    got, k = [], 0
    for cut in (1, 4, 5, 9):  # NOTE: four reads abandoned in a row, then the rest
        for item in s:
            got.append(item)
            k += 1
            if k == cut:
                break
    got += run_to(s, 2)
    s.close()
    same_items(got, ref)


@pytest.mark.parametrize("name", sorted(MAKERS))
def test_two_iterations_at_once_fail_clearly_and_the_newest_reads_on(name):
    """Two iterations at once over one stream (``zip(s, s)``) shared its one position: they
    paired items 0 and 1, 2 and 3... and ended two epochs for one, silently. The newest
    iteration now reads the stream; an older one fails when read again, naming the fix; the
    newest reads on from where the stream is, as a read after an abandoned one does."""
    from labkit.errors import DataError

    ref = reference(name)
    s = MAKERS[name]()
    with pytest.raises(DataError, match="one iteration at a time"):
        list(zip(s, s))
    s.close()
    s = MAKERS[name]()
    old = iter(s)
    got = [next(old)]
    new = iter(s)
    got.append(next(new))
    with pytest.raises(DataError, match="another one had started"):
        next(old)
    while s.epoch < 2:
        got.extend(s)  # NOTE: after the epoch the iteration began, a new one a new epoch
    same_items(got, ref)
    s.close()


@pytest.mark.parametrize("name", sorted(MAKERS))
def test_a_state_loaded_closes_the_iteration_open_then(name):
    """An iteration open when a state is loaded read on from the loaded position, or from
    what its buffers held, depending on the stage (Unpack after 1 item gave item 3 where the
    state said 1); it now fails, naming the load, and a new one reads from the state."""
    from labkit.errors import DataError

    ref = reference(name)
    for k in (1, 3):
        s = MAKERS[name]()
        it = iter(s)
        for _ in range(k):
            next(it)
        state = s.state_dict()
        next(it)
        next(it)
        s.load_state_dict(state)
        with pytest.raises(DataError, match="closed when a state was loaded"):
            next(it)
        got = []
        while s.epoch < 2:
            got.extend(s)
        same_items(got, ref[k:])
        s.close()
