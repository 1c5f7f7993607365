"""Reading the converters' inputs: files, archives and their members, crafted or damaged.

Every input is opened as a regular file (a FIFO or a device would wait forever or never end),
and nothing is unpacked beyond what it declares and what ``LABKIT_CONVERT_MAX_BYTES`` allows
(a ``Budget`` per source, all its files and members together): a member that declares more is
refused from its header, before a byte of it is unpacked, and one that holds more or less than
it declares is refused as damaged. Errors name the file, the member and the fix.
"""

from __future__ import annotations

import bz2
import contextlib
import gzip
import lzma
import os
import stat
import struct
import tarfile
import zipfile
import zlib
from pathlib import Path, PurePosixPath

import numpy as np

from .. import config
from ..errors import DataError
from .layout import dtype_problem

_BLOCK = 1 << 20
#: what reading a damaged archive raises (zipfile, tarfile, gzip, zlib, bz2, lzma, NumPy's header)
_DAMAGED = (OSError, EOFError, ValueError, NotImplementedError, RuntimeError, KeyError,
            zipfile.BadZipFile, tarfile.TarError, zlib.error, lzma.LZMAError, struct.error)
_SETTING = "LABKIT_CONVERT_MAX_BYTES"


def size(n: int) -> str:
    """``n`` bytes for people: ``1,073,741,824 bytes (1.0 GiB)``."""
    unit = max(u for u in range(7) if n >= 1024 ** u or u == 0)
    if not unit:
        return f"{n:,} bytes"
    v = n / 1024 ** unit
    return f"{n:,} bytes ({v:.1f} {' KMGTPE'[unit]}iB)" if v < 1e4 else f"{n:,} bytes ({v:.3g} EiB)"


