"""A training stream whose epoch yields no batches (an empty split, drop_last with a batch
larger than the data) is an error: the loop went from epoch to epoch for ever when only
iterations could end it (millions of epochs, writing the run store each time)."""

import threading

import numpy as np
import pytest

import labkit as lk
import labkit.bricks as B
import labkit.functions as F
from labkit import training as T
from labkit.data import DataStream, H5Dataset, IndexableDataset, ShuffledScheme, write_h5
from labkit.errors import TrainingError


def _loop(stream, store):
    m = B.Sequence(B.Linear(4, 2))
    opt = lk.optimizers.SGD(lr=0.1).setup(m)
    return T.MainLoop(m, opt, stream,
                      lambda mo, b: F.softmax_cross_entropy(mo(lk.tensor(b["x"])), b["y"]),
                      extensions=[T.FinishAfter(iterations=10)], store=store)


def _streams(tmp_path):
    x, y = np.zeros((32, 4), np.float32), np.zeros(32, np.int64)
    write_h5(tmp_path / "empty.h5", {"x": x, "y": y}, splits={"train": (0, 0), "test": (0, 32)})
    yield "empty split", DataStream(H5Dataset(tmp_path / "empty.h5", split="train"),
                                    batch_size=8, shuffle=True, seed=0)
    yield "drop_last", DataStream(IndexableDataset({"x": x, "y": y}),
                                  ShuffledScheme(32, 64, seed=0, drop_last=True))


@pytest.mark.parametrize("store", [False, True])
def test_an_epoch_without_batches_is_an_error(tmp_path, store):
    for what, stream in _streams(tmp_path):
        with lk.runs.use_store(tmp_path / f"runs-{what}.sqlite"):
            loop = _loop(stream, store)
            done = []
            t = threading.Thread(target=lambda d=done, lp=loop: d.append(_run(lp)), daemon=True)
            t.start()
            t.join(60)
            assert not t.is_alive(), f"{what}: the loop still runs"
            (err,) = done
            assert isinstance(err, TrainingError), (what, err)
            assert "epochs 0 and 1 of the training stream yielded no batches" in str(err), what
            assert loop.status["epoch"] == 1
            if store:
                assert lk.runs.get(loop.run_id)["status"] == "failed"


def _run(loop):
    try:
        loop.run()
    except Exception as e:  # noqa: BLE001 - handed to the test
        return e
    return None


def test_the_rest_of_an_epoch_read_by_hand_is_no_empty_stream():
    """Batches read from loop.stream between runs (supported) up to an epoch's end, without
    its StopIteration: the next run's first epoch has nothing left, and the loop goes on to
    the next (a review found the first version of the check refusing it)."""
    x, y = np.zeros((32, 4), np.float32), np.zeros(32, np.int64)
    stream = DataStream(IndexableDataset({"x": x, "y": y}), batch_size=8)
    loop = _loop(stream, False)
    for _ in zip(range(4), loop.stream):
        pass
    loop.run()
    assert loop.status["iteration"] == 10
