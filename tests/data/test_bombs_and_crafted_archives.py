"""Decompression bombs and crafted archives given to the converters: each is refused from what
it declares, before the expansion is unpacked (tracemalloc sees no allocation near its size),
with a DataError naming the file, the member and the fix, and no output file is written.

The bombs are small (a few MiB of zeros, a few KiB compressed) and LABKIT_CONVERT_MAX_BYTES is
set low (1 MiB) to stand in for the real limit."""

from __future__ import annotations

import gzip
import io
import os
import struct
import tarfile
import tracemalloc
import warnings
import zipfile

import numpy as np
import pytest

from labkit import cli as _cli
from labkit import config
from labkit.data import (
    H5Dataset,
    convert_cifar10,
    convert_h5,
    convert_mnist,
    convert_npz,
    convert_text,
    read_idx,
)
from labkit.data.layout import _text_attr
from labkit.errors import ConfigError, DataError

pytestmark = pytest.mark.timeout(60, method="thread")

MIB = 1 << 20
BOMB = 4 * MIB  # what each bomb expands to


@pytest.fixture
def low_limit(monkeypatch):
    monkeypatch.setenv("LABKIT_CONVERT_MAX_BYTES", "1M")


def refused(fn, match, *, peak=MIB // 2):
    """``fn()`` raises DataError matching ``match`` and allocates less than ``peak`` meanwhile."""
    tracemalloc.start()
    try:
        with pytest.raises(DataError, match=match) as e:
            fn()
        used = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert used < peak, f"allocated {used} bytes on the way to refusing it"
    return str(e.value)


def npy_header(shape, descr="|u1") -> bytes:
    text = f"{{'descr': '{descr}', 'fortran_order': False, 'shape': {shape!r}, }}"
    text += " " * (63 - (10 + len(text)) % 64) + "\n"
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(text)) + text.encode("latin1")


