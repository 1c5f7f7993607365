"""Converters to labkit's HDF5 layout, and ``get(name)`` for the standard files.

Each converter reads data a user has (or that labkit ships) and writes one standard file;
``labkit convert NAME ...`` runs them from the shell. None of them downloads anything, and none
unpickles: CIFAR-10 is read from its *binary* archive, never its Python (pickle) version.

Examples
--------
``lk.data.get("digits", split="train")`` builds ``$LABKIT_HOME/datasets/digits.h5`` on first
use; the converter can also write anywhere:

>>> import tempfile, os
>>> from labkit.data import H5Dataset, convert_digits
>>> path = convert_digits(os.path.join(tempfile.mkdtemp(), "digits.h5"))
>>> train = H5Dataset(path, split="train")
>>> train.num_examples, train.sources
(1297, ('features', 'targets'))
"""

from __future__ import annotations

import contextlib
import gzip
import json
import lzma
import re
import struct
import tarfile
import zlib
from collections import Counter
from pathlib import Path

import numpy as np

from ..backend.random import Generator
from ..config import datasets_dir
from ..errors import DataError
from ._inputs import Budget, npz_arrays, open_regular, read_exact, tar_members
from .datasets import H5Dataset
from .layout import MAX_META, check_container, write_h5

IMAGE_LABELS = {"features": ("batch", "channel", "height", "width"), "targets": ("batch",)}


def dataset_path(name: str) -> Path:
    """Where the standard file of dataset ``name`` lives: ``$LABKIT_HOME/datasets/NAME.h5``."""
    return datasets_dir() / f"{name}.h5"


# ---- digits ---------------------------------------------------------------------------------
DIGITS_SPLITS = {"train": (0, 1297), "valid": (1297, 1497), "test": (1497, 1797)}


def convert_digits(path=None) -> Path:
    """The 8x8 handwritten digits shipped with labkit (UCI optdigits, CC BY 4.0; see
    ``labkit/data/files/README.md``): 1,797 images, ``features`` uint8 (N, 1, 8, 8) with values
    0..16 and ``targets`` int64. Shuffled once with a fixed seed, then split 1297 / 200 / 300
    into train / valid / test."""
    src = Path(__file__).parent / "files" / "digits.csv.gz"
    raw = np.loadtxt(gzip.open(src, "rt"), delimiter=",", dtype=np.int64)
    if raw.shape != (1797, 65):
        raise DataError(f"{src}: expected 1797 rows of 64 pixels and a label, got {raw.shape}")
    order = Generator(seed=20240).permutation(len(raw))
    raw = raw[order]
    return write_h5(
        path or dataset_path("digits"),
        {"features": raw[:, :64].astype(np.uint8).reshape(-1, 1, 8, 8), "targets": raw[:, 64]},
        DIGITS_SPLITS, axis_labels=IMAGE_LABELS, name="digits",
        description="UCI optical recognition of handwritten digits (8x8, values 0..16), "
                    "CC BY 4.0, E. Alpaydin and C. Kaynak")


