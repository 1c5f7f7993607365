"""A scheme built for another dataset's size is refused when the stream is made (sequential
batches came back empty past the data, or half the data was never seen); a pad value the
data's dtype cannot hold is refused (-0.5 padding token ids became 0, a real id); an example
scheme of a negative size is refused."""

from __future__ import annotations

import numpy as np
import pytest

from labkit.data import (
    DataStream,
    IndexableDataset,
    SequentialExampleScheme,
    SequentialScheme,
    ShardedScheme,
    ShuffledScheme,
)
from labkit.data.transformers import Padding
from labkit.errors import DataError


@pytest.mark.parametrize("scheme", [SequentialScheme(50, 10), SequentialScheme(10, 5),
                                    ShuffledScheme(30, 4, seed=0),
                                    ShardedScheme(SequentialScheme(10, 4), 0, 2),
                                    SequentialExampleScheme(19)])
def test_a_scheme_of_another_size_is_refused(scheme):
    ds = IndexableDataset({"x": np.arange(20)})
    with pytest.raises(DataError, match=r"the scheme covers \d+ examples but the dataset has "
                                        r"20; build the scheme with the dataset's"):
        DataStream(ds, scheme)


def test_a_scheme_of_the_right_size_covers_every_example_once():
    ds = IndexableDataset({"x": np.arange(20)})
    for scheme in (SequentialScheme(20, 8), ShuffledScheme(20, 6, seed=1),
                   SequentialExampleScheme(20)):
        seen = np.concatenate([np.atleast_1d(b["x"]) for b in DataStream(ds, scheme)])
        assert sorted(seen.tolist()) == list(range(20))


def test_an_example_scheme_of_a_negative_size_is_refused():
    with pytest.raises(DataError, match="need num_examples >= 0, got -3"):
        SequentialExampleScheme(-3)


def _padded(seqs, pad):
    return next(iter(Padding(DataStream(IndexableDataset({"s": seqs}), batch_size=len(seqs)),
                             pad_value=pad)))


@pytest.mark.parametrize("seqs,pad", [
    ([np.arange(1), np.arange(3)], -0.5),
    ([np.arange(1, dtype=np.uint8), np.arange(3, dtype=np.uint8)], -1),
    ([np.arange(1, dtype=np.int8), np.arange(3, dtype=np.int8)], 300),
    ([np.arange(1), np.arange(3)], float("nan")),
])
def test_a_pad_value_the_dtype_cannot_hold_is_refused(seqs, pad):
    with pytest.raises(DataError, match="is not a value of source 's''s dtype"):
        _padded(seqs, pad)


def test_pad_values_the_dtype_holds_pad_exactly():
    b = _padded([np.arange(1), np.arange(3)], -1)
    assert b["s"].tolist() == [[0, -1, -1], [0, 1, 2]] and b["s_mask"].tolist() == [
        [1, 0, 0], [1, 1, 1]]
    f = _padded([np.ones(1, np.float32), np.ones(2, np.float32)], float("nan"))["s"]
    assert f.dtype == np.float32 and np.isnan(f[0, 1]) and f[1].tolist() == [1, 1]
    assert _padded([np.arange(2), np.arange(1)], 2.0)["s"].tolist() == [[0, 1], [0, 2]]


def test_a_state_from_a_stream_over_other_data_is_refused(tmp_path):
    """A state saved from the train split does not load into the test split's stream (the
    same sizes: it loaded silently), nor into a stream of other sources; the same data loads,
    and a state saved before streams recorded their data still does."""
    from labkit.data import H5Dataset
    from labkit.data.layout import write_h5

    path = tmp_path / "t.h5"
    write_h5(path, {"x": np.arange(40), "y": np.arange(40) * 2},
             splits={"train": (0, 20), "test": (20, 40)})
    a = DataStream(H5Dataset(path, "train"), batch_size=4)
    it = iter(a)
    next(it)
    state = a.state_dict()
    for other in (DataStream(H5Dataset(path, "test"), batch_size=4),
                  DataStream(H5Dataset(path, "train"), batch_size=4, sources=["y"])):
        with pytest.raises(DataError, match=r"\['dataset'\]\['(split|sources)'\]: the state was "
                                            r"saved from a stream over"):
            other.load_state_dict(state)
    same = DataStream(H5Dataset(path, "train"), batch_size=4)
    same.load_state_dict(state)
    assert next(iter(same))["x"].tolist() == next(it)["x"].tolist()
    old = {**state, "stages": [{k: v for k, v in s.items() if k != "dataset"}
                               for s in state["stages"]]}
    DataStream(H5Dataset(path, "test"), batch_size=4).load_state_dict(old)


