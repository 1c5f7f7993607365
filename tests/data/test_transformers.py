"""Schemes and transformers against plain NumPy references."""

import numpy as np
import pytest

from labkit.data import (
    Batch,
    Bucket,
    Cast,
    DataStream,
    Filter,
    Flatten,
    Mapping,
    NGrams,
    Normalize,
    OneHot,
    Padding,
    Prefetch,
    RandomCrop,
    RandomFlip,
    ScaleAndShift,
    SequentialExampleScheme,
    SequentialScheme,
    ShardedScheme,
    ShuffledExampleScheme,
    ShuffledScheme,
    SortByLength,
    Unpack,
)
from labkit.errors import DataError

from . import helpers


# ---- schemes --------------------------------------------------------------------------------
def indices(scheme, epoch):
    out = []
    for k in range(scheme.num_requests(epoch)):
        r = scheme.request(epoch, k)
        out.append(np.arange(100)[r] if isinstance(r, slice) else np.atleast_1d(r))
    return out


def test_sequential_and_shuffled_schemes_cover_each_example_once():
    seq = indices(SequentialScheme(23, 5), 0)
    assert [len(b) for b in seq] == [5, 5, 5, 5, 3]
    assert np.array_equal(np.concatenate(seq), np.arange(23))
    assert SequentialScheme(23, 5, drop_last=True).num_requests(0) == 4
    sh = ShuffledScheme(23, 5, seed=1)
    e0, e1 = np.concatenate(indices(sh, 0)), np.concatenate(indices(sh, 1))
    assert sorted(e0) == sorted(e1) == list(range(23))
    assert not np.array_equal(e0, e1)
    assert np.array_equal(e0, np.concatenate(indices(ShuffledScheme(23, 5, seed=1), 0)))
    assert not np.array_equal(e0, np.concatenate(indices(ShuffledScheme(23, 5, seed=2), 0)))
    ex = ShuffledExampleScheme(23, seed=1)
    assert sorted(np.concatenate(indices(ex, 3))) == list(range(23))
    assert [int(i) for i in np.concatenate(indices(SequentialExampleScheme(4), 0))] == [0, 1, 2, 3]


def test_sharded_batches_split_every_global_batch():
    base = ShuffledScheme(51, 12, seed=4)  # NOTE: a last batch of 3, one for each shard
    shards = [ShardedScheme(base, i, 3) for i in range(3)]
    assert {s.num_requests(0) for s in shards} == {base.num_requests(0)}
    for k in range(base.num_requests(0)):
        parts = [np.atleast_1d(s.request(0, k)) for s in shards]
        assert np.array_equal(np.concatenate(parts), base.request(0, k))
    seq = [ShardedScheme(SequentialScheme(10, 4), i, 2) for i in range(2)]
    assert np.array_equal(np.arange(10)[seq[1].request(0, 0)], [2, 3])
    ex = [ShardedScheme(SequentialExampleScheme(11), i, 3) for i in range(3)]
    assert [s.num_requests(0) for s in ex] == [3, 3, 3]
    assert [ex[1].request(0, k) for k in range(3)] == [1, 4, 7]
    with pytest.raises(DataError, match="0 <= index < count"):
        ShardedScheme(base, 3, 3)


# ---- per item -------------------------------------------------------------------------------
def batches(stream):
    return list(stream)


@pytest.fixture
def imgs():
    return helpers.images()


