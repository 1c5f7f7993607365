"""What killed writers leave, and cleaning it up without touching what live writers write."""

from __future__ import annotations

import itertools
import os
import re
import shutil
from pathlib import Path

from .._proc import HOST, alive, start_time
from ._common import FILES, MANIFEST
from ._files import NOFOLLOW

# A writer works in ".<name>.<kind>-<pid>-<start>-<host>-<n>": kind is tmp (being written), old
# (the checkpoint it replaces) or deleting; start is its process's start time (so a reused pid
# is told apart), host a CRC of its host name (pids of other machines mean nothing here).
TEMP = re.compile(r"^\.(?P<name>.+)\.(?P<kind>tmp|old|deleting)-(?P<pid>\d{1,10})-"
                   r"(?P<start>\d{1,20})-(?P<host>[0-9a-f]{8})-\d{1,20}$")
# what labkit wrote before the start time and host were added
LEGACY_TEMP = re.compile(r"^\.(?P<name>.+)\.(?P<kind>tmp|old|deleting)-(?P<pid>\d{1,10})"
                          r"(-\d{1,20})?$")
_SERIAL = itertools.count()


def temp_name(name: str, kind: str) -> str:
    pid = os.getpid()
    return f".{name}.{kind}-{pid}-{start_time(pid)}-{HOST}-{next(_SERIAL)}"


def lock(path: Path):
    """An open descriptor on ``path`` holding an exclusive advisory lock (None where there
    are no such locks): cleanup() leaves a directory alone while its writer holds this."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - not on POSIX
        return None
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        pass  # NOTE: a file system without locks: the pid and start time still protect it
    return fd


def _locked(path: Path) -> bool:
    """Whether another open descriptor holds the lock of ``lock`` on ``path``."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover
        return False
    try:
        fd = os.open(path, os.O_RDONLY | NOFOLLOW | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        return True  # gone or unreadable: leave it alone
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    except OSError:
        return False
    finally:
        os.close(fd)  # releases the probe's own lock
    return False


def cleanup(directory) -> list[str]:
    """Remove what writers killed mid-save or mid-remove left in ``directory``; returns what
    was done. A temporary directory is removed only when its writer is gone (not running on
    this host, or its pid now belongs to a later process, and nobody holds its lock); a
    replaced checkpoint (``.old``) whose replacement never arrived is put back. Entries of
    other hosts and other programs are left alone. Never raises for what it finds."""
    done = []
    try:
        entries = list(os.scandir(directory))
    except OSError:
        return done
    for e in entries:
        m = TEMP.match(e.name)
        legacy = LEGACY_TEMP.match(e.name) if m is None else None
        if m is None and legacy is None:
            continue
        g = (m or legacy).groupdict()
        if m is not None and g["host"] != HOST:
            continue
        p = Path(e.path)
        try:
            if not e.is_dir(follow_symlinks=False):
                continue
            if alive(int(g["pid"]), int(g["start"]) if m is not None else None) or \
                    (g["kind"] == "tmp" and _locked(p)):
                continue
            # NOTE: the old names are plainer: take only what holds nothing but checkpoint files
            if legacy is not None and not set(os.listdir(p)) <= {MANIFEST, *FILES}:
                continue
            final = p.with_name(g["name"])
            if g["kind"] == "old" and not os.path.lexists(final):
                os.replace(p, final)
                done.append(f"restored {final} (its replacement was interrupted)")
                continue
            shutil.rmtree(p)
            done.append(f"removed {p}")
        except OSError:
            continue  # another cleaner got there first, or no permission: not ours to fix
    return done