# ---- MNIST (IDX files) ----------------------------------------------------------------------
_IDX_TYPES = {0x08: np.uint8, 0x09: np.int8, 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4", 0x0E: ">f8"}


def read_idx(path) -> np.ndarray:
    """An array from an IDX file (MNIST's format), gzipped or not. The data its header declares
    is checked against ``LABKIT_CONVERT_MAX_BYTES`` before any is read or unpacked."""
    return _read_idx(Path(path), Budget())


def _read_idx(path: Path, budget: Budget) -> np.ndarray:
    try:
        with open_regular(path) as raw:
            f = gzip.GzipFile(fileobj=raw, mode="rb") if path.suffix == ".gz" else raw
            head = f.read(4)
            if len(head) < 4 or head[0] != 0 or head[1] != 0 or head[2] not in _IDX_TYPES:
                raise DataError(f"{path} is not an IDX file (bad magic number {head.hex()})")
            if not 1 <= head[3] <= 4:  # NOTE: MNIST's are 1 (labels) and 3 (images)
                raise DataError(f"{path}: the header declares {head[3]} dimensions; an IDX file "
                                "of images or labels has 1 to 4 (not an MNIST file?)")
            raw_dims = f.read(4 * head[3])
            if len(raw_dims) < 4 * head[3]:
                raise DataError(f"{path}: the header ends before its {head[3]} dimensions; the "
                                "file is truncated or not an IDX file")
            dims = struct.unpack(f">{head[3]}I", raw_dims)
            dtype = np.dtype(_IDX_TYPES[head[2]])
            want = dtype.itemsize
            for n in dims:  # NOTE: Python ints: np.prod of four 65536s wraps to 0
                want *= n
            if f is raw:  # NOTE: an uncompressed file's size is known before anything is read
                have = raw.seek(0, 2) - 4 - len(raw_dims)
                if have != want:
                    raise DataError(f"{path}: the header says {dims} ({want} bytes of data) but "
                                    f"the file has {'more' if have > want else have}; it is "
                                    "truncated or not an IDX file")
                raw.seek(4 + len(raw_dims))
            budget.take(want, f"{path} (its header: {dims} of {dtype})")
            body = read_exact(f, want, f"{path} (its header: {dims} of {dtype})")
    except (EOFError, zlib.error, gzip.BadGzipFile) as e:
        raise DataError(f"{path}: cannot read ({e}); the file is damaged or not an IDX file"
                        ) from None
    except OSError as e:
        raise DataError(f"{path}: cannot read ({e})") from None
    return body.view(dtype).reshape(dims).astype(dtype.newbyteorder("="))


def _find(directory: Path, stem: str) -> Path:
    for name in (stem, stem + ".gz", stem.replace("-idx", ".idx"), stem.replace("-idx", ".idx")
                 + ".gz"):
        if (directory / name).exists():
            return directory / name
    raise DataError(f"{directory}: no {stem}[.gz]; the MNIST converter needs the four IDX files "
                    "(train-images-idx3-ubyte, train-labels-idx1-ubyte, t10k-images-idx3-ubyte, "
                    "t10k-labels-idx1-ubyte)")


def _with_valid(n_train: int, n_test: int) -> dict:
    valid = n_train // 6
    return {"train": (0, n_train - valid), "valid": (n_train - valid, n_train),
            "train_full": (0, n_train), "test": (n_train, n_train + n_test)}


def convert_mnist(directory, path=None) -> Path:
    """MNIST from the IDX files in ``directory``: ``features`` uint8 (N, 1, 28, 28), ``targets``
    int64; splits train / valid (the last sixth of train) / train_full / test."""
    d = Path(directory)
    parts, budget = {}, Budget()  # NOTE: the four files together
    for split, prefix in (("train", "train"), ("test", "t10k")):
        x = _read_idx(_find(d, f"{prefix}-images-idx3-ubyte"), budget)
        y = _read_idx(_find(d, f"{prefix}-labels-idx1-ubyte"), budget)
        if x.ndim != 3 or y.ndim != 1 or len(x) != len(y):
            raise DataError(f"{d}: {prefix} images {x.shape} and labels {y.shape} do not match")
        if y.dtype.kind not in "iu" or (len(y) and y.min() < 0):
            raise DataError(f"{d}: {prefix} labels must be class ids (integers >= 0), got "
                            f"{y.dtype}" + (f" down to {y.min()}" if y.dtype.kind in "iu" else ""))
        parts[split] = (x, y)
    (xa, _), (xb, _) = parts.values()
    if xa.shape[1:] != xb.shape[1:] or xa.dtype != xb.dtype:
        # NOTE: np.concatenate raised a bare ValueError, or cast one split to the other's dtype
        raise DataError(f"{d}: train images are {xa.dtype} {xa.shape[1:]}, t10k images "
                        f"{xb.dtype} {xb.shape[1:]}; both files must hold images of one size "
                        "and type")
    x = np.concatenate([parts["train"][0], parts["test"][0]])[:, None]
    y = np.concatenate([parts["train"][1], parts["test"][1]]).astype(np.int64)
    return write_h5(path or dataset_path("mnist"), {"features": x, "targets": y},
                    _with_valid(len(parts["train"][0]), len(parts["test"][0])),
                    axis_labels=IMAGE_LABELS, name="mnist", description="MNIST handwritten digits")


# ---- CIFAR-10 (binary version) --------------------------------------------------------------
_CIFAR_RECORD = 1 + 3 * 32 * 32
CIFAR10_CLASSES = ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse",
                   "ship", "truck"]


#: the records in each of CIFAR-10's six batches: a larger member is not CIFAR-10's
_CIFAR_BATCH = 10000