def test_scale_normalize_cast_onehot_flatten(imgs):
    x = imgs.data["features"]
    y = imgs.data["targets"]
    s = DataStream(imgs, batch_size=16)
    b = batches(ScaleAndShift(s, 2.0, -1.0, which_sources="features"))[1]
    assert b["features"].dtype == np.float32
    assert np.array_equal(b["features"], x[16:32].astype(np.float32) * 2 - 1)
    assert np.array_equal(b["targets"], y[16:32])  # other sources untouched
    b = batches(Normalize(s, 100.0, 50.0, which_sources="features"))[0]
    np.testing.assert_allclose(b["features"], (x[:16] - 100.0) / 50.0, rtol=1e-6)
    assert batches(Cast(s, np.float64, "targets"))[0]["targets"].dtype == np.float64
    b = batches(OneHot(s, 10))[2]
    assert np.array_equal(b["targets"], np.eye(10, dtype=np.float32)[y[32:48]])
    assert batches(Flatten(s, "features"))[0]["features"].shape == (16, 120)
    ex = DataStream(imgs, batch_size=None)
    assert next(iter(Flatten(ex, "features")))["features"].shape == (120,)
    with pytest.raises(DataError, match="label 10, outside 0..9"):
        batches(OneHot(s, 10, which_sources="index"))
    with pytest.raises(DataError, match="no source 'labels'"):
        OneHot(s, 10, which_sources="labels")


def test_mapping_checks_its_result(imgs):
    s = DataStream(imgs, batch_size=8)
    assert np.array_equal(batches(Mapping(s, helpers.square_features))[0]["features"],
                          imgs.data["features"][:8] ** 2)
    with pytest.raises(DataError, match="fn returned a tuple; it must return a dict"):
        batches(Mapping(s, lambda item: (item,)))
    with pytest.raises(DataError, match="no source 'features'"):
        batches(Mapping(s, lambda item: {"y": item["targets"]}))
    m = Mapping(s, lambda item: {"y": item["targets"]}, sources=["y"])
    assert m.sources == ("y",) and batches(m)[0]["y"].shape == (8,)


def test_random_crop_takes_windows_of_the_input(imgs):
    s = RandomCrop(DataStream(imgs, batch_size=20), (6, 7), seed=3)
    x = imgs.data["features"]
    offsets = set()
    epoch0 = batches(s)
    for k, b in enumerate(epoch0):
        assert b["features"].shape == (20, 1, 6, 7)
        for i, crop in enumerate(b["features"]):
            src = x[k * 20 + i]
            hits = [(oy, ox) for oy in range(5) for ox in range(6)
                    if np.array_equal(src[:, oy:oy + 6, ox:ox + 7], crop)]
            assert hits, "crop is not a window of its example"
            offsets.add(hits[0])
    assert len(offsets) > 10  # the windows vary
    again = RandomCrop(DataStream(imgs, batch_size=20), (6, 7), seed=3)
    assert np.array_equal(batches(again)[1]["features"], epoch0[1]["features"])
    assert not np.array_equal(batches(s)[1]["features"], epoch0[1]["features"])  # new epoch
    with pytest.raises(DataError, match="a 11x7 crop needs"):
        batches(RandomCrop(DataStream(imgs, batch_size=4), (11, 7)))
    one = next(iter(RandomCrop(DataStream(imgs, batch_size=None), 5, seed=1)))
    assert one["features"].shape == (1, 5, 5)


def test_random_flip_flips_whole_examples(imgs):
    x = imgs.data["features"]
    for p, expect in ((0.0, 0), (1.0, 60)):
        b = batches(RandomFlip(DataStream(imgs, batch_size=60), p=p))[0]["features"]
        assert sum(np.array_equal(b[i], x[i][..., ::-1]) for i in range(60)) == expect
    b = batches(RandomFlip(DataStream(imgs, batch_size=60), seed=5))[0]["features"]
    flipped = [np.array_equal(b[i], x[i][..., ::-1]) for i in range(60)]
    kept = [np.array_equal(b[i], x[i]) for i in range(60)]
    assert all(f or k for f, k in zip(flipped, kept))
    assert 15 < sum(flipped) < 45
    v = batches(RandomFlip(DataStream(imgs, batch_size=60), axis=1, p=1.0))[0]["features"]
    assert np.array_equal(v, x[:, :, ::-1])


