"""Datasets: named sources of examples, read by request (an index, a slice or an index array).

A dataset is stateless: it answers ``get_data(request)`` with a dict ``{source: array}`` whose
first axis is the request's examples. Streams decide which requests to make.

``H5Dataset`` reads files in labkit's HDF5 layout, which ``write_h5`` writes (see
``labkit.data.layout``): every field is checked once when the file is opened, so a damaged or
hand-made file raises ``DataError`` naming the file and the field instead of reading wrong rows.

Examples
--------
>>> import numpy as np, tempfile, os
>>> from labkit.data import H5Dataset, write_h5
>>> path = os.path.join(tempfile.mkdtemp(), "toy.h5")
>>> _ = write_h5(path, {"x": np.arange(12.0).reshape(6, 2), "y": np.arange(6)},
...          splits={"train": (0, 4), "test": (4, 6)})
>>> ds = H5Dataset(path, split="test")
>>> ds.num_examples, ds.sources
(2, ('x', 'y'))
>>> ds.get_data([1, 0])["y"]
array([5, 4])
"""

from __future__ import annotations

import errno
import json
import os
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from ..errors import DataError
from .layout import (  # noqa: F401 - FORMAT_VERSION and write_h5 are re-exported
    FORMAT_VERSION,
    check_container,
    h5py,
    read_layout,
    warn_old_format,
    write_h5,
)

# ---- opening ------------------------------------------------------------------------------
#: how long opening waits for another process's HDF5 lock on the file to go (a process writing
#: it holds the lock until it closes it; a process forked while the file was open for an instant
#: holds it until it execs)
LOCK_WAIT = 2.0


def is_locked(e: OSError) -> bool:
    """Whether HDF5 could not open a file because another process holds its lock (errno 11),
    not because this filesystem takes no locks (ENOSYS, ENOLCK: ``no_locks``)."""
    return e.errno in (errno.EAGAIN, errno.EWOULDBLOCK) or (
        "unable to lock file" in str(e) and f"errno = {errno.EAGAIN}," in str(e))


def no_locks(e: OSError) -> bool:
    return "unable to lock file" in str(e) and not is_locked(e)


def open_h5(path):
    """``(h5py.File(path, "r"), superblock version)`` after ``check_container``; failures become
    ``DataError``. A file another process holds locked (open for writing) is waited for up to
    ``LOCK_WAIT`` seconds, then refused as locked, not as damaged."""
    path = Path(path)
    if not path.exists():
        raise DataError(f"{path}: no such dataset file (build it with `labkit convert` "
                        "or labkit.data.write_h5)")
    if not path.is_dir() and not path.is_file():  # NOTE: opening a FIFO waits for a writer
        raise DataError(f"{path}: not a regular file (a pipe or a device); HDF5 reads files")
    version = check_container(path)
    deadline = time.monotonic() + LOCK_WAIT
    while True:
        try:
            return h5py().File(path, "r"), version
        except OSError as e:
            if no_locks(e):
                raise DataError(f"{path}: this filesystem does not take HDF5's file locks "
                                f"({e}); set HDF5_USE_FILE_LOCKING=FALSE in the environment "
                                "before Python starts to read it without them") from None
            if not is_locked(e):
                raise _damaged(path, e) from None
            if time.monotonic() >= deadline:
                raise DataError(
                    f"{path}: locked by another process that has it open for writing (HDF5 "
                    f"locks a file while it is written; waited {LOCK_WAIT:g} s): let that "
                    "process finish or close the file there (a `labkit convert`, a write_h5 "
                    "or an h5py.File(..., 'w'/'a') left open in a notebook), then open it "
                    "again. On a filesystem whose locks do not work (some NFS mounts), set "
                    "HDF5_USE_FILE_LOCKING=FALSE") from None
            time.sleep(0.05)
        except (KeyError, RuntimeError, ValueError, TypeError) as e:
            raise _damaged(path, e) from None


def _damaged(path, e) -> DataError:
    return DataError(f"{path}: cannot open as HDF5 ({e}); the file is truncated or damaged "
                     "- rebuild it")