def zip_of(members, method=zipfile.ZIP_DEFLATED) -> bytes:
    """A zip of ``{name: bytes or an iterable of blocks}``, written a block at a time."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", method) as z, warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # NOTE: 'Duplicate name', as meant
        for name, data in members:
            with z.open(name, "w", force_zip64=True) as w:
                for block in [data] if isinstance(data, bytes) else data:
                    w.write(block)
    return buf.getvalue()


def zeros(n, block=MIB):
    for _ in range(n // block):
        yield bytes(block)


# ---- .npz -----------------------------------------------------------------------------------
def test_an_npz_bomb_is_refused_from_its_declared_size(tmp_path, low_limit):
    bomb = zip_of([("x.npy", [npy_header((BOMB,)), *zeros(BOMB)])])
    assert len(bomb) < BOMB / 100
    (tmp_path / "b.npz").write_bytes(bomb)
    msg = refused(lambda: convert_npz(tmp_path / "b.npz", tmp_path / "b.h5"),
                  r"b\.npz: member 'x\.npy' declares 4,194,432 bytes \(4\.0 MiB\) of data, more "
                  r"than the 1,048,576 bytes \(1\.0 MiB\) a converter unpacks from one source")
    assert "LABKIT_CONVERT_MAX_BYTES=1G" in msg
    assert "it was not unpacked and nothing was written" in msg
    assert not (tmp_path / "b.h5").exists()


def test_npz_members_count_together(tmp_path, low_limit):
    half = [npy_header((MIB // 2,)), *zeros(MIB // 2, MIB // 2)]
    (tmp_path / "b.npz").write_bytes(zip_of([("x.npy", half), ("y.npy", list(half))]))
    refused(lambda: convert_npz(tmp_path / "b.npz", tmp_path / "b.h5"),
            r"member 'y\.npy' declares 524,416 bytes .* \(1,048,832 bytes \(1\.0 MiB\) with "
            r"what this source declared before it\)")


def test_a_member_larger_than_its_npy_header_is_refused_before_it_is_unpacked(tmp_path):
    # NOTE: under the default limit: the header says 8 bytes, the member 4 MiB of zeros
    (tmp_path / "b.npz").write_bytes(zip_of([("x.npy", [npy_header((8,)), *zeros(BOMB)])]))
    refused(lambda: convert_npz(tmp_path / "b.npz", tmp_path / "b.h5"),
            r"member 'x\.npy': its header declares shape \(8,\) of uint8 \(8 bytes\) but the "
            r"member holds 4,194,304 bytes \(4\.0 MiB\) of data; it is truncated or damaged")


@pytest.mark.parametrize("shape, data, match", [
    ((100,), bytes(40), r"shape \(100,\) of uint8 \(100 bytes\) but the member holds 40 bytes"),
    ((2**62, 2**62), bytes(8), r"shape \(4611686018427387904, 4611686018427387904\) of uint8 "
                               r"\(21,267,647,932,558,653,966,460,912,964,485,513,216 bytes "
                               r"\(1\.84e\+19 EiB\)\) but the member holds 8 bytes"),
    ((-1, 8), bytes(8), r"declares shape \(-1, 8\); the file is damaged or crafted"),
    ((), bytes(1), r"member 'x\.npy' is a scalar"),
], ids=["truncated", "overflowing", "negative", "scalar"])
def test_npy_headers_that_disagree_with_their_data(tmp_path, shape, data, match):
    (tmp_path / "b.npz").write_bytes(zip_of([("x.npy", npy_header(shape) + data)]))
    refused(lambda: convert_npz(tmp_path / "b.npz", tmp_path / "b.h5"), match)


def _encrypted() -> bytes:
    raw = bytearray(zip_of([("x.npy", npy_header((1,)) + b"a")], zipfile.ZIP_STORED))
    for sig, at in ((b"PK\x03\x04", 6), (b"PK\x01\x02", 8)):  # the flag bits of both headers
        i = raw.find(sig)
        raw[i + at] |= 1
    return bytes(raw)


def _method(n) -> bytes:
    raw = bytearray(zip_of([("x.npy", npy_header((1,)) + b"a")], zipfile.ZIP_STORED))
    for sig, at in ((b"PK\x03\x04", 8), (b"PK\x01\x02", 10)):
        i = raw.find(sig)
        raw[i + at:i + at + 2] = struct.pack("<H", n)
    return bytes(raw)


@pytest.mark.parametrize("data, match", [
    (zip_of([("x.npy", npy_header((1,)) + b"a"), ("x.npy", npy_header((1,)) + b"b")]),
     r"member 'x\.npy' appears twice"),
    (zip_of([("a.npy.npy", npy_header((1,)) + b"a"), ("a.npy", npy_header((1,)) + b"b")]),
     r"member 'a\.npy\.npy': 'a\.npy' cannot name a source"),
    (zip_of([("../x.npy", npy_header((1,)) + b"a")]), r"'\.\./x' cannot name a source"),
    (zip_of([("x.npy", npy_header((1,), "<U3") + bytes(12))]), r"member 'x\.npy': expected "
                                                                 "numbers"),
    (zip_of([("x.npy", npy_header((2,)) + b"ab"), ("y.npy", npy_header((3,)) + b"abc")]),
     r"arrays differ in length .*\{'x': 2, 'y': 3\}"),
    (zip_of([]), "holds no arrays"),
    (_encrypted(), r"member 'x\.npy' is encrypted"),
    (_method(99), r"member 'x\.npy' is compressed with zip method 99"),
], ids=["duplicate", "ambiguous", "path", "strings", "lengths", "empty", "encrypted", "method"])
def test_crafted_npz_archives(tmp_path, data, match):
    (tmp_path / "b.npz").write_bytes(data)
    with pytest.raises(DataError, match=r"b\.npz: .*" + match):
        convert_npz(tmp_path / "b.npz", tmp_path / "b.h5")
    assert not (tmp_path / "b.h5").exists()


def test_a_bad_crc_past_the_header_names_the_member(tmp_path):
    buf = io.BytesIO()
    np.savez(buf, x=np.arange(20000.0))  # NOTE: past the first read of the member's header
    raw = bytearray(buf.getvalue())
    raw[-1000] ^= 1  # NOTE: in the data (the central directory is the last ~100 bytes)
    (tmp_path / "b.npz").write_bytes(bytes(raw))
    with pytest.raises(DataError, match=r"member 'x\.npy': not a readable .npy array .*CRC"):
        convert_npz(tmp_path / "b.npz", tmp_path / "b.h5")


# ---- IDX ------------------------------------------------------------------------------------
def idx_gz(dims, body_blocks) -> bytes:
    buf = io.BytesIO()
    with gzip.GzipFile(fileobj=buf, mode="wb") as g:
        g.write(b"\0\0\x08" + bytes([len(dims)]) + struct.pack(f">{len(dims)}I", *dims))
        for block in body_blocks:
            g.write(block)
    return buf.getvalue()


def test_an_idx_gzip_bomb_is_refused_from_its_header(tmp_path, low_limit):
    (tmp_path / "x-idx.gz").write_bytes(idx_gz((BOMB // 1024, 1024), zeros(BOMB)))
    refused(lambda: read_idx(tmp_path / "x-idx.gz"),
            r"x-idx\.gz \(its header: \(4096, 1024\) of uint8\) declares 4,194,304 bytes")


def test_an_idx_gzip_stream_longer_than_its_header_is_not_unpacked(tmp_path):
    (tmp_path / "x-idx.gz").write_bytes(idx_gz((8,), zeros(BOMB)))
    refused(lambda: read_idx(tmp_path / "x-idx.gz"),
            r"x-idx\.gz \(its header: \(8,\) of uint8\) holds more than the 8 bytes of data it "
            "declares")
    (tmp_path / "x-idx.gz").write_bytes(idx_gz((8,), [b"abc"]))
    refused(lambda: read_idx(tmp_path / "x-idx.gz"), r"declares 8 bytes of data but holds 3 bytes")


def test_mnist_counts_its_four_files_together(tmp_path, monkeypatch):
    monkeypatch.setenv("LABKIT_CONVERT_MAX_BYTES", "800")
    for prefix, n in (("train", 1), ("t10k", 1)):
        (tmp_path / f"{prefix}-images-idx3-ubyte.gz").write_bytes(idx_gz((n, 20, 20), [bytes(400)]))
        (tmp_path / f"{prefix}-labels-idx1-ubyte.gz").write_bytes(idx_gz((n,), [b"\1"]))
    with pytest.raises(DataError, match=r"t10k-images-idx3-ubyte\.gz .*\(801 bytes with what"):
        convert_mnist(tmp_path, tmp_path / "m.h5")
    monkeypatch.setenv("LABKIT_CONVERT_MAX_BYTES", "802")
    assert H5Dataset(convert_mnist(tmp_path, tmp_path / "m.h5"), split="train_full").num_examples


# ---- tar (CIFAR-10) -------------------------------------------------------------------------
BATCHES = [f"data_batch_{i}.bin" for i in range(1, 6)] + ["test_batch.bin"]


def tar_of(members, mode="w:gz", fmt=tarfile.GNU_FORMAT) -> bytes:
    """``members``: (TarInfo, data or None); None writes the header alone (truncated)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode=mode, format=fmt) as tar:
        for info, data in members:
            if data is None:
                tar.fileobj.write(info.tobuf(fmt, tar.encoding, tar.errors))
            else:
                tar.addfile(info, io.BytesIO(data) if info.isfile() else None)
    return buf.getvalue()


