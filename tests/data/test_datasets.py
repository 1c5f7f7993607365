"""Datasets and the HDF5 layout: round trips against the arrays written, and clear errors."""

import h5py
import numpy as np
import pytest

from labkit.data import H5Dataset, IndexableDataset, write_h5
from labkit.errors import DataError


@pytest.fixture
def arrays(rng):
    n = 200
    return {"features": rng.standard_normal((n, 8, 16)).astype(np.float32),
            "targets": rng.integers(0, 10, n),
            "text": [rng.integers(0, 50, rng.integers(0, 9)).astype(np.int32) for _ in range(n)]}


@pytest.fixture
def h5file(tmp_path, arrays):
    return write_h5(tmp_path / "d.h5", arrays, {"train": (0, 150), "test": (150, 200),
                                                "odd": (10, 20)},
                    axis_labels={"features": ("batch", "channel", "time")},
                    metadata={"vocabulary": ["<unk>", "é", "b"]}, name="toy")


def ragged_equal(a, b):
    return len(a) == len(b) and all(np.array_equal(x, y) and x.dtype == y.dtype
                                    for x, y in zip(a, b))


REQUESTS = [3, slice(None), slice(5, 40), slice(0, 100, 7), np.array([9, 2, 2, 120, 0]),
            np.array([], dtype=np.int64), [5, 4, 3], np.arange(149, -1, -3)]


@pytest.mark.parametrize("in_memory", [False, True])
@pytest.mark.parametrize("request_", REQUESTS, ids=lambda r: repr(r)[:20])
def test_h5_reads_what_was_written(h5file, arrays, in_memory, request_):
    ds = H5Dataset(h5file, split="train", load_in_memory=in_memory)
    assert ds.num_examples == 150 and ds.sources == ("features", "targets", "text")
    got = ds.get_data(request_)
    rows = np.arange(150)[request_]
    assert got["features"].dtype == np.float32
    assert np.array_equal(got["features"], arrays["features"][:150][request_])
    assert np.array_equal(got["targets"], arrays["targets"][:150][request_])
    want_text = [arrays["text"][i] for i in np.atleast_1d(rows)]
    if np.ndim(rows) == 0:
        assert np.array_equal(got["text"], want_text[0])
    else:
        assert ragged_equal(got["text"], want_text)


def test_splits_offset_and_concatenate(h5file, arrays):
    test = H5Dataset(h5file, split="test", sources=["targets"])
    assert test.sources == ("targets",)
    assert np.array_equal(test.get_data(slice(None))["targets"], arrays["targets"][150:])
    both = H5Dataset(h5file, split=["odd", "test"])
    assert both.num_examples == 60
    want = np.concatenate([arrays["features"][10:20], arrays["features"][150:]])
    idx = np.array([59, 0, 11, 10])
    assert np.array_equal(both.get_data(idx)["features"], want[idx])
    assert np.array_equal(both.get_data(slice(8, 13))["features"], want[8:13])


def test_layout_is_documented_and_plain_hdf5(h5file):
    with h5py.File(h5file) as f:
        assert f.attrs["labkit_dataset"] == 1
        assert f["features"].fletcher32 and f["features"].chunks[0] > 1
        assert f["features"].chunks[0] * 8 * 16 * 4 <= 16 * 1024
        assert f["text"].attrs["ragged"] == 1 and f["_ragged/text"].shape == (201,)
    ds = H5Dataset(h5file)
    assert ds.axis_labels["features"] == ("batch", "channel", "time")
    assert ds.metadata("vocabulary") == ["<unk>", "é", "b"]
    assert not list(h5file.parent.glob(".*tmp*")), "temporary file left behind"


def test_file_reopens_in_each_process(h5file):
    import pickle

    ds = H5Dataset(h5file)
    ds.get_data(0)
    assert ds._file is not None
    clone = pickle.loads(pickle.dumps(ds))  # what a worker receives: no handle
    assert clone._file is None
    assert np.array_equal(clone.get_data(4)["features"], ds.get_data(4)["features"])


