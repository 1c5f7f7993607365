"""Dataset files crafted elsewhere, each refused with a DataError that names the file and the
culprit, or read exactly as written: groups of the layout that are links to other files or to
themselves, data HDF5 would make up (never written: read as zeros, and a 536-byte file that
declares 8 TB), a filter this h5py cannot decode, dtypes that write_h5 and the reader must agree
on, big-endian data, a file changed or replaced after it was opened (in this process and in a
worker's), and load_in_memory past the memory there is."""

from __future__ import annotations

import os
import shutil
import struct
import warnings

import h5py
import numpy as np
import pytest

from labkit.data import (
    DataStream,
    H5Dataset,
    Parallel,
    SequentialScheme,
    convert_npz,
    datasets,
    write_h5,
)
from labkit.errors import DataError, WorkerError

pytestmark = pytest.mark.timeout(120, method="thread")


def crafted(path, n=4, libver=("v110", "v110")):
    """An open file with the root attributes write_h5 gives it (one split, 'train', of n rows)."""
    text = f'{{"train": [0, {n}]}}'
    f = h5py.File(path, "w", libver=libver)
    f.attrs["labkit_dataset"] = np.int64(1)
    f.attrs["splits"] = np.array(text.encode(), dtype=h5py.string_dtype("utf-8", len(text)))
    return f


def read(path, **kwargs):
    ds = H5Dataset(path, split="train", **kwargs)
    return ds, ds.get_data(slice(0, ds.num_examples))


# ---- the layout's groups are members of this file -------------------------------------------
@pytest.fixture
def elsewhere(tmp_path):
    """Another file holding what a crafted file's /_ragged or /_meta would read."""
    path = tmp_path / "elsewhere.h5"
    with h5py.File(path, "w") as f:
        f["ragged/text"] = np.arange(5, dtype=np.int64)
        f["meta/level"] = np.frombuffer(b'"read from elsewhere"', np.uint8)
    return path


@pytest.mark.parametrize("group", ["_ragged", "_meta"])
@pytest.mark.parametrize("kind", ["external", "soft", "loop"])
def test_the_layouts_groups_that_are_links_are_refused(tmp_path, elsewhere, group, kind):
    path = tmp_path / "d.h5"
    with crafted(path) as f:
        f["text"] = np.arange(4, dtype=np.int32)
        f["text"].attrs["ragged"] = np.int64(1)
        f["_ragged/text"] = np.arange(5, dtype=np.int64)
        if group == "_meta":
            f["somewhere/level"] = np.frombuffer(b'"read from a link"', np.uint8)
        else:
            f.move("_ragged", "somewhere")
        target = {"external": h5py.ExternalLink(str(elsewhere), group.strip("_")),
                  "soft": h5py.SoftLink("/somewhere"), "loop": h5py.SoftLink(f"/{group}")}
        f[group] = target[kind]
    with pytest.raises(DataError, match=f"d.h5: /{group}: expected a group stored in this file"):
        H5Dataset(path, split="train")


def test_a_pipe_is_refused_not_waited_on(tmp_path):
    os.mkfifo(tmp_path / "d.h5")
    with pytest.raises(DataError, match="d.h5: not a regular file"):
        H5Dataset(tmp_path / "d.h5")


# ---- data HDF5 would make up ----------------------------------------------------------------
def _unwritten_source(f):
    f.create_dataset("x", shape=(4, 3), dtype=np.float32, chunks=(1, 3), fletcher32=True)
    f["x"][0] = 1  # rows 1..3 never written


def _unwritten_contiguous(f):
    f.create_dataset("x", shape=(4, 3), dtype=np.float32)


def _unwritten_offsets(f):
    f["text"] = np.zeros(0, dtype=np.int32)
    f["text"].attrs["ragged"] = np.int64(1)
    f.create_dataset("_ragged/text", shape=(5,), dtype=np.int64)  # zeros: four empty rows


def _unwritten_metadata(f):
    f["x"] = np.zeros(4)
    f.create_dataset("_meta/level", shape=(1,), dtype=np.uint8, fillvalue=ord("0"))


@pytest.mark.parametrize("make, field", [
    (_unwritten_source, "source 'x'"), (_unwritten_contiguous, "source 'x'"),
    (_unwritten_offsets, "offsets /_ragged/text"), (_unwritten_metadata, "metadata /_meta/level"),
])
def test_data_never_written_is_refused_not_read_as_zeros(tmp_path, make, field):
    path = tmp_path / "d.h5"
    with crafted(path) as f:
        make(f)
    with pytest.raises(DataError, match=f"d.h5: {field}: its data .* was never written"):
        read(path)