def test_ngrams_padding_sort_by_length():
    ds = helpers.sentences(12)
    seqs = ds.data["text"]
    b = batches(NGrams(DataStream(ds, batch_size=4), 2))[0]
    want_x = [s[i:i + 2] for s in seqs[:4] for i in range(len(s) - 2)]
    want_y = [s[i + 2] for s in seqs[:4] for i in range(len(s) - 2)]
    assert np.array_equal(b["text"], np.array(want_x).reshape(-1, 2))
    assert np.array_equal(b["targets"], want_y) and b["text"].dtype == np.int32
    p = batches(Padding(DataStream(ds, batch_size=5), "text"))[0]
    t = max(len(s) for s in seqs[:5])
    assert p["text"].shape == (5, t) and p["text_mask"].shape == (5, t)
    for i, s in enumerate(seqs[:5]):
        assert np.array_equal(p["text"][i, :len(s)], s) and (p["text"][i, len(s):] == 0).all()
        assert p["text_mask"][i].sum() == len(s)
    o = batches(SortByLength(DataStream(ds, batch_size=6), "text"))[0]
    lengths = [len(s) for s in o["text"]]
    assert lengths == sorted(lengths, reverse=True)
    assert sorted(o["index"].tolist()) == list(range(6))
    with pytest.raises(DataError, match="batch them first"):
        Padding(DataStream(ds, batch_size=None), "text")


# ---- sequential -----------------------------------------------------------------------------
def test_batch_unpack_filter(imgs):
    ex = DataStream(imgs, batch_size=None)
    b = batches(Batch(ex, 25))
    assert [len(x["index"]) for x in b] == [25, 25, 10]
    assert np.array_equal(b[1]["features"], imgs.data["features"][25:50])
    assert len(batches(Batch(DataStream(imgs, batch_size=None), 25, drop_last=True))) == 2
    u = batches(Unpack(DataStream(imgs, batch_size=7)))
    assert [int(e["index"]) for e in u] == list(range(60))
    f = batches(Filter(DataStream(imgs, batch_size=None), helpers.keep_even))
    assert [int(e["index"]) for e in f] == list(range(0, 60, 2))
    with pytest.raises(DataError, match="already yields batches"):
        Batch(DataStream(imgs, batch_size=4), 2)


def test_bucket_groups_similar_lengths_and_covers_the_epoch():
    ds = helpers.sentences(50)
    s = Bucket(DataStream(ds, batch_size=None, shuffle=True, seed=2), "text", 5, pool=5, seed=1)
    epoch = batches(s)
    seen = np.concatenate([b["index"] for b in epoch])
    assert sorted(seen.tolist()) == list(range(50))
    spread = np.mean([np.ptp([len(q) for q in b["text"]]) for b in epoch])
    rand = np.mean([np.ptp([len(ds.data["text"][i]) for i in range(j, j + 5)])
                    for j in range(0, 50, 5)])
    assert spread < rand / 2  # batches hold similar lengths


def test_prefetch_yields_the_same_and_passes_errors(imgs):
    plain = batches(DataStream(imgs, batch_size=9))
    pre = batches(Prefetch(DataStream(imgs, batch_size=9), 2))
    assert len(pre) == len(plain)
    assert all(np.array_equal(a["features"], b["features"]) for a, b in zip(plain, pre))
    bad = Prefetch(OneHot(DataStream(imgs, batch_size=9), 10, which_sources="index"))
    with pytest.raises(DataError, match="outside 0..9"):
        batches(bad)


def test_stream_errors(imgs):
    with pytest.raises(DataError, match="expected a labkit.data dataset"):
        DataStream(np.zeros(3))
    with pytest.raises(DataError, match="wrap a dataset in DataStream"):
        OneHot(imgs, 10)
    with pytest.raises(DataError, match="not both"):
        DataStream(imgs, SequentialScheme(60, 2), batch_size=3)


def test_default_seed_is_random_but_kept_in_the_state(imgs):
    a = DataStream(imgs, batch_size=10, shuffle=True)
    b = DataStream(imgs, batch_size=10, shuffle=True)
    assert a.scheme.seed != b.scheme.seed
    b.load_state_dict(a.state_dict())
    assert all(np.array_equal(x["index"], y["index"]) for x, y in zip(a, b))