def member(name, size=None, data=b"", **attrs):
    info = tarfile.TarInfo(f"cifar-10-batches-bin/{name}" if "/" not in name else name)
    info.size = len(data) if size is None else size
    for k, v in attrs.items():
        setattr(info, k, v)
    return info


def record(label=3) -> bytes:
    return bytes([label]) + bytes(3072)


def good_batches(skip=()):
    return [(member(n, data=record()), record()) for n in BATCHES if n not in skip]


@pytest.mark.parametrize("members, match", [
    ([(member("data_batch_1.bin", 2**40), None)],
     r"member 'cifar-10-batches-bin/data_batch_1\.bin' declares 1,099,511,627,776 bytes "
     r"\(1\.0 TiB\) of data, more than the 4,294,967,296 bytes \(4\.0 GiB\) .*"
     "LABKIT_CONVERT_MAX_BYTES=1024G"),
    ([(member("readme.html", 2**40), None)], r"member 'cifar-10-batches-bin/readme\.html' "
                                             r"declares 1,099,511,627,776 bytes"),
    ([(member("data_batch_1.bin", -3073), None)],
     r"member 'cifar-10-batches-bin/data_batch_1\.bin' declares a negative size \(-3073\)"),
    ([(member("data_batch_1.bin", 10001 * 3073), None)],
     r"member 'cifar-10-batches-bin/data_batch_1\.bin' declares 30,733,073 bytes \(29\.3 MiB\), "
     r"more than a data_batch_1\.bin can hold \(30,730,000 bytes"),
], ids=["member", "skipped-member", "negative", "more-than-a-batch"])
def test_tar_members_are_refused_from_their_headers(tmp_path, members, match):
    (tmp_path / "c.tar.gz").write_bytes(tar_of(members))
    refused(lambda: convert_cifar10(tmp_path / "c.tar.gz", tmp_path / "c.h5"), r"c\.tar\.gz: "
            + match)


