"""A second probe of files: HDF5 dataset splits that cross, and checkpoint states whose
versions, counters, step numbers and seeds are of the wrong type or out of range, each refused
with a labkit error that names the field, before anything loads."""

import h5py
import numpy as np
import pytest

from labkit.data import H5Dataset, write_h5
from labkit.errors import DataError


# ---- dataset splits -------------------------------------------------------------------------
def _crafted(path, splits_text, n=10):
    """A labkit dataset file of ``n`` rows whose splits attribute is ``splits_text`` as is."""
    with h5py.File(path, "w", libver=("v110", "v110")) as f:
        f.attrs["labkit_dataset"] = np.int64(1)
        f.attrs["splits"] = np.array(splits_text.encode(),
                                     dtype=h5py.string_dtype("utf-8", len(splits_text)))
        f["x"] = np.arange(n, dtype=np.float32)
    return path


@pytest.mark.parametrize("splits,match", [
    ('{"train": [0, 6], "test": [4, 8]}', r"splits 'train' \[0, 6\] and 'test' \[4, 8\] cross"),
    ('{"test": [4, 10], "train": [0, 5]}', r"'train' \[0, 5\] and 'test' \[4, 10\] cross"),
    ('{"a": [0, 10], "b": [2, 4], "c": [3, 6]}', r"'b' \[2, 4\] and 'c' \[3, 6\] cross"),
    ('{"train": [-1, 5]}', r"split 'train'.*0 <= start <= stop <= 10"),
    ('{"train": [6, 2]}', r"split 'train'.*0 <= start <= stop <= 10"),
    ('{"train": [0, 11]}', r"split 'train'.*0 <= start <= stop <= 10"),
    ('{"train": [0, 4.0]}', r"split 'train'.*two integers"),
    ('{"train": [0, true]}', r"split 'train'.*two integers"),
    ('{"train": [0, 4, 5]}', r"split 'train'.*two integers"),
    ('{"train": [[0, 1, 2]]}', r"split 'train'.*two integers"),
    ('{"train": {"start": 0, "stop": 4}}', r"split 'train'.*two integers"),
    ('{"train": null}', r"split 'train'.*two integers"),
    ('[[0, 4]]', r"attribute 'splits': expected a JSON object"),
])
def test_crossing_or_bad_split_ranges_in_a_file_are_refused_on_open(tmp_path, splits, match):
    path = _crafted(tmp_path / "d.h5", splits)
    with pytest.raises(DataError, match=match) as e:
        H5Dataset(path, split=[])
    assert str(path) in str(e.value) and "rebuild it" in str(e.value)


def test_write_h5_refuses_crossing_splits():
    with pytest.raises(DataError, match=r"write_h5.*'train' \[0, 6\] and 'test' \[4, 8\] cross"):
        write_h5("/nonexistent/never-written.h5", {"x": np.arange(10)},
                 {"train": (0, 6), "test": (4, 8)})


@pytest.mark.parametrize("splits", [
    {"train": (0, 6), "valid": (6, 8), "train_full": (0, 8), "test": (8, 10)},  # converters
    {"train": (0, 4), "valid": (4, 4), "train_full": (0, 4), "test": (4, 10)},  # no valid rows
    {"train": (0, 8), "small": (2, 4), "test": (8, 10)},  # a subset inside its split
    {"a": (0, 0), "b": (0, 10), "c": (3, 3), "d": (10, 10)},  # empty splits meet nothing
    {"train": (0, 5), "test": (5, 10)},
])
def test_splits_that_nest_or_are_disjoint_are_read_as_written(tmp_path, splits):
    path = write_h5(tmp_path / "d.h5", {"x": np.arange(10)}, splits)
    for name, (a, b) in splits.items():
        ds = H5Dataset(path, split=name)
        assert ds.num_examples == b - a
        assert ds.get_data(slice(None))["x"].tolist() == list(range(a, b))


def test_many_splits_are_checked_quickly(tmp_path):
    import json
    import time

    splits = {f"s{i}": [i, i + 1] for i in range(5000)}
    splits.update({"all": [0, 5000], "big": [100, 200], "cross": [150, 300]})
    path = _crafted(tmp_path / "d.h5", json.dumps(splits), n=5000)
    t0 = time.perf_counter()
    with pytest.raises(DataError, match=r"'big' \[100, 200\] and 'cross' \[150, 300\] cross"):
        H5Dataset(path, split=[])
    assert time.perf_counter() - t0 < 2