@pytest.mark.parametrize("count", [2, 3])
@pytest.mark.parametrize("kind", ["flip", "crop"])
def test_random_augmentation_over_shards_is_one_processs(kind, count):
    """N ranks' shares of each batch, flipped or cropped, are one process's batch (every
    rank drew the first rows' values: the same flips on each rank)."""
    from labkit.data import ShardedScheme
    from labkit.data.transformers import RandomCrop, RandomFlip

    img = np.arange(16 * 6 * 6, dtype=np.float32).reshape(16, 1, 6, 6)
    ds = IndexableDataset({"features": img})

    def batches(scheme):
        s = DataStream(ds, scheme)
        t = RandomFlip(s, p=0.5, seed=7) if kind == "flip" else RandomCrop(s, 4, seed=7)
        return [b["features"] for b in t]

    full = batches(ShuffledScheme(16, 8, seed=1))
    parts = [batches(ShardedScheme(ShuffledScheme(16, 8, seed=1), i, count))
             for i in range(count)]
    for k, b in enumerate(full):
        np.testing.assert_array_equal(np.concatenate([p[k] for p in parts]), b)


@pytest.mark.parametrize("base,count", [(SequentialScheme(10, 3), 2),   # last batch of 1
                                        (ShuffledScheme(9, 4, seed=0), 2),
                                        (SequentialScheme(2, 4), 3),    # one batch of 2
                                        (SequentialScheme(12, 2), 3)])  # every batch of 2
def test_a_shard_that_would_get_an_empty_batch_is_refused_when_made(base, count):
    # NOTE: the rank's empty batch gave a NaN mean loss (0/0) at the end of the epoch
    with pytest.raises(DataError, match="cannot be split between .* shards .* use a larger "
                                        "batch_size or drop_last=True"):
        ShardedScheme(base, 0, count)


def test_shards_of_batches_that_split_are_accepted():
    for base, count in ((SequentialScheme(10, 3, drop_last=True), 3),
                        (SequentialScheme(11, 4), 3), (SequentialScheme(0, 4), 2),
                        (SequentialScheme(1, 4, drop_last=True), 2)):
        parts = [list(DataStream(IndexableDataset({"x": np.arange(base.num_examples)}),
                                 ShardedScheme(base, i, count))) for i in range(count)]
        for batches in zip(*parts):
            assert all(len(b["x"]) >= 1 for b in batches)
        seen = sorted(np.concatenate([b["x"] for p in parts for b in p] or [[]]).tolist())
        assert seen == list(range(len(seen)))


class _Uneven(SequentialScheme):
    """Batches of 4, 4 and then 1: sizes the shard cannot know before it is asked."""

    def request(self, epoch, k):
        return [slice(0, 4), slice(4, 8), slice(8, 9)][k]

    def num_requests(self, epoch):
        return 3


def test_an_empty_share_of_a_batch_is_refused_when_asked():
    scheme = _Uneven(9, 4)
    shard = ShardedScheme(type("Custom", (), {"batched": True, "request": scheme.request,
                                               "num_requests": scheme.num_requests,
                                               "__repr__": lambda s: "Custom()"})(), 1, 2)
    assert shard.request(0, 0) == slice(2, 4, 1)
    with pytest.raises(DataError, match=r"batch 2 of epoch 0 of Custom\(\) has 1 examples, "
                                        r"fewer than the 2 shards: shard 1 would get an empty"):
        shard.request(0, 2)
    with pytest.raises(DataError, match="shard 1 would get an empty batch"):
        ShardedScheme(type("Arrays", (), {"batched": True, "num_requests": lambda s, e: 1,
                                          "request": lambda s, e, k: np.array([5])})(),
                      1, 2).request(0, 0)