def _cifar_records(name: str, data: np.ndarray):
    if not len(data):
        raise DataError(f"{name}: holds no records; a CIFAR-10 batch holds {_CIFAR_BATCH}")
    if len(data) % _CIFAR_RECORD:
        raise DataError(f"{name}: {len(data)} bytes is not a whole number of CIFAR-10 records "
                        f"({_CIFAR_RECORD} bytes each); the file is truncated or has bytes "
                        "that are not CIFAR-10's")
    rec = data.reshape(-1, _CIFAR_RECORD)
    if rec[:, 0].max() > 9:
        raise DataError(f"{name}: labels above 9; this is not the CIFAR-10 binary version")
    return rec[:, 1:].reshape(-1, 3, 32, 32), rec[:, 0].astype(np.int64)


def convert_cifar10(source, path=None) -> Path:
    """CIFAR-10 from ``cifar-10-binary.tar.gz`` or its extracted ``cifar-10-batches-bin``
    directory (the *binary* version: the Python version is pickles, which labkit never loads).
    ``features`` uint8 (N, 3, 32, 32), ``targets`` int64; splits train (batches 1-4) / valid
    (batch 5) / train_full / test."""
    source = Path(source)
    names = [f"data_batch_{i}.bin" for i in range(1, 6)] + ["test_batch.bin"]
    most, budget = _CIFAR_BATCH * _CIFAR_RECORD, Budget()
    blobs = {}
    if source.is_dir():
        for n in names:
            f = source / n
            if not f.exists():
                raise DataError(f"{source}: no {n}; expected the extracted cifar-10-batches-bin "
                                "directory")
            with open_regular(f) as fh:
                have = fh.seek(0, 2)
                if have > most:
                    raise DataError(f"{f}: {have:,} bytes, more than a CIFAR-10 batch holds "
                                    f"({_CIFAR_BATCH} records, {most:,} bytes); this is not "
                                    "the cifar-10-batches-bin directory")
                budget.take(have, str(f))
                fh.seek(0)
                blobs[n] = read_exact(fh, have, str(f))
    else:
        try:
            blobs, seen = tar_members(source, set(names), most, budget)
            if "data_batch_1" in seen and "data_batch_1.bin" not in blobs:
                raise DataError(f"{source} is the Python (pickle) version of CIFAR-10; labkit "
                                "reads only the binary version, cifar-10-binary.tar.gz")
            for n in names:
                if n not in blobs:
                    raise DataError(f"{source}: the archive has no {n}")
        except (tarfile.TarError, OSError, EOFError, zlib.error, lzma.LZMAError) as e:
            raise DataError(f"{source}: cannot read the archive ({e}); it is truncated or not "
                            "cifar-10-binary.tar.gz") from None
    # NOTE: errors name the member where it is: the directory's file, or archive's member
    where = {n: str(source / n) if source.is_dir() else f"{source}: {n}" for n in names}
    xs, ys = zip(*(_cifar_records(where[n], blobs[n]) for n in names))
    n_train, n_valid = sum(len(x) for x in xs[:5]), len(xs[4])
    splits = {"train": (0, n_train - n_valid), "valid": (n_train - n_valid, n_train),
              "train_full": (0, n_train), "test": (n_train, n_train + len(xs[5]))}
    return write_h5(path or dataset_path("cifar10"),
                    {"features": np.concatenate(xs), "targets": np.concatenate(ys)}, splits,
                    axis_labels=IMAGE_LABELS, metadata={"classes": CIFAR10_CLASSES},
                    name="cifar10", description="CIFAR-10 (binary version)")