@pytest.mark.parametrize("in_memory", [False, True])
def test_a_small_file_declaring_terabytes_is_refused_at_open(tmp_path, in_memory):
    path = tmp_path / "d.h5"
    with crafted(path, n=10 ** 12) as f:
        f.create_dataset("x", shape=(10 ** 12,), dtype=np.float64, chunks=(1 << 20,))
    assert path.stat().st_size < 10_000
    with pytest.raises(DataError, match=r"source 'x': its data \(8000000000000 bytes"):
        H5Dataset(path, split="train", load_in_memory=in_memory)


def test_a_source_stored_in_huge_chunks_is_refused_at_open(tmp_path):
    """Each read of a row decompresses its whole chunk: one chunk of 1 GiB (which a file of a
    few MiB holds, compressed) would be unpacked for every minibatch."""
    path = tmp_path / "d.h5"
    with crafted(path) as f:
        f.create_dataset("x", shape=(4, 8192, 8192), dtype=np.float32,
                         chunks=(4, 8192, 8192), compression="gzip")
    assert path.stat().st_size < 1 << 20
    with pytest.raises(DataError, match=r"d.h5: source 'x': stored in chunks of shape \(4, 8192, "
                       r"8192\) \(1,024 MiB each, more than 64 MiB\).*smaller chunks"):
        H5Dataset(path, split="train")
    with crafted(path) as f:  # NOTE: at the limit: read
        f.create_dataset("x", data=np.ones((4, 1024, 4096), np.float32), chunks=(4, 1024, 4096))
    assert read(path)[1]["x"].sum() == 4 * 1024 * 4096


def test_a_filter_this_h5py_lacks_is_named_at_open(tmp_path):
    path = tmp_path / "d.h5"
    with crafted(path, libver="earliest") as f:  # NOTE: headers without checksums, to edit
        f.create_dataset("x", data=np.arange(4.0), chunks=(4,), compression="lzf")
    data = path.read_bytes()
    lzf = struct.pack("<H", 32000)
    assert data.count(lzf) == 1 and not h5py.h5z.filter_avail(64999)
    path.write_bytes(data.replace(lzf, struct.pack("<H", 64999)))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the old file format's warning
        with pytest.raises(DataError, match="d.h5: source 'x': stored with HDF5 filter 64999 .*"
                                            "install its plugin"):
            H5Dataset(path, split="train")


# ---- dtypes ---------------------------------------------------------------------------------
@pytest.mark.parametrize("value", [
    np.array([1 + 2j, 3j]), np.array([b"ab", b"c"]), np.zeros(2, dtype=[("a", "f4")]),
    np.zeros(2, dtype=np.longdouble), np.array(["2020-01-01", "2021-01-01"], "M8[D]"),
    [np.array(["a", "b"]), np.array(["c"])],
])
def test_write_h5_refuses_what_the_reader_refuses(tmp_path, value):
    with pytest.raises(DataError, match=r"d.h5\): source 'x': expected numbers"):
        write_h5(tmp_path / "d.h5", {"x": value})
    assert not (tmp_path / "d.h5").exists()


def test_write_h5_refuses_a_scalar_it_made_one_row_of(tmp_path):
    with pytest.raises(DataError, match="source 'x' is a scalar"):
        write_h5(tmp_path / "d.h5", {"x": np.float64(3)})


def test_a_long_double_source_is_refused_on_read(tmp_path):
    path = tmp_path / "d.h5"
    with crafted(path) as f:
        f["x"] = np.arange(4, dtype=np.longdouble)
    with pytest.raises(DataError, match="d.h5: source 'x': expected numbers .* float128"):
        H5Dataset(path, split="train")


@pytest.mark.parametrize("in_memory", [False, True])
def test_big_endian_data_is_read_in_this_machines_byte_order(tmp_path, in_memory):
    path = tmp_path / "d.h5"
    x = np.arange(24, dtype=">f4").reshape(6, 4)
    with crafted(path, n=6) as f:
        f.create_dataset("chunked", data=x, chunks=(1, 4), fletcher32=True)
        f["contiguous"] = x.astype(">i8")
        f["text"] = np.arange(9, dtype=">i4")
        f["text"].attrs["ragged"] = np.int64(1)
        f["_ragged/text"] = np.array([0, 1, 3, 3, 6, 8, 9], dtype=">i8")
    ds = H5Dataset(path, split="train", load_in_memory=in_memory)
    for request in (slice(0, 6), [5, 0, 2], 3):
        got = ds.get_data(request)
        assert got["chunked"].dtype == np.float32 and got["contiguous"].dtype == np.int64
        assert np.array_equal(got["chunked"], x[request])
        assert np.array_equal(got["contiguous"], x[request])
        texts = got["text"] if not isinstance(request, int) else [got["text"]]
        assert all(t.dtype == np.int32 for t in texts)
    assert ds.get_data(4)["text"].tolist() == [6, 7]