def test_not_a_labkit_file(tmp_path):
    p = tmp_path / "plain.h5"
    with h5py.File(p, "w") as f:
        f["x"] = np.zeros(3)
    with pytest.raises(DataError, match=r"plain.h5 is not a labkit dataset.*labkit_dataset"):
        H5Dataset(p)
    (tmp_path / "text.h5").write_text("hello")
    with pytest.raises(DataError, match=r"text.h5: cannot open as HDF5"):
        H5Dataset(tmp_path / "text.h5")
    with pytest.raises(DataError, match="no such dataset file"):
        H5Dataset(tmp_path / "missing.h5")


def test_missing_split_or_source_lists_what_exists(h5file):
    with pytest.raises(DataError, match=r"no split 'valid'; the file has splits \['odd', 'test', "
                                        r"'train'\]"):
        H5Dataset(h5file, split="valid")
    with pytest.raises(DataError, match=r"no source 'labels'; the file has sources"):
        H5Dataset(h5file, sources=["labels"])
    with pytest.raises(DataError, match="no metadata 'classes'"):
        H5Dataset(h5file).metadata("classes")


def test_truncated_file_is_reported(h5file, tmp_path):
    data = h5file.read_bytes()
    cut = tmp_path / "cut.h5"
    cut.write_bytes(data[: len(data) // 2])
    with pytest.raises(DataError, match=r"cut.h5.*(truncated|cannot open)"):
        ds = H5Dataset(cut)
        ds.get_data(slice(None))


def test_corrupted_chunk_is_reported_not_read(h5file, arrays):
    with h5py.File(h5file) as f:
        info = f["features"].id.get_chunk_info(3)
        rows = f["features"].chunks[0]
    raw = bytearray(h5file.read_bytes())
    raw[info.byte_offset + 10] ^= 0xFF
    h5file.write_bytes(bytes(raw))
    ds = H5Dataset(h5file)
    assert np.array_equal(ds.get_data(0)["features"], arrays["features"][0])  # other chunks fine
    bad_row = 3 * rows + 1
    with pytest.raises(DataError, match=r"source 'features', rows \[" + str(bad_row)
                                        + r"\]: the data failed its checksum"):
        ds.get_data([bad_row])


@pytest.mark.parametrize("bad, message", [
    (np.array([0.5, 1.0]), "cannot sort this request"),
    (np.zeros((2, 2), dtype=int), "cannot sort this request"),
    ("abc", "cannot sort this request"),
    (150, "example 150 is out of range"),
    ([3, -1], "example -1 is out of range"),
    (slice(0, 10, -1), "positive step"),
])
def test_bad_requests(h5file, bad, message):
    with pytest.raises(DataError, match=message):
        H5Dataset(h5file).get_data(bad)


def test_write_errors(tmp_path):
    with pytest.raises(DataError, match="sources differ in length"):
        write_h5(tmp_path / "a.h5", {"x": np.zeros(3), "y": np.zeros(4)})
    with pytest.raises(DataError, match=r"split 'train' = \(0, 9\): expected 0 <= start <= "
                                        r"stop <= 3"):
        write_h5(tmp_path / "a.h5", {"x": np.zeros(3)}, {"train": (0, 9)})
    with pytest.raises(DataError, match="dtype <U1"):
        write_h5(tmp_path / "a.h5", {"x": np.array(["a", "b"])})
    assert not (tmp_path / "a.h5").exists()


def test_indexable_dataset():
    ds = IndexableDataset({"x": np.arange(10).reshape(5, 2), "s": [np.arange(i) for i in range(5)]})
    got = ds.get_data(np.array([4, 1]))
    assert np.array_equal(got["x"], [[8, 9], [2, 3]]) and ragged_equal(got["s"], [np.arange(4),
                                                                                  np.arange(1)])
    with pytest.raises(DataError, match="sources differ in length"):
        IndexableDataset({"x": np.zeros(3), "y": np.zeros(2)})
    with pytest.raises(DataError, match=r"no source 'z'; the sources are \['x', 's'\]"):
        ds.get_data(0, sources=["z"])


# ---- the checksummed container and the layout checked at open --------------------------------
def test_written_in_hdf5s_checksummed_format(h5file):
    from labkit.data.layout import check_container

    raw = h5file.read_bytes()
    assert raw[8] == 3 and check_container(h5file) == 3  # superblock v3 (HDF5 1.10 format)
    assert b"GCOL" not in raw  # no global heap: text attributes live in checksummed headers
    with h5py.File(h5file) as f:
        assert h5py.h5o.get_info(f["features"].id).hdr.version == 2
        assert f.attrs["splits"].dtype.kind == "S"
        assert H5Dataset(h5file).info == {"name": "toy"}


def _old_format(path, arrays):
    """A file as labkit wrote it before the checksummed format."""
    with h5py.File(path, "w") as f:
        f.attrs["labkit_dataset"] = 1
        f.attrs["splits"] = '{"train": [0, 150], "test": [150, 200]}'
        f.attrs["name"] = "old"
        f["features"] = arrays["features"]
        f["features"].attrs["axis_labels"] = '["batch", "channel", "time"]'
        f["targets"] = arrays["targets"]
    return path


def test_old_format_is_read_with_a_warning_and_rewritten_by_convert_h5(tmp_path, arrays):
    from labkit.data import convert_h5

    old = _old_format(tmp_path / "old.h5", arrays)
    with pytest.warns(UserWarning, match=r"old.h5 is in HDF5's old file format .*no checksums.*"
                                         r"convert_h5"):
        ds = H5Dataset(old, split="test")
    assert np.array_equal(ds.get_data(slice(None))["features"], arrays["features"][150:])
    new = convert_h5(old, tmp_path / "new.h5")
    assert new.read_bytes()[8] == 3
    again = H5Dataset(new, split="test")
    assert again.info == {"name": "old"} and again.axis_labels["features"] == ("batch", "channel",
                                                                              "time")
    assert np.array_equal(again.get_data(slice(None))["features"], arrays["features"][150:])


def _set(path, where, key, value):
    with h5py.File(path, "r+") as f:
        f[where].attrs[key] = value


@pytest.mark.parametrize("value, message", [
    ('{"train": [-10, -2]}', r"split 'train': expected 0 <= start <= stop <= 200 "
                              r".*got \[-10, -2\]"),
    ('{"train": [0, 7.5]}', r"split 'train': expected \[start, stop\] \(two integers\), got "
                            r"\[0, 7.5\]"),
    ('{"train": [0, true]}', r"split 'train': expected \[start, stop\] \(two integers\)"),
    ('[[0, 150]]', r"expected a JSON object"),
])
def test_splits_are_checked_at_open(h5file, value, message):
    _set(h5file, "/", "splits", value)
    with pytest.raises(DataError, match=r"d.h5: attribute 'splits'.*" + message):
        H5Dataset(h5file, split=[])


def _swap_two(o):
    i = 1 + int(np.flatnonzero(o[2:] > o[1:-1])[0])  # o[i] < o[i + 1]
    o = o.copy()
    o[i], o[i + 1] = o[i + 1], o[i]
    return o


@pytest.mark.parametrize("change, message", [
    (_swap_two, r"offset \d+ is smaller than the one before it"),
    (lambda o: np.r_[o[:-1], o[-1] + 1], r"expected offsets up to the data length"),
    (lambda o: np.delete(o, 5), r"expected one number of rows for every source"),
    (lambda o: o.astype(np.float64), r"expected N \+ 1 integer offsets"),
])
def test_ragged_offsets_are_checked_at_open(h5file, change, message):
    with h5py.File(h5file, "r+") as f:
        offsets = f["_ragged/text"][()]
        del f["_ragged/text"]
        f["_ragged/text"] = change(offsets)
    with pytest.raises(DataError, match=message):
        H5Dataset(h5file)


def test_write_h5_refuses_splits_that_are_not_two_integers(tmp_path):
    for rng in [(0, 7.5), (True, 2), (0, 1, 2), "0:3"]:
        with pytest.raises(DataError, match=r"split 'train' = .*: expected \[start, stop\] "
                                            r"\(two integers\)"):
            write_h5(tmp_path / "a.h5", {"x": np.zeros(9)}, {"train": rng})
    assert not (tmp_path / "a.h5").exists()