def test_a_tar_bomb_of_zeros_is_refused_before_it_is_unpacked(tmp_path, low_limit):
    # NOTE: the real thing: a data member of 4 MiB of zeros, a few KiB in the archive
    data = bytes(BOMB)
    (tmp_path / "c.tar.bz2").write_bytes(tar_of([(member("readme.html", data=data), data)],
                                                "w:bz2"))
    assert (tmp_path / "c.tar.bz2").stat().st_size < 1000
    del data
    refused(lambda: convert_cifar10(tmp_path / "c.tar.bz2", tmp_path / "c.h5"),
            r"member 'cifar-10-batches-bin/readme\.html' declares 4,194,304 bytes")


@pytest.mark.parametrize("fmt", [tarfile.PAX_FORMAT, tarfile.GNU_FORMAT], ids=["pax", "gnu"])
def test_a_header_bomb_is_not_held_in_memory(tmp_path, fmt):
    """tarfile reads a pax header or a GNU long name whole, before any member can be checked:
    one of 8 MiB, a few KiB in the archive, is refused as the stream reaches it."""
    info = member("data_batch_1.bin", data=b"")
    if fmt == tarfile.PAX_FORMAT:
        info.pax_headers = {"comment": "a" * (2 * BOMB)}
    else:
        info.name = "d/" * BOMB + "data_batch_1.bin"
    (tmp_path / "c.tar.gz").write_bytes(tar_of([(info, b"")], "w:gz", fmt))
    assert (tmp_path / "c.tar.gz").stat().st_size < 100_000
    refused(lambda: convert_cifar10(tmp_path / "c.tar.gz", tmp_path / "c.h5"),
            r"c\.tar\.gz: its headers hold more than 2,097,152 bytes \(2\.0 MiB\) besides the "
            "members' data", peak=4 * MIB)


def test_an_archive_of_too_many_members(tmp_path):
    (tmp_path / "c.tar.gz").write_bytes(tar_of([(member(f"m{i}"), b"") for i in range(1001)]))
    with pytest.raises(DataError, match=r"c\.tar\.gz: more than 1000 members"):
        convert_cifar10(tmp_path / "c.tar.gz", tmp_path / "c.h5")


@pytest.mark.parametrize("extra, match", [
    ([(member("data_batch_1.bin", type=tarfile.SYMTYPE, linkname="test_batch.bin"), b"")],
     r"member 'cifar-10-batches-bin/data_batch_1\.bin' is a symbolic link"),
    ([(member("data_batch_1.bin", type=tarfile.LNKTYPE,
              linkname="cifar-10-batches-bin/test_batch.bin"), b"")], "is a hard link"),
    ([*good_batches(), (member("other/data_batch_1.bin", data=record()), record())],
     r"member 'other/data_batch_1\.bin': a second data_batch_1\.bin in the archive"),
    ([(member("data_batch_1.bin", size=0, pax_headers={"size": "nan"}), b"")],
     r"member 'cifar-10-batches-bin/data_batch_1\.bin' declares size 'nan', not a number"),
    ([(member("data_batch_1.bin", size=0, pax_headers={"size": "-3073"}), b"")],
     r"declares size '-3073', not a number"),
    ([(member("data_batch_1.bin"), b"")], r"data_batch_1\.bin: holds no records"),
], ids=["symlink", "hardlink", "duplicate", "nan-size", "negative-size", "empty"])
def test_crafted_tar_members(tmp_path, extra, match):
    """``extra``: a crafted data_batch_1.bin (or a whole archive of them)."""
    members = extra if len(extra) > 1 else extra + good_batches(skip=("data_batch_1.bin",))
    (tmp_path / "c.tar").write_bytes(tar_of(members, "w", tarfile.PAX_FORMAT))
    with pytest.raises(DataError, match=match):
        convert_cifar10(tmp_path / "c.tar", tmp_path / "c.h5")
    assert not (tmp_path / "c.h5").exists()