# ---- text -----------------------------------------------------------------------------------
def convert_text(file, path=None, level: str = "char", valid_fraction: float = 0.05,
                 test_fraction: float = 0.05, min_count: int = 1) -> Path:
    """A corpus from a plain UTF-8 text file: one example per non-empty line, tokens as ids.

    ``level`` is ``"char"`` or ``"word"`` (whitespace-separated). The vocabulary (metadata
    ``vocabulary``) starts with ``<unk>`` (id 0, also for tokens seen fewer than ``min_count``
    times), then tokens by decreasing count (ties alphabetically). The last lines are the valid
    and test splits. The ``text`` source is ragged (int32 sequences); see ``NGrams`` and
    ``Padding``.
    """
    file = Path(file)
    if level not in ("char", "word"):
        raise DataError(f"convert_text: level must be 'char' or 'word', got {level!r}")
    if not isinstance(min_count, (int, np.integer)) or isinstance(min_count, bool) or \
            min_count < 1:
        raise DataError(f"convert_text: min_count must be a whole number >= 1, got "
                        f"{min_count!r}")
    for arg, v in (("valid_fraction", valid_fraction), ("test_fraction", test_fraction)):
        if not (isinstance(v, (int, float)) and 0 <= v <= 1):
            raise DataError(f"convert_text: {arg} must be a number in [0, 1], got {v!r}")
    if valid_fraction + test_fraction > 1:
        raise DataError(f"convert_text: valid_fraction + test_fraction must be at most 1, got "
                        f"{valid_fraction} + {test_fraction}")
    try:
        with open_regular(file) as fh:
            have = fh.seek(0, 2)
            Budget().take(have, str(file))
            fh.seek(0)
            # NOTE: utf-8-sig: a byte-order mark made the first token another word
            text = read_exact(fh, have, str(file)).tobytes().decode("utf-8-sig")
        # NOTE: lines end at \n, \r\n or \r (as a text file's lines): not at a form feed or
        # \u2028 inside a line, where str.splitlines() cuts (one example became two)
        lines = [ln for ln in re.split(r"\r\n|\r|\n", text) if ln.strip()]
    except UnicodeDecodeError as e:
        raise DataError(f"{file}: not UTF-8 text ({e})") from None
    except OSError as e:
        raise DataError(f"{file}: cannot read ({e.strerror or e})") from None
    if not lines:
        raise DataError(f"{file}: no non-empty lines")
    tokens = [list(ln) if level == "char" else ln.split() for ln in lines]
    counts = Counter(t for line in tokens for t in line)
    vocab = ["<unk>"] + sorted((t for t, c in counts.items() if c >= min_count),
                               key=lambda t: (-counts[t], t))
    size = len(json.dumps(vocab).encode())
    if size > MAX_META:
        raise DataError(f"{file}: its vocabulary of {len(vocab):,} tokens is {size:,} bytes as "
                        f"JSON, more than a dataset's metadata holds ({MAX_META:,}); keep "
                        f"fewer words (min_count={min_count} now: raise it) or use level='char'")
    ids = {t: i for i, t in enumerate(vocab)}
    seqs = [np.array([ids.get(t, 0) for t in line], dtype=np.int32) for line in tokens]
    n = len(seqs)
    n_test, n_valid = int(n * test_fraction), int(n * valid_fraction)
    splits = {"train": (0, n - n_valid - n_test), "valid": (n - n_valid - n_test, n - n_test),
              "test": (n - n_test, n)}
    return write_h5(path or dataset_path(file.stem), {"text": seqs}, splits,
                    axis_labels={"text": ("batch", "time")},
                    metadata={"vocabulary": vocab, "level": level}, name=file.stem,
                    description=f"{level}-level corpus from {file.name}")


# ---- labkit's own files, rewritten ---------------------------------------------------------
def convert_h5(file, path=None) -> Path:
    """A file in labkit's HDF5 layout rewritten in the current format (by default in place,
    atomically): every source, split, axis label, metadata entry, name and description. Use it
    on files in HDF5's old file format, whose metadata has no checksums."""
    file = Path(file)
    ds = H5Dataset(file, split=[])
    budget, rows, sources = Budget(), slice(0, ds._num_rows), {}
    try:
        for s in ds.all_sources:  # NOTE: a compressed source can declare terabytes
            budget.take(ds.file[s].nbytes, f"{file}: source {s!r}")
        for s in ds.all_sources:
            data = ds._read_rows(s, rows)
            sources[s] = list(data) if s in ds.ragged else data
    finally:
        ds.close()
    return write_h5(path or file, sources, ds.splits, axis_labels=ds.axis_labels_all,
                    metadata={k: ds.metadata(k) for k in ds.metadata_keys},
                    name=ds.info.get("name"), description=ds.info.get("description"))


# ---- npz ------------------------------------------------------------------------------------
def convert_npz(file, path=None, splits: dict | None = None) -> Path:
    """Every array of a ``.npz`` file as a source (loaded with ``allow_pickle=False``). Each
    member is checked before it is unpacked: a .npy of numbers whose header agrees with its
    size, all of them within ``LABKIT_CONVERT_MAX_BYTES``."""
    file = Path(file)
    arrays = npz_arrays(file, Budget())
    return write_h5(path or dataset_path(file.stem), arrays, splits, name=file.stem)


