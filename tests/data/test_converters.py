"""Converters on small files the tests write, the shipped digits set, and `labkit convert`."""

import gzip
import io
import json
import struct
import tarfile

import numpy as np
import pytest

import labkit as lk
from labkit.cli import main as cli
from labkit.data import H5Dataset, convert_cifar10, convert_mnist, convert_npz, convert_text
from labkit.errors import DataError


def test_digits_from_the_shipped_file(tmp_path):
    path = lk.data.convert_digits(tmp_path / "digits.h5")
    sizes = {s: H5Dataset(path, split=s).num_examples for s in ("train", "valid", "test")}
    assert sizes == {"train": 1297, "valid": 200, "test": 300}
    ds = H5Dataset(path, split=["train", "valid", "test"], load_in_memory=True)
    x, y = ds.get_data(slice(None))["features"], ds.get_data(slice(None))["targets"]
    assert x.shape == (1797, 1, 8, 8) and x.dtype == np.uint8 and x.max() == 16
    assert sorted(np.bincount(y)) [0] >= 170  # every class is there (~180 each)
    # the shuffle before splitting is fixed: the file is the same every time
    again = H5Dataset(lk.data.convert_digits(tmp_path / "again.h5"), split="test")
    assert np.array_equal(again.get_data(slice(None))["targets"],
                          H5Dataset(path, split="test").get_data(slice(None))["targets"])
    assert np.bincount(H5Dataset(path, split="test").get_data(slice(None))["targets"]).min() > 15


def test_get_builds_digits_and_rebuilds_a_corrupted_file():
    train = lk.data.get("digits")
    assert train.num_examples == 1297 and train.path.parent == lk.config.datasets_dir()
    raw = bytearray(train.path.read_bytes())
    import h5py

    with h5py.File(train.path) as f:
        off = f["features"].id.get_chunk_info(2).byte_offset
    raw[off + 5] ^= 0xFF
    train.path.write_bytes(bytes(raw))
    with pytest.warns(UserWarning, match="was corrupted; rebuilt it"):
        fixed = lk.data.get("digits", split="valid")
    fixed.get_data(slice(None))
    with pytest.raises(DataError, match=r"no dataset 'mnist'.*labkit convert mnist"):
        lk.data.get("mnist")


def test_get_rebuilds_digits_written_in_the_old_hdf5_format(recwarn):
    import h5py

    path = lk.data.get("digits").path
    with h5py.File(path) as f:  # the same content, in HDF5's old (unchecksummed) format
        content = {k: f[k][()] for k in ("features", "targets")}
        attrs = {k: f.attrs[k].decode() if isinstance(f.attrs[k], bytes) else f.attrs[k]
                 for k in f.attrs}
    with h5py.File(path, "w") as f:
        f.attrs.update(attrs)
        for k, v in content.items():
            f[k] = v
    assert path.read_bytes()[8] == 0
    again = lk.data.get("digits", split="test")
    assert path.read_bytes()[8] == 3 and again.num_examples == 300
    assert not [w for w in recwarn if "old file format" in str(w.message)]


def write_idx(path, arr, gz=False):
    codes = {np.uint8: 0x08}
    head = bytes([0, 0, codes[arr.dtype.type], arr.ndim]) + struct.pack(f">{arr.ndim}I",
                                                                         *arr.shape)
    data = head + arr.tobytes()
    (gzip.open if gz else open)(path, "wb").write(data)


