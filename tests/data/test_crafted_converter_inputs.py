"""Converter inputs crafted or damaged elsewhere: each is a DataError that names the file and what
is wrong with it, never a bare struct.error, zlib.error, BadZipFile or OSError, and never a file
written from a misread input."""

from __future__ import annotations

import gzip
import io
import struct
import zipfile

import numpy as np
import pytest

from labkit.data import convert_cifar10, convert_npz, convert_text, read_idx
from labkit.errors import DataError

pytestmark = pytest.mark.timeout(60, method="thread")


def _gzip_with_a_bad_deflate_stream(data: bytes) -> bytes:
    raw = bytearray(gzip.compress(data))
    raw[12] ^= 0xFF  # inside the deflate stream (the header is 10 bytes)
    return bytes(raw)


@pytest.mark.parametrize("name, data, match", [
    ("short-idx", b"\0\0\x08\x03\0\0", "the header ends before its 3 dimensions"),
    ("deflate-idx.gz", _gzip_with_a_bad_deflate_stream(b"\0\0\x08\x01\0\0\0\x04abcd" * 10),
     "cannot read .*damaged or not an IDX file"),
    # NOTE: np.prod of the dims wrapped to 0, and reshape raised a bare ValueError
    ("wrap-idx", b"\0\0\x08\x04" + struct.pack(">4I", *[65536] * 4), "the header says"),
    ("long-idx", b"\0\0\x08\x01\0\0\0\x02abc", "the header says .* but the file has more"),
], ids=["short", "deflate", "wrap", "long"])
def test_damaged_idx_files(tmp_path, name, data, match):
    (tmp_path / name).write_bytes(data)
    with pytest.raises(DataError, match=f"{name}: {match}"):
        read_idx(tmp_path / name)


def test_an_idx_file_reads_as_written(tmp_path):
    x = np.arange(24, dtype=">i4").reshape(2, 3, 4)
    (tmp_path / "x-idx.gz").write_bytes(gzip.compress(b"\0\0\x0c\x03" + struct.pack(">3I", 2, 3, 4)
                                                      + x.tobytes()))
    got = read_idx(tmp_path / "x-idx.gz")
    assert got.dtype == np.int32 and np.array_equal(got, x)


def _npz(**arrays) -> bytes:
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    return buf.getvalue()


def _flipped_crc(data: bytes) -> bytes:
    raw = bytearray(data)
    at = raw.find(np.float64(1).tobytes())
    raw[at + 7] ^= 1
    return bytes(raw)


def _member_not_npy() -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("x", b"some bytes")
    return buf.getvalue()


def _bad_npy_header() -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("x.npy", b"\x93NUMPY\x01\x00\x10\x00{'descr': <f8}  \n")
    return buf.getvalue()


@pytest.mark.parametrize("data, match", [
    (b"PK\x03\x04" + b"\0" * 100, "not a readable .npz file"),
    (_flipped_crc(_npz(x=np.arange(100.0))), "member 'x.npy': not a readable .npy array .*CRC"),
    (_member_not_npy(), "member 'x' is not a .npy array"),
    # NOTE: was 'holds object arrays'
    (_bad_npy_header(), "member 'x.npy': not a readable .npy array .*Cannot parse header"),
], ids=["zip", "crc", "member", "header"])
def test_damaged_npz_files(tmp_path, data, match):
    (tmp_path / "a.npz").write_bytes(data)
    with pytest.raises(DataError, match=f"a.npz: {match}"):
        convert_npz(tmp_path / "a.npz", tmp_path / "a.h5")
    assert not (tmp_path / "a.h5").exists()


def test_an_npz_of_object_arrays_still_says_pickle(tmp_path):
    (tmp_path / "a.npz").write_bytes(_npz(x=np.array([{}, None], dtype=object)))
    with pytest.raises(DataError, match="a.npz: holds object arrays, which need pickle"):
        convert_npz(tmp_path / "a.npz", tmp_path / "a.h5")


def test_convert_text_of_a_missing_file_or_impossible_fractions(tmp_path):
    with pytest.raises(DataError, match="none.txt: cannot read"):
        convert_text(tmp_path / "none.txt", tmp_path / "t.h5")
    (tmp_path / "t.txt").write_text("a b\nc d\n")
    with pytest.raises(DataError, match="valid_fraction must be a number in \\[0, 1\\], got -1"):
        convert_text(tmp_path / "t.txt", tmp_path / "t.h5", valid_fraction=-1)
    with pytest.raises(DataError, match="valid_fraction \\+ test_fraction must be at most 1"):
        convert_text(tmp_path / "t.txt", tmp_path / "t.h5", valid_fraction=0.8,
                     test_fraction=0.8)


def test_cifar10_directory_with_an_unreadable_batch(tmp_path):
    for name in [f"data_batch_{i}.bin" for i in range(1, 6)]:
        (tmp_path / name).write_bytes(bytes(3073))
    (tmp_path / "test_batch.bin").mkdir()
    with pytest.raises(DataError, match="test_batch.bin: cannot read"):
        convert_cifar10(tmp_path, tmp_path / "c.h5")
