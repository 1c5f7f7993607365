"""labkit's HDF5 layout: writing it (``write_h5``) and checking a file against it on open.

The layout (format version 1):

- the root group has the attribute ``labkit_dataset = 1`` (the format version) and ``splits``,
  a JSON object ``{"train": [start, stop], ...}`` of row ranges; optional ``name`` and
  ``description`` attributes. Two splits that share rows nest (``train_full`` holds
  ``train`` and ``valid``, as the MNIST and CIFAR-10 converters write it; a subset lies inside
  its split); ranges that cross (``train [0, 6]``, ``test [4, 8]``) are refused;
- every *source* is a dataset in the root group whose first axis is the example axis (all
  splits, concatenated; every source has the same number of rows), of bool, integers or floats
  of at most 64 bits (in either byte order; read in the machine's), every byte of it written
  (never HDF5's fill value), with filters this h5py decodes; its ``axis_labels``
  attribute is a JSON list such as ``["batch", "channel", "height", "width"]``;
- a *ragged* source (sequences of different lengths) is stored flat with the attribute
  ``ragged = 1``; its ``N + 1`` row offsets are ``/_ragged/<source>`` (int64);
- metadata such as a vocabulary is JSON, stored as uint8 bytes in ``/_meta/<key>``;
- data is chunked in small row chunks (about 16 KiB, so random minibatches read little more than
  they need) with ``fletcher32`` checksums, so corrupted data raises instead of being read.

The container is HDF5's newer file format (superblock version 3, version 2 object headers,
checksummed chunk indexes: what HDF5 1.10 and later read), in which every piece of metadata
carries a checksum too, and text attributes are fixed-length strings kept inside those
checksummed headers (variable-length strings would live in HDF5's global heap, which has none).
``check_container`` verifies the superblock itself before h5py parses anything; ``read_layout``
checks every field above once at open. Files in the old format (superblock 0 or 1, no metadata
checksums) are still read, with a warning to rewrite them.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import NamedTuple

import numpy as np

from .._fs import atomic_path
from .._json import loads_strict
from ..errors import DataError

FORMAT_VERSION = 1
#: HDF5 format bounds for writing: 1.10's (checksummed metadata; older h5py wheels read it)
LIBVER = ("v110", "v110")
_CHUNK_BYTES = 16 * 1024
#: the largest chunk a source may be stored in: reading a row unpacks its whole chunk (h5py's
#: own are at most 1 MiB; a crafted 4 GiB chunk of zeros compresses to a few MiB)
MAX_CHUNK_BYTES = 64 << 20
_SIGNATURE = b"\x89HDF\r\n\x1a\n"
_OFFSETS_BLOCK = 1 << 20  # ragged offsets are checked this many at a time
#: the most bytes of one /_meta entry (a vocabulary): a 1 MB file of gzip chunks declared 1 GiB
MAX_META = 64 << 20


def h5py():
    try:
        import h5py
    except ImportError:  # pragma: no cover - h5py is a dependency
        raise DataError("HDF5 datasets need h5py: pip install h5py") from None
    return h5py


# ---- writing --------------------------------------------------------------------------------
def _is_int(v) -> bool:
    return isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_))


def _text_attr(value: str) -> np.ndarray:
    """A fixed-length UTF-8 string: stored in the (checksummed) object header."""
    raw = value.encode()
    return np.array(raw, dtype=h5py().string_dtype("utf-8", max(1, len(raw))))


def write_h5(path, sources: Mapping[str, object],
             splits: Mapping[str, tuple[int, int]] | None = None,
             *, axis_labels: Mapping[str, Sequence[str]] | None = None,
             metadata: Mapping[str, object] | None = None, name: str | None = None,
             description: str | None = None, checksums: bool = True) -> Path:
    """Write ``sources`` in labkit's HDF5 layout at ``path``, atomically; returns the path.

    ``sources`` maps names to arrays with a common first axis, or to lists of 1-D arrays (ragged
    sequences). ``splits`` maps split names to ``(start, stop)`` row ranges (default: one
    ``"all"`` split). The file is written under a temporary name, flushed to disk and renamed, so
    readers never see half a file. ``checksums=False`` writes contiguous data without fletcher32
    (the metadata keeps its checksums).
    """
    h5 = h5py()
    path = Path(path)
    if not sources:
        raise DataError(f"write_h5({path}): give at least one source")
    lengths = {}
    prepared = {}
    for src, value in sources.items():
        if not isinstance(src, str) or not src or src.startswith("_") or "/" in src:
            raise DataError(f"write_h5({path}): source name {src!r} must be a non-empty string "
                            "that does not start with '_' or contain '/'")
        if isinstance(value, (list, tuple)) or (isinstance(value, np.ndarray)
                                                 and value.dtype == object):
            seqs = [np.asarray(v) for v in value]
            if any(s.ndim != 1 for s in seqs):
                raise DataError(f"write_h5({path}): ragged source {src!r} must hold 1-D sequences")
            dtype = np.result_type(*[s.dtype for s in seqs]) if seqs else np.int64
            _check_dtype(path, src, dtype)
            dtype = dtype.newbyteorder("=")
            offsets = np.zeros(len(seqs) + 1, dtype=np.int64)
            np.cumsum([len(s) for s in seqs], out=offsets[1:])
            flat = (np.concatenate(seqs).astype(dtype, copy=False) if seqs
                    else np.zeros(0, dtype=dtype))
            prepared[src] = ("ragged", flat, offsets)
            lengths[src] = len(seqs)
        else:
            arr = np.asarray(value)
            if arr.ndim == 0:  # NOTE: before ascontiguousarray, which makes it one row
                raise DataError(f"write_h5({path}): source {src!r} is a scalar")
            _check_dtype(path, src, arr.dtype)
            # NOTE: stored in this machine's byte order (readers convert it to theirs)
            arr = np.ascontiguousarray(arr, dtype=arr.dtype.newbyteorder("="))
            prepared[src] = ("dense", arr, None)
            lengths[src] = len(arr)
    if len(set(lengths.values())) != 1:
        raise DataError(f"write_h5({path}): sources differ in length: {lengths}")
    n = next(iter(lengths.values()))
    checked = {}
    for split, rng in (dict(splits) if splits else {"all": (0, n)}).items():
        problem = "its name must be a string" if not isinstance(split, str) else \
            split_problem(rng, n)
        if problem:
            raise DataError(f"write_h5({path}): split {split!r} = {rng!r}: {problem}")
        checked[split] = [int(rng[0]), int(rng[1])]
    problem = overlap_problem(checked)
    if problem:
        raise DataError(f"write_h5({path}): {problem}")
    meta = {}
    for key, value in (metadata or {}).items():
        if not isinstance(key, str) or not key or "/" in key or key in (".", ".."):
            raise DataError(f"write_h5({path}): metadata key {key!r} must be a non-empty string "
                            "without '/'")
        meta[key] = json.dumps(value).encode()
        if len(meta[key]) > MAX_META:  # NOTE: the reader refuses it: a file no one could open
            raise DataError(f"write_h5({path}): metadata {key!r} is {len(meta[key]):,} bytes "
                            f"as JSON; a dataset's metadata entry holds at most {MAX_META:,} "
                            "(keep vocabularies and tables smaller, or store them as sources)")
    for src, labels in (axis_labels or {}).items():
        if labels is None:
            continue
        labels = list(labels)
        kind, arr, _ = prepared.get(src, ("dense", None, None))
        if arr is None:
            raise DataError(f"write_h5({path}): axis_labels for {src!r}, which is not a source")
        ndim = 2 if kind == "ragged" else arr.ndim
        if len(labels) != ndim or not all(isinstance(x, str) for x in labels):
            raise DataError(f"write_h5({path}): axis_labels for {src!r} must be {ndim} names "
                            f"(the source has {ndim} axes), got {labels!r}")

    def chunked(shape, itemsize):
        row = int(np.prod(shape[1:], dtype=np.int64)) * itemsize
        rows = max(1, min(shape[0], _CHUNK_BYTES // max(row, 1)))
        return (rows,) + tuple(shape[1:])

    def create(group, key, arr):
        opts = {}
        if checksums and arr.size:
            opts = {"chunks": chunked(arr.shape, arr.dtype.itemsize), "fletcher32": True}
        return group.create_dataset(key, data=arr, **opts)

    with atomic_path(path) as tmp, h5.File(tmp, "w", libver=LIBVER) as f:
        f.attrs["labkit_dataset"] = np.int64(FORMAT_VERSION)
        f.attrs["splits"] = _text_attr(json.dumps(checked))
        if name:
            f.attrs["name"] = _text_attr(str(name))
        if description:
            f.attrs["description"] = _text_attr(str(description))
        for src, (kind, arr, offsets) in prepared.items():
            d = create(f, src, arr)
            if kind == "ragged":
                d.attrs["ragged"] = np.int64(1)
                create(f.require_group("_ragged"), src, offsets)
            labels = (axis_labels or {}).get(src)
            if labels is not None:
                d.attrs["axis_labels"] = _text_attr(json.dumps(list(labels)))
        for key, text in meta.items():
            create(f.require_group("_meta"), key, np.frombuffer(text, dtype=np.uint8))
    return path


def dtype_problem(dtype) -> str | None:
    """What is wrong with a source's dtype, or None: the one rule for writing and for reading a
    file. Sources hold bool, integers or floats of at most 64 bits (what every device takes)."""
    dtype = np.dtype(dtype)
    if (dtype.kind not in "biuf" or dtype.fields is not None or dtype.subdtype is not None
            or dtype.itemsize > 8):
        return (f"expected numbers (bool, integer or float of at most 64 bits), got dtype "
                f"{dtype}")
    return None


def _check_dtype(path, src, dtype) -> None:
    problem = dtype_problem(dtype)
    if problem:
        hint = ("encode strings as token ids and keep a vocabulary in metadata" if
                np.dtype(dtype).kind in "OUS" else "convert it, e.g. .astype(np.float64)")
        raise DataError(f"write_h5({path}): source {src!r}: {problem}; store numbers ({hint})")


# ---- the container: checked before h5py parses it -------------------------------------------
_M32 = 0xFFFFFFFF


def _rot(x, k):
    return ((x << k) | (x >> (32 - k))) & _M32


def lookup3(data: bytes, initval: int = 0) -> int:
    """Bob Jenkins' lookup3 ``hashlittle``: the checksum on HDF5's newer metadata."""
    n = len(data)
    a = b = c = (0xDEADBEEF + n + initval) & _M32
    i = 0
    while n - i > 12:
        a = (a + int.from_bytes(data[i:i + 4], "little")) & _M32
        b = (b + int.from_bytes(data[i + 4:i + 8], "little")) & _M32
        c = (c + int.from_bytes(data[i + 8:i + 12], "little")) & _M32
        a = (a - c) & _M32; a ^= _rot(c, 4); c = (c + b) & _M32  # noqa: E702
        b = (b - a) & _M32; b ^= _rot(a, 6); a = (a + c) & _M32  # noqa: E702
        c = (c - b) & _M32; c ^= _rot(b, 8); b = (b + a) & _M32  # noqa: E702
        a = (a - c) & _M32; a ^= _rot(c, 16); c = (c + b) & _M32  # noqa: E702
        b = (b - a) & _M32; b ^= _rot(a, 19); a = (a + c) & _M32  # noqa: E702
        c = (c - b) & _M32; c ^= _rot(b, 4); b = (b + a) & _M32  # noqa: E702
        i += 12
    if i == n:
        return c
    tail = data[i:].ljust(12, b"\0")
    a = (a + int.from_bytes(tail[0:4], "little")) & _M32
    b = (b + int.from_bytes(tail[4:8], "little")) & _M32
    c = (c + int.from_bytes(tail[8:12], "little")) & _M32
    c ^= b; c = (c - _rot(b, 14)) & _M32  # noqa: E702
    a ^= c; a = (a - _rot(c, 11)) & _M32  # noqa: E702
    b ^= a; b = (b - _rot(a, 25)) & _M32  # noqa: E702
    c ^= b; c = (c - _rot(b, 16)) & _M32  # noqa: E702
    a ^= c; a = (a - _rot(c, 4)) & _M32  # noqa: E702
    b ^= a; b = (b - _rot(a, 14)) & _M32  # noqa: E702
    c ^= b; c = (c - _rot(b, 24)) & _M32  # noqa: E702
    return c


def _superblock_ok(head: bytes) -> bool:
    """Whether ``head`` (from the signature on) is a version 2/3 superblock whose checksum holds."""
    size = head[9] if len(head) > 9 else 0
    if size not in (2, 4, 8, 16):
        return False
    end = 12 + 4 * size
    return (len(head) >= end + 4
            and int.from_bytes(head[end:end + 4], "little") == lookup3(head[:end]))


_warned_old: set[str] = set()


def check_container(path) -> int:
    """Check the HDF5 superblock of ``path`` before h5py parses the file; returns its version.

    Version 2 and 3 superblocks carry a checksum, verified here. A version 0/1 superblock that
    would be a valid version 2/3 one but for the version byte is a damaged new file.
    """
    path = Path(path)
    try:
        with open(path, "rb") as fh:
            fh.seek(0, 2)
            size = fh.tell()
            base = 0
            # NOTE: HDF5 looks for its signature at 0, 512, 1024, 2048, ... (after a user block).
            while base + 8 <= size:
                fh.seek(base)
                if fh.read(8) == _SIGNATURE:
                    break
                base = 512 if base == 0 else base * 2
            else:
                raise DataError(f"{path}: cannot open as HDF5: no HDF5 signature; the file is "
                                "damaged or is not an HDF5 file - rebuild it")
            fh.seek(base)
            head = fh.read(12 + 4 * 16 + 4)
    except OSError as e:
        raise DataError(f"{path}: cannot read ({e})") from None
    version = head[8] if len(head) > 8 else -1
    if version in (2, 3):
        if not _superblock_ok(head):
            raise DataError(f"{path}: the HDF5 superblock (the file's header) fails its checksum; "
                            "the file is damaged - rebuild it")
        return version
    if version in (0, 1):
        for v in (2, 3):
            if _superblock_ok(head[:8] + bytes([v]) + head[9:]):
                raise DataError(f"{path}: the HDF5 superblock says version {version} but is a "
                                f"damaged version {v} superblock; the file is damaged - rebuild it")
        return version
    raise DataError(f"{path}: unknown HDF5 superblock version {version}; the file is damaged or "
                    "was written by a newer HDF5 than this h5py reads")


def warn_old_format(path, version: int) -> None:
    """Warn (once per file and process) that ``path`` is in HDF5's old file format."""
    if version < 2 and str(path) not in _warned_old:
        _warned_old.add(str(path))
        warnings.warn(f"{path} is in HDF5's old file format (superblock version {version}), "
                      "whose metadata has no checksums, so damage to it can go unnoticed; "
                      "rewrite it with labkit.data.convert_h5(path) (or rebuild it with "
                      "`labkit convert` / write_h5)", stacklevel=3)