def test_mnist_from_idx_files(tmp_path, rng):
    xtr = rng.integers(0, 256, (12, 28, 28)).astype(np.uint8)
    ytr = rng.integers(0, 10, 12).astype(np.uint8)
    xte = rng.integers(0, 256, (5, 28, 28)).astype(np.uint8)
    yte = rng.integers(0, 10, 5).astype(np.uint8)
    write_idx(tmp_path / "train-images-idx3-ubyte.gz", xtr, gz=True)
    write_idx(tmp_path / "train-labels-idx1-ubyte.gz", ytr, gz=True)
    write_idx(tmp_path / "t10k-images-idx3-ubyte", xte)
    write_idx(tmp_path / "t10k-labels-idx1-ubyte", yte)
    path = convert_mnist(tmp_path, tmp_path / "mnist.h5")
    test = H5Dataset(path, split="test").get_data(slice(None))
    assert np.array_equal(test["features"], xte[:, None]) and np.array_equal(test["targets"], yte)
    assert H5Dataset(path, split="valid").num_examples == 2
    assert H5Dataset(path, split="train_full").num_examples == 12
    # truncated IDX file: reported with its name
    data = (tmp_path / "t10k-images-idx3-ubyte").read_bytes()
    (tmp_path / "t10k-images-idx3-ubyte").write_bytes(data[:-10])
    with pytest.raises(DataError, match=r"t10k-images-idx3-ubyte: the header says \(5, 28, 28\)"):
        convert_mnist(tmp_path, tmp_path / "bad.h5")
    (tmp_path / "t10k-images-idx3-ubyte").write_bytes(data)
    (tmp_path / "t10k-labels-idx1-ubyte").unlink()
    with pytest.raises(DataError, match="no t10k-labels-idx1-ubyte"):
        convert_mnist(tmp_path)


def cifar_blob(rng, n):
    labels = rng.integers(0, 10, n).astype(np.uint8)
    images = rng.integers(0, 256, (n, 3072)).astype(np.uint8)
    return np.concatenate([labels[:, None], images], axis=1).tobytes(), images, labels


def test_cifar10_from_the_binary_archive(tmp_path, rng):
    tgz = tmp_path / "cifar-10-binary.tar.gz"
    want_x, want_y = [], []
    with tarfile.open(tgz, "w:gz") as tar:
        for name in [f"data_batch_{i}.bin" for i in range(1, 6)] + ["test_batch.bin"]:
            blob, x, y = cifar_blob(rng, 3)
            want_x.append(x)
            want_y.append(y)
            info = tarfile.TarInfo(f"cifar-10-batches-bin/{name}")
            info.size = len(blob)
            tar.addfile(info, io.BytesIO(blob))
    path = convert_cifar10(tgz, tmp_path / "c.h5")
    ds = H5Dataset(path, split="test")
    assert np.array_equal(ds.get_data(slice(None))["features"].reshape(3, -1), want_x[5])
    assert H5Dataset(path, split="train").num_examples == 12
    assert H5Dataset(path, split="valid").num_examples == 3
    assert ds.metadata("classes")[0] == "airplane"
    # the Python version is pickles: refused, never opened
    py = tmp_path / "cifar-10-python.tar.gz"
    with tarfile.open(py, "w:gz") as tar:
        info = tarfile.TarInfo("cifar-10-batches-py/data_batch_1")
        info.size = 4
        tar.addfile(info, io.BytesIO(b"\x80\x04N."))
    with pytest.raises(DataError, match="pickle.*binary version"):
        convert_cifar10(py)
    (tmp_path / "trunc.tar.gz").write_bytes(tgz.read_bytes()[:200])
    with pytest.raises(DataError, match="trunc.tar.gz: cannot read the archive"):
        convert_cifar10(tmp_path / "trunc.tar.gz")


@pytest.mark.parametrize("level", ["char", "word"])
def test_text_corpus(tmp_path, level):
    lines = ["the cat sat", "", "the dog sat down", "a cat", "über alles"] * 4
    src = tmp_path / "corpus.txt"
    src.write_text("\n".join(lines), encoding="utf-8")
    path = convert_text(src, tmp_path / "c.h5", level=level, valid_fraction=0.125,
                        test_fraction=0.125)
    ds = H5Dataset(path, split=["train", "valid", "test"])
    vocab = ds.metadata("vocabulary")
    assert vocab[0] == "<unk>"
    text = ds.get_data(slice(None))["text"]
    kept = [ln for ln in lines if ln.strip()]
    assert len(text) == len(kept) == 16
    for seq, line in zip(text, kept):
        toks = list(line) if level == "char" else line.split()
        assert [vocab[i] for i in seq] == toks
    assert H5Dataset(path, split="test").num_examples == 2
    counts = {t: sum(ln.split().count(t) if level == "word" else ln.count(t) for ln in kept)
              for t in vocab[1:]}
    assert list(counts.values()) == sorted(counts.values(), reverse=True)


