"""Reading and writing the files of a checkpoint: CRC-32 overlapped with the I/O, and members read
only as regular files inside a real directory (no links, FIFOs or paths); ``read_regular`` for
files outside a checkpoint (a model's weights): regular files only, links followed."""

from __future__ import annotations

import collections
import errno
import mmap
import os
import stat
import threading
import zlib
from pathlib import Path

from ..errors import CheckpointError
from ._common import CHUNK


class Crc:
    """CRC-32 of a sequence of buffers, computed on a helper thread (zlib releases the GIL), so
    checksumming overlaps the disk I/O instead of adding to it."""

    def __init__(self):
        self.value = 0
        self._jobs: collections.deque = collections.deque()
        self._cv = threading.Condition()
        self._done = False
        self._thread = threading.Thread(target=self._run, daemon=True, name="labkit-crc")
        self._thread.start()

    def _run(self):
        while True:
            with self._cv:
                while not self._jobs and not self._done:
                    self._cv.wait()
                if not self._jobs:
                    return
                buf = self._jobs.popleft()
            self.value = zlib.crc32(buf, self.value)

    def add(self, buf):
        with self._cv:
            self._jobs.append(buf)
            self._cv.notify()

    def result(self) -> int:
        with self._cv:
            self._done = True
            self._cv.notify()
        self._thread.join()
        return self.value


def chunks(mv: memoryview):
    for i in range(0, len(mv), CHUNK):
        yield mv[i:i + CHUNK]


def write_file(path: Path, pieces) -> tuple[int, int]:
    """Write byte buffers to ``path`` and fsync; returns (size, crc32)."""
    crc = Crc()
    size = 0
    try:
        with open(path, "wb") as f:
            for piece in pieces:
                for chunk in chunks(memoryview(piece).cast("B")):
                    f.write(chunk)
                    crc.add(chunk)
                    size += len(chunk)
            f.flush()
            os.fsync(f.fileno())
    finally:
        value = crc.result()  # NOTE: also on an error, so the helper thread always ends
    return size, value


NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_READ_FLAGS = os.O_RDONLY | NOFOLLOW | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
_DIR_FD = os.open in os.supports_dir_fd and os.stat in os.supports_dir_fd