# ---- the layout: checked field by field at open ---------------------------------------------
class Layout(NamedTuple):
    sources: tuple[str, ...]
    ragged: frozenset
    splits: dict[str, tuple[int, int]]
    axis_labels: dict[str, tuple[str, ...]]
    metadata: dict[str, str]       # key -> its JSON text
    num_rows: int
    info: dict[str, str]           # the optional name and description


def split_problem(rng, n: int) -> str | None:
    """What is wrong with a split's row range ``[start, stop]`` over ``n`` rows, or None: the
    one rule for writing and for reading a file."""
    if not (isinstance(rng, (list, tuple)) and len(rng) == 2 and all(_is_int(v) for v in rng)):
        return "expected [start, stop] (two integers)"
    if not 0 <= int(rng[0]) <= int(rng[1]) <= n:
        return f"expected 0 <= start <= stop <= {n} (the number of rows)"
    return None


def overlap_problem(splits: Mapping[str, Sequence[int]]) -> str | None:
    """What is wrong with how valid split ranges meet, or None: two splits that share rows must
    nest (one holds every row of the other: ``train_full`` holds ``train`` and ``valid``, a
    ``small`` subset lies inside ``train``); ranges that cross are refused. Empty splits hold
    no rows and meet nothing."""
    # NOTE: sorted by start, longest first, a stack of the open ranges (each inside the one
    # below it) finds the first range that crosses another in O(n log n)
    order = sorted((int(a), -int(b), name) for name, (a, b) in splits.items() if a < b)
    stack: list[tuple[int, int, str]] = []
    for a, neg_b, name in order:
        b = -neg_b
        while stack and stack[-1][1] <= a:
            stack.pop()
        if stack and b > stack[-1][1]:
            pa, pb, other = stack[-1]
            return (f"splits {other!r} [{pa}, {pb}] and {name!r} [{a}, {b}] cross: they share "
                    f"rows {a}..{pb - 1} but each has rows the other lacks; splits either hold "
                    "disjoint rows or nest (train_full holds train and valid)")
        stack.append((a, b, name))
    return None


