"""Atomic files: written beside their final name, fsynced, renamed into place, and the directory
fsynced, so a process killed at any instant leaves the old file or the new one, never half of
one. Every file labkit writes for later (datasets, tuning results, kernel binaries, the
checkpoint files) goes through here.

Examples
--------
>>> import tempfile, pathlib
>>> from labkit._fs import atomic_write
>>> p = pathlib.Path(tempfile.mkdtemp()) / "tuning.json"
>>> atomic_write(p, b'{"ok": 1}')
>>> p.read_bytes()
b'{"ok": 1}'
"""

from __future__ import annotations

import os
import tempfile
from contextlib import contextmanager
from pathlib import Path

from ._proc import HOST, alive, start_time

#: the prefix of every temporary file or directory labkit writes: what a crash can leave behind
TMP_PREFIX = ".labkit-tmp-"


def _umask() -> int:
    mask = os.umask(0)  # NOTE: the only way to read it; set back at once
    os.umask(mask)
    return mask


def fsync_dir(path) -> None:
    """Make a rename or a new entry in directory ``path`` durable."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:  # pragma: no cover - not on POSIX
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_file(path) -> None:
    with open(path, "rb+") as f:
        os.fsync(f.fileno())


def _owner() -> str:
    pid = os.getpid()
    return f"{HOST}-{pid}-{start_time(pid)}"


def _sweep(path: Path) -> None:
    """Remove the temporaries of ``path`` that a killed writer left (SIGKILL skips the
    ``finally`` that removes them: each killed `labkit convert` left its full-size file for
    good): those named after a process of this host that is gone (its pid and start time, so
    a reused pid is told apart). Another host's, a live writer's and unnamed older ones stay."""
    prefix = f"{TMP_PREFIX}{path.name}."
    try:
        names = [n for n in os.listdir(path.parent) if n.startswith(prefix)]
    except OSError:
        return
    for name in names:
        # "<host>-<pid>-<start>" before mkstemp's part
        owner = name[len(prefix):].rpartition(".")[0].split("-")
        if len(owner) != 3 or owner[0] != HOST or not (owner[1].isdigit() and
                                                       owner[2].isdigit()):
            continue
        if not alive(int(owner[1]), int(owner[2]) or None):
            try:
                os.unlink(path.parent / name)
            except OSError:
                pass  # NOTE: another writer swept it first, or it is not ours to remove


@contextmanager
def atomic_path(path):
    """Yield a temporary path beside ``path``; when the block ends without an error, the file
    written there is fsynced and renamed to ``path``. On an error it is removed and ``path`` is
    untouched. For writers that open files by name (h5py)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    _sweep(path)
    try:
        fd, tmp = tempfile.mkstemp(dir=path.parent,
                                   prefix=f"{TMP_PREFIX}{path.name}.{_owner()}.")
    except OSError as e:
        if e.errno is None:
            raise
        # NOTE: the path asked for, not the temporary one beside it (the error named
        # /proc/self/.labkit-tmp-nope.h5.host-1-2.x for -o /proc/self/nope.h5)
        raise type(e)(e.errno, f"{e.strerror or e} (a temporary file beside it could not be "
                               "made)", str(path)) from None
    # NOTE: mkstemp makes the file private (0600); the file gets the mode a plain open() would
    os.fchmod(fd, 0o666 & ~_umask())
    os.close(fd)
    tmp = Path(tmp)
    try:
        yield tmp
        fsync_file(tmp)
        os.replace(tmp, path)
        fsync_dir(path.parent)
    finally:
        if tmp.exists():
            tmp.unlink()


def atomic_write(path, data: bytes | str) -> None:
    """Write ``data`` to ``path`` atomically (see the module docstring)."""
    if isinstance(data, str):
        data = data.encode()
    with atomic_path(path) as tmp, open(tmp, "wb") as f:
        f.write(data)