# ---- requests -------------------------------------------------------------------------------
def check_request(request, num_examples: int, where: str):
    """Normalise a request to an int, a ``slice`` with step > 0, or a 1-D int64 array.

    Raises ``DataError`` naming ``where`` for anything else, or for an index out of range.
    """
    if isinstance(request, (int, np.integer)) and not isinstance(request, bool):
        r = int(request)
        if not 0 <= r < num_examples:
            raise DataError(f"{where}: example {r} is out of range (0..{num_examples - 1})")
        return r
    if isinstance(request, slice):
        start, stop, step = request.indices(num_examples)
        if step <= 0:
            raise DataError(f"{where}: a slice request needs a positive step, got {request}")
        return slice(start, max(start, stop), step)
    try:
        idx = np.asarray(request)
    except Exception:
        idx = None
    if idx is None or idx.ndim != 1 or not (idx.dtype.kind in "iu" or idx.size == 0):
        shown = f"array of dtype {idx.dtype} and shape {idx.shape}" if idx is not None else (
            type(request).__name__)
        raise DataError(f"{where}: cannot sort this request into example indices: expected an int, "
                        f"a slice or a 1-D integer array, got {shown}")
    idx = idx.astype(np.int64, copy=False)
    if idx.size and (idx.min() < 0 or idx.max() >= num_examples):
        bad = idx[(idx < 0) | (idx >= num_examples)][0]
        raise DataError(f"{where}: example {int(bad)} is out of range (0..{num_examples - 1})")
    return idx


class Dataset:
    """The interface: ``sources``, ``num_examples``, ``axis_labels`` and ``get_data``."""

    sources: tuple[str, ...] = ()
    num_examples: int = 0
    axis_labels: dict[str, tuple | None] = {}

    def get_data(self, request, sources: Sequence[str] | None = None) -> dict[str, np.ndarray]:
        raise NotImplementedError

    def _pick(self, sources) -> tuple[str, ...]:
        if sources is None:
            return self.sources
        sources = (sources,) if isinstance(sources, str) else tuple(sources)
        missing = [s for s in sources if s not in self.sources]
        if missing:
            raise DataError(f"{self!r}: no source {missing[0]!r}; the sources are "
                            f"{list(self.sources)}")
        return sources

    def __len__(self) -> int:
        return self.num_examples

    def state_dict(self) -> dict:
        """Datasets hold no iteration state; present so every component has one."""
        return {}

    def load_state_dict(self, state: dict) -> None:
        pass


def _native(a):
    """``a`` in the machine's byte order (a big-endian array from a file of another machine:
    worker processes deliver native arrays, so batches are alike with and without them, as
    an H5Dataset's are)."""
    if isinstance(a, np.ndarray) and a.dtype.kind not in "OV" and not a.dtype.isnative:
        return a.astype(a.dtype.newbyteorder("="))
    return a


class IndexableDataset(Dataset):
    """Sources held in memory: a dict of arrays (or of lists of arrays, for sequences).

    Examples
    --------
    >>> import numpy as np
    >>> ds = IndexableDataset({"x": np.zeros((5, 3)), "y": np.arange(5)})
    >>> ds.get_data(slice(1, 3))["y"]
    array([1, 2])
    """

    def __init__(self, sources: Mapping[str, object], axis_labels: Mapping | None = None):
        if not sources:
            raise DataError("IndexableDataset: give at least one source, e.g. {'features': x}")
        self.data: dict[str, np.ndarray] = {}
        for name, value in sources.items():
            if isinstance(value, list) and value and isinstance(value[0], np.ndarray):
                arr = np.empty(len(value), dtype=object)
                arr[:] = [_native(v) for v in value]
            else:
                arr = _native(np.asarray(value))
            if arr.ndim == 0:
                raise DataError(f"IndexableDataset: source {name!r} is a scalar; each source "
                                "needs a first axis of examples")
            self.data[name] = arr
        lengths = {n: len(a) for n, a in self.data.items()}
        if len(set(lengths.values())) != 1:
            raise DataError(f"IndexableDataset: sources differ in length: {lengths}")
        self.sources = tuple(self.data)
        self.num_examples = next(iter(lengths.values()))
        self.axis_labels = {n: (tuple(axis_labels[n]) if axis_labels and n in axis_labels
                                else None) for n in self.sources}

    def get_data(self, request, sources=None):
        request = check_request(request, self.num_examples, repr(self))
        return {s: self.data[s][request] for s in self._pick(sources)}

    def __repr__(self) -> str:
        return f"IndexableDataset({self.num_examples} examples, sources={list(self.sources)})"


