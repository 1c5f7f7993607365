"""Damaged or crafted input files that were accepted: a .tar.gz whose gzip CRC was never read
(58 of 60 bit flips converted CIFAR into wrong pixels), a .npz whose damaged central directory
hid a member (a source silently dropped), an HDF5 dataset with a null dataspace (a raw
TypeError) and a gzip bomb in /_meta (a 1 MB file took 3 GB to open)."""

from __future__ import annotations

import gzip
import io
import tarfile
import zipfile

import h5py
import numpy as np
import pytest

from labkit.data import H5Dataset, convert_cifar10, convert_npz
from labkit.errors import DataError

from ..faults.test_crafted_dataset_files import crafted
from .test_converters import cifar_blob


def _cifar(tmp_path, rng) -> bytes:
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w") as tar:
        for name in [f"data_batch_{i}.bin" for i in range(1, 6)] + ["test_batch.bin"]:
            blob, _, _ = cifar_blob(rng, 3)
            info = tarfile.TarInfo(f"cifar-10-batches-bin/{name}")
            info.size = len(blob)
            tar.addfile(info, io.BytesIO(blob))
    return gzip.compress(raw.getvalue(), mtime=0)


def test_a_targz_whose_data_fails_its_crc_is_refused(tmp_path, rng):
    data = _cifar(tmp_path, rng)
    good = tmp_path / "cifar-10-binary.tar.gz"
    good.write_bytes(data)
    convert_cifar10(good, tmp_path / "good.h5")
    refused = 0
    for k, pos in enumerate(range(200, len(data) - 8, max(1, (len(data) - 208) // 24))):
        bad = tmp_path / f"bad{k}.tar.gz"
        bad.write_bytes(data[:pos] + bytes([data[pos] ^ 0x01]) + data[pos + 1:])
        with pytest.raises(DataError):  # NOTE: never converted into other pixels
            convert_cifar10(bad, tmp_path / f"bad{k}.h5")
        refused += 1
    assert refused >= 20
    cut = tmp_path / "cut.tar.gz"
    cut.write_bytes(data[:-4])  # NOTE: the trailer's length field gone
    with pytest.raises(DataError, match="damaged"):
        convert_cifar10(cut, tmp_path / "cut.h5")


def test_an_npz_whose_directory_hides_a_member_is_refused(tmp_path):
    path = tmp_path / "two.npz"
    np.savez(path, x=np.arange(4.0), y=np.arange(4))
    d = bytearray(path.read_bytes())
    cd = d.find(b"PK\x01\x02")  # NOTE: x's directory entry: its comment swallows y's
    d[cd + 33] ^= 0x10
    path.write_bytes(bytes(d))
    with zipfile.ZipFile(path) as zf:
        assert len(zf.infolist()) == 1
    with pytest.raises(DataError, match="declares 2 members but its directory lists 1"):
        convert_npz(path, tmp_path / "two.h5")


def test_a_null_dataspace_is_refused_naming_it(tmp_path):
    path = tmp_path / "null.h5"
    with crafted(path) as f:
        f.create_dataset("x", data=h5py.Empty("f8"))
    with pytest.raises(DataError, match="source 'x': expected data, got an empty \\(null\\) "
                                        "dataspace"):
        H5Dataset(path, split="train")


def test_metadata_larger_than_labkit_reads_is_refused_before_it_is_read(tmp_path):
    path = tmp_path / "bomb.h5"
    with crafted(path) as f:
        f.create_dataset("x", data=np.arange(4.0))
        # NOTE: 80 MiB of JSON whitespace in chunks of 4 MiB: a small file
        d = f.create_dataset("_meta/vocabulary", shape=(80 << 20,), dtype=np.uint8,
                             chunks=(4 << 20,), compression="gzip")
        for a in range(0, 80 << 20, 4 << 20):
            d[a:a + (4 << 20)] = 32
        d[-1] = ord("0")
    assert path.stat().st_size < 2 << 20
    with pytest.raises(DataError, match=r"/_meta/vocabulary: expected 1-D uint8 \(JSON bytes\) "
                                        r"of at most 67,108,864 bytes"):
        H5Dataset(path, split="train")