def _what(mode) -> str:
    for test, name in ((stat.S_ISLNK, "a symbolic link"), (stat.S_ISDIR, "a directory"),
                       (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device")):
        if test(mode):
            return name
    return "not a regular file"


def _os_problem(e: OSError) -> str:
    if e.errno == errno.ELOOP:
        return "a symbolic link (labkit does not follow links in checkpoints)"
    return f"cannot be read ({e.strerror or e})"


class Dir:
    """One checkpoint directory, opened once (not through a link); its members are read only
    as regular files inside it, each checked with lstat before it is opened (so a FIFO cannot
    block) and opened with O_NOFOLLOW|O_NONBLOCK relative to the directory's descriptor."""

    def __init__(self, path):
        # NOTE: a str (Path joins cost more than the reads here), without trailing slashes:
        # lstat("link/") would follow the link
        self.path = os.fsdecode(path).rstrip("/") or "/"
        self.fd = None
        try:
            st = os.lstat(self.path)
        except FileNotFoundError:
            raise CheckpointError(f"{self.path}: no such checkpoint directory") from None
        except OSError as e:
            raise CheckpointError(f"{self.path}: {_os_problem(e)}") from None
        if stat.S_ISLNK(st.st_mode):
            raise CheckpointError(f"{self.path}: a symbolic link; labkit loads checkpoints from "
                                  "real directories only, not through links (pass the target)")
        if not stat.S_ISDIR(st.st_mode):
            raise CheckpointError(f"{self.path}: {_what(st.st_mode)}, not a checkpoint "
                                  "directory")
        if _DIR_FD:
            try:
                self.fd = os.open(self.path, os.O_RDONLY | NOFOLLOW
                                  | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_CLOEXEC", 0))
            except OSError as e:
                raise CheckpointError(f"{self.path}: {_os_problem(e)}") from None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None

    def read(self, name: str, size: int | None = None, crc: int | None = None,
             limit: int | None = None):
        """The bytes of member ``name``, checked against ``size`` and ``crc`` when given."""
        where = os.path.join(self.path, name)
        if name in ("", ".", "..") or "/" in name or os.sep in name:
            raise CheckpointError(f"{where}: not a file name inside the checkpoint directory")
        target = name if self.fd is not None else where
        try:
            st = os.stat(target, dir_fd=self.fd, follow_symlinks=False)
            if not stat.S_ISREG(st.st_mode):
                raise CheckpointError(f"{where}: {_what(st.st_mode)}; labkit reads only regular "
                                      "files inside a checkpoint directory")
            fd = os.open(target, _READ_FLAGS, dir_fd=self.fd)
            try:
                fst = os.fstat(fd)
                if not stat.S_ISREG(fst.st_mode) or (fst.st_dev, fst.st_ino) != (st.st_dev,
                                                                                   st.st_ino):
                    raise CheckpointError(f"{where}: replaced while it was being opened")
                n = fst.st_size
                if size is not None and n != size:
                    raise CheckpointError(f"{where}: {n} bytes, the manifest says {size}; the "
                                          "file is truncated, extended or was changed")
                if limit is not None and n > limit:
                    raise CheckpointError(f"{where}: {n} bytes, more than the {limit} a labkit "
                                          "checkpoint's file of this kind can hold")
                return read_exact(fd, n, crc, where)
            finally:
                os.close(fd)
        except FileNotFoundError:
            raise Missing(f"{where}: missing; the checkpoint is incomplete") from None
        except OSError as e:
            raise CheckpointError(f"{where}: {_os_problem(e)}") from None


class Missing(CheckpointError):
    pass


def read_regular(path, limit: int | None = None, what: str = "file"):
    """The bytes of the regular file at ``path``, for files that are not in a checkpoint
    directory (a model's weights and record). Links are followed (weights may live in a cache);
    the file is opened without blocking and checked with fstat before any read, so a FIFO, a
    device (``/dev/zero``) or a directory is refused, never waited on or read without end.
    ``limit``: the most bytes such a ``what`` can hold."""
    where = os.fsdecode(path)
    try:
        fd = os.open(where, _READ_FLAGS & ~NOFOLLOW)
    except FileNotFoundError:
        raise Missing(f"{where}: missing") from None
    except (OSError, ValueError) as e:  # NOTE: ValueError: a NUL in the path
        raise CheckpointError(f"{where}: {_os_problem(e) if isinstance(e, OSError) else e}") \
            from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise CheckpointError(f"{where}: {_what(st.st_mode)}; labkit reads a {what} only "
                                  "from a regular file")
        if limit is not None and st.st_size > limit:
            raise CheckpointError(f"{where}: {st.st_size} bytes, more than the {limit} a {what} "
                                  "can hold")
        return read_exact(fd, st.st_size, None, where)
    except OSError as e:
        raise CheckpointError(f"{where}: {_os_problem(e)}") from None
    finally:
        os.close(fd)


def read_exact(fd: int, size: int, crc: int | None, where):
    """Read exactly ``size`` bytes from ``fd`` (then expect the end of the file), checking the
    CRC-32 when given (overlapped with the reads for large files)."""
    # NOTE: an anonymous mmap for large files, not bytearray (which zero-fills 100 MB first) or
    # np.empty (whose huge-page advice makes the first touch of fresh memory 4x slower here).
    buf = mmap.mmap(-1, size) if size > CHUNK else bytearray(size)
    mv = memoryview(buf)
    check = Crc() if crc is not None and size > CHUNK else None
    value = 0
    try:
        for chunk in chunks(mv):
            got = 0
            while got < len(chunk):
                n = os.readv(fd, [chunk[got:]])
                if not n:
                    raise CheckpointError(f"{where}: short read; the file is truncated")
                got += n
            if check is not None:
                check.add(chunk)
            elif crc is not None:
                value = zlib.crc32(chunk, value)
    finally:
        if check is not None:
            value = check.result()  # NOTE: also on an error, so the helper thread always ends
    if os.read(fd, 1):
        raise CheckpointError(f"{where}: longer than {size} bytes; the file was changed")
    if crc is not None and value != crc:
        raise CheckpointError(f"{where}: the CRC-32 does not match the manifest; the file is "
                              "corrupted")
    return buf