class _Reader:
    """Reads one file's layout; every error names the file, the field and what was expected."""

    def __init__(self, f, path):
        self.f, self.path = f, path

    def fail(self, field, message):
        raise DataError(f"{self.path}: {field}: {message}; the file is damaged or was not written "
                        "by labkit.data.write_h5 - rebuild it")

    def h5(self, field, fn):
        """Run an h5py call; its failures (damaged structures) become DataError for ``field``."""
        try:
            return fn()
        except DataError:
            raise
        except (OSError, KeyError, RuntimeError, ValueError, TypeError, IndexError) as e:
            self.fail(field, f"cannot be read ({type(e).__name__}: {e})")

    def text(self, obj, key, field):
        value = self.h5(field, lambda: obj.attrs[key])
        if isinstance(value, np.ndarray) and value.shape == () and value.dtype.kind in "SO":
            value = value[()]
        if isinstance(value, (bytes, np.bytes_)):
            try:
                return bytes(value).decode("utf-8")
            except UnicodeDecodeError:
                self.fail(field, "expected UTF-8 text, got undecodable bytes")
        if isinstance(value, str):
            return value
        self.fail(field, f"expected a text attribute, got {type(value).__name__}")

    def json(self, text, field, strict=True):
        try:
            return loads_strict(text, constants=not strict)
        except ValueError as e:
            self.fail(field, f"expected JSON, got {text[:60]!r} ({e})")

    def integer(self, obj, key, field):
        value = self.h5(field, lambda: obj.attrs[key])
        if isinstance(value, np.ndarray) and value.shape == ():
            value = value[()]
        if not _is_int(value):
            self.fail(field, f"expected an integer, got {value!r}")
        return int(value)

    def read(self) -> Layout:
        f = self.f
        attrs = self.h5("root attributes", lambda: set(f.attrs.keys()))
        if "labkit_dataset" not in attrs:
            raise DataError(f"{self.path} is not a labkit dataset: its root group has no "
                            "'labkit_dataset' attribute (write one with labkit.data.write_h5 or "
                            "`labkit convert`)")
        version = self.integer(f, "labkit_dataset", "attribute 'labkit_dataset'")
        if version > FORMAT_VERSION:
            raise DataError(f"{self.path} uses labkit dataset format {version}; this labkit "
                            f"reads format {FORMAT_VERSION} - upgrade labkit")
        if version < 1:
            self.fail("attribute 'labkit_dataset'", f"expected format version 1..{FORMAT_VERSION}"
                      f", got {version}")
        if "splits" not in attrs:
            self.fail("attribute 'splits'", "missing (a JSON object of [start, stop] ranges)")
        raw_splits = self.json(self.text(f, "splits", "attribute 'splits'"), "attribute 'splits'")
        info = {k: self.text(f, k, f"attribute {k!r}") for k in ("name", "description")
                if k in attrs}

        members = self.h5("root group", lambda: list(f.keys()))
        for key in [k for k in ("_ragged", "_meta") if k in members]:
            self.link(f, key, f"/{key}", "group")  # NOTE: before any path through it is looked up
        sources, ragged, labels, rows = [], set(), {}, {}
        for key in members:
            if key in ("_ragged", "_meta"):
                continue
            if key.startswith("_"):
                self.fail(f"member {key!r}", "unknown; the layout's members starting with '_' are "
                          "_ragged and _meta")
            d = self.dataset(f, key, f"source {key!r}")
            shape, dtype = d.shape, d.dtype
            if len(shape) == 0:
                self.fail(f"source {key!r}", "expected a first axis of examples, got a scalar")
            if dtype_problem(dtype):
                self.fail(f"source {key!r}", dtype_problem(dtype))
            d_attrs = self.h5(f"source {key!r}", lambda d=d: set(d.attrs.keys()))
            is_ragged = False
            if "ragged" in d_attrs:
                flag = self.integer(d, "ragged", f"attribute 'ragged' of source {key!r}")
                if flag not in (0, 1):
                    self.fail(f"attribute 'ragged' of source {key!r}",
                              f"expected 0 or 1, got {flag}")
                is_ragged = flag == 1
            if is_ragged:
                if len(shape) != 1:
                    self.fail(f"ragged source {key!r}", f"expected flat (1-D) data, got shape "
                              f"{shape}")
                ragged.add(key)
                rows[key] = self.offsets(key, shape[0])
            else:
                rows[key] = shape[0]
            if "axis_labels" in d_attrs:
                field = f"attribute 'axis_labels' of source {key!r}"
                names = self.json(self.text(d, "axis_labels", field), field)
                ndim = 2 if is_ragged else len(shape)
                if (not isinstance(names, list) or len(names) != ndim
                        or not all(isinstance(x, str) for x in names)):
                    self.fail(field, f"expected a JSON list of {ndim} names (one per axis), "
                              f"got {names!r}")
                labels[key] = tuple(names)
            sources.append(key)
        if not sources:
            raise DataError(f"{self.path}: the file holds no sources")
        if "_ragged" in members:
            for key in self.group("_ragged"):
                if key not in ragged:
                    self.fail(f"/_ragged/{key}", "offsets of a source that is not ragged (its "
                              "'ragged' attribute is missing or 0)")
        if len(set(rows.values())) != 1:
            self.fail("sources", f"expected one number of rows for every source, got {rows}")
        n = next(iter(rows.values()))
        splits = self.splits(raw_splits, n)
        meta = {}
        if "_meta" in members:
            for key in self.group("_meta"):
                field = f"metadata /_meta/{key}"
                d = self.dataset(f["_meta"], key, field)
                if len(d.shape) != 1 or d.dtype != np.uint8 or d.shape[0] > MAX_META:
                    self.fail(field, f"expected 1-D uint8 (JSON bytes) of at most {MAX_META:,}"
                              f" bytes, got {d.dtype} {d.shape}")
                raw = self.h5(field, lambda d=d: d[()])
                try:
                    text = raw.tobytes().decode("utf-8")
                except UnicodeDecodeError:
                    self.fail(field, "expected UTF-8 JSON, got undecodable bytes")
                self.json(text, field, strict=False)
                meta[key] = text
        return Layout(tuple(sources), frozenset(ragged), splits, labels, meta, n, info)

    def link(self, group, key, field, what="dataset"):
        link = self.h5(field, lambda: group.get(key, getlink=True))
        if not isinstance(link, h5py().HardLink):
            # NOTE: a soft or external link reads another member or another file (a FIFO: hangs)
            self.fail(field, f"expected a {what} stored in this file, got a "
                      f"{type(link).__name__} (links are not part of the layout)")

    def dataset(self, group, key, field):
        self.link(group, key, field)
        obj = self.h5(field, lambda: group[key])
        if not hasattr(obj, "shape") or not hasattr(obj, "dtype"):
            self.fail(field, f"expected a dataset, got {type(obj).__name__}")
        if self.h5(field, lambda: (obj.shape, obj.dtype))[0] is None:  # NOTE: h5py.Empty
            self.fail(field, "expected data, got an empty (null) dataspace")
        if self.h5(field, lambda: obj.external) or self.h5(field, lambda: obj.is_virtual):
            # NOTE: its bytes would come from other files (any file: /etc/passwd)
            self.fail(field, "expected data stored in this file, got external or virtual "
                      "storage that reads other files")
        self.storage(obj, field)
        return obj

    def storage(self, d, field):
        """Refuse data HDF5 cannot decode here, or would make up: never written, it reads as zeros
        (the fill value), and a file of a few bytes can declare terabytes that way."""
        h5 = h5py()
        dcpl = self.h5(field, d.id.get_create_plist)
        for i in range(self.h5(field, dcpl.get_nfilters)):
            code, _, _, name = self.h5(field, lambda i=i: dcpl.get_filter(i))
            if not self.h5(field, lambda code=code: h5.h5z.filter_avail(code)):
                raise DataError(f"{self.path}: {field}: stored with HDF5 filter {code} "
                                f"({name.decode(errors='replace') or 'unnamed'}), which this "
                                "h5py cannot decode; install its plugin (pip install hdf5plugin, "
                                "then import hdf5plugin) or rewrite the file without it")
        chunks = self.h5(field, lambda: d.chunks)
        if chunks:
            size = int(np.prod(chunks, dtype=object)) * d.dtype.itemsize
            if size > MAX_CHUNK_BYTES:
                self.fail(field, f"stored in chunks of shape {chunks} ({size / 2**20:,.0f} MiB "
                          f"each, more than {MAX_CHUNK_BYTES >> 20} MiB): every read of a row "
                          "would decompress a whole chunk; rewrite it in smaller chunks "
                          "(labkit.data.write_h5 does, or h5repack -l CHUNK=...)")
        if d.nbytes and self.h5(field, d.id.get_space_status) != h5.h5d.SPACE_STATUS_ALLOCATED:
            self.fail(field, f"its data ({d.nbytes} bytes, shape {d.shape}) was never written, "
                      "or only in part (HDF5 would read zeros in its place)")

    def group(self, key):
        obj = self.h5(f"/{key}", lambda: self.f[key])
        if hasattr(obj, "shape"):
            self.fail(f"/{key}", "expected a group, got a dataset")
        return self.h5(f"/{key}", lambda: list(obj.keys()))

    def offsets(self, key, length):
        """The number of sequences of ragged source ``key``, after checking its offsets."""
        field = f"offsets /_ragged/{key}"
        if not self.h5(field, lambda: f"_ragged/{key}" in self.f):
            self.fail(field, "missing (a ragged source needs its N + 1 row offsets)")
        d = self.dataset(self.f, f"_ragged/{key}", field)
        if len(d.shape) != 1 or d.dtype.kind not in "iu" or d.shape[0] < 1:
            self.fail(field, f"expected N + 1 integer offsets (1-D), got {d.dtype} {d.shape}")
        total = d.shape[0]
        last = 0
        for a in range(0, total, _OFFSETS_BLOCK):
            block = self.h5(field, lambda a=a: d[a:a + _OFFSETS_BLOCK])
            if a == 0 and block[0] != 0:
                self.fail(field, f"expected the first offset to be 0, got {block[0]}")
            if block.max() > length:
                self.fail(field, f"expected offsets up to the data length {length}, got "
                          f"{block.max()}")
            steps = np.diff(block.astype(np.int64), prepend=last)
            if (steps < 0).any():
                bad = a + int(np.argmax(steps < 0))
                self.fail(field, f"expected non-decreasing offsets, but offset {bad} is smaller "
                          "than the one before it")
            last = int(block[-1])
        if last != length:
            self.fail(field, f"expected the last offset to be the data length {length}, got "
                      f"{last}")
        return total - 1

    def splits(self, raw, n):
        field = "attribute 'splits'"
        if not isinstance(raw, dict):
            self.fail(field, f"expected a JSON object {{name: [start, stop]}}, got {raw!r}"[:200])
        out = {}
        for name, rng in raw.items():
            problem = split_problem(rng, n)
            if problem:
                self.fail(f"{field}, split {name!r}", f"{problem}, got {rng!r}"[:200])
            out[name] = (int(rng[0]), int(rng[1]))
        problem = overlap_problem(out)
        if problem:
            self.fail(field, problem)
        return out


def read_layout(f, path) -> Layout:
    """Check every field of an open file against the layout; ``DataError`` names the first bad
    one."""
    return _Reader(f, path).read()