class Budget:
    """The bytes a converter may still unpack from one source (``LABKIT_CONVERT_MAX_BYTES``)."""

    def __init__(self):
        self.limit, self.used = config.get(_SETTING), 0

    def take(self, n: int, what: str) -> None:
        """Count ``n`` declared bytes of ``what``; refused beyond the limit, before reading."""
        if n < 0:
            raise DataError(f"{what} declares a negative size ({n}); the file is damaged or "
                            "crafted")
        if self.used + n > self.limit:
            before = f" ({size(self.used + n)} with what this source declared before it)" \
                if self.used else ""
            need = -(-(self.used + n) // 1024 ** 3)
            raise DataError(
                f"{what} declares {size(n)} of data{before}, more than the {size(self.limit)} a "
                f"converter unpacks from one source ({_SETTING}); it was not unpacked and nothing "
                "was written. A small compressed file can declare that much (a decompression "
                f"bomb); if this is a genuinely large dataset, raise the limit: {_SETTING}={need}G "
                "(a conversion holds about twice that in memory)")
        self.used += n


def open_regular(path):
    """``path`` opened for reading, refused unless it is a regular file (never waits on a FIFO)."""
    path = Path(path)
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except FileNotFoundError:
        raise DataError(f"{path}: cannot read (no such file)") from None
    except OSError as e:
        raise DataError(f"{path}: cannot read ({e.strerror or e})") from None
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        kind = ("a directory" if stat.S_ISDIR(mode) else "a FIFO" if stat.S_ISFIFO(mode) else
                "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else "a socket")
        raise DataError(f"{path}: cannot read ({kind}, not a regular file); a converter reads "
                        "files (from a pipe or a device it could wait or read forever)")
    if hasattr(os, "set_blocking"):
        os.set_blocking(fd, True)
    return os.fdopen(fd, "rb")


def read_exact(f, n: int, what: str, kind: str = "the file") -> np.ndarray:
    """Exactly the ``n`` bytes ``what`` declares, as uint8, read (and unpacked) a block at a time:
    a stream that holds less is truncated, one that holds more is refused after one byte more."""
    out = np.empty(n, dtype=np.uint8)
    view, got = memoryview(out), 0
    while got < n:
        k = f.readinto(view[got:got + _BLOCK])
        if not k:
            raise DataError(f"{what} declares {size(n)} of data but holds {size(got)}; "
                            f"{kind} is truncated or damaged")
        got += k
    if f.read(1):
        raise DataError(f"{what} holds more than the {size(n)} of data it declares; {kind} is "
                        "damaged or crafted")
    return out


# ---- .npz -----------------------------------------------------------------------------------
_MAX_HEADER = 10000  # NOTE: NumPy's own default bound on a .npy header
_METHODS = {zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED, zipfile.ZIP_BZIP2, zipfile.ZIP_LZMA}


def npz_arrays(path, budget: Budget) -> dict:
    """Every array of the ``.npz`` at ``path``, each member checked before it is unpacked: a .npy
    of numbers whose header (shape x itemsize) agrees with the member's declared size, within
    ``budget``. Read with ``np.load(allow_pickle=False)`` from the same open file."""
    path = Path(path)
    with open_regular(path) as fh:
        magic = fh.read(8)
        if not magic.startswith(b"PK"):  # every .npz is a zip archive
            hint = " (it is an HDF5 file: `labkit convert h5 FILE`)" if magic.startswith(
                b"\x89HDF") else ""
            raise DataError(f"{path}: not a .npz file: it does not start like a zip archive"
                            f"{hint}")
        fh.seek(0)
        try:
            with zipfile.ZipFile(fh) as zf:
                infos = zf.infolist()
                if not infos:
                    raise DataError(f"{path}: holds no arrays (an empty archive)")
                declared = _declared_members(fh)
                if declared is not None and declared != len(infos):
                    # NOTE: a damaged central directory hid a member: one source was dropped
                    raise DataError(f"{path}: the archive declares {declared} members but its "
                                    f"directory lists {len(infos)}; the file is damaged")
                names: set = set()
                for info in infos:
                    if info.filename in names:
                        raise DataError(f"{path}: member {info.filename!r} appears twice in the "
                                        "archive (which one is meant is ambiguous); the file is "
                                        "damaged or crafted")
                    names.add(info.filename)
                for info in infos:
                    _check_member(path, zf, info, names, budget)
            fh.seek(0)
            arrays = {}
            with np.load(fh, allow_pickle=False) as z:
                for k in z.files:
                    try:
                        arrays[k] = z[k]
                    except _DAMAGED as e:
                        raise DataError(f"{path}: member {k + '.npy'!r}: not a readable .npy "
                                        f"array ({type(e).__name__}: {e}); the file is damaged "
                                        "or truncated") from None
        except DataError:
            raise
        except _DAMAGED as e:
            raise DataError(f"{path}: not a readable .npz file ({type(e).__name__}: {e}); it is "
                            "damaged or truncated") from None
    lengths = {k: len(v) for k, v in arrays.items()}
    if len(set(lengths.values())) > 1:
        raise DataError(f"{path}: its arrays differ in length (the first axis, one row per "
                        f"example): {lengths}"[:400])
    return arrays


def _check_member(path, zf, info, names, budget) -> None:
    name = info.filename
    what = f"{path}: member {name!r}"
    if not name.endswith(".npy"):
        raise DataError(f"{what} is not a .npy array; a .npz holds only arrays (np.savez)")
    key = name[:-4]
    if not key or key.startswith("_") or "/" in key or key in names:
        # NOTE: np.load looks a key up as a member name first ('a.npy' of 'a.npy.npy')
        raise DataError(f"{what}: {key!r} cannot name a source (a source name is non-empty, "
                        "has no '/', does not start with '_' and is no other member's name); "
                        "save the arrays under other names, e.g. np.savez(file, x=a, y=b)")
    if info.flag_bits & 0x1:
        raise DataError(f"{what} is encrypted; a .npz is not (np.savez)")
    if info.compress_type not in _METHODS:
        raise DataError(f"{what} is compressed with zip method {info.compress_type}, which "
                        "Python's zipfile cannot unpack; write it with np.savez or "
                        "np.savez_compressed")
    budget.take(info.file_size, what)
    try:
        with zf.open(info) as m:
            version = np.lib.format.read_magic(m)
            if version == (1, 0):
                shape, _, dtype = np.lib.format.read_array_header_1_0(m)
            elif version == (2, 0):
                shape, _, dtype = np.lib.format.read_array_header_2_0(
                    m, max_header_size=_MAX_HEADER)
            else:  # NOTE: 3.0 is for field names beyond Latin-1: structured, never a source
                raise DataError(f"{what}: .npy format {version[0]}.{version[1]} (structured "
                                "arrays), which a source cannot hold")
            header = m.tell()
    except DataError:
        raise
    except _DAMAGED as e:
        raise DataError(f"{what}: not a readable .npy array ({type(e).__name__}: {e}); the file "
                        "is damaged or truncated") from None
    if dtype.hasobject:
        raise DataError(f"{path}: holds object arrays, which need pickle; labkit does not load "
                        f"them (member {name!r}, dtype {dtype})")
    problem = dtype_problem(dtype)
    if problem:
        raise DataError(f"{what}: {problem}; store numbers (encode text as token ids)")
    if len(shape) == 0:
        raise DataError(f"{what} is a scalar; a source has a first axis of examples")
    if not all(isinstance(d, int) and d >= 0 for d in shape):
        raise DataError(f"{what}: its header declares shape {shape}; the file is damaged or "
                        "crafted")
    nbytes = dtype.itemsize
    for d in shape:  # NOTE: Python ints: a product in int64 wraps
        nbytes *= d
    if header + nbytes != info.file_size:
        raise DataError(f"{what}: its header declares shape {shape} of {dtype} ({size(nbytes)}) "
                        f"but the member holds {size(max(info.file_size - header, 0))} of data; "
                        "it is truncated or damaged")


def _declared_members(fh) -> int | None:
    """The member count a zip archive's end record declares (None: not found, or zip64)."""
    fh.seek(0, os.SEEK_END)
    end = fh.tell()
    fh.seek(max(0, end - (1 << 16) - 22))
    tail = fh.read()
    at = tail.rfind(b"PK\x05\x06")
    if at < 0 or at + 22 > len(tail):
        return None
    total = struct.unpack("<H", tail[at + 10:at + 12])[0]
    return None if total == 0xFFFF else total


# ---- tar ------------------------------------------------------------------------------------
def tar_members(path, wanted, max_each: int, budget: Budget, max_members: int = 1000
                ) -> tuple[dict, set]:
    """``({basename: uint8 array}, every basename seen)`` for the regular members of the tar
    archive (any compression) at ``path`` whose basenames are ``wanted``, read as the archive is
    scanned (once, forward). Each member's declared size is checked before its data is read or
    skipped: all of them against ``budget``, a wanted one against ``max_each``; past
    ``max_members`` members the archive is refused (headers alone, 512 bytes each, compress a
    thousandfold and tarfile keeps every one in memory). A wanted name that is a link or appears
    twice is refused (a link would read another member). Members are never written to disk, so
    their paths (``..``, absolute) reach nothing."""
    with open_regular(path) as fh, _unpacked(fh) as raw:
        stream = _Capped(raw, path)
        # NOTE: forward only ("r|"): nothing is unpacked twice
        with tarfile.open(fileobj=stream, mode="r|") as tar:
            found, seen = _scan(path, tar, stream, wanted, max_each, budget, max_members)
        _drain(path, raw)
    return found, seen


def _drain(path, raw, limit: int = 1 << 20) -> None:
    """Read the (decompressed) stream to its end after the tar archive's: gzip checks its CRC
    and length only there (58 of 60 bit flips in a .tar.gz converted into wrong pixels);
    more than ``limit`` bytes after the archive's end are refused."""
    n = 0
    try:
        while True:
            chunk = raw.read(1 << 16)
            if not chunk:
                return
            n += len(chunk)
            if n > limit:
                raise DataError(f"{path}: more than {limit >> 20} MiB after the tar archive's "
                                "end; the file is damaged or not the archive expected")
    except (OSError, EOFError, zlib.error, lzma.LZMAError) as e:
        raise DataError(f"{path}: the compressed archive is damaged ({type(e).__name__}: {e}); "
                        "download it again") from e


def _scan(path, tar, stream, wanted, max_each, budget, max_members):
    found, seen = {}, set()
    for i, m in enumerate(tar):  # NOTE: lazily: each header is checked before its data
        if i == max_members:
            raise DataError(f"{path}: more than {max_members} members; this is not the "
                            f"archive expected (it holds {len(wanted)} files to read)")
        base = PurePosixPath(m.name).name
        seen.add(base)
        what = f"{path}: member {m.name!r}"
        declared = m.pax_headers.get("size")
        if declared is not None and not (declared.isascii() and declared.isdigit()):
            # NOTE: tarfile reads a pax size it cannot parse ('nan', '1e9') as 0
            raise DataError(f"{what} declares size {declared[:40]!r}, not a number of bytes; "
                            "the archive is damaged or crafted")
        budget.take(m.size, what)
        stream.allow(m.size)
        if base not in wanted:
            continue
        if not m.isfile():
            kind = ("a symbolic link" if m.issym() else "a hard link" if m.islnk() else
                    "a directory" if m.isdir() else "not a regular file")
            raise DataError(f"{what} is {kind}; labkit reads only regular members (a link "
                            "reads another member in its place)")
        if base in found:
            raise DataError(f"{what}: a second {base} in the archive (which one is meant is "
                            "ambiguous); the archive is damaged or crafted")
        if m.size > max_each:
            raise DataError(f"{what} declares {size(m.size)}, more than a {base} can hold "
                            f"({size(max_each)}); this is not the archive it claims to be")
        found[base] = read_exact(tar.extractfile(m), m.size, what, "the archive")
    return found, seen


def _unpacked(fh):
    """``fh`` decompressed as a stream (gzip, bzip2 or xz, told by its first bytes), or as is."""
    head = fh.read(6)
    fh.seek(0)
    if head.startswith(b"\x1f\x8b"):
        return gzip.GzipFile(fileobj=fh, mode="rb")
    if head.startswith(b"BZh"):
        return bz2.BZ2File(fh)
    if head.startswith(b"\xfd7zXZ\x00"):
        return lzma.LZMAFile(fh)
    return contextlib.nullcontext(fh)


class _Capped:
    """A stream read forward up to what the members checked so far declare, and ``_SLACK`` more
    for headers: tarfile reads a pax or long-name header whole, before any check could see it (a
    few KiB of gzip made it hold 100 MiB)."""

    _SLACK = 2 << 20

    def __init__(self, f, path):
        self.f, self.path, self.cap, self.got = f, path, self._SLACK, 0

    def allow(self, n: int) -> None:
        self.cap += -(-n // 512) * 512

    def read(self, n: int = -1) -> bytes:
        n = self.cap - self.got + 1 if n < 0 else min(n, self.cap - self.got + 1)
        data = self.f.read(n)
        self.got += len(data)
        if self.got > self.cap:
            raise DataError(f"{self.path}: its headers hold more than {size(self._SLACK)} "
                            "besides the members' data (a header bomb: tarfile would hold it all "
                            "in memory); the archive is damaged or crafted")
        return data
