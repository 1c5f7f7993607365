"""An error (or Ctrl-C) while Batch or Bucket fills a buffer: the examples taken for it are
read again, in this process and from a state saved then (they were lost, and that state was
refused as damaged)."""

import os
from pathlib import Path

import numpy as np
import pytest

from labkit.data import Batch, Bucket, DataStream, IndexableDataset, Mapping, Parallel

#: a file naming the example whose next reading fails (removed by it: one failure), read by
#: worker processes too
MARK = "LABKIT_TEST_FLAKY_MARK"


def flaky(ex):
    mark = Path(os.environ[MARK])
    i = int(ex["index"])
    try:
        if int(mark.read_text()) == i:
            mark.unlink()
            raise OSError(f"example {i}: the disk hiccuped")
    except FileNotFoundError:
        pass
    return ex


def _pipeline(kind, workers):
    n = 24
    ds = IndexableDataset({"index": np.arange(n),
                           "seq": [np.zeros(1 + (i * 7) % 5) for i in range(n)]})
    s = Mapping(DataStream(ds), flaky)
    if workers:
        s = Parallel(s, workers=workers)
    return Batch(s, 4) if kind == "batch" else Bucket(s, "seq", 2, pool=3, seed=3)


def _indices(batches):
    return [sorted(int(i) for i in b["index"]) for b in batches]


@pytest.mark.parametrize("workers", [0, 1])
@pytest.mark.parametrize("kind", ["batch", "bucket"])
def test_an_error_while_a_buffer_fills_loses_nothing(kind, workers, tmp_path, monkeypatch):
    mark = tmp_path / "mark"
    monkeypatch.setenv(MARK, str(mark))
    want = _indices(_pipeline(kind, workers))  # NOTE: uninterrupted
    # NOTE: the second buffer (examples 4-7 of a Batch, 6-11 of a Bucket) fails at its 3rd
    mark.write_text("6" if kind == "batch" else "8")
    s = _pipeline(kind, workers)
    it = iter(s)
    got = [next(it) for _ in range(1 if kind == "batch" else 3)]
    with pytest.raises(Exception, match="the disk hiccuped"):
        got.append(next(it))
    state = s.state_dict()
    fresh = _pipeline(kind, workers)
    fresh.load_state_dict(state)  # NOTE: it was refused: "the state is damaged"
    assert _indices(got) + _indices(fresh) == want
    assert _indices(got) + _indices(s) == want  # NOTE: and in this process, as it is
    for p in (s, fresh):
        p.close()


@pytest.mark.parametrize("workers", [0, 2])
def test_a_state_loaded_into_a_prefetch_being_read_takes_effect(workers):
    """Loaded while an iteration was open, the state was undone by that iteration's rewind
    as it ended (the next batches were 6-11, not 0-11), or raced its reading thread."""
    from labkit.data import Prefetch

    def build():
        s = DataStream(IndexableDataset({"index": np.arange(12)}), batch_size=2)
        return Prefetch(Parallel(s, workers=workers) if workers else s, 2)
    s = build()
    start = s.state_dict()
    for n, _ in enumerate(s):
        if n == 2:
            s.load_state_dict(start)
            break
    assert _indices(s) == [[0, 1], [2, 3], [4, 5], [6, 7], [8, 9], [10, 11]]
    it = iter(s)
    next(it)
    s.load_state_dict(start)
    with pytest.raises(Exception, match="closed when a state was loaded"):
        next(it)  # NOTE: a stale iterator: refused, not its queued batches
    assert _indices(s)[0] == [0, 1]
    s.close()
