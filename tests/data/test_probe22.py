"""The data pipeline against references (probe 22): a Bucket's source is in its state; its
sizes are checked; a flip's axis must be an example's; random stages above Parallel draw
each rank's rows of the global batch."""

import numpy as np
import pytest

from labkit.data import (
    Bucket,
    DataStream,
    IndexableDataset,
    Parallel,
    RandomCrop,
    RandomFlip,
    ShardedScheme,
    ShuffledScheme,
)
from labkit.errors import DataError


def _texts():
    return IndexableDataset({"a": [np.arange(1 + i % 5) for i in range(24)],
                             "b": [np.arange(1 + (7 * i) % 5) for i in range(24)]})


def test_a_buckets_state_records_its_source():
    s = Bucket(DataStream(_texts()), "a", 2, pool=4, seed=1)
    next(iter(s))
    state = s.state_dict()
    with pytest.raises(DataError, match="source = 'a', this one has 'b'"):
        Bucket(DataStream(_texts()), "b", 2, pool=4, seed=1).load_state_dict(state)


@pytest.mark.parametrize("kw", [{"batch_size": 0}, {"batch_size": -1}, {"pool": 0},
                                {"batch_size": 2.5}])
def test_bucket_sizes_are_checked(kw):
    args = {"batch_size": 2, "pool": 3, **kw}
    with pytest.raises(DataError, match=r"Bucket: (batch_size|pool) must be an integer >= 1"):
        Bucket(DataStream(_texts()), "a", args.pop("batch_size"), **args)


@pytest.mark.parametrize("batched", [False, True])
def test_a_flip_axis_outside_the_examples_is_refused(batched):
    """axis=-3 on (5, 6) examples reversed the batch's order, not the examples."""
    x = np.arange(6 * 30.0).reshape(6, 5, 6)
    ds = IndexableDataset({"features": x})
    s = RandomFlip(DataStream(ds, batch_size=6) if batched else DataStream(ds), axis=-3, p=1)
    with pytest.raises(DataError, match=r"axis -3 is not an axis of source 'features''s "
                                        r"examples \(2 dimensions: axes -2 to 1\)"):
        next(iter(s))


@pytest.mark.parametrize("stage", ["flip", "crop"])
@pytest.mark.parametrize("ranks", [2, 4])
def test_random_stages_above_parallel_shard_as_one_process(stage, ranks):
    """Below Parallel the ranks' shares made the one-process batch; above it every rank drew
    the first rows of the global batch's draw."""
    x = np.arange(8 * 6 * 6, dtype=np.float32).reshape(8, 1, 6, 6)
    ds = IndexableDataset({"features": x})

    def build(scheme):
        s = Parallel(DataStream(ds, scheme), workers=0)
        return RandomFlip(s, p=0.5, seed=4) if stage == "flip" else RandomCrop(s, 4, seed=4)
    whole = next(iter(build(ShuffledScheme(8, 8, seed=2))))["features"]
    parts = [next(iter(build(ShardedScheme(ShuffledScheme(8, 8, seed=2), r, ranks))))
             ["features"] for r in range(ranks)]
    np.testing.assert_array_equal(np.concatenate(parts), whole)


@pytest.mark.parametrize("make, words", [
    (lambda s: RandomCrop(s, 0), "RandomCrop: shape must be"),
    (lambda s: RandomCrop(s, -2), "RandomCrop: shape must be"),
    (lambda s: RandomCrop(s, (2, 2, 2)), "RandomCrop: shape must be"),
])
def test_bad_stage_settings_are_refused_when_built(make, words):
    from labkit.data import OneHot

    s = DataStream(IndexableDataset({"features": np.zeros((4, 1, 6, 6)),
                                     "targets": np.zeros(4, np.int64)}))
    with pytest.raises(DataError, match=words):
        make(s)
    with pytest.raises(DataError, match="OneHot: num_classes must be >= 1"):
        OneHot(s, 0)


def test_a_crop_of_scalar_examples_is_a_data_error():
    s = RandomCrop(DataStream(IndexableDataset({"features": np.zeros(4)})), 2)
    with pytest.raises(DataError, match="RandomCrop: source 'features' has examples of shape"):
        next(iter(s))


def test_numpy_numbers_as_settings_are_their_values():
    """ScaleAndShift(np.float64(0.5)) makes 0.5's items: its state was refused."""
    from labkit.data import ScaleAndShift

    ds = IndexableDataset({"features": np.ones((4, 2))})
    a = ScaleAndShift(DataStream(ds), np.float64(0.5), 1)
    ScaleAndShift(DataStream(ds), 0.5, 1).load_state_dict(a.state_dict())


def test_normalize_refuses_a_std_its_source_dtype_rounds_to_zero_or_not_finite():
    from labkit.data import Normalize

    ds = IndexableDataset({"features": np.ones((4, 2), np.float16)})
    s = Normalize(DataStream(ds), 0.0, 1e-8)
    with pytest.raises(DataError, match="0 in source 'features''s dtype float16"):
        next(iter(s))
    for bad in (np.nan, np.inf, 0.0):
        with pytest.raises(DataError, match="std has zeros or values that are not finite"):
            Normalize(DataStream(ds), 0.0, bad)