def test_npz_and_cli(tmp_path, capsys):
    np.savez(tmp_path / "a.npz", x=np.arange(6.0).reshape(3, 2), y=np.arange(3))
    path = convert_npz(tmp_path / "a.npz", tmp_path / "a.h5")
    assert np.array_equal(H5Dataset(path, split="all").get_data([2])["x"], [[4.0, 5.0]])
    with open(tmp_path / "obj.npz", "wb") as f:
        np.savez(f, o=np.array([{"a": 1}], dtype=object))
    with pytest.raises(DataError, match="need pickle"):
        convert_npz(tmp_path / "obj.npz")
    assert cli(["convert", "digits", "-o", str(tmp_path / "d.h5")]) == 0
    out = capsys.readouterr().out
    assert "train 1297, valid 200, test 300" in out and "features, targets" in out
    assert cli(["convert", "mnist", str(tmp_path)]) == 1
    assert "no train-images-idx3-ubyte" in capsys.readouterr().err
    assert json.loads(json.dumps(H5Dataset(tmp_path / "d.h5").splits))


def test_digits_are_read_through_once_per_file_version(monkeypatch):
    """lk.data.get("digits") checks the file by reading it through once per process and
    version of the file (a sweep's trials open it many times); a file written since is
    checked again."""
    from labkit.data import converters

    path = lk.data.get("digits").path
    calls = []
    real = converters._corrupt
    monkeypatch.setattr(converters, "_corrupt", lambda p: calls.append(p) or real(p))
    for split in ("train", "valid", "test", "train"):
        lk.data.get("digits", split=split)
    assert calls == []
    path.write_bytes(path.read_bytes())  # the same bytes, written again: a new version
    lk.data.get("digits", split="valid")
    assert calls == [path]
    lk.data.get("digits")
    assert calls == [path]


RACE = """
import os, sys, time
from pathlib import Path
import labkit as lk

go, done, n = Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3])
(go.parent / "ready" / str(os.getpid())).touch()  # NOTE: imported: all start together
while not go.exists():
    time.sleep(0.001)
ds = lk.data.get("digits")
(done / str(os.getpid())).touch()
while len(list(done.iterdir())) < n:  # NOTE: every process has built or found the file
    time.sleep(0.01)
print(ds.get_data(slice(0, ds.num_examples))["targets"].sum())
"""


def test_processes_that_get_digits_at_once_on_a_fresh_home_all_read_it(tmp_path):
    """A sweep's first trials on a fresh machine: each worker built the digits file and put
    its own in place, and the others' open datasets found their file replaced ("changed or
    replaced since this dataset opened it") and failed their trials. One builds it now."""
    import os
    import subprocess
    import sys
    import time

    go, done, n = tmp_path / "go", tmp_path / "done", 4
    done.mkdir()
    (tmp_path / "ready").mkdir()
    env = {**os.environ, "LABKIT_HOME": str(tmp_path / "home")}
    procs = [subprocess.Popen([sys.executable, "-c", RACE, str(go), str(done), str(n)],
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True) for _ in range(n)]
    deadline = time.monotonic() + 60
    while len(list((tmp_path / "ready").iterdir())) < n and time.monotonic() < deadline:
        time.sleep(0.01)
    go.touch()
    outs = [p.communicate(timeout=120) for p in procs]
    assert all(p.returncode == 0 for p in procs), [e[-2000:] for _, e in outs]
    assert len({o.strip() for o, _ in outs}) == 1


def test_text_lines_end_at_newlines_only(tmp_path):
    """A form feed or U+2028 inside a line is part of it (str.splitlines() cut there: one
    example became two); \\n, \\r\\n and \\r end lines."""
    src = tmp_path / "t.txt"
    src.write_bytes("a\fb\r\nc\u2028d\re f\n\n".encode("utf-8"))
    path = convert_text(src, tmp_path / "t.h5", valid_fraction=0, test_fraction=0)
    ds = H5Dataset(path, split="train")
    vocab = ds.metadata("vocabulary")
    text = ["".join(vocab[i] for i in seq) for seq in ds.get_data(slice(None))["text"]]
    assert text == ["a\fb", "c\u2028d", "e f"]