@pytest.mark.parametrize("mode", ["w", "w:xz"])
def test_tar_member_paths_reach_nothing_outside(tmp_path, mode):
    """Members are read in memory, never extracted: '../' and absolute paths write nothing."""
    (tmp_path / "in").mkdir()
    names = ["../../escaped/" + n for n in BATCHES[:3]] + ["/tmp/h1/escaped/" + n
                                                           for n in BATCHES[3:]]
    (tmp_path / "in/c.tar").write_bytes(tar_of([(member(n, data=record(i)), record(i))
                                                for i, n in enumerate(names)], mode))
    ds = H5Dataset(convert_cifar10(tmp_path / "in/c.tar", tmp_path / "c.h5"), split="test")
    assert ds.get_data(slice(None))["targets"].tolist() == [5]
    assert sorted(os.listdir(tmp_path)) == ["c.h5", "in"] and os.listdir(tmp_path / "in") == [
        "c.tar"]
    assert not os.path.exists("/tmp/h1/escaped") and not (tmp_path.parent / "escaped").exists()


# ---- files that are not files ---------------------------------------------------------------
@pytest.mark.parametrize("kind", ["fifo", "device"])
def test_pipes_and_devices_are_refused_without_waiting(tmp_path, kind):
    def place(path):
        if kind == "fifo":
            os.mkfifo(path)
        else:
            os.symlink("/dev/zero", path)
    want = "a FIFO" if kind == "fifo" else "a device"
    for name, convert in (("t.txt", lambda p: convert_text(p, tmp_path / "o.h5")),
                          ("a.npz", lambda p: convert_npz(p, tmp_path / "o.h5")),
                          ("x-idx", read_idx)):
        place(tmp_path / name)
        with pytest.raises(DataError, match=f"{name}: cannot read \\({want}, not a regular file"):
            convert(tmp_path / name)
    d = tmp_path / "cifar"
    d.mkdir()
    for n in BATCHES:
        (d / n).write_bytes(record())
    (d / "test_batch.bin").unlink()
    place(d / "test_batch.bin")
    with pytest.raises(DataError, match=f"test_batch.bin: cannot read \\({want}"):
        convert_cifar10(d, tmp_path / "o.h5")
    place(tmp_path / "c.tar.gz")
    with pytest.raises(DataError, match=f"c.tar.gz: cannot read \\({want}"):
        convert_cifar10(tmp_path / "c.tar.gz", tmp_path / "o.h5")
    assert not (tmp_path / "o.h5").exists()


def test_a_cifar_directory_file_larger_than_a_batch(tmp_path):
    for n in BATCHES:
        (tmp_path / n).write_bytes(record())
    with open(tmp_path / "data_batch_3.bin", "r+b") as f:
        f.truncate(10001 * 3073)  # NOTE: sparse: no disk used
    with pytest.raises(DataError, match=r"data_batch_3\.bin: 30,733,073 bytes, more than a "
                                        "CIFAR-10 batch holds"):
        convert_cifar10(tmp_path, tmp_path / "c.h5")


# ---- text and HDF5 --------------------------------------------------------------------------
def test_a_text_file_past_the_limit(tmp_path, monkeypatch):
    monkeypatch.setenv("LABKIT_CONVERT_MAX_BYTES", "10")
    (tmp_path / "t.txt").write_text("abcdef\nghijkl\n")
    with pytest.raises(DataError, match=r"t\.txt declares 14 bytes of data, more than the 10 "
                                        "bytes"):
        convert_text(tmp_path / "t.txt", tmp_path / "t.h5")