def test_a_big_endian_npz_is_written_in_this_machines_byte_order(tmp_path):
    np.savez(tmp_path / "a.npz", x=np.arange(5, dtype=">f8"))
    path = convert_npz(tmp_path / "a.npz", tmp_path / "a.h5")
    with h5py.File(path) as f:
        assert f["x"].dtype.isnative
    assert H5Dataset(path, split="all").get_data(slice(0, 5))["x"].tolist() == [0, 1, 2, 3, 4]


# ---- a file changed after it was opened -----------------------------------------------------
@pytest.fixture
def opened(tmp_path):
    path = write_h5(tmp_path / "d.h5", {"x": np.arange(100.0)}, {"train": (0, 50),
                                                                   "test": (50, 100)})
    return path, H5Dataset(path, split="train")


def _replace(path):
    """What `labkit convert` or write_h5 does to a file: a new one renamed over it."""
    write_h5(path, {"x": -np.arange(100.0)}, {"train": (0, 50), "test": (50, 100)})


def test_a_file_replaced_before_the_first_read_is_refused(opened):
    path, ds = opened
    _replace(path)
    with pytest.raises(DataError, match="d.h5: the file was changed or replaced since"):
        ds.get_data(slice(0, 3))


def test_a_file_replaced_while_open_reads_the_file_that_was_opened(opened):
    path, ds = opened
    ds.get_data(0)
    _replace(path)  # NOTE: the open handle still reads the file that was checked
    assert ds.get_data(slice(0, 3))["x"].tolist() == [0, 1, 2]


def test_a_file_rewritten_in_place_while_open_is_refused(opened):
    path, ds = opened
    ds.get_data(0)
    with open(path, "r+b") as fh:  # NOTE: the same inode, rewritten
        fh.seek(0, 2)
        fh.write(b"\0" * 512)
    with pytest.raises(DataError, match="d.h5: the file was changed or replaced since"):
        ds.get_data(0)


def test_a_worker_refuses_a_replaced_file_and_the_main_process_says_so(opened):
    path, ds = opened
    _replace(path)
    stream = Parallel(DataStream(ds, SequentialScheme(50, 10)), workers=1)
    try:
        with pytest.raises(WorkerError, match="DataError: .*d.h5: the file was changed or "
                                              "replaced since"):
            next(iter(stream))
    finally:
        stream.close()


def test_a_copy_of_a_file_reads_like_the_original(opened, tmp_path):
    path, _ = opened
    copy = shutil.copy(path, tmp_path / "copy.h5")
    ds = H5Dataset(copy, split="test")
    assert ds.get_data(slice(0, 2))["x"].tolist() == [50, 51]


# ---- memory ---------------------------------------------------------------------------------
def test_load_in_memory_past_the_memory_available_is_refused(tmp_path, monkeypatch):
    path = write_h5(tmp_path / "d.h5", {"x": np.zeros((100, 10)), "t": [np.arange(3)] * 100})
    # NOTE: x is 8,000 bytes, t 2,400 and 100 arrays of ~100 bytes
    monkeypatch.setattr(datasets, "_available_memory", lambda: 13_000)
    with pytest.raises(DataError, match="d.h5: load_in_memory=True needs 19.9 KiB for split "
                                        "all but 12.7 KiB .* load_in_memory=False"):
        H5Dataset(path, split="all", load_in_memory=True)
    assert H5Dataset(path, split="all", sources="t", load_in_memory=True)._memory is not None
    monkeypatch.undo()
    free = datasets._available_memory()
    assert free is None or 0 < free < 1 << 60
    assert H5Dataset(path, split="all", load_in_memory=True).get_data(3)["x"].shape == (10,)


def test_memory_running_out_while_reading_names_the_file(opened):
    _, ds = opened

    def read():
        raise MemoryError("Unable to allocate 7.28 TiB")
    with pytest.raises(DataError, match="d.h5: source 'x', rows 0:5: not enough memory"):
        ds._guard(read, "x", "0:5")