# ---- reading --------------------------------------------------------------------------------
def _is_corruption(err: Exception) -> bool:
    text = str(err).lower()
    return any(w in text for w in ("checksum", "filter", "fletcher", "read failed",
                                   "can't read data", "wrong b-tree", "bad object", "corrupt"))


class H5Dataset(Dataset):
    """One or more splits of a file in labkit's HDF5 layout (see the module docstring).

    Parameters
    ----------
    path : the ``.h5`` file.
    split : a split name, or several (their rows are concatenated in the order given).
    sources : the sources to read (default: all).
    load_in_memory : read the split's rows into memory once (fast random access for small data).

    The file is opened lazily in the process that reads it, and again after a fork or in a worker
    process (HDF5 handles do not survive either); a file changed or replaced since the layout was
    checked is refused then, not read. Index requests in any order, with repeats, are read in
    sorted order (as h5py requires) and put back in the order asked.
    """

    def __init__(self, path, split: str | Sequence[str] = "train",
                 sources: Sequence[str] | None = None, load_in_memory: bool = False):
        self.path = Path(path)
        self.split = (split,) if isinstance(split, str) else tuple(split)
        self.load_in_memory = bool(load_in_memory)
        self._file = None
        self._pid = None
        self._memory: dict[str, np.ndarray] | None = None
        f, version = open_h5(self.path)
        with f:
            self._identity = _identity(f)
            layout = read_layout(f, self.path)
        warn_old_format(self.path, version)
        self.all_sources, self.ragged = layout.sources, layout.ragged
        self.splits, self.axis_labels_all = layout.splits, layout.axis_labels
        self._metadata = layout.metadata
        self._num_rows, self.info = layout.num_rows, layout.info
        self.metadata_keys = tuple(layout.metadata)
        splits = self.splits
        bad = [s for s in self.split if not isinstance(s, str)]
        if bad:
            raise DataError(f"{self.path}: a split is named by a string, got {bad[0]!r}")
        missing = [s for s in self.split if s not in splits]
        if missing:
            raise DataError(f"{self.path}: no split {missing[0]!r}; the file has splits "
                            f"{sorted(splits)}")
        self.sources = self.all_sources if sources is None else tuple(
            [sources] if isinstance(sources, str) else sources)
        absent = [s for s in self.sources if s not in self.all_sources]
        if absent:
            raise DataError(f"{self.path}: no source {absent[0]!r}; the file has sources "
                            f"{list(self.all_sources)}")
        self.axis_labels = {s: self.axis_labels_all.get(s) for s in self.sources}
        ranges = [splits[s] for s in self.split]
        self.num_examples = sum(b - a for a, b in ranges)
        ranges = ranges or [(0, 0)]
        # NOTE: one split is an offset (requests stay slices); several need an index map.
        self._offset = ranges[0][0] if len(ranges) == 1 else None
        self._rows = None if len(ranges) == 1 else np.concatenate(
            [np.arange(a, b, dtype=np.int64) for a, b in ranges])
        if self.load_in_memory:
            need, free = self._bytes_in_memory(), _available_memory()
            if free is not None and need > free:
                raise DataError(f"{self.path}: load_in_memory=True needs {_size(need)} for split "
                                f"{'+'.join(self.split)} but {_size(free)} of memory is "
                                "available; use load_in_memory=False (rows are then read as they "
                                "are asked for)")
            self._memory = self._read_all()

    # -- file handling
    def _open_file(self):
        return open_h5(self.path)[0]

    @property
    def file(self):
        """The open h5py file of this process (opened on first use, again after a fork), the one
        whose layout was checked: a file changed or replaced since is refused, not read."""
        if self._file is None or self._pid != os.getpid():
            self._file, self._pid = None, None
            f = self._open_file()
            if _identity(f) != self._identity:
                f.close()
            else:
                self._file, self._pid = f, os.getpid()
        if self._file is None or _identity(self._file) != self._identity:
            raise DataError(f"{self.path}: the file was changed or replaced since this dataset "
                            "opened it and checked its layout; open it again (a new H5Dataset) "
                            "to read the file as it is now")
        return self._file

    def close(self) -> None:
        if self._file is not None and self._pid == os.getpid():
            self._file.close()
        self._file = None

    def __getstate__(self):
        # NOTE: worker processes get the path and the options, never an open HDF5 handle.
        state = self.__dict__.copy()
        state["_file"] = None
        state["_pid"] = None
        return state

    def metadata(self, key: str):
        """The JSON metadata stored under ``/_meta/<key>`` (e.g. ``"vocabulary"``)."""
        if key not in self.metadata_keys:
            raise DataError(f"{self.path}: no metadata {key!r}; the file has "
                            f"{list(self.metadata_keys)}")
        return json.loads(self._metadata[key])

    # -- reading
    def _guard(self, read, source, rows):
        try:
            return read()
        except DataError:
            raise
        except MemoryError:
            raise DataError(f"{self.path}: source {source!r}, rows {rows}: not enough memory to "
                            "read them; ask for fewer rows (or use load_in_memory=False)") from None
        except (OSError, RuntimeError, ValueError, KeyError, TypeError) as e:
            if _is_corruption(e):
                raise DataError(f"{self.path}: source {source!r}, rows {rows}: the data failed "
                                f"its checksum or could not be decoded ({e}); the file is "
                                "corrupted - rebuild it") from None
            raise DataError(f"{self.path}: reading source {source!r}, rows {rows} failed: {e}"
                            ) from None

    def _read_rows(self, source, rows):
        """Rows of the file (a slice or a sorted unique int array) of one source."""
        if source in self.ragged:
            return self._read_ragged(source, rows)
        d = self._guard(lambda: self.file[source], source, _show(rows))
        if isinstance(rows, slice) or d.chunks is None:
            return _native(self._guard(lambda: d[rows], source, _show(rows)))
        # NOTE: h5py's fancy indexing of a chunked dataset walks a point selection through every
        # chunk (~8 ms for 128 random rows of 28x28 here); one slice read per run of consecutive
        # rows is ~1.7 ms for the same bytes.
        out = np.empty((len(rows), *d.shape[1:]), dtype=d.dtype.newbyteorder("="))
        if not len(rows):
            return out
        breaks = np.flatnonzero(np.diff(rows) != 1) + 1
        starts = np.concatenate([[0], breaks])
        stops = np.concatenate([breaks, [len(rows)]])

        def read():
            for a, b in zip(starts.tolist(), stops.tolist()):
                r0 = int(rows[a])
                out[a:b] = d[r0:r0 + b - a]
            return out
        return self._guard(read, source, _show(rows))

    def _read_ragged(self, source, rows):
        offsets_d, flat = self._guard(lambda: (self.file[f"_ragged/{source}"], self.file[source]),
                                      source, _show(rows))
        if isinstance(rows, slice):
            rows = np.arange(rows.start, rows.stop, rows.step or 1)
        if rows.size == 0:
            return np.empty(0, dtype=object)
        lo, hi = int(rows[0]), int(rows[-1]) + 2
        offs = self._guard(lambda: offsets_d[lo:hi], source, _show(rows)).astype(np.int64)
        starts, stops = offs[rows - lo], offs[rows - lo + 1]
        span = int(stops[-1] - starts[0])
        out = np.empty(rows.size, dtype=object)
        if span <= 4 * int((stops - starts).sum()) + 1024:
            base = int(starts[0])
            block = _native(self._guard(lambda: flat[base:base + span], source, _show(rows)))
            for i, (a, b) in enumerate(zip(starts, stops)):
                out[i] = block[a - base:b - base]
        else:
            for i, (a, b) in enumerate(zip(starts, stops)):
                out[i] = _native(self._guard(lambda a=a, b=b: flat[a:b], source, int(rows[i])))
        return out

    def _bytes_in_memory(self) -> int:
        """What ``_read_all`` allocates (a ragged sequence costs ~100 bytes more as an array)."""
        total = 0
        for s in self.sources:
            d = self.file[s]
            for a, b in (self.splits[name] for name in self.split):
                if s in self.ragged and a < b:
                    lo, hi = self.file[f"_ragged/{s}"][[a, b]].tolist()
                    total += (hi - lo) * d.dtype.itemsize + 100 * (b - a)
                elif s not in self.ragged:
                    total += (b - a) * (d.nbytes // max(d.shape[0], 1))
        return total

    def _read_all(self) -> dict[str, np.ndarray]:
        out = {}
        for s in self.sources:
            parts = [self._read_rows(s, slice(a, b, 1)) for a, b in
                     (self.splits[name] for name in self.split)]
            out[s] = np.concatenate(parts) if len(parts) > 1 else parts[0]
        return out

    def get_data(self, request, sources=None):
        request = check_request(request, self.num_examples, repr(self))
        sources = self._pick(sources)
        if self._memory is not None:
            return {s: self._memory[s][request] for s in sources}
        scalar = isinstance(request, int)
        if scalar:
            request = np.array([request], dtype=np.int64)
        if isinstance(request, slice) and self._offset is not None:
            rows = slice(request.start + self._offset, request.stop + self._offset, request.step)
            out = {s: self._read_rows(s, rows) for s in sources}
        else:
            if isinstance(request, slice):
                request = np.arange(request.start, request.stop, request.step, dtype=np.int64)
            rows = request + self._offset if self._rows is None else self._rows[request]
            # NOTE: h5py reads index lists only sorted and unique; read so, then restore order.
            uniq, inverse = np.unique(rows, return_inverse=True)
            out = {}
            for s in sources:
                data = self._read_rows(s, uniq)
                out[s] = data if (uniq.size == rows.size and (np.diff(rows) > 0).all()) \
                    else data[inverse]
        if scalar:
            out = {s: v[0] for s, v in out.items()}
        return out

    def __repr__(self) -> str:
        return (f"H5Dataset('{self.path}', split={'+'.join(self.split)}, "
                f"{self.num_examples} examples)")


def _native(a):
    """``a`` in this machine's byte order (HDF5 converts big-endian data as it reads)."""
    return a if a.dtype.isnative else a.astype(a.dtype.newbyteorder("="))


def _identity(f):
    """What changes when the file under an open h5py handle is rewritten in place (a rename
    over its path leaves the open file as it was, and a reopen gets another inode)."""
    try:
        st = os.fstat(f.id.get_vfd_handle())
    except (OSError, ValueError, TypeError, AttributeError):
        return None
    return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns


def _size(n: int) -> str:
    unit = max(u for u in range(5) if n >= 1024 ** u or u == 0)
    return f"{n / 1024 ** unit:.1f} {['bytes', 'KiB', 'MiB', 'GiB', 'TiB'][unit]}"


def _available_memory() -> int | None:
    """Bytes this process can still allocate: Linux's MemAvailable, less under a cgroup limit."""
    found = []
    try:
        with open("/proc/meminfo") as fh:
            found += [int(ln.split()[1]) * 1024 for ln in fh if ln.startswith("MemAvailable:")]
    except (OSError, ValueError, IndexError):
        pass
    try:
        limit = Path("/sys/fs/cgroup/memory.max").read_text().strip()
        if limit != "max":
            found.append(int(limit) - int(Path("/sys/fs/cgroup/memory.current").read_text()))
    except (OSError, ValueError):
        pass
    return max(0, min(found)) if found else None


def _show(rows) -> str:
    if isinstance(rows, slice):
        return f"{rows.start}:{rows.stop}"
    rows = np.asarray(rows)
    if rows.size <= 4:
        return str(rows.tolist())
    return f"[{rows[0]}, {rows[1]}, ..., {rows[-1]}] ({rows.size} rows)"