def test_an_hdf5_source_compressed_past_the_limit(tmp_path, low_limit):
    import h5py

    with h5py.File(tmp_path / "b.h5", "w", libver=("v110", "v110")) as f:
        f.attrs["labkit_dataset"] = np.int64(1)
        f.attrs["splits"] = _text_attr('{"all": [0, 4096]}')
        f.create_dataset("x", data=np.zeros((4096, 1024), np.uint8), chunks=(1024, 1024),
                         compression="gzip")
    assert (tmp_path / "b.h5").stat().st_size < 100_000
    refused(lambda: convert_h5(tmp_path / "b.h5", tmp_path / "c.h5"),
            r"b\.h5: source 'x' declares 4,194,304 bytes \(4\.0 MiB\) of data, more than")


# ---- the setting and the CLI ----------------------------------------------------------------
def test_the_limit_setting(monkeypatch, tmp_path, capsys):
    for raw, want in (("4G", 4 << 30), ("512m", 512 << 20), ("1.5K", 1536), ("123", 123),
                      ("2GiB", 2 << 30)):
        monkeypatch.setenv("LABKIT_CONVERT_MAX_BYTES", raw)
        assert config.get("LABKIT_CONVERT_MAX_BYTES") == want
    monkeypatch.setenv("LABKIT_CONVERT_MAX_BYTES", "0")
    with pytest.raises(ConfigError, match="LABKIT_CONVERT_MAX_BYTES='0': expected a size"):
        config.get("LABKIT_CONVERT_MAX_BYTES")
    monkeypatch.setenv("LABKIT_CONVERT_MAX_BYTES", "1M")
    (tmp_path / "b.npz").write_bytes(zip_of([("x.npy", [npy_header((BOMB,)), *zeros(BOMB)])]))
    assert _cli.main(["convert", "npz", str(tmp_path / "b.npz"), "-o",
                      str(tmp_path / "b.h5")]) == 1
    err = capsys.readouterr().err
    assert err.startswith("labkit convert npz: ") and "LABKIT_CONVERT_MAX_BYTES=1G" in err
    assert err.count("\n") == 1 and not (tmp_path / "b.h5").exists()


# ---- MNIST files that disagree, dataset names that are paths --------------------------------
def idx(dims, code, body: bytes) -> bytes:
    return b"\0\0" + bytes([code, len(dims)]) + struct.pack(f">{len(dims)}I", *dims) + body


@pytest.mark.parametrize("test_images, labels, match", [
    (idx((1, 20, 20), 0x08, bytes(400)), idx((1,), 0x08, b"\1"),
     r"train images are uint8 \(28, 28\), t10k images uint8 \(20, 20\)"),  # NOTE: a ValueError
    (idx((1, 28, 28), 0x0D, bytes(4 * 784)), idx((1,), 0x08, b"\1"),
     r"t10k images float32 \(28, 28\); both files"),  # NOTE: was cast to float32, silently
    (idx((1, 28, 28), 0x08, bytes(784)), idx((1,), 0x09, b"\xff"),
     "t10k labels must be class ids \\(integers >= 0\\), got int8 down to -1"),
    (idx((1, 28, 28), 0x08, bytes(784)), idx((1,), 0x0D, bytes(4)),
     "t10k labels must be class ids \\(integers >= 0\\), got float32$"),
], ids=["size", "dtype", "negative-label", "float-label"])
def test_mnist_files_that_disagree(tmp_path, test_images, labels, match):
    (tmp_path / "train-images-idx3-ubyte").write_bytes(idx((1, 28, 28), 0x08, bytes(784)))
    (tmp_path / "train-labels-idx1-ubyte").write_bytes(idx((1,), 0x08, b"\1"))
    (tmp_path / "t10k-images-idx3-ubyte").write_bytes(test_images)
    (tmp_path / "t10k-labels-idx1-ubyte").write_bytes(labels)
    with pytest.raises(DataError, match=match):
        convert_mnist(tmp_path, tmp_path / "m.h5")
    assert not (tmp_path / "m.h5").exists()


@pytest.mark.parametrize("name", ["../../etc/passwd", "a/b", "..", "", "a\0b", 3])
def test_get_takes_names_not_paths(name):
    from labkit.data import get

    with pytest.raises(DataError, match="get: a dataset name is a file name without '/'"):
        get(name)