CONVERTERS = {"digits": convert_digits, "mnist": convert_mnist, "cifar10": convert_cifar10,
              "text": convert_text, "npz": convert_npz, "h5": convert_h5}


def get(name: str, split: str = "train", **kwargs) -> H5Dataset:
    """The standard dataset ``name`` (an ``H5Dataset`` of ``split``), from ``$LABKIT_HOME``.

    ``"digits"`` is built from the data labkit ships the first time (or again if the file is
    corrupted); other datasets must be converted first: ``labkit convert mnist DIR``.
    ``kwargs`` go to ``H5Dataset`` (``sources=``, ``load_in_memory=``).
    """
    if not isinstance(name, str) or name in ("", ".", "..") or any(c in name for c in "/\\\0"):
        # NOTE: a name is a file in $LABKIT_HOME/datasets, never a path out of it
        raise DataError(f"get: a dataset name is a file name without '/', got {name!r}; "
                        "open a file elsewhere with H5Dataset(path)")
    path = dataset_path(name)
    if name == "digits":
        stamp = _stamp(path)
        if stamp is None or stamp != _VERIFIED.get(str(path)):
            _check_digits(path)
    elif not path.exists():
        raise DataError(f"no dataset {name!r} at {path}; convert it first "
                        f"(`labkit convert {name} SOURCE`, see `labkit convert --help`)")
    return H5Dataset(path, split=split, **kwargs)


def _check_digits(path) -> None:
    """labkit's own digits file, (re)built when missing, in the old format or corrupted.

    NOTE: read through once per process and version of the file (a sweep's trials and a
    notebook's cells open it again and again, 3 ms each time); a file written since is checked
    again, and reading it checks every chunk's checksum anyway. One process at a time checks
    and builds it (a lock file beside it): two that built it at once (a sweep's first trials on
    a fresh machine) each put their own file in place, and the first one's dataset then found
    its file replaced and failed its trial."""
    with _one_at_a_time(path):
        _check_digits_locked(path)


@contextlib.contextmanager
def _one_at_a_time(path):
    """An exclusive lock on ``.<name>.lock`` beside ``path`` while the block runs (POSIX; where
    it cannot be had, a directory that cannot be written or no fcntl, the block runs as it
    is: building the file then fails, or races, as it would have without it)."""
    try:
        import fcntl

        path.parent.mkdir(parents=True, exist_ok=True)
        f = open(path.with_name(f".{path.name}.lock"), "ab")  # noqa: SIM115 - closed below
    except (ImportError, OSError):
        yield
        return
    with f:
        fcntl.flock(f, fcntl.LOCK_EX)
        yield


def _check_digits_locked(path) -> None:
    if path.exists() and _old_format(path):
        path.unlink()  # labkit's own copy, rebuilt in the checksummed format
    seen = _stamp(path)  # NOTE: the version read through below
    if seen is not None and _corrupt(path):
        import warnings

        warnings.warn(f"{path} was corrupted; rebuilt it from the data labkit ships",
                      stacklevel=3)
        path.unlink()
    if not path.exists():
        try:
            convert_digits(path)
        except OSError as e:  # NOTE: LABKIT_HOME a file, read-only, full
            raise DataError(f"cannot write the digits dataset to {path} ({e.strerror or e}); "
                            "set LABKIT_HOME to a directory you can write") from e
        seen = _stamp(path)
    if seen is not None and _stamp(path) == seen:  # NOTE: not replaced while it was read
        _VERIFIED[str(path)] = seen


#: the digits files read through and found sound, by path: their _stamp then
_VERIFIED: dict = {}


def _stamp(path):
    """What changes when a file is written or replaced (None: it does not exist)."""
    try:
        st = path.stat()
    except OSError:
        return None
    return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns


def _old_format(path) -> bool:
    """A digits file written before labkit used HDF5's checksummed format (rebuilt quietly)."""
    try:
        return check_container(path) < 2
    except DataError:
        return False


def _corrupt(path) -> bool:
    try:
        ds = H5Dataset(path, split=list(DIGITS_SPLITS))
        ds.get_data(slice(0, ds.num_examples))
        return False
    except DataError:
        return True


__all__ = ["CONVERTERS", "convert_cifar10", "convert_digits", "convert_h5", "convert_mnist",
           "convert_npz", "convert_text", "dataset_path", "get", "read_idx"]
